"""The request/answer protocol (shared/application/requests.py) against both databases: what lands on a job's stream while a
worker computes its answer never costs a second computation, and an answer is stored once."""
from datetime import UTC, datetime
from uuid import uuid4

import pytest

from shared.adapters.eventstore import ConcurrencyConflict, EventStore
from shared.application.requests import answer_request, needs_answer
from shared.domain.contracts import PlannerCatchUp
from shared.domain.events import (BaselineFailed, BaselineMeasured, BaselineRequested, JobCancelled, JobSubmitted,
                                  KernelCompiled, TaskProfiled, derived_id)
from shared.domain.projections import job_stream
from tests.fakes import RecordingBus

JOB = "aaaabbbbcccc"
STREAM = job_stream(JOB)


@pytest.fixture
def store(store_url):
    s = EventStore(store_url)
    yield s
    s.close()


@pytest.fixture
def request_(store, vector_add_spec) -> BaselineRequested:
    """A job as the planner leaves it: submitted, its baseline requested."""
    store.append(STREAM, [JobSubmitted(stream_id=STREAM, spec=vector_add_spec)], expected_version=0)
    (request,) = store.append(STREAM, [BaselineRequested(stream_id=STREAM, queue="benchmark.0", params={})],
                              expected_version=1)
    return request


def compiled(request: BaselineRequested) -> KernelCompiled:
    rid = request.event_id
    return KernelCompiled(event_id=derived_id(rid, "KernelCompiled"), stream_id=STREAM, request_id=rid,
                          arch="sm_90", compile_ms=1.0, cache_key="k" * 64)


def measured(request: BaselineRequested) -> BaselineMeasured:
    rid = request.event_id
    return BaselineMeasured(event_id=derived_id(rid, "BaselineMeasured"), stream_id=STREAM, request_id=rid,
                            device="H100", params={}, grid=(1, 1, 1), block=(256, 1, 1), samples_ms=[1.0],
                            median_ms=1.0)


def failed(request: BaselineRequested) -> BaselineFailed:
    rid = request.event_id
    return BaselineFailed(event_id=derived_id(rid, "BaselineFailed"), stream_id=STREAM, request_id=rid,
                          stage="launch", reason="CUDA_ERROR_LAUNCH_FAILED")


def profiled_elsewhere() -> TaskProfiled:
    """Another task's record, of another request: nothing to do with the answer being computed."""
    return TaskProfiled(stream_id=STREAM, request_id=uuid4(), task="benchmark.tune", worker="gpu-host:42",
                        started_at=datetime.now(UTC), wall_s=3.0, peak_rss_mb=900.0)


class Worker:
    """A compute step that counts its calls and, while it "measures", lets `meanwhile` append to the stream."""

    def __init__(self, store: EventStore, answer, meanwhile=()):
        self.store, self.answer, self.meanwhile, self.calls = store, answer, list(meanwhile), 0

    def __call__(self, history, submitted, request):
        self.calls += 1
        assert isinstance(submitted, JobSubmitted) and isinstance(request, BaselineRequested)
        assert [e.type for e in history] == ["JobSubmitted", "BaselineRequested"]
        if self.meanwhile:
            self.store.append(STREAM, self.meanwhile, expected_version=None)
        return self.answer(request)


def answer(store: EventStore, bus: RecordingBus, request: BaselineRequested, worker: Worker) -> None:
    answer_request(store, bus, JOB, request.event_id, BaselineRequested, worker)


def test_an_unrelated_event_appended_between_read_and_append_costs_no_second_measurement(store, request_):
    bus = RecordingBus()
    worker = Worker(store, lambda r: [compiled(r), measured(r)], meanwhile=[profiled_elsewhere()])

    answer(store, bus, request_, worker)

    assert worker.calls == 1
    assert [e.type for e in store.read_stream(STREAM)] == ["JobSubmitted", "BaselineRequested", "TaskProfiled",
                                                           "KernelCompiled", "BaselineMeasured"]
    assert [m.task for m in bus.messages] == [PlannerCatchUp.task]

    # The task redelivered (or retried) finds its request answered: nothing computed or appended again, and
    # the planner is woken again in case the first delivery died before it woke it.
    answer(store, bus, request_, worker)
    assert worker.calls == 1
    assert len(store.read_stream(STREAM)) == 5
    assert [m.task for m in bus.messages] == [PlannerCatchUp.task] * 2


def test_the_same_answer_from_two_workers_is_stored_once(store, request_):
    bus = RecordingBus()
    # Another worker holding the same message appends the same answer (the same derived ids) first.
    worker = Worker(store, lambda r: [compiled(r), measured(r)], meanwhile=[compiled(request_), measured(request_)])

    answer(store, bus, request_, worker)

    assert [e.type for e in store.read_stream(STREAM)] == ["JobSubmitted", "BaselineRequested", "KernelCompiled",
                                                           "BaselineMeasured"]
    assert [m.task for m in bus.messages] == [PlannerCatchUp.task]


def test_a_different_answer_sharing_an_id_is_refused_and_the_first_stands(store, request_):
    bus = RecordingBus()
    first = [compiled(request_), failed(request_)]
    worker = Worker(store, lambda r: [compiled(r), measured(r)], meanwhile=first)

    answer(store, bus, request_, worker)  # the store refuses it whole; the request is answered: no error

    stream = store.read_stream(STREAM)
    assert [e.event_id for e in stream[2:]] == [e.event_id for e in first]
    assert not needs_answer(stream, request_.event_id)
    assert [m.task for m in bus.messages] == [PlannerCatchUp.task]


def test_a_conflict_that_leaves_the_request_owed_is_raised(store, request_):
    bus = RecordingBus()
    # Only a part of another answer is stored (its compile record): the request is still owed an answer.
    worker = Worker(store, lambda r: [compiled(r), measured(r)], meanwhile=[compiled(request_)])

    with pytest.raises(ConcurrencyConflict, match="1 of 2 events were already stored"):
        answer(store, bus, request_, worker)

    assert needs_answer(store.read_stream(STREAM), request_.event_id)
    assert bus.messages == []


def test_a_cancelled_job_is_owed_no_work_and_its_planner_is_woken(store, request_):
    bus = RecordingBus()
    store.append(STREAM, [JobCancelled(stream_id=STREAM, reason="stop", cancelled_by="cli")], expected_version=None)
    worker = Worker(store, lambda r: [compiled(r), measured(r)])

    answer(store, bus, request_, worker)

    assert worker.calls == 0
    assert [e.type for e in store.read_stream(STREAM)][-1] == "JobCancelled"
    assert [m.task for m in bus.messages] == [PlannerCatchUp.task]
