"""A tune job from submission to the merged result: planner decisions, benchmark handlers, a real SQLite
store and real spawned GPU processes (a CPU stand-in plays the GPU), split over two GPU queues."""
from uuid import UUID

import pytest

from services.benchmark import handlers
from services.benchmark.resources import BenchmarkResources
from services.planner.handlers import catch_up
from services.planner.policy import react
from shared.application.jobs import cancel_job
from shared.domain.contracts import MeasureBaseline, TuneShard
from shared.domain.events import (BaselineMeasured, ConfigFailed, ConfigMeasured, JobSubmitted, ShardTuned,
                                  TuningCompleted, TuningRequested)
from shared.domain.projections import job_stream, project_job
from tests.fakes import RecordingBus, ScriptedBenchmarkSession, scripted_time_ms

BLOCKS = [64, 128, 192, 256, ScriptedBenchmarkSession.POISON, ScriptedBenchmarkSession.WRONG, 384, 512]
HANDLERS = {MeasureBaseline.task: handlers.measure_baseline, TuneShard.task: handlers.tune_shard}


@pytest.fixture
def gpus():
    """One warm set of resources per GPU queue, as one benchmark worker per GPU keeps."""
    resources = {gpu: BenchmarkResources(int(gpu), compile_workers=1, session_factory=ScriptedBenchmarkSession)
                 for gpu in ("0", "1")}
    yield resources
    for r in resources.values():
        r.close()


def tune_spec(sweep_spec, **search):
    return sweep_spec.model_validate({**sweep_spec.model_dump(), "strategy": {"name": "tune"},
                                      "tune_params": {"block_size_x": BLOCKS},
                                      "benchmark": {**sweep_spec.benchmark.model_dump(), "search": search}})


def run_until_quiet(store, bus, gpus):
    """Deliver every message the planner and handlers send, as the bus would, until none is left."""
    done = 0
    while True:
        catch_up(store, bus, list(gpus))
        if done == len(bus.messages):
            return
        for message in bus.messages[done:]:
            done += 1
            if message.task in HANDLERS:
                kw = message.kwargs
                HANDLERS[message.task](store, bus, kw["job_id"], UUID(kw["request_id"]), gpus[kw["gpu"]])


def submit(store, spec, job_id="t00000000001"):
    store.append(job_stream(job_id), [JobSubmitted(stream_id=job_stream(job_id), spec=spec)], expected_version=0)
    return job_id


def test_a_brute_force_tune_is_split_over_both_gpus_and_merged(store, gpus, sweep_spec):
    job_id = submit(store, tune_spec(sweep_spec))
    bus = RecordingBus()

    run_until_quiet(store, bus, gpus)

    history = store.read_stream(job_stream(job_id))
    view = project_job(history, job_id)
    assert view.status == "completed", view.failure
    requests = [e for e in history if isinstance(e, TuningRequested)]
    assert sorted(r.queue for r in requests) == ["benchmark.0", "benchmark.1"]
    shards = [e for e in history if isinstance(e, ShardTuned)]
    assert len(shards) == 2 and sum(s.configs for s in shards) == len(BLOCKS)
    assert sum(s.host_replacements for s in shards) == 1  # the poisoned context cost one GPU process
    outcomes = [e for e in history if isinstance(e, ConfigMeasured | ConfigFailed)]
    assert sorted(e.params["block_size_x"] for e in outcomes) == sorted(BLOCKS)
    assert {e.params["block_size_x"] for e in outcomes if isinstance(e, ConfigFailed)} == {
        ScriptedBenchmarkSession.POISON, ScriptedBenchmarkSession.WRONG}
    (completed,) = [e for e in history if isinstance(e, TuningCompleted)]
    assert completed.best_params == {"block_size_x": 256} and completed.configs_failed == 2
    assert completed.speedup == pytest.approx(view.baseline_ms / scripted_time_ms(256))
    assert view.best_params == {"block_size_x": 256} and "tuned" in view.summary
    # The baseline records what its output was checked with: the reference repeats itself, so the default.
    (baseline,) = [e for e in history if isinstance(e, BaselineMeasured)]
    assert [(t.output, t.atol, t.rtol, t.reason) for t in baseline.tolerances] == [
        ("c", 1e-4, 1e-4, "the float32 default: the reference repeats itself exactly")]


def test_redelivered_tuning_appends_nothing(store, gpus, sweep_spec):
    job_id = submit(store, tune_spec(sweep_spec, strategy="brute_force"))
    bus = RecordingBus()
    run_until_quiet(store, bus, {"0": gpus["0"]})
    history = store.read_stream(job_stream(job_id))
    request = next(e for e in history if isinstance(e, TuningRequested))

    handlers.tune_shard(store, bus, job_id, request.event_id, gpus["0"])

    assert [e.event_id for e in store.read_stream(job_stream(job_id))] == [e.event_id for e in history]


def test_a_shard_whose_worker_died_resumes_after_what_it_recorded(store, gpus, sweep_spec):
    job_id = submit(store, tune_spec(sweep_spec, strategy="brute_force"))
    bus = RecordingBus()
    catch_up(store, bus, ["0"])
    baseline = bus.messages[0].kwargs
    handlers.measure_baseline(store, bus, job_id, UUID(baseline["request_id"]), gpus["0"])
    catch_up(store, bus, ["0"])
    request = next(e for e in store.read_stream(job_stream(job_id)) if isinstance(e, TuningRequested))
    # What the dead worker recorded, with the ids the runner derives: 256 looked slow on that run.
    from services.benchmark.tuning import config_key
    from shared.domain.events import derived_id

    before = [ConfigMeasured(event_id=derived_id(request.event_id, config_key({"block_size_x": b}), "ConfigMeasured"),
                             stream_id=job_stream(job_id), request_id=request.event_id, params={"block_size_x": b},
                             grid=(1, 1, 1), block=(b, 1, 1), samples_ms=[99.0], median_ms=99.0, min_ms=99.0,
                             mean_ms=99.0, stddev_ms=0.0, ci95_ms=None) for b in (64, 256)]
    store.append(job_stream(job_id), before, expected_version=None)

    handlers.tune_shard(store, bus, job_id, request.event_id, gpus["0"])

    history = store.read_stream(job_stream(job_id))
    outcomes = [e for e in history if isinstance(e, ConfigMeasured | ConfigFailed)]
    assert sorted(e.params["block_size_x"] for e in outcomes) == sorted(BLOCKS)  # each exactly once
    (shard,) = [e for e in history if isinstance(e, ShardTuned)]
    # 256 was not measured again (its recorded 99 ms stands), so the best is the next fastest.
    assert shard.configs == len(BLOCKS) and shard.best_params in ({"block_size_x": 192}, {"block_size_x": 384})


def test_other_strategies_run_as_one_shard(sweep_spec):
    spec = tune_spec(sweep_spec, strategy="genetic_algorithm", max_fevals=5)
    view = project_job([JobSubmitted(stream_id="job-x", spec=spec)])

    baseline = BaselineMeasured(stream_id="job-x", request_id=UUID(int=1), device="d", params={}, grid=(1, 1, 1),
                                block=(1, 1, 1), samples_ms=[1.0], median_ms=1.0)
    (request,) = react(baseline, view, ["0", "1", "2"]).events
    assert isinstance(request, TuningRequested) and (request.shard, request.shards) == (0, 1)


def test_a_shard_that_could_not_run_fails_the_job_with_its_reason():
    spec_view = project_job([TuningRequested(event_id=UUID(int=1), stream_id="job-x", queue="benchmark.0")])
    failed = ShardTuned(stream_id="job-x", request_id=UUID(int=1), device="none", strategy="brute_force", configs=0,
                   measured=0, failed=0, best_params=None, best_ms=None, wall_s=0, compile_s=0, gpu_busy_s=0,
                   first_result_s=0, error="no CUDA device: the driver reports CUDA_ERROR_NO_DEVICE")
    (job_failed,) = react(failed, spec_view, ["0"]).events
    assert job_failed.type == "JobFailed" and job_failed.stage == "tuning" and "NO_DEVICE" in job_failed.reason


def test_a_cancelled_job_stops_its_search_and_asks_for_nothing_more(store, gpus, sweep_spec):
    job_id = submit(store, tune_spec(sweep_spec, strategy="brute_force"))
    bus = RecordingBus()
    catch_up(store, bus, ["0"])
    handlers.measure_baseline(store, bus, job_id, UUID(bus.messages[0].kwargs["request_id"]), gpus["0"])
    catch_up(store, bus, ["0"])
    request = next(e for e in store.read_stream(job_stream(job_id)) if isinstance(e, TuningRequested))
    stream = job_stream(job_id)
    original_append = store.append

    def append_then_cancel(stream_id, events, expected_version, **kw):
        """The user cancels as soon as the search has recorded its first configurations."""
        stored = original_append(stream_id, events, expected_version, **kw)
        if any(isinstance(e, ConfigMeasured | ConfigFailed) for e in events) and \
                not store.stream_has(stream, "JobCancelled"):
            cancel_job(store, bus, job_id, reason="wrong sizes", cancelled_by="test")
        return stored

    store.append = append_then_cancel
    handlers.tune_shard(store, bus, job_id, request.event_id, gpus["0"])
    store.append = original_append

    history = store.read_stream(stream)
    assert not any(isinstance(e, ShardTuned) for e in history)  # stopped: a cancelled job is owed no answer
    assert project_job(history, job_id).status == "cancelled"
    assert project_job(history, job_id).failure == "wrong sizes"
    catch_up(store, bus, ["0"])
    assert store.read_stream(stream) == history  # the planner starts nothing for it
    # A redelivered request for it does no work either.
    handlers.tune_shard(store, bus, job_id, request.event_id, gpus["0"])
    assert store.read_stream(stream) == history
