"""The job read model: a pure fold over a job's events."""
import threading
import time
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from kforge.specfile import load_spec
from shared.adapters.eventstore import EventStore
from shared.application.jobs import follow_job
from shared.domain.events import (BaselineFailed, BaselineMeasured, BaselineRequested, JobCompleted, JobFailed,
                                  JobSubmitted, KernelCompiled, StepSkipped, TaskProfiled, Undecodable)
from shared.domain.projections import JobView, job_id_of, job_stream, project_job
from tests.conftest import EXAMPLES

T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def job(vector_add_spec):
    """The events of one job up to its baseline measurement, in stream order, with store-set versions."""
    stream = job_stream("j1")
    submitted = JobSubmitted(stream_id=stream, spec=vector_add_spec, occurred_at=at(0))
    requested = BaselineRequested(stream_id=stream, queue="benchmark.0", params=vector_add_spec.baseline_params(),
                                  occurred_at=at(1))
    compiled = KernelCompiled(stream_id=stream, request_id=requested.event_id, arch="sm_90", compile_ms=42.5,
                              cache_key="k", occurred_at=at(2))
    measured = BaselineMeasured(stream_id=stream, request_id=requested.event_id, device="NVIDIA H100",
                                params=requested.params, grid=(262144, 1, 1), block=(256, 1, 1),
                                samples_ms=[1.0, 1.5, 2.0], median_ms=1.5, replay=True, occurred_at=at(3))
    events = [submitted, requested, compiled, measured]
    return [e.model_copy(update={"stream_version": i}) for i, e in enumerate(events, start=1)]


def test_stream_naming():
    assert job_stream("abc") == "job-abc"
    assert job_id_of(job_stream("abc")) == "abc"


def test_no_events():
    view = project_job([], "j9")
    assert view == JobView(job_id="j9")
    assert view.status == "unknown" and view.version == 0 and view.event_types == ()
    assert not view.finished


def test_submitted(job, vector_add_spec):
    view = project_job(job[:1])

    assert view.job_id == "j1"
    assert view.status == "submitted"
    assert view.spec == vector_add_spec
    assert view.submitted_at == at(0) and view.updated_at == at(0)
    assert view.version == 1
    assert view.event_types == ("JobSubmitted",)
    assert not view.finished


def test_benchmarking_then_measured(job):
    requested = project_job(job[:2])
    assert requested.status == "benchmarking"
    assert requested.baseline_request == job[1].event_id

    compiled = project_job(job[:3])
    assert compiled.status == "benchmarking" and compiled.compile_ms == 42.5

    measured = project_job(job)
    assert measured.status == "benchmarking"  # measured, but the planner has not completed the job yet
    assert measured.baseline_ms == 1.5
    assert measured.baseline_samples_ms == (1.0, 1.5, 2.0)
    assert measured.device == "NVIDIA H100"
    assert measured.replay is True
    assert measured.compile_ms == 42.5 and measured.baseline_request == job[1].event_id
    assert measured.version == 4 and measured.updated_at == at(3) and measured.submitted_at == at(0)
    assert measured.event_types == ("JobSubmitted", "BaselineRequested", "KernelCompiled", "BaselineMeasured")


def test_completed(job):
    done = JobCompleted(stream_id=job[0].stream_id, summary="baseline 1.5 ms", stream_version=5, occurred_at=at(9))

    view = project_job([*job, done])

    assert view.status == "completed" and view.finished
    assert view.summary == "baseline 1.5 ms"
    assert view.baseline_ms == 1.5  # earlier facts stay
    assert view.version == 5 and view.updated_at == at(9)
    assert view.event_types[-1] == "JobCompleted"
    assert view.failure is None and view.failed_stage is None


def test_failed(job):
    stream = job[0].stream_id
    baseline_failed = BaselineFailed(stream_id=stream, request_id=job[1].event_id, stage="compile",
                                     reason="syntax error", stream_version=3, occurred_at=at(5))
    events = [*job[:2], baseline_failed]

    view = project_job(events)
    assert view.status == "benchmarking"  # a failed baseline is not yet a failed job
    assert (view.failed_stage, view.failure) == ("compile", "syntax error")
    assert not view.finished

    job_failed = JobFailed(stream_id=stream, stage="compile", reason="syntax error", stream_version=4,
                           occurred_at=at(6))
    view = project_job([*events, job_failed])
    assert view.status == "failed" and view.finished
    assert (view.failed_stage, view.failure) == ("compile", "syntax error")
    assert view.summary is None and view.baseline_ms is None
    assert view.version == 4
    assert view.event_types == ("JobSubmitted", "BaselineRequested", "BaselineFailed", "JobFailed")


def test_events_without_a_job_effect_still_count(job):
    step = StepSkipped(stream_id=job[0].stream_id, step_id="s1", reason="d", stream_version=5, occurred_at=at(7))
    before, after = project_job(job), project_job([*job, step])

    assert after.status == before.status and after.baseline_ms == before.baseline_ms
    assert after.version == 5 and after.updated_at == at(7)
    assert after.event_types == (*before.event_types, "StepSkipped")


def test_version_counts_events_not_yet_stored(vector_add_spec):
    """Events not yet stored carry no stream_version; the fold counts them instead."""
    stream = job_stream("new")
    events = [JobSubmitted(stream_id=stream, spec=vector_add_spec),
              BaselineRequested(stream_id=stream, queue="benchmark.0", params={})]
    assert project_job(events).version == 2
    assert project_job(events, "new").job_id == "new"


def test_projection_over_a_stored_stream(sqlite_url, job):
    store = EventStore(sqlite_url)
    try:
        fresh = [e.model_copy(update={"stream_version": None}) for e in job]
        store.append(job[0].stream_id, fresh, expected_version=0)
        done = JobCompleted(stream_id=job[0].stream_id, summary="ok")
        store.append(job[0].stream_id, [done], expected_version=4)
        stored = store.read_stream(job[0].stream_id)
    finally:
        store.close()

    view = project_job(stored)
    assert view == project_job([*job, done.model_copy(update={"stream_version": 5})])
    assert view.status == "completed" and view.version == 5 and view.job_id == "j1"


def test_views_are_immutable(job):
    view = project_job(job)
    with pytest.raises(AttributeError):
        view.status = "completed"


def test_a_view_carried_on_equals_the_view_folded_at_once(job):
    for cut in range(len(job) + 1):
        assert project_job(job[cut:], "j1", since=project_job(job[:cut], "j1")) == project_job(job, "j1")


def test_an_undecodable_event_marks_the_job_and_the_fold_goes_on(job):
    unknown = Undecodable(position=9, stream_id=job_stream("j1"), stream_version=5, occurred_at=at(4),
                          type="JobRenamed", version=1, reason="unknown type")
    completed = JobCompleted(stream_id=job_stream("j1"), summary="done", stream_version=6, occurred_at=at(5))

    view = project_job([*job, unknown, completed], "j1")

    assert view.unreadable == "event 9 (JobRenamed v1) cannot be read: unknown type"
    assert view.status == "completed" and view.version == 6 and view.event_types[-2] == "JobRenamed"
    assert view.tenant == "local"


def test_following_a_job_reads_each_event_once(sqlite_url):
    """A long tune is followed by reading what came since the last poll, not the whole stream every 100 ms."""
    class CountingStore(EventStore):
        read = 0

        def read_stream(self, *args, **kwargs):
            events = super().read_stream(*args, **kwargs)
            self.read += len(events)
            return events

    store, stream = CountingStore(sqlite_url), job_stream("follow000001")
    spec = load_spec(EXAMPLES / "vector_add.cu", EXAMPLES / "vector_add.yaml")
    store.append(stream, [JobSubmitted(stream_id=stream, spec=spec)], expected_version=0)

    def work():
        for i in range(40):
            store.append(stream, [TaskProfiled(stream_id=stream, request_id=uuid4(), task="t", worker="w",
                                               started_at=datetime.now(UTC), wall_s=0.0, peak_rss_mb=0.0)],
                         expected_version=None)
            time.sleep(0.01)
        store.append(stream, [JobCompleted(stream_id=stream, summary="done")], expected_version=None)

    worker = threading.Thread(target=work)
    worker.start()
    seen = []
    view = follow_job(store, "follow000001", seen.append, timeout_s=30, poll_s=0.005)
    worker.join()
    assert view.status == "completed" and len(seen) == 42
    assert store.read == 42  # every event read once, however many polls there were
