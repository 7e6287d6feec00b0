"""The bus over the real Redis with real worker processes, and in embedded mode."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from celery import Celery

from shared.adapters.bus import CeleryBus, InProcessBus, configure_celery
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application.jobs import follow_job, job_events, submit_job
from shared.domain.contracts import MeasureBaseline, Message, PlannerCatchUp
from tests.conftest import HAS_GPU

KFORGE = str(Path(sys.executable).parent / "kforge")


@pytest.fixture
def services(redis_url, postgres_url, tmp_path):
    """A planner worker and a benchmark.0 worker as separate processes, like docker-compose runs them."""
    env = {**os.environ, "REDIS_URL": redis_url, "DATABASE_URL": postgres_url, "KFORGE_HOME": str(tmp_path),
           "KFORGE_GPUS": "0"}
    settings = Settings(REDIS_URL=redis_url, DATABASE_URL=postgres_url, KFORGE_HOME=tmp_path)
    app = configure_celery(Celery("kforge-test-client"), settings)
    logs = [open(tmp_path / f"{q}.log", "w") for q in ("planner", "benchmark.0")]
    workers = [subprocess.Popen([KFORGE, "worker", "-Q", q], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True) for q, log in zip(("planner", "benchmark.0"), logs)]
    try:
        try:
            _wait_for_workers(app, count=2, timeout_s=60)
        except AssertionError:
            for q in ("planner", "benchmark.0"):
                print((tmp_path / f"{q}.log").read_text()[-3000:])
            raise
        yield EventStore(postgres_url), CeleryBus(app)
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=30)
        for log in logs:
            log.close()


def _wait_for_workers(app: Celery, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=0.5)) >= count:
            return
    raise AssertionError(f"{count} workers did not answer within {timeout_s} s")


def _wait_until_quiet(store: EventStore, stream_id: str, quiet_s: float = 2.0, timeout_s: float = 30) -> int:
    """Wait until the stream and the planner's tracking stop moving; returns the stream version."""
    deadline, last, since = time.monotonic() + timeout_s, None, time.monotonic()
    while time.monotonic() < deadline:
        now = (store.stream_version(stream_id), store.tracked_position("planner"))
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > quiet_s:
            return now[0]
        time.sleep(0.1)
    raise AssertionError("the stream kept changing")


@pytest.mark.redis
@pytest.mark.postgres
@pytest.mark.skipif(HAS_GPU, reason="expects the no-device outcome of a GPU-less machine")
def test_a_job_travels_through_redis_and_worker_processes(services, vector_add_spec):
    store, bus = services
    job_id = submit_job(store, bus, vector_add_spec)
    view = follow_job(store, job_id, on_event=lambda e: None, timeout_s=60)
    assert _wait_until_quiet(store, f"job-{job_id}") == 6
    events = job_events(store, job_id)
    # The worker records its task once it has answered, so its profile may land before or after JobFailed.
    assert [e.type for e in events if e.type != "TaskProfiled"] == ["JobSubmitted", "BaselineRequested",
                                                                    "KernelCompiled", "BaselineFailed", "JobFailed"]
    [profiled] = [e for e in events if e.type == "TaskProfiled"]
    assert profiled.request_id == events[1].event_id and profiled.task == MeasureBaseline.task
    assert profiled.started_at >= events[1].occurred_at and profiled.peak_rss_mb > 0
    assert view.status == "failed" and view.failed_stage == "device" and view.failure.startswith("no CUDA device")
    assert [e.stream_version for e in events] == [1, 2, 3, 4, 5, 6]
    assert store.tracked_position("planner") >= events[-1].position

    # Redeliver every message of this job, twice: handlers are idempotent, so nothing is appended again.
    request = events[1]
    for _ in range(2):
        bus.dispatch(MeasureBaseline.message(request.queue, job_id, request.event_id))
        bus.dispatch(PlannerCatchUp.message(reason="redelivery test"))
    assert _wait_until_quiet(store, events[0].stream_id) == 6
    assert [e.event_id for e in job_events(store, job_id)] == [e.event_id for e in events]


@pytest.mark.redis
@pytest.mark.postgres
def test_jobs_submitted_concurrently_all_finish_with_no_event_twice(services, vector_add_spec):
    store, bus = services
    ids: list[str] = []
    threads = [threading.Thread(target=lambda: ids.append(submit_job(store, bus, vector_add_spec)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    views = [follow_job(store, job_id, on_event=lambda e: None, timeout_s=90) for job_id in ids]
    assert all(v.finished for v in views), [(v.job_id, v.status) for v in views]
    for job_id in ids:
        _wait_until_quiet(store, f"job-{job_id}", quiet_s=0.5)
        types = [e.type for e in job_events(store, job_id)]
        assert len(types) == len(set(types)) == 6  # five of the job's own, and the worker's TaskProfiled


def test_celery_is_configured_for_safe_redelivery(tmp_path):
    app = configure_celery(Celery("t"), Settings(REDIS_URL="redis://127.0.0.1:6379/14", KFORGE_HOME=tmp_path))
    assert app.conf.task_acks_late and app.conf.task_reject_on_worker_lost
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.broker_transport_options["visibility_timeout"] >= 3600
    routes = app.amqp.router.route({}, "verifier.check_candidate")
    assert routes["queue"].name == "verifier"
    assert app.amqp.router.route({}, "planner.catch_up")["queue"].name == "planner"


def test_in_process_bus_runs_tasks_in_order_and_survives_a_failing_task(tmp_path):
    app = configure_celery(Celery("embedded-test"), Settings(KFORGE_HOME=tmp_path))
    ran: list[str] = []

    @app.task(name="test.record")
    def record(label: str) -> None:
        ran.append(label)
        if label == "boom":
            raise RuntimeError("a task that fails")

    bus = InProcessBus(app)
    for i, label in enumerate(["a", "boom", "b", "c"]):
        bus.dispatch(Message(task="test.record", queue="planner", kwargs={"label": label}, message_id=str(i)))
    bus.wait_idle()
    assert ran == ["a", "boom", "b", "c"]
