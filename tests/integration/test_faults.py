"""Faults on the real thing: a Redis server of this test's own (so that it can be killed and restarted), a
PostgreSQL database, the gateway and the workers as separate `kforge` processes, as docker-compose runs
them. Measurements are replayed (no GPU here), everything else is real: NVRTC compiles, Celery, HTTP.

The table of what was tried and what held is printed at the end of the pytest run."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from kforge.specfile import load_spec
from services.benchmark.tuning import config_key
from shared.adapters.broker import Broker
from shared.adapters.eventstore import EventStore
from shared.application.jobs import get_job, job_events
from shared.domain.events import ConfigFailed, ConfigMeasured, JobSubmitted, ShardTuned
from shared.domain.projections import TERMINAL, job_id_of
from tests.conftest import record_fault

pytestmark = [pytest.mark.redis, pytest.mark.postgres]
KFORGE = str(Path(sys.executable).parent / "kforge")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """Redis, the gateway and workers as processes; each can be killed and started again."""

    def __init__(self, tmp_path: Path, database_url: str, **settings: str):
        self.tmp_path, self.redis_port, self.http_port = tmp_path, _free_port(), _free_port()
        self.redis_url = f"redis://127.0.0.1:{self.redis_port}/0"
        self.env = {**os.environ, "REDIS_URL": self.redis_url, "DATABASE_URL": database_url,
                    "KFORGE_HOME": str(tmp_path), "KFORGE_GPUS": "0", "KFORGE_VISIBILITY_TIMEOUT_S": "6",
                    "KFORGE_WEBHOOK_RETRY_DELAYS_S": "1,2",  # each below the visibility timeout
                    "KFORGE_RECOVERY_INTERVAL_S": "1", **settings}
        self.processes: dict[str, subprocess.Popen] = {}
        self.store = EventStore(database_url)
        self.url = f"http://127.0.0.1:{self.http_port}"

    def start(self, name: str) -> None:
        command = {
            "redis": ["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no"],
            "gateway": [KFORGE, "serve", "--port", str(self.http_port)],
        }.get(name, [KFORGE, "worker", "-Q", name])
        log = open(self.tmp_path / f"{name}.log", "a")
        self.processes[name] = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True)
        if name == "redis":
            self._wait(lambda: Broker(self.redis_url).client.ping(), f"redis on {self.redis_port}")
        elif name == "gateway":
            self._wait(lambda: httpx.get(self.url + "/v1/jobs").status_code == 200, "the gateway")

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes.pop(name)
        os.killpg(process.pid, sig)
        process.wait(timeout=60)

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.kill(name, signal.SIGTERM if name != "redis" else signal.SIGKILL)
        self.store.close()

    def log(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text()[-4000:]

    @staticmethod
    def _wait(ready, what: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{what} did not come up in {timeout_s} s")

    def submit(self, body: dict) -> httpx.Response:
        return httpx.post(self.url + "/v1/jobs", json=body, timeout=30)

    def wait_finished(self, job_id: str, timeout_s: float = 180):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            view = get_job(self.store, job_id)
            if view.finished:
                return view
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} still {view.status} after {timeout_s} s; planner log:\n"
                             f"{self.log('planner')}\nbenchmark log:\n{self.log('benchmark.0')}")

    def wait_for(self, condition, what: str, timeout_s: float = 60) -> None:
        self._wait(condition, what, timeout_s)


@pytest.fixture
def cluster(tmp_path, postgres_url):
    made: list[Cluster] = []

    def make(**settings) -> Cluster:
        made.append(Cluster(tmp_path, postgres_url, **settings))
        made[-1].start("redis")
        return made[-1]

    yield make
    for c in made:
        c.stop_all()


def _replayed(example: str, **changes) -> dict:
    spec = load_spec(EXAMPLES / f"{example}.cu", EXAMPLES / f"{example}.yaml").model_dump(mode="json")
    return {**spec, "benchmark": {**spec["benchmark"], "replay": True}, **changes}


def _assert_intact(store: EventStore, job_id: str) -> list:
    """Every event once, in one gap-free stream."""
    events = job_events(store, job_id)
    assert [e.stream_version for e in events] == list(range(1, len(events) + 1))
    assert len({e.event_id for e in events}) == len(events)
    return events


def test_a_worker_killed_mid_task_loses_and_repeats_nothing(cluster):
    c = cluster()
    for name in ("planner", "benchmark.0,verifier.0", "gateway"):
        c.start(name)
    job_id = c.submit(_replayed("matmul")).json()["job_id"]

    def measuring() -> bool:
        events = job_events(c.store, job_id)
        return any(isinstance(e, ConfigMeasured) for e in events) and not any(isinstance(e, ShardTuned)
                                                                              for e in events)

    c.wait_for(measuring, "the tuning to be under way", timeout_s=120)
    c.kill("benchmark.0,verifier.0")  # SIGKILL: no warm shutdown, its message stays unacknowledged
    at_kill = sum(isinstance(e, ConfigMeasured | ConfigFailed) for e in job_events(c.store, job_id))
    c.start("benchmark.0,verifier.0")  # the broker hands it the task again after the visibility timeout
    view = c.wait_finished(job_id)

    events = _assert_intact(c.store, job_id)
    outcomes = [e for e in events if isinstance(e, ConfigMeasured | ConfigFailed)]
    keys = Counter(config_key(e.params) for e in outcomes)
    [shard] = [e for e in events if isinstance(e, ShardTuned)]
    assert view.status == "completed", view.failure
    assert max(keys.values()) == 1 and len(keys) == shard.configs  # every configuration exactly once
    assert 0 < at_kill < shard.configs
    assert Counter(e.type for e in events)["JobCompleted"] == 1
    record_fault("worker killed mid-task", f"SIGKILL of the benchmark worker after {at_kill} of {shard.configs} "
                 "configurations; a new worker started",
                 f"job completed {view.speedup:.2f}x; the task came back after the visibility timeout and resumed "
                 f"after the {at_kill} recorded; each configuration once, {len(events)} events gap-free")


def test_a_redis_restart_loses_no_job(cluster):
    c = cluster()
    c.start("planner")
    c.start("gateway")
    job_id = c.submit(_replayed("vector_add")).json()["job_id"]
    broker = Broker(c.redis_url)
    # No benchmark worker yet: the planner has sent the baseline request, which waits in Redis...
    c.wait_for(lambda: broker.depths(["benchmark.0"])["benchmark.0"] == 1, "the request to be queued")
    c.kill("redis")  # ...and is lost with it: this Redis keeps nothing on disk
    c.start("redis")
    # The new Redis starts empty; the planner's recovery (every second here) finds the request owed and not in
    # the broker, and queues it again, before any worker could have taken it. (Reading the depth at once raced
    # with that recovery.)
    c.wait_for(lambda: "sent 1 request(s) again that the broker had lost" in c.log("planner"),
               "the planner's recovery to send the lost request again")
    assert broker.depths(["benchmark.0"])["benchmark.0"] == 1
    c.start("benchmark.0,verifier.0")
    view = c.wait_finished(job_id, timeout_s=120)

    events = _assert_intact(c.store, job_id)
    assert view.status == "completed", view.failure
    assert Counter(e.type for e in events)["BaselineRequested"] == 1
    assert Counter(e.type for e in events)["JobCompleted"] == 1
    assert "sent 1 request(s) again that the broker had lost" in c.log("planner")
    record_fault("Redis restarted mid-job", "Redis killed and restarted empty while the job's baseline request "
                 "waited in its queue", f"job {view.status}: the planner's recovery found the request owed and "
                 f"not in the broker and sent it again; {len(events)} events, none twice")


def _malformed(spec: dict) -> list[tuple[str, dict]]:
    """100 broken submissions: (label, httpx request arguments)."""
    cases: list[tuple[str, dict]] = []
    for field in ("kernel_name", "source", "args", "sizes"):
        cases.append((f"missing {field}", {"json": {k: v for k, v in spec.items() if k != field}}))
    wrong_values = {"kernel_name": [None, 3, "", "has space", "x" * 500], "sizes": [{"n": "lots"}, {"n": -1}, [],
                    {"n": 1.5}, "n=4"], "args": ["a,b", [], [{"name": "a"}], [{"dtype": "float32"}], None],
                    "tune_params": [{"block_size_x": []}, {"block_size_x": "32"}, [32], {"": [1]}, 5],
                    "strategy": [{"name": "no such"}, "tune", {"name": "multiturn", "target_speedup": -2}, [], None],
                    "benchmark": [{"iterations": 0}, {"iterations": "many"}, {"timeout_s": -1}, {"iteration": 5},
                                  []], "webhook_url": ["not a url", "ftp://example.com/x", "http://127.0.0.1/x",
                                                       "http://169.254.169.254/", "http://10.0.0.1/"],
                    "restrictions": ["block_size_x >", 7, [1, 2], ["import os"], {"a": 1}],
                    "problem_size": ["n", [], [1, 2, 3, 4], ["n *"], [{"a": 1}]]}
    for field, values in wrong_values.items():
        cases += [(f"{field}={value!r:.40}", {"json": {**spec, field: value}}) for value in values]
    for dtype in ("float", "double", "int", "complex128", "", "float33", None, 7):
        args = [{**spec["args"][0], "dtype": dtype}, *spec["args"][1:]]
        cases.append((f"dtype {dtype!r}", {"json": {**spec, "args": args}}))
    cases += [(f"unknown field {name}", {"json": {**spec, name: 1}})
              for name in ("tune_param", "kernel", "size", "strategy_name", "extra")]
    raw_bodies = [b"", b"{", b"[]", b"null", b"42", b'"spec"', b"{'single': 'quotes'}", b"\xff\xfe\x00",
                  b'{"kernel_name": "x",}', b"<xml/>", json.dumps(spec).encode()[:-10], b"{" * 1000,
                  b'{"a": ' * 50 + b"1" + b"}" * 50, b"\x00" * 64, b"NaN"]
    cases += [(f"raw body {body[:16]!r}", {"content": body, "headers": {"content-type": "application/json"}})
              for body in raw_bodies]
    cases += [("text/plain body", {"content": json.dumps(spec), "headers": {"content-type": "text/plain"}}),
              ("form body", {"data": {"kernel_name": "x"}}),
              ("oversized source", {"json": {**spec, "source": "x" * (2 << 20)}}),
              ("run name with spaces", {"json": spec, "params": {"run": "a b"}}),
              ("run name too long", {"json": spec, "params": {"run": "r" * 200}})]
    while len(cases) < 100:  # the rest: wrong types in nested args
        i = len(cases)
        args = [{**spec["args"][0], "shape": [f"m{i}"]}, *spec["args"][1:]]
        cases.append((f"shape names unknown size m{i}", {"json": {**spec, "args": args}}))
    return cases[:100]


def test_100_malformed_submissions_get_100_clear_4xx_and_the_server_lives(cluster):
    c = cluster()
    c.start("gateway")
    spec = _replayed("vector_add")
    cases = _malformed(spec)
    answers = [(label, httpx.post(c.url + "/v1/jobs", timeout=30, **request)) for label, request in cases]

    statuses = Counter(a.status_code for _, a in answers)
    unclear = [(label, a.status_code, a.text[:200]) for label, a in answers
               if not 400 <= a.status_code < 500 or not a.json().get("detail")]
    assert len(answers) == 100 and not unclear, unclear
    for label, answer in answers:
        if answer.status_code == 422:  # field-level: each error names its field (or says the body is broken)
            assert all(e["message"] for e in answer.json()["errors"]), label
    assert c.store.stream_ids("job-") == []  # nothing recorded
    assert c.processes["gateway"].poll() is None
    assert c.submit(spec).status_code == 202  # still serving
    record_fault("100 malformed submissions", f"{len(cases)} broken bodies: missing and mistyped fields, bad "
                 "JSON, wrong content types, a 2 MiB source, refused webhook URLs",
                 f"all 4xx ({', '.join(f'{n}x {s}' for s, n in sorted(statuses.items()))}), each saying what is "
                 "wrong; nothing recorded; the gateway still accepts a valid job")


def test_a_flood_is_bounded_and_nothing_accepted_is_lost(cluster):
    limit = 8
    c = cluster(KFORGE_MAX_OPEN_JOBS=str(limit))
    for name in ("planner", "benchmark.0,verifier.0", "gateway"):
        c.start(name)
    body = _replayed("vector_add", strategy={"name": "baseline"})
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: c.submit(body), range(80)))

    statuses = Counter(a.status_code for a in answers)
    accepted = {a.json()["job_id"] for a in answers if a.status_code == 202}
    assert set(statuses) <= {202, 429} and statuses[429] > 0, statuses
    assert all(a.headers["retry-after"] for a in answers if a.status_code == 429)
    assert {job_id_of(s) for s in c.store.stream_ids("job-")} == accepted  # a 429 leaves nothing behind
    views = [c.wait_finished(job_id, timeout_s=120) for job_id in accepted]
    assert all(v.status == "completed" for v in views), Counter(v.status for v in views)
    # Replaying the log: never more unfinished jobs than the limit.
    open_jobs, most = 0, 0
    for event in c.store.read_all(limit=100_000):
        if isinstance(event, JobSubmitted):
            open_jobs += 1
        elif event.type in ("JobCompleted", "JobFailed", "JobCancelled"):
            open_jobs -= 1
        most = max(most, open_jobs)
    assert most <= limit and all(s in TERMINAL for s in (v.status for v in views))
    record_fault("flood of submissions", f"80 submissions from 16 threads at once, limit {limit} unfinished jobs",
                 f"{statuses[202]} accepted (202), {statuses[429]} refused (429 with Retry-After); at most {most} "
                 "unfinished at any time; every accepted job completed, no refused one recorded")
