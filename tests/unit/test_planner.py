"""The planner: its pure policy, one event at a time, and its catch-up loop over a real SQLite store."""
import os
import subprocess
import sys
from pathlib import Path
from uuid import uuid4

import pytest
from sqlalchemy import text

from services.planner import handlers
from services.planner.policy import NOTHING, react
from shared.domain.contracts import MeasureBaseline, Message
from shared.domain.events import (BaselineFailed, BaselineMeasured, BaselineRequested, JobCompleted, JobFailed,
                                  JobSubmitted, KernelCompiled, GeneratorCalled)
from shared.domain.projections import project_job
from tests.fakes import RecordingBus

GPUS = ["0", "1", "2"]
ROOT = Path(__file__).resolve().parents[2]


class BrokenBus:
    def dispatch(self, message: Message) -> None:
        raise ConnectionError("broker unreachable")


def submitted(spec, job_id: str | None = None) -> JobSubmitted:
    return JobSubmitted(stream_id=f"job-{job_id or uuid4().hex[:8]}", spec=spec)


def measured(request: BaselineRequested, median_ms: float = 1.5, replay: bool = False) -> BaselineMeasured:
    return BaselineMeasured(stream_id=request.stream_id, request_id=request.event_id, device="NVIDIA H100",
                            params=request.params, grid=(4, 1, 1), block=(256, 1, 1), samples_ms=[1.0, median_ms, 2.0],
                            median_ms=median_ms, replay=replay)


def job_after(*events):
    return project_job(events)


# --- policy -----------------------------------------------------------------------------------------
def test_job_submitted_requests_a_baseline(vector_add_spec):
    job = submitted(vector_add_spec)

    reaction = react(job, job_after(job), GPUS)

    assert reaction.messages == []
    [request] = reaction.events
    assert isinstance(request, BaselineRequested)
    assert request.stream_id == job.stream_id
    assert request.queue in {f"benchmark.{g}" for g in GPUS}
    assert request.params == vector_add_spec.baseline_params()
    assert request.event_id != job.event_id
    # Deciding again (a redelivery) derives the same event, id included.
    again = react(job, job_after(job), GPUS).events[0]
    assert again.event_id == request.event_id and again.queue == request.queue


def test_gpu_choice_is_stable_per_job_and_spreads_jobs(vector_add_spec):
    jobs = [submitted(vector_add_spec, f"j{i}") for i in range(40)]
    queues = [react(j, job_after(j), GPUS).events[0].queue for j in jobs]

    assert set(queues) <= {f"benchmark.{g}" for g in GPUS}
    assert len(set(queues)) > 1  # not every job lands on one GPU
    # The choice depends on the job id only, not on the event or the time.
    for j, queue in zip(jobs, queues):
        replay = JobSubmitted(stream_id=j.stream_id, spec=vector_add_spec)
        assert react(replay, job_after(replay), GPUS).events[0].queue == queue
    assert react(jobs[0], job_after(jobs[0]), ["only"]).events[0].queue == "benchmark.only"


def test_gpu_choice_is_the_same_in_another_process(vector_add_spec):
    """Python's hash() is salted per process; the planner's choice must not be."""
    job_ids = [f"job-j{i}" for i in range(12)]
    here = []
    for stream in job_ids:
        job = JobSubmitted(stream_id=stream, spec=vector_add_spec)
        here.append(react(job, job_after(job), GPUS).events[0].queue)

    script = (
        "import sys; from pathlib import Path\n"
        "from kforge.specfile import load_spec\n"
        "from services.planner.policy import react\n"
        "from shared.domain.events import JobSubmitted\n"
        "from shared.domain.projections import project_job\n"
        f"spec = load_spec(Path({str(ROOT / 'examples' / 'vector_add.cu')!r}), None)\n"
        f"for s in {job_ids!r}:\n"
        "    j = JobSubmitted(stream_id=s, spec=spec)\n"
        f"    print(react(j, project_job([j]), {GPUS!r}).events[0].queue)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == here


def test_baseline_requested_sends_measure_baseline(vector_add_spec):
    job = submitted(vector_add_spec, "abc123")
    [request] = react(job, job_after(job), GPUS).events

    reaction = react(request, job_after(job, request), GPUS)

    assert reaction.events == []
    [message] = reaction.messages
    assert message.task == MeasureBaseline.task
    assert message.queue == request.queue
    assert message.message_id == str(request.event_id)
    assert message.kwargs == {"job_id": "abc123", "request_id": str(request.event_id), "gpu": request.queue.split(".")[1]}


def test_baseline_measured_completes_the_job(vector_add_spec):
    job = submitted(vector_add_spec)
    [request] = react(job, job_after(job), GPUS).events
    result = measured(request, median_ms=1.23456)

    reaction = react(result, job_after(job, request, result), GPUS)

    assert reaction.messages == []
    [completed] = reaction.events
    assert isinstance(completed, JobCompleted)
    assert completed.stream_id == job.stream_id
    assert "1.2346 ms" in completed.summary and "NVIDIA H100" in completed.summary
    assert "replayed" not in completed.summary
    assert react(result, job_after(job, request, result), GPUS).events[0].event_id == completed.event_id

    replayed = measured(request, replay=True)
    assert "replayed measurement" in react(replayed, job_after(job, request, replayed), GPUS).events[0].summary


def test_baseline_failed_fails_the_job(vector_add_spec):
    job = submitted(vector_add_spec)
    [request] = react(job, job_after(job), GPUS).events
    failure = BaselineFailed(stream_id=job.stream_id, request_id=request.event_id, stage="compile",
                             reason="error: identifier 'x' is undefined", log="nvrtc log")

    reaction = react(failure, job_after(job, request, failure), GPUS)

    [failed] = reaction.events
    assert isinstance(failed, JobFailed)
    assert (failed.stage, failed.reason) == ("compile", "error: identifier 'x' is undefined")
    assert failed.stream_id == job.stream_id
    assert reaction.messages == []
    assert react(failure, job_after(job, request, failure), GPUS).events[0].event_id == failed.event_id


def test_finished_job_ignores_late_events(vector_add_spec):
    job = submitted(vector_add_spec)
    [request] = react(job, job_after(job), GPUS).events
    result = measured(request)
    [completed] = react(result, job_after(job, request, result), GPUS).events
    finished = job_after(job, request, result, completed)
    assert finished.finished

    late_failure = BaselineFailed(stream_id=job.stream_id, request_id=request.event_id, stage="device", reason="x")
    for late in (measured(request, median_ms=9.0), late_failure, request, job):
        assert react(late, finished, GPUS) == NOTHING
    assert react(completed, finished, GPUS) == NOTHING


def test_events_the_planner_does_not_act_on(vector_add_spec):
    job = submitted(vector_add_spec)
    [request] = react(job, job_after(job), GPUS).events
    compiled = KernelCompiled(stream_id=job.stream_id, request_id=request.event_id, arch="sm_90", compile_ms=3.0,
                              cache_key="k")
    step = GeneratorCalled(stream_id=job.stream_id, request_id=request.event_id, kind="plan", step_id=None, provider="rules",
                           model="kforge-rules", system="s", prompt="p", response="r")
    assert react(compiled, job_after(job, request, compiled), GPUS) == NOTHING
    assert react(step, job_after(job, request, step), GPUS) == NOTHING


# --- catch-up over a real store ---------------------------------------------------------------------
def test_catch_up_runs_a_job_to_its_baseline_request(store, vector_add_spec):
    job = submitted(vector_add_spec, "flow")
    store.append(job.stream_id, [job], expected_version=0)
    bus = RecordingBus()

    processed = handlers.catch_up(store, bus, GPUS)

    assert processed == 2  # JobSubmitted, then the BaselineRequested the planner appended
    stream = store.read_stream(job.stream_id)
    assert [e.type for e in stream] == ["JobSubmitted", "BaselineRequested"]
    request = stream[1]
    [message] = bus.messages
    assert message.task == MeasureBaseline.task
    assert message.message_id == str(request.event_id)
    assert message.queue == request.queue
    assert message.kwargs == {"job_id": "flow", "request_id": str(request.event_id), "gpu": request.queue.split(".")[1]}
    assert store.tracked_position(handlers.CONSUMER) == request.position
    assert project_job(stream).status == "benchmarking"

    # Nothing new: a second catch-up processes, appends and sends nothing.
    log = store.read_all()
    assert handlers.catch_up(store, bus, GPUS) == 0
    assert len(bus.messages) == 1
    assert store.read_all() == log


def test_catch_up_after_a_crash_appends_no_duplicates(store, vector_add_spec):
    job = submitted(vector_add_spec, "crash")
    store.append(job.stream_id, [job], expected_version=0)
    # The planner decided and appended, then died before its tracking position committed.
    [request] = store.append(job.stream_id, react(job, project_job([job]), GPUS).events, expected_version=None)
    assert store.tracked_position(handlers.CONSUMER) == 0
    bus = RecordingBus()

    assert handlers.catch_up(store, bus, GPUS) == 2

    stream = store.read_stream(job.stream_id)
    assert [e.event_id for e in stream] == [job.event_id, request.event_id]
    assert [m.message_id for m in bus.messages] == [str(request.event_id)]

    # The benchmark worker reports; the planner completes the job, once.
    result = measured(request)
    store.append(job.stream_id, [result], expected_version=2)
    # BaselineMeasured, then its JobCompleted, which would request the webhook if the spec had one
    assert handlers.catch_up(store, bus, GPUS) == 2
    assert store.tracked_position(handlers.CONSUMER) == store.read_all()[-1].position
    stream = store.read_stream(job.stream_id)
    assert [e.type for e in stream] == ["JobSubmitted", "BaselineRequested", "BaselineMeasured", "JobCompleted"]
    assert "1.5000 ms" in stream[-1].summary
    assert len(bus.messages) == 1
    assert handlers.catch_up(store, bus, GPUS) == 0
    assert store.stream_version(job.stream_id) == 4

    view = project_job(stream)
    assert view.status == "completed" and view.baseline_ms == 1.5


def test_replaying_the_whole_log_appends_nothing(store, vector_add_spec):
    """If the tracking position is lost, the planner reprocesses everything: derived ids keep the log as it was,
    and the request of a job that has finished is not sent to a benchmark worker again."""
    job = submitted(vector_add_spec, "replay")
    store.append(job.stream_id, [job], expected_version=0)
    bus = RecordingBus()
    handlers.catch_up(store, bus, GPUS)
    request = store.read_stream(job.stream_id)[1]
    store.append(job.stream_id, [measured(request)], expected_version=2)
    handlers.catch_up(store, bus, GPUS)
    log = store.read_all()
    assert [e.type for e in log][-1] == "JobCompleted"

    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM kforge_tracking"))
    assert store.tracked_position(handlers.CONSUMER) == 0

    # JobSubmitted, BaselineRequested, BaselineMeasured and JobCompleted decided again
    assert handlers.catch_up(store, bus, GPUS) == 4
    assert store.read_all() == log
    assert [m.message_id for m in bus.messages] == [str(request.event_id)]


def test_failed_dispatch_rolls_back_and_is_retried(store, vector_add_spec):
    job = submitted(vector_add_spec, "retry")
    store.append(job.stream_id, [job], expected_version=0)

    with pytest.raises(ConnectionError):
        handlers.catch_up(store, BrokenBus(), GPUS)

    # JobSubmitted was processed and committed; the request event's transaction rolled back.
    stream = store.read_stream(job.stream_id)
    assert [e.type for e in stream] == ["JobSubmitted", "BaselineRequested"]
    assert store.tracked_position(handlers.CONSUMER) == stream[0].position

    bus = RecordingBus()
    assert handlers.catch_up(store, bus, GPUS) == 1
    assert [m.message_id for m in bus.messages] == [str(stream[1].event_id)]
    assert store.read_stream(job.stream_id) == stream


def test_catch_up_fails_a_job_ignores_late_results_and_skips_other_streams(store, vector_add_spec):
    store.append("audit-1", [JobCompleted(stream_id="audit-1", summary="not a job stream")], expected_version=0)
    job = submitted(vector_add_spec, "bad")
    store.append(job.stream_id, [job], expected_version=0)
    bus = RecordingBus()
    handlers.catch_up(store, bus, GPUS)
    request = store.read_stream(job.stream_id)[1]

    failure = BaselineFailed(stream_id=job.stream_id, request_id=request.event_id, stage="launch", reason="too many")
    store.append(job.stream_id, [failure], expected_version=2)
    assert handlers.catch_up(store, bus, GPUS) == 2  # the failure, then its JobFailed (no webhook to request)

    stream = store.read_stream(job.stream_id)
    assert [e.type for e in stream] == ["JobSubmitted", "BaselineRequested", "BaselineFailed", "JobFailed"]
    assert (stream[-1].stage, stream[-1].reason) == ("launch", "too many")
    assert project_job(stream).status == "failed"

    # A result arriving after the job failed changes nothing.
    store.append(job.stream_id, [measured(request)], expected_version=4)
    assert handlers.catch_up(store, bus, GPUS) == 1
    assert [e.type for e in store.read_stream(job.stream_id)][-2:] == ["JobFailed", "BaselineMeasured"]
    assert project_job(store.read_stream(job.stream_id)).status == "failed"

    assert len(bus.messages) == 1
    assert store.read_stream("audit-1")[0].summary == "not a job stream"
    assert store.stream_version("audit-1") == 1
    assert store.tracked_position(handlers.CONSUMER) == store.read_all()[-1].position


def test_a_job_gets_one_terminal_event_when_results_queue_up(store, vector_add_spec):
    job = submitted(vector_add_spec, "twice")
    store.append(job.stream_id, [job], expected_version=0)
    handlers.catch_up(store, RecordingBus(), GPUS)
    request = store.read_stream(job.stream_id)[1]
    failure = BaselineFailed(stream_id=job.stream_id, request_id=request.event_id, stage="launch", reason="r")
    store.append(job.stream_id, [failure, measured(request)], expected_version=2)

    handlers.catch_up(store, RecordingBus(), GPUS)

    stream = store.read_stream(job.stream_id)
    terminal = [e.type for e in stream if isinstance(e, JobCompleted | JobFailed)]
    assert terminal == ["JobFailed"]
    assert project_job(stream).status == "failed"
