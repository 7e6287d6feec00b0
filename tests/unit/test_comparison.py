"""A tuned candidate is kept only when it is faster than the best kernel so far beyond the noise: the planner
asks for the two to be timed in turn, the benchmark answers (from the GPU, the recordings, or without a
device from the tuning's medians), and the planner judges the answer's interval against the margin."""
import math
from uuid import uuid4

import pytest
from rich.console import Console

from kforge.render import describe, steps_table
from services.benchmark.handlers import compare_kernels, measure_baseline
from services.benchmark.replay import Recording, ReplayBook
from services.benchmark.resources import BenchmarkResources
from services.benchmark.sampling import look_confidence, looks, settled, speedup_interval
from services.planner import step_flow
from services.planner.policy import react
from shared.adapters.device.probe import DeviceInfo
from shared.application.requests import outstanding_requests
from shared.domain.contracts import CompareKernels
from shared.domain.events import (EVENTS, BaselineFailed, BaselineMeasured, BaselineRequested, CandidateGenerated,
                                  CandidateVerified, ComparisonRequested, GenerationRequested, JobSubmitted,
                                  KernelsCompared, StepAccepted, StepDiscarded, TuningCompleted, TuningRequested,
                                  VerificationRequested)
from shared.domain.projections import job_stream, project_job
from shared.domain.reports.tracker import performance_tracker
from shared.domain.spec import TuningStep
from shared.domain.steps import TUNED_SUFFIX, project_optimisation
from tests.conftest import HAS_GPU
from tests.fakes import RecordingBus, ScriptedBenchmarkSession
from tests.report_streams import rewrite_job

JOB = "cmp000000001"
STREAM = job_stream(JOB)
STEP = TuningStep(id="unroll", description="unroll the loop")


def explicit(spec, **benchmark):
    return spec.model_validate({**spec.model_dump(), "strategy": {"name": "explicit", "steps": [STEP.model_dump()]},
                                "benchmark": {**spec.benchmark.model_dump(), **benchmark}})


def comparing(spec) -> list:
    """A job whose one step's candidate is tuned (0.99 ms against the baseline's 1.0 ms) and sent to be compared."""
    submitted = JobSubmitted(stream_id=STREAM, spec=spec)
    baseline = BaselineRequested(stream_id=STREAM, queue="benchmark.0", params=spec.baseline_params())
    candidate = spec.as_candidate().model_copy(update={"source": spec.source.replace("{", "{ /* unrolled */", 1)})
    rewrite = GenerationRequested(stream_id=STREAM, queue="generator", kind="rewrite", step=STEP, candidate_id="unroll")
    events = [submitted, baseline,
              BaselineMeasured(stream_id=STREAM, request_id=baseline.event_id, device="GPU", params=baseline.params,
                               grid=(1, 1, 1), block=(256, 1, 1), samples_ms=[1.0, 1.0, 1.0], median_ms=1.0),
              rewrite, CandidateGenerated(stream_id=STREAM, request_id=rewrite.event_id, step_id="unroll",
                                          candidate_id="unroll", candidate=candidate, provider="rules"),
              TuningRequested(stream_id=STREAM, queue="benchmark.0", candidate_id="unroll"),
              TuningCompleted(stream_id=STREAM, candidate_id="unroll", best_params=candidate.params, best_time_ms=0.99,
                              configs_evaluated=1, configs_failed=0, speedup=1 / 0.99)]
    # The configuration that won is verified (and sanitised) again, even when it is the one verified first;
    # then the planner asks for the comparison.
    (verify,) = step_flow.after_tuning(events[-1], uuid4(), project_optimisation(events), "verifier.0",
                                       "benchmark.0", [])
    assert isinstance(verify, VerificationRequested) and verify.candidate_id == "unroll" + TUNED_SUFFIX
    assert verify.candidate.params == candidate.params
    verified = CandidateVerified(stream_id=STREAM, request_id=verify.event_id, candidate_id=verify.candidate_id,
                                 device="GPU", trials=[], max_abs_error=0.0, max_rel_error=0.0)
    events += [verify, verified]
    request = step_flow.compare(verified, project_optimisation(events), "benchmark.0")
    assert isinstance(request, ComparisonRequested)
    return [*events, request]


def judged(events: list, speedup: float | None, interval, error: str | None = None):
    request = events[-1]
    answer = KernelsCompared(stream_id=STREAM, request_id=request.event_id, candidate_id="unroll", device="GPU",
                             incumbent_samples_ms=[], candidate_samples_ms=[], incumbent_ms=1.0, candidate_ms=0.99,
                             speedup=speedup, speedup_ci=interval, error=error)
    history = [*events, answer]
    (decision,) = react(answer, project_job(history), ["0"], project_optimisation(history)).events
    return decision


def test_the_tuned_candidate_is_sent_to_be_timed_against_the_best_so_far(vector_add_spec):
    events = comparing(explicit(vector_add_spec))
    request = events[-1]
    assert request.queue == "benchmark.0" and request.candidate_id == "unroll"
    assert request.incumbent.source == vector_add_spec.source and "unrolled" in request.candidate.source
    assert request.incumbent.params == vector_add_spec.baseline_params()
    assert (request.incumbent_ms, request.candidate_ms) == (1.0, 0.99)
    # It is a request like any other: owed an answer until one comes, and sent to the benchmark worker.
    assert outstanding_requests(events)[-1] == request
    message = react(request, project_job(events), ["0"], project_optimisation(events)).messages[0]
    assert message.task == CompareKernels.task and message.kwargs["request_id"] == str(request.event_id)
    assert project_optimisation(events).record("unroll").status == "comparing"


def test_clearly_faster_is_accepted_with_its_interval(vector_add_spec):
    accepted = judged(comparing(explicit(vector_add_spec)), 1.25, (1.21, 1.29))
    assert isinstance(accepted, StepAccepted)
    assert (accepted.speedup, accepted.speedup_ci) == (1.25, (1.21, 1.29))
    assert (accepted.old_time_ms, accepted.new_time_ms) == (1.0, 0.99)


def test_within_noise_is_discarded_naming_the_interval_and_the_margin(vector_add_spec):
    discarded = judged(comparing(explicit(vector_add_spec)), 1.009, (0.998, 1.021))
    assert isinstance(discarded, StepDiscarded) and discarded.stage == "compare"
    assert discarded.reason.startswith("within noise: 1.009x [0.998, 1.021] does not clear 1.02")
    # The interval clears 1 but not 1 + the margin: still noise. A margin of 0 would keep it.
    assert isinstance(judged(comparing(explicit(vector_add_spec)), 1.03, (1.01, 1.05)), StepDiscarded)
    spec = explicit(vector_add_spec).model_copy(deep=True)
    spec = spec.model_validate({**spec.model_dump(), "strategy": {**spec.strategy.model_dump(), "min_speedup_margin": 0}})
    assert isinstance(judged(comparing(spec), 1.03, (1.01, 1.05)), StepAccepted)


def test_slower_is_discarded(vector_add_spec):
    discarded = judged(comparing(explicit(vector_add_spec)), 0.95, (0.94, 0.96))
    assert isinstance(discarded, StepDiscarded)
    assert discarded.reason == "slower than the best so far (the submitted kernel): 0.950x [0.940, 0.960]"


def test_a_comparison_that_could_not_run_discards_the_step_saying_why(vector_add_spec):
    discarded = judged(comparing(explicit(vector_add_spec)), None, None, error="launch: the candidate: OUT_OF_RESOURCES")
    assert isinstance(discarded, StepDiscarded) and discarded.stage == "compare"
    assert "OUT_OF_RESOURCES" in discarded.reason


def test_without_an_interval_the_point_estimate_must_clear_the_margin(vector_add_spec):
    assert isinstance(judged(comparing(explicit(vector_add_spec)), 1.25, None), StepAccepted)
    discarded = judged(comparing(explicit(vector_add_spec)), 1.0101, None)
    assert discarded.reason.startswith("within noise: 1.010x (no interval) does not clear 1.02")


def test_a_step_accepted_before_intervals_reads_with_its_ratio_and_no_interval():
    payload = {"step_id": "unroll", "candidate_id": "unroll", "old_time_ms": 1.0, "new_time_ms": 0.8,
               "best_params": {"block_size_x": 128}}
    event = EVENTS.decode("StepAccepted", 1, payload, {"stream_id": STREAM, "event_id": str(uuid4())})
    assert event.version == 2
    assert event.speedup == pytest.approx(1.25) and event.speedup_ci is None


def test_the_median_ratio_interval_of_paired_samples():
    # Both kernels drift together; the candidate is 1.25x faster with a little noise of its own.
    drift = [1.0, 1.1, 0.95, 1.2, 1.05, 1.0]
    old = [2.0 * d for d in drift]
    new = [1.6 * d * (1 + 0.01 * (-1) ** i) for i, d in enumerate(drift)]
    speedup, (low, high) = speedup_interval(old, new)
    assert low < speedup < high and speedup == pytest.approx(1.25, rel=1e-3)
    assert high - low < 0.05  # the shared drift cancels in the pairs
    assert speedup_interval([2.0], [1.0]) == (pytest.approx(2.0), None)
    assert speedup_interval([1.0] * 5, [1.0] * 5) == (1.0, None)  # too few pairs to bound a median at 95%
    assert speedup_interval([1.0] * 6, [1.0] * 6) == (1.0, (1.0, 1.0))


def test_one_disturbed_pair_neither_moves_nor_widens_the_interval():
    old, new = [1.15] * 15, [1.0] * 15
    disturbed = [*new[:7], 3.0, *new[8:]]  # one launch caught behind a clock change
    assert speedup_interval(old, disturbed) == speedup_interval(old, new) == (pytest.approx(1.15), (1.15, 1.15))


def test_a_duel_looks_at_doubling_pair_counts_each_at_a_share_of_the_5_percent():
    assert looks(15, 120) == [15, 30, 60, 120] and looks(15, 100) == [15, 30, 60, 100] and looks(15, 15) == [15]
    assert look_confidence(15, 120) == pytest.approx(1 - 0.05 / 4)
    ratios = [1.0 + 0.01 * i for i in range(15)]  # 1.00 .. 1.14
    assert speedup_interval(ratios, [1.0] * 15) == (pytest.approx(1.07), (pytest.approx(1.03), pytest.approx(1.11)))
    wider = speedup_interval(ratios, [1.0] * 15, look_confidence(15, 120))[1]
    assert wider == (pytest.approx(1.02), pytest.approx(1.12))  # order statistics 3 and 13 rather than 4 and 12


def test_pairs_are_settled_once_the_interval_leaves_the_bar():
    noisy = [1.0 + 0.05 * (-1) ** i for i in range(15)]
    assert settled([1.2] * 15, noisy, bar=1.02, confidence=0.95)  # well above: more pairs would not change the verdict
    assert settled([0.8] * 15, noisy, bar=1.02, confidence=0.95)  # well below
    assert not settled([1.03] * 15, noisy, bar=1.02, confidence=0.95)  # straddles the bar: time more pairs
    assert not settled([1.5] * 5, [1.0] * 5, bar=1.02, confidence=0.95)  # no interval yet


# --- the benchmark's answer --------------------------------------------------------------------------------
def _stored(store, events):
    store.append(STREAM, [e.model_copy(update={"stream_version": None, "position": None}) for e in events],
                 expected_version=0)
    return events[-1]


@pytest.mark.skipif(HAS_GPU, reason="with a CUDA device the two are timed, not judged from the medians")
def test_without_a_device_the_tuning_medians_stand_without_an_interval(store, vector_add_spec):
    request = _stored(store, comparing(explicit(vector_add_spec)))

    compare_kernels(store, RecordingBus(), JOB, request.event_id, BenchmarkResources(0, "sm_90"))

    history = store.read_stream(STREAM)
    answer = history[-1]
    assert isinstance(answer, KernelsCompared) and answer.error is None
    assert answer.speedup == pytest.approx(1 / 0.99) and answer.speedup_ci is None
    assert answer.device == "none" and "the tuning's medians, no interval" in answer.note
    # 1.0101x does not clear 1.02: the step is discarded, and the job goes on.
    decision = react(answer, project_job(history), ["0"], project_optimisation(history)).events[0]
    assert isinstance(decision, StepDiscarded) and "(no interval)" in decision.reason


def test_on_a_scripted_gpu_the_two_are_timed_in_turn(store, vector_add_spec):
    spec = explicit(vector_add_spec, comparison_pairs=8, timeout_s=5)
    events = comparing(spec)
    faster = events[-1].candidate.model_copy(update={"params": {**events[-1].candidate.params, "block_size_x": 256}})
    slower = events[-1].incumbent.model_copy(update={"params": {**events[-1].incumbent.params, "block_size_x": 512}})
    request = _stored(store, [*events[:-1], events[-1].model_copy(update={"candidate": faster, "incumbent": slower})])
    _on_the_scripted_gpu(compare_kernels, store, request)

    answer = store.read_stream(STREAM)[-1]
    assert isinstance(answer, KernelsCompared) and answer.error is None and answer.device == "Scripted GPU"
    assert len(answer.incumbent_samples_ms) == len(answer.candidate_samples_ms) == 8
    assert answer.speedup == pytest.approx(2.0, rel=0.01)  # scripted: 2.0 ms at 512 threads, 1.0 at 256
    low, high = answer.speedup_ci
    assert low < answer.speedup < high and high - low < 0.02


def test_in_replay_the_recorded_samples_are_paired(store, vector_add_spec, tmp_path):
    spec = explicit(vector_add_spec, replay=True)
    request = _stored(store, comparing(spec))
    book = ReplayBook(tmp_path / "book.json")
    device = DeviceInfo(index=0, name="NVIDIA H100 80GB HBM3", arch="sm_90", max_threads=1024, peaks=None)
    for candidate, samples in ((request.incumbent, [1.0, 1.01, 0.99, 1.0, 1.0, 1.02, 0.98]),
                               (request.candidate, [0.8, 0.81, 0.79, 0.8, 0.8, 0.8])):
        recorded = spec.for_candidate(candidate)
        book.add(recorded, Recording.of(recorded, device, "2026-11-23", recorded.baseline_params(),
                                        _measured(samples)))

    compare_kernels(store, RecordingBus(), JOB, request.event_id, BenchmarkResources(0, "sm_90", replay_book=book))

    answer = store.read_stream(STREAM)[-1]
    assert answer.replay and answer.error is None and "recorded" in answer.device
    assert answer.incumbent_samples_ms == [1.0, 1.01, 0.99, 1.0, 1.0, 1.02]
    assert answer.candidate_samples_ms == [0.8, 0.81, 0.79, 0.8, 0.8, 0.8]
    assert answer.speedup == pytest.approx(1.25, rel=0.01) and answer.speedup_ci is not None
    assert "[REPLAY]" in describe(answer)


def test_in_replay_without_recordings_the_tuning_medians_stand(store, vector_add_spec, tmp_path):
    request = _stored(store, comparing(explicit(vector_add_spec, replay=True)))

    compare_kernels(store, RecordingBus(), JOB, request.event_id,
                    BenchmarkResources(0, "sm_90", replay_book=ReplayBook(tmp_path / "empty.json")))

    answer = store.read_stream(STREAM)[-1]
    assert answer.replay and answer.speedup_ci is None and "no recorded samples" in answer.note


def _on_the_scripted_gpu(handler, store, request) -> None:
    resources = BenchmarkResources(0, compile_workers=1, session_factory=ScriptedBenchmarkSession)
    try:
        handler(store, RecordingBus(), JOB, request.event_id, resources)
    finally:
        resources.close()


def _measured(samples):
    from services.benchmark.measurement import Measured

    return Measured(samples_ms=samples, check_ms=samples[0], max_abs_error=0.0)


# --- a baseline whose output disagrees with its own reference run ---------------------------------------------
def test_a_baseline_output_mismatch_is_reported_at_stage_output(store, vector_add_spec):
    spec = vector_add_spec.model_validate({**vector_add_spec.model_dump(), "params": {"block_size_x": ScriptedBenchmarkSession.WRONG},
                                           "benchmark": {**vector_add_spec.benchmark.model_dump(), "timeout_s": 5}})
    submitted = JobSubmitted(stream_id=STREAM, spec=spec)
    (request,) = react(submitted, project_job([submitted]), ["0"]).events
    store.append(STREAM, [submitted, request], expected_version=0)
    _on_the_scripted_gpu(measure_baseline, store, request)

    failed = store.read_stream(STREAM)[-1]
    assert isinstance(failed, BaselineFailed)
    assert failed.stage == "output" and "differ from the reference" in failed.reason


# --- every reported speedup carries its interval ---------------------------------------------------------------
def test_the_tracker_and_the_cli_show_each_steps_interval(vector_add_spec):
    events = rewrite_job(vector_add_spec)

    tracker = performance_tracker(events)
    (kept,) = tracker.steps
    assert (kept.speedup, kept.speedup_ci) == (2.0, (1.96, 2.04))
    assert {t.step_id: t.speedup_ci for t in tracker.tried} == {"elements_per_thread": (1.96, 2.04), "restrict": None}
    assert "(+50.00%, 2.000x [1.960, 2.040])" in tracker.generate_overview()
    assert math.isclose(tracker.model_dump(mode="json")["steps"][0]["speedup_ci"][0], 1.96)

    console = Console(width=250, record=True)
    console.print(steps_table(project_optimisation(events)))
    table = console.export_text()
    assert "speedup [95% CI]" in table and "2.000x [1.960, 2.040]" in table
    accepted = next(e for e in events if isinstance(e, StepAccepted))
    assert "2.000x [1.960, 2.040]" in describe(accepted)
