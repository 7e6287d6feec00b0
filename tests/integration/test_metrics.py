"""GET /metrics over a real store holding whole jobs' event streams, and over the real Redis broker."""
from collections import Counter

import pytest
from celery import Celery
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from services.gateway.app import create_app
from shared.adapters.bus import configure_celery
from shared.adapters.eventstore import EventStore
from shared.adapters.settings import Settings
from shared.application.jobs import list_jobs
from shared.application.runtime import Runtime
from shared.domain.contracts import Generate, MeasureBaseline, PlannerCatchUp, TuneShard, VerifyCandidate
from shared.domain.events import BaselineRequested, JobCancelled, JobFailed, ShardTuned, TaskProfiled, TuningRequested
from tests.fakes import RecordingBus
from tests.report_streams import JobStream, rewrite_job, tune_job

H100 = "NVIDIA H100 80GB HBM3"


def _jobs(spec) -> list[list]:
    """Two finished jobs from the report streams, and one job in each other status."""
    submitted = JobStream("sub1", spec)
    benchmarking = JobStream("bench1", spec)
    benchmarking.add(BaselineRequested, queue="benchmark.0", params={})
    tuning = JobStream("tun1", spec)
    tuning.baseline([1.0, 1.0, 1.0])
    # A shard on a second GPU of the same model: 2 of 8 s busy.
    request = tuning.add(TuningRequested, queue="benchmark.1", candidate_id="submitted")
    tuning.add(ShardTuned, request_id=request.event_id, device=H100, strategy="brute_force", configs=1, measured=1,
               failed=0, best_params={"block_size_x": 256}, best_ms=1.0, wall_s=8.0, compile_s=1.0, gpu_busy_s=2.0,
               first_result_s=0.5)
    failed = JobStream("fail1", spec)
    failed.baseline([1.0])
    failed.add(JobFailed, stage="baseline", reason="no CUDA device")
    cancelled = JobStream("canc1", spec)
    cancelled.add(BaselineRequested, queue="benchmark.0", params={})
    cancelled.add(JobCancelled, reason="enough", cancelled_by="http")
    return [tune_job(spec, "aaaa1"), rewrite_job(spec, "cccc3"), submitted.events, benchmarking.events,
            tuning.events, failed.events, cancelled.events]


def _runtime(tmp_path, sqlite_url, spec, redis_url: str | None = None) -> Runtime:
    rt = Runtime(settings=Settings(KFORGE_HOME=tmp_path, REDIS_URL=redis_url, DATABASE_URL=None, KFORGE_GPUS="0,1"),
                 store=EventStore(sqlite_url), bus=RecordingBus())
    for events in _jobs(spec):
        rt.store.append(events[0].stream_id, [e.model_copy(update={"stream_version": None, "position": None})
                                              for e in events], expected_version=0)
    return rt


def _scrape(rt: Runtime) -> dict[tuple[str, frozenset], float]:
    with TestClient(create_app(lambda: rt)) as client:
        response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def _labelled(samples: dict, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: v for (n, labels), v in samples.items() if n == name}


def test_metrics_from_the_event_store(tmp_path, sqlite_url, vector_add_spec):
    rt = _runtime(tmp_path, sqlite_url, vector_add_spec)
    samples = _scrape(rt)

    # Jobs by status: the cheap fold over status events agrees with the full read model.
    by_status = _labelled(samples, "kforge_jobs", "status")
    assert by_status == {"submitted": 1, "benchmarking": 1, "tuning": 1, "completed": 2, "failed": 1, "cancelled": 1}
    assert Counter(v.status for v in list_jobs(rt.store)) == {k: v for k, v in by_status.items() if v}
    assert samples["kforge_jobs_submitted_total", frozenset()] == 7

    # Histograms: one observation per TaskProfiled event, for each task.
    profiled = [e for e in rt.store.read_types(["TaskProfiled"]) if isinstance(e, TaskProfiled)]
    per_task = Counter(e.task for e in profiled)
    assert per_task == {MeasureBaseline.task: 4, TuneShard.task: 3, Generate.task: 2, VerifyCandidate.task: 2}
    for name in ("kforge_task_duration_seconds", "kforge_task_queue_wait_seconds"):
        assert _labelled(samples, f"{name}_count", "task") == per_task
    # The report streams: each tuning shard waits 1 s and runs 4 s, each verification waits 0.2 s and runs 5 s.
    tune = frozenset({("task", TuneShard.task)})
    assert samples["kforge_task_duration_seconds_sum", tune] == pytest.approx(12.0)
    assert samples["kforge_task_queue_wait_seconds_sum", tune] == pytest.approx(3.0)
    assert samples["kforge_task_duration_seconds_bucket", tune | {("le", "2.5")}] == 0
    assert samples["kforge_task_duration_seconds_bucket", tune | {("le", "5.0")}] == 3
    verify = frozenset({("task", VerifyCandidate.task)})
    assert samples["kforge_task_queue_wait_seconds_sum", verify] == pytest.approx(0.4)
    assert samples["kforge_task_queue_wait_seconds_bucket", verify | {("le", "0.1")}] == 0
    assert samples["kforge_task_queue_wait_seconds_bucket", verify | {("le", "0.25")}] == 2
    assert samples["kforge_task_queue_wait_seconds_bucket", verify | {("le", "+Inf")}] == 2

    # GPU utilisation, per GPU: three 3-of-4 s shards on GPU 0, one 2-of-8 s shard on GPU 1 (same model).
    assert _labelled(samples, "kforge_gpu_busy_seconds_total", "gpu") == {"0": 9.0, "1": 2.0}
    assert _labelled(samples, "kforge_gpu_wall_seconds_total", "gpu") == {"0": 12.0, "1": 8.0}
    assert _labelled(samples, "kforge_gpu_utilisation_ratio", "gpu") == {"0": pytest.approx(0.75),
                                                                         "1": pytest.approx(0.25)}
    assert {dict(labels)["device"] for (n, labels) in samples if n == "kforge_gpu_utilisation_ratio"} == {H100}

    # Embedded mode has no broker, so no broker metrics.
    assert not any(n.startswith(("kforge_broker", "kforge_queue", "kforge_messages")) for n, _ in samples)
    rt.store.close()


def test_metrics_need_no_api_key_and_stay_out_of_the_schema(tmp_path, sqlite_url):
    rt = Runtime(settings=Settings(KFORGE_HOME=tmp_path, REDIS_URL=None, DATABASE_URL=None, KFORGE_API_KEYS="k1"),
                 store=EventStore(sqlite_url), bus=RecordingBus())
    with TestClient(create_app(lambda: rt)) as client:
        assert client.get("/v1/jobs").status_code == 401
        response = client.get("/metrics")
        assert response.status_code == 200 and "kforge_jobs_submitted_total 0.0" in response.text
        assert "/metrics" not in client.get("/openapi.json").json()["paths"]
    rt.store.close()


@pytest.mark.redis
def test_queue_depths_from_the_real_broker(tmp_path, sqlite_url, vector_add_spec, redis_url):
    rt = _runtime(tmp_path, sqlite_url, vector_add_spec, redis_url=redis_url)
    app = configure_celery(Celery("kforge-test-client"), rt.settings)
    for _ in range(3):  # no worker serves the queue, so they stay in it
        app.send_task(PlannerCatchUp.task, kwargs={"reason": "metrics test"}, queue="planner")
    app.send_task(TuneShard.task, kwargs={}, queue="benchmark.1")
    samples = _scrape(rt)
    assert samples["kforge_broker_up", frozenset()] == 1
    assert _labelled(samples, "kforge_queue_depth", "queue") == {
        "planner": 3, "generator": 0, "webhooks": 0, "benchmark.0": 0, "verifier.0": 0, "benchmark.1": 1,
        "verifier.1": 0}
    assert samples["kforge_messages_unacknowledged", frozenset()] == 0
    assert samples["kforge_jobs_submitted_total", frozenset()] == 7
    app.close()
    rt.store.close()


def test_an_unreachable_broker_still_scrapes(tmp_path, sqlite_url, vector_add_spec):
    rt = _runtime(tmp_path, sqlite_url, vector_add_spec, redis_url="redis://127.0.0.1:1/0")
    samples = _scrape(rt)
    assert samples["kforge_broker_up", frozenset()] == 0
    assert not any(n.startswith(("kforge_queue", "kforge_messages")) for n, _ in samples)
    assert _labelled(samples, "kforge_jobs", "status")["completed"] == 2  # the store's metrics are all there
    rt.store.close()
