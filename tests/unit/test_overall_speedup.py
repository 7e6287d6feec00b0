"""The speedup a job reports is its best kernel timed in turn with the submitted kernel as submitted, never the
ratio of a baseline and a tuning time measured apart (on a shared GPU those disagreed by 16%)."""
import pytest

from services.planner.policy import react
from shared.domain.events import (BaselineMeasured, BaselineRequested, ComparisonRequested, JobCompleted, JobFailed,
                                  JobSubmitted, KernelsCompared, ShardTuned, StepAccepted, TuningCompleted,
                                  TuningRequested)
from shared.domain.projections import project_job
from shared.domain.reports.results import kernel_result
from shared.domain.reports.tracker import performance_tracker
from shared.domain.steps import OVERALL, project_optimisation
from tests.report_streams import rewrite_job
from tests.unit.test_comparison import STREAM, comparing, explicit, judged


def decide(history: list) -> list:
    return react(history[-1], project_job(history), ["0"], project_optimisation(history)).events


def answered(request: ComparisonRequested, speedup: float, interval, error: str | None = None) -> KernelsCompared:
    return KernelsCompared(stream_id=STREAM, request_id=request.event_id, candidate_id=OVERALL, device="GPU",
                           incumbent_samples_ms=[], candidate_samples_ms=[], incumbent_ms=1.02, candidate_ms=0.85,
                           speedup=speedup, speedup_ci=interval, error=error)


@pytest.fixture
def kept_one_step(vector_add_spec) -> list:
    """An explicit job whose only step was accepted (1.25x against the submitted kernel, timed in turn)."""
    events = comparing(explicit(vector_add_spec))
    accepted = judged(events, 1.25, (1.21, 1.29))
    assert isinstance(accepted, StepAccepted)
    return [*events, accepted]


def test_a_job_that_kept_a_step_times_its_best_against_the_submitted_kernel_before_it_completes(kept_one_step,
                                                                                                 vector_add_spec):
    (request,) = decide(kept_one_step)

    assert isinstance(request, ComparisonRequested) and request.candidate_id == OVERALL
    assert request.incumbent.source == vector_add_spec.source
    assert request.incumbent.params == vector_add_spec.baseline_params()
    assert "unrolled" in request.candidate.source and (request.incumbent_ms, request.candidate_ms) == (1.0, 0.99)
    # Deciding again while the answer is out asks nothing twice.
    assert decide([*kept_one_step, request, kept_one_step[-1]]) == []


def test_the_job_reports_the_speedup_timed_in_turn(kept_one_step):
    (request,) = decide(kept_one_step)
    history = [*kept_one_step, request, answered(request, 1.2, (1.15, 1.25))]

    (completed,) = decide(history)
    history.append(completed)

    assert isinstance(completed, JobCompleted)
    assert "1.200x [1.150, 1.250] the submitted kernel, timed in turn (1.0200 -> 0.8500 ms on GPU)" in completed.summary
    view = project_job(history)
    assert (view.speedup, view.speedup_ci) == (1.2, (1.15, 1.25))
    tracker = performance_tracker(history)
    assert (tracker.speedup, tracker.speedup_in_turn_ci) == (1.2, (1.15, 1.25))
    assert tracker.get_total_improvement() == pytest.approx(100 * (1 - 1 / 1.2))
    assert "1.200x [1.150, 1.250] timed in turn" in tracker.generate_overview()


def test_a_final_comparison_that_failed_falls_back_to_the_times_taken_apart_and_says_so(kept_one_step):
    (request,) = decide(kept_one_step)
    history = [*kept_one_step, request, answered(request, None, None, error="launch: out of memory")]

    (completed,) = decide(history)

    assert "1.01x the baseline 1.0000 ms, timed apart (they could not be timed in turn: launch: out of memory)" \
        in completed.summary
    assert project_job([*history, completed]).speedup == pytest.approx(1 / 0.99)


def tuned(spec, best_block: int) -> list:
    """A tune job whose one shard found `best_block` fastest (0.8 ms against the baseline's 1.0 ms)."""
    submitted = JobSubmitted(stream_id=STREAM, spec=spec)
    baseline = BaselineRequested(stream_id=STREAM, queue="benchmark.0", params=spec.baseline_params())
    tuning = TuningRequested(stream_id=STREAM, queue="benchmark.0", candidate_id="submitted")
    return [submitted, baseline,
            BaselineMeasured(stream_id=STREAM, request_id=baseline.event_id, device="GPU", params=baseline.params,
                             grid=(1, 1, 1), block=(256, 1, 1), samples_ms=[1.0] * 3, median_ms=1.0),
            tuning, ShardTuned(stream_id=STREAM, request_id=tuning.event_id, device="GPU", strategy="brute_force",
                               configs=3, measured=3, failed=0, best_params={"block_size_x": best_block}, best_ms=0.8,
                               wall_s=1.0, compile_s=1.0, gpu_busy_s=1.0, first_result_s=0.1)]


def test_a_tune_job_times_the_winning_configuration_against_the_submitted_one(sweep_spec):
    history = tuned(sweep_spec, best_block=512)

    merged, request = decide(history)

    assert isinstance(merged, TuningCompleted) and request.candidate_id == OVERALL
    assert request.incumbent.params == sweep_spec.baseline_params()
    assert request.candidate.params == {**sweep_spec.baseline_params(), "block_size_x": 512}
    assert request.candidate.source == sweep_spec.source
    history += [merged, request, answered(request, 1.19, (1.17, 1.21))]
    (completed,) = decide(history)
    assert completed.summary.startswith("tuned 0.8000 ms with {'block_size_x': 512}, 1.190x [1.170, 1.210] the "
                                        "submitted configuration, timed in turn")
    assert "3 configurations, 0 rejected, on GPU" in completed.summary
    history.append(completed)
    assert project_job(history).speedup == 1.19
    (step,) = performance_tracker(history).steps
    assert (step.speedup, step.speedup_ci) == (1.19, (1.17, 1.21))


def test_a_tune_job_whose_submitted_configuration_won_has_nothing_to_time_again(sweep_spec):
    merged, completed = decide(tuned(sweep_spec, best_block=256))

    assert isinstance(completed, JobCompleted) and "1.25x the baseline 1.0000 ms, timed apart" in completed.summary


def test_the_kernel_result_and_its_files_carry_the_speedup_timed_in_turn(vector_add_spec):
    events = rewrite_job(vector_add_spec)
    compared = KernelsCompared(stream_id=events[0].stream_id, request_id=events[-2].event_id, candidate_id=OVERALL,
                               device="GPU", incumbent_samples_ms=[], candidate_samples_ms=[], incumbent_ms=1.0,
                               candidate_ms=0.52, speedup=1.9, speedup_ci=(1.85, 1.95))
    history = [*events[:-1], compared, events[-1]]

    result = kernel_result(history)

    assert (result.speedup, result.speedup_in_turn_ci) == (1.9, (1.85, 1.95))
    assert kernel_result(events).speedup == 2.0  # a job recorded before: the medians' ratio, timed apart


def test_medians_standing_in_where_no_device_could_time_them_are_not_called_timed_in_turn(kept_one_step):
    (request,) = decide(kept_one_step)
    medians = answered(request, 1.0 / 0.99, None).model_copy(update={
        "device": "none", "note": "no device to time them in turn (no CUDA device): the tuning's medians"})
    history = [*kept_one_step, request, medians]

    (completed,) = decide(history)

    assert "timed apart (they could not be timed in turn: no device to time them in turn" in completed.summary
    assert project_job([*history, completed]).speedup_ci is None
    assert performance_tracker([*history, completed]).speedup_in_turn is None


def test_outputs_that_change_when_the_best_is_timed_again_fail_the_job(kept_one_step):
    (request,) = decide(kept_one_step)
    history = [*kept_one_step, request, answered(request, None, None, error="output: the candidate: its last "
                                                                           "launch differs from the reference")]

    (failed,) = decide(history)

    assert isinstance(failed, JobFailed) and failed.stage == "compare" and "not delivered" in failed.reason


def test_a_tune_job_whose_winner_is_slower_than_the_baseline_has_nothing_to_time(sweep_spec):
    history = tuned(sweep_spec, best_block=512)
    history[-1] = history[-1].model_copy(update={"best_ms": 1.05})  # other parameters, but no faster

    merged, completed = decide(history)

    assert isinstance(completed, JobCompleted) and "timed apart" in completed.summary


def test_any_shards_error_fails_the_tune_even_at_another_shards_event(sweep_spec):
    history = tuned(sweep_spec, best_block=512)
    broken = history[-1].model_copy(update={"request_id": history[-2].event_id, "error": "no device",
                                            "best_ms": None, "best_params": None})
    second = TuningRequested(stream_id=STREAM, queue="benchmark.1", candidate_id="submitted", shard=1, shards=2)
    history = [*history[:-2], history[-2].model_copy(update={"shards": 2}), second, history[-1],
               broken.model_copy(update={"request_id": second.event_id})]

    (failed,) = react(history[-2], project_job(history), ["0", "1"], project_optimisation(history)).events

    assert isinstance(failed, JobFailed) and failed.reason == "no device"
