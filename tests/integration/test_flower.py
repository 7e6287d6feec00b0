"""Flower as docker-compose runs it, against the real Redis and a real planner worker process; and the
Celery ping that the compose file uses as the CPU workers' healthcheck."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read().decode()
    except OSError:  # not listening yet, or an HTTP error
        return None


def _poll(what: str, check, timeout_s: float = 45):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (found := check()) is not None:
            return found
        time.sleep(0.25)
    raise AssertionError(f"{what} within {timeout_s} s")


@pytest.mark.redis
def test_flower_lists_a_real_worker_and_the_worker_answers_its_healthcheck(redis_url, tmp_path):
    port = _free_port()
    # No DATABASE_URL: the worker's store is SQLite under KFORGE_HOME. Flower's JSON API is off without
    # authentication or FLOWER_UNAUTHENTICATED_API.
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {
        "REDIS_URL": redis_url, "KFORGE_HOME": str(tmp_path), "FLOWER_UNAUTHENTICATED_API": "true"}
    node = f"planner@{socket.gethostname()}"  # kforge worker names itself <first queue>@%h
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("flower", "planner")}
    processes = {
        "flower": subprocess.Popen([str(BIN / "celery"), "--app", "kforge.worker", "flower", f"--port={port}",
                                    "--address=127.0.0.1"], env=env, cwd=tmp_path, stdout=logs["flower"],
                                   stderr=subprocess.STDOUT, start_new_session=True),
        "planner": subprocess.Popen([str(BIN / "kforge"), "worker", "-Q", "planner"], env=env, cwd=tmp_path,
                                    stdout=logs["planner"], stderr=subprocess.STDOUT, start_new_session=True),
    }
    base = f"http://127.0.0.1:{port}"
    try:
        assert _poll("Flower did not answer its healthcheck", lambda: _get(f"{base}/healthcheck")) == "OK"
        # refresh=1: Flower asks the workers now (inspect) rather than waiting for their events.
        # Flower may list the node from its events before the inspect reply with its queues arrives: wait for both.
        workers = _poll(f"Flower did not list {node} with its queues",
                        lambda: (w := _get(f"{base}/api/workers?refresh=1")) and
                        "active_queues" in json.loads(w).get(node, {}) and json.loads(w) or None)
        assert [q["name"] for q in workers[node]["active_queues"]] == ["planner"]
        assert "planner.catch_up" in workers[node]["registered"]
        # Flower's own Prometheus metrics (the scrape target deploy/README.md lists) see the worker's heartbeat.
        _poll("flower_worker_online stayed absent", lambda: True if
              f'flower_worker_online{{worker="{node}"}} 1.0' in (_get(f"{base}/metrics") or "") else None)

        # The compose healthcheck of a CPU worker: exit 0 when that node answers, non-zero when none does.
        ping = [str(BIN / "celery"), "--app", "kforge.worker", "inspect", "ping", "-d"]
        alive = subprocess.run([*ping, node], env=env, capture_output=True, text=True, timeout=60, check=False)
        assert alive.returncode == 0 and "pong" in alive.stdout, alive.stdout + alive.stderr
        absent = subprocess.run([*ping, "webhooks@nowhere"], env=env, capture_output=True, timeout=60, check=False)
        assert absent.returncode != 0
    except AssertionError:
        for name in logs:
            print(name, (tmp_path / f"{name}.log").read_text()[-3000:])
        raise
    finally:
        for process in processes.values():
            os.killpg(process.pid, signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for log in logs.values():
            log.close()
