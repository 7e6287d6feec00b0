"""The life of an optimisation step, from the planner's side: ask the job's strategy what comes next, and
carry a generated candidate through verification, tuning, verification of its tuned configuration, and the
comparison with the best kernel so far (the two timed in turn on one GPU) that accepts it as the new best or
discards it.

Every event gets an id derived from the event it answers, so deciding twice appends nothing twice.
"""
from uuid import UUID

from services.planner.strategies import Ask, Finish, Skip, strategy_for
from shared.domain.contracts import GENERATOR_QUEUE
from shared.domain.events import (CandidateRejected, CandidateVerified, ComparisonRequested, Event, GenerationRequested,
                                  JobCompleted, JobFailed, KernelsCompared, StepAccepted, StepDiscarded, StepSkipped,
                                  TuningCompleted, VerificationRequested, derived_id)
from shared.domain.projections import JobView
from shared.domain.spec import CandidateSpec
from shared.domain.speedup import speedup_text
from shared.domain.steps import OVERALL, TUNED_SUFFIX, Optimisation, StepRecord, timed_in_turn


def advance(trigger: Event, job: JobView, opt: Optimisation, benchmark_queue: str) -> list[Event]:
    """The strategy's next move, unless a request is still out or a step is still on its way. A job that kept a
    step finishes once its best kernel has been timed in turn against the submitted one (OVERALL)."""
    if opt.pending or (opt.current is not None and opt.current.status != "valid"):
        return []
    decision = strategy_for(job.spec.strategy.name).decide(opt, job.spec.strategy)
    ids = dict(event_id=derived_id(trigger.event_id, "decided"), stream_id=trigger.stream_id)
    match decision:
        case Ask(kind=kind, step=step, focus=focus):
            return [GenerationRequested(**ids, queue=GENERATOR_QUEUE, kind=kind, step=step, focus=focus,
                                        candidate_id=step.id if kind == "rewrite" else None)]
        case Skip(step=step, reason=reason):
            return [StepSkipped(**ids, step_id=step.id, reason=reason)]
        case Finish(reason=reason, failed=True):
            return [JobFailed(**ids, stage="plan", reason=reason)]
        case Finish(reason=reason) if opt.best.step_id is not None and opt.overall is None:
            if opt.overall_requested:
                return []  # its answer is on its way
            return [overall_comparison(trigger, job, opt.best.candidate, opt.best.params, opt.best.time_ms,
                                       benchmark_queue)]
        case Finish(reason=reason):
            return [JobCompleted(**ids, summary=summary(opt, reason))]
    raise TypeError(f"strategy {job.spec.strategy.name!r} decided {decision!r}, which is not Ask, Skip or Finish")


def summary(opt: Optimisation, reason: str) -> str:
    best, kept = opt.best, [r.step.id for r in opt.steps if r.status == "accepted"]
    if not kept:
        return f"{reason}; no step beat the submitted kernel ({best.time_ms:.4f} ms), which stays the best"
    return (f"{reason}; best {best.time_ms:.4f} ms with {best.params}, "
            f"{overall_text(opt.overall, opt.baseline_ms, best.time_ms, 'kernel')}, through {' -> '.join(kept)}")


def overall_comparison(trigger: Event, job: JobView, best: CandidateSpec, params: dict, best_ms: float,
                       queue: str) -> ComparisonRequested:
    """Time the job's best kernel in turn with the submitted kernel as submitted: the speedup the job reports."""
    submitted = job.spec.as_candidate()
    return ComparisonRequested(event_id=derived_id(trigger.event_id, "ComparisonRequested", OVERALL),
                               stream_id=trigger.stream_id, queue=queue, candidate_id=OVERALL,
                               incumbent=submitted.model_copy(update={"params": job.spec.baseline_params()}),
                               candidate=best.model_copy(update={"params": params}), incumbent_ms=job.baseline_ms,
                               candidate_ms=best_ms)


def overall_text(compared: KernelsCompared | None, baseline_ms: float, best_ms: float, what: str) -> str:
    """The job's speedup as it reads in its summary: from the OVERALL comparison where it could be timed."""
    apart = f"{baseline_ms / best_ms:.2f}x the baseline {baseline_ms:.4f} ms, timed apart"
    if compared is None:
        return apart
    if not timed_in_turn(compared):
        return f"{apart} (they could not be timed in turn: {compared.error or compared.note})"
    return (f"{speedup_text(compared.speedup, compared.speedup_ci)} the submitted {what}, timed in turn "
            f"({compared.incumbent_ms:.4f} -> {compared.candidate_ms:.4f} ms on {compared.device})")


def after_tuning(completed: TuningCompleted, merged: UUID, opt: Optimisation, verifier_queue: str,
                 benchmark_queue: str, errors: list[str]) -> list[Event]:
    """A candidate's space is searched: discard it, or verify its best configuration too before comparing."""
    record = opt.by_candidate(completed.candidate_id)
    if completed.best_time_ms is None:
        why = "; ".join(errors) or (f"none of {completed.configs_evaluated} configurations ran correctly; "
                                    "see the ConfigFailed events")
        return [_discarded(completed.stream_id, merged, record, "tune", why)]
    best = _winning_params(record, completed.best_params)
    # The configuration that won is proven before it counts, even when it is the one verified first: this
    # verification is the one that sanitises what may be kept, and it reuses the job's trials (a fraction of a
    # second on the GPU).
    return [VerificationRequested(event_id=derived_id(merged, "VerificationRequested"), stream_id=completed.stream_id,
                                  queue=verifier_queue, candidate_id=record.candidate_id + TUNED_SUFFIX,
                                  candidate=record.candidate.model_copy(update={"params": best}))]


def compare(verified: CandidateVerified, opt: Optimisation, benchmark_queue: str) -> Event:
    record = opt.by_candidate(verified.candidate_id)
    return _comparison(verified.stream_id, verified.event_id, record, opt, record.new_ms,
                       _winning_params(record, record.best_params), benchmark_queue)


def _winning_params(record: StepRecord, tuned: dict) -> dict:
    """The candidate's defines with the configuration that won its tuning: what it is verified and kept with."""
    return {**record.candidate.params, **tuned}


def discard_rejected(rejected: CandidateRejected, opt: Optimisation) -> Event:
    record = opt.by_candidate(rejected.candidate_id)
    where = f" [{rejected.trial}]" if rejected.trial else ""
    stage = "verify tuned" if rejected.candidate_id.endswith(TUNED_SUFFIX) else "verify"
    return _discarded(rejected.stream_id, rejected.event_id, record, stage, f"{rejected.check}: {rejected.reason}{where}")


def _comparison(stream: str, cause: UUID, record: StepRecord, opt: Optimisation, new_ms: float, params: dict,
                queue: str) -> Event:
    """Time the best kernel so far and the candidate's winning configuration in turn, on one GPU: their tuning
    medians, measured apart, differ by run-to-run noise as much as by the rewrite."""
    best = opt.best
    return ComparisonRequested(event_id=derived_id(cause, "ComparisonRequested"), stream_id=stream, queue=queue,
                               candidate_id=record.candidate_id,
                               incumbent=best.candidate.model_copy(update={"params": best.params}),
                               candidate=record.candidate.model_copy(update={"params": params}),
                               incumbent_ms=best.time_ms, candidate_ms=new_ms)


def judge(compared: KernelsCompared, opt: Optimisation) -> Event:
    """Keep the candidate only when it is faster beyond the noise: the 95% interval of its speedup lies above
    1 + the strategy's margin (without an interval, its point estimate must)."""
    record, old_ms, cause = opt.by_candidate(compared.candidate_id), opt.best.time_ms, compared.event_id
    where = f"step {opt.best.step_id}" if opt.best.step_id else "the submitted kernel"
    if compared.error:
        return _discarded(compared.stream_id, cause, record, "compare", f"could not be timed against the best so far "
                                                                         f"({where}): {compared.error}", record.new_ms)
    bar = 1 + opt.spec.strategy.min_speedup_margin
    low, high = compared.speedup_ci or (compared.speedup, compared.speedup)
    figure = speedup_text(compared.speedup, compared.speedup_ci)
    if low > bar:
        return StepAccepted(event_id=derived_id(cause, "StepAccepted"), stream_id=compared.stream_id,
                            step_id=record.step.id, candidate_id=record.candidate_id, old_time_ms=old_ms,
                            new_time_ms=record.new_ms, best_params=_winning_params(record, record.best_params),
                            speedup=compared.speedup, speedup_ci=compared.speedup_ci)
    if high < 1:
        reason = f"slower than the best so far ({where}): {figure}"
    else:
        reason = f"within noise: {figure} does not clear {bar:g} (against {where})"
    return _discarded(compared.stream_id, cause, record, "compare", reason, record.new_ms)


def _discarded(stream: str, cause: UUID, record: StepRecord, stage: str, reason: str, new_ms: float | None = None) -> Event:
    return StepDiscarded(event_id=derived_id(cause, "StepDiscarded"), stream_id=stream,
                         step_id=record.step.id, candidate_id=record.candidate_id, stage=stage, reason=reason,
                         new_time_ms=new_ms)
