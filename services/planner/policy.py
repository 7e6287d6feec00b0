"""What the planner does in reaction to one event, given the job's current state: a pure function.

Every event the planner appends gets an id derived from the event it reacts to, so deciding twice
(a redelivered or restarted planner) yields the same ids and the store keeps only the first.
Work for other services is dispatched when the planner reaches the request *event* in the log, so a
crash between appending a request and sending it cannot lose the request.
"""
import zlib
from dataclasses import dataclass, field
from functools import singledispatch

from services.planner import step_flow
from services.planner.strategies import UnknownStrategy, strategy_for
from shared.domain.contracts import (WEBHOOKS_QUEUE, CompareKernels, DeliverWebhook, Generate, MeasureBaseline, Message,
                                     TuneShard, VerifyCandidate, benchmark_queue, verifier_queue)
from shared.domain.events import (JOB_ENDS, BaselineFailed, BaselineMeasured, BaselineRequested, CandidateGenerated,
                                  CandidateRejected, CandidateVerified, ComparisonRequested, Event, GenerationFailed,
                                  GenerationRequested, JobCancelled, JobCompleted, KernelsCompared, JobFailed,
                                  JobSubmitted, PlanProposed, ShardTuned, StepAccepted, StepBrokenDown, StepDiscarded,
                                  StepSkipped, StepValidated, TaskFailed, TuningCompleted, TuningRequested,
                                  VerificationIncomplete, VerificationRequested, WebhookRequested, derived_id)
from shared.domain.projections import JobView, job_id_of
from shared.domain.steps import OVERALL, SUBMITTED, TUNED_SUFFIX, Optimisation


@dataclass(frozen=True)
class Reaction:
    events: list[Event] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)


NOTHING = Reaction()
# The ends of a job, and the request to announce one: reacted to although the job has finished.
ANNOUNCING = (*JOB_ENDS, WebhookRequested)


def react(event: Event, job: JobView, gpus: list[str], optimisation: Optimisation | None = None) -> Reaction:
    """The planner's decision; only events named in TRIGGERS ever lead to one. `optimisation` is the job's
    folded steps, needed by jobs whose strategy rewrites the kernel."""
    if isinstance(event, ANNOUNCING):
        return _announce(event, job)  # the job has just finished: its webhook goes out
    if job.finished:
        return NOTHING  # a late result, or a request still in the log, changes nothing for a finished job
    return _react(event, job, gpus, optimisation)


def _announce(event: Event, job: JobView) -> Reaction:
    if isinstance(event, WebhookRequested):
        return Reaction(messages=[request_message(event)])
    if job.spec is None or job.spec.webhook_url is None:
        return NOTHING
    kind = {JobCompleted: "job.completed", JobFailed: "job.failed", JobCancelled: "job.cancelled"}[type(event)]
    return Reaction(events=[WebhookRequested(event_id=derived_id(event.event_id, "WebhookRequested"),
                                             stream_id=event.stream_id, queue=WEBHOOKS_QUEUE,
                                             url=str(job.spec.webhook_url), kind=kind)])


def _home_gpu(stream_id: str, gpus: list[str]) -> int:
    """Spread jobs over the GPU workers by a stable hash of the job id (Python's hash() is salted per process)."""
    return zlib.crc32(stream_id.encode()) % len(gpus)


def _home_queue(stream_id: str, gpus: list[str]) -> str:
    return benchmark_queue(gpus[_home_gpu(stream_id, gpus)])


@singledispatch
def _react(event: Event, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    return NOTHING


@_react.register
def _(event: JobSubmitted, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    gpu = gpus[_home_gpu(event.stream_id, gpus)]
    if event.spec.strategy.generates:
        try:
            strategy_for(event.spec.strategy.name)
        except UnknownStrategy as exc:
            return Reaction(events=[JobFailed(event_id=derived_id(event.event_id, "JobFailed"),
                                              stream_id=event.stream_id, stage="plan", reason=str(exc))])
    if event.spec.strategy.name == "verify":
        return Reaction(events=[VerificationRequested(
            event_id=derived_id(event.event_id, "VerificationRequested"), stream_id=event.stream_id,
            queue=verifier_queue(gpu), candidate_id="candidate", candidate=event.spec.strategy.candidate)])
    request = BaselineRequested(event_id=derived_id(event.event_id, "BaselineRequested"), stream_id=event.stream_id,
                                queue=benchmark_queue(gpu), params=event.spec.baseline_params())
    return Reaction(events=[request])


@_react.register(BaselineRequested)
@_react.register(TuningRequested)
@_react.register(VerificationRequested)
@_react.register(ComparisonRequested)
@_react.register(GenerationRequested)
def _(event: Event, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    return Reaction(messages=[request_message(event)])


def request_message(request: Event) -> Message:
    """The message that has a worker answer a request: sent when the planner reaches the request in the log,
    and again by recovery when the broker lost it."""
    job_id = job_id_of(request.stream_id)
    match request:
        case BaselineRequested():
            return MeasureBaseline.message(request.queue, job_id, request.event_id)
        case TuningRequested():
            return TuneShard.message(request.queue, job_id, request.event_id)
        case VerificationRequested():
            return VerifyCandidate.message(request.queue, job_id, request.event_id)
        case ComparisonRequested():
            return CompareKernels.message(request.queue, job_id, request.event_id)
        case GenerationRequested():
            return Generate.message(job_id, request.event_id)
        case WebhookRequested():
            return DeliverWebhook.message(job_id, request.event_id)
    raise TypeError(f"{request.type} is not a request")


@_react.register
def _(event: BaselineMeasured, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    if job.spec.strategy.name == "tune":
        return Reaction(events=_tuning(event, job, gpus, SUBMITTED))
    if job.spec.strategy.generates:
        return Reaction(events=step_flow.advance(event, job, opt, _home_queue(event.stream_id, gpus)))
    label = " (replayed measurement)" if event.replay else ""
    summary = f"baseline {event.median_ms:.4f} ms on {event.device}{label}, grid {event.grid}, block {event.block}"
    return Reaction(events=[JobCompleted(event_id=derived_id(event.event_id, "JobCompleted"),
                                         stream_id=event.stream_id, summary=summary)])


def _tuning(trigger: Event, job: JobView, gpus: list[str], candidate_id: str) -> list[Event]:
    """Requests to search a kernel's space: brute force splits over every GPU worker (interleaved shards);
    other search strategies are sequential."""
    shards = len(gpus) if job.spec.benchmark.search.strategy == "brute_force" else 1
    first = _home_gpu(trigger.stream_id, gpus)
    return [TuningRequested(event_id=derived_id(trigger.event_id, "TuningRequested", shard), stream_id=trigger.stream_id,
                            queue=benchmark_queue(gpus[(first + shard) % len(gpus)]), candidate_id=candidate_id,
                            shard=shard, shards=shards)
            for shard in range(shards)]


@_react.register
def _(event: ShardTuned, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    candidate_id = next(cid for cid, rid in job.tuning_requests if rid == event.request_id)
    requested, shards = job.shards_of(candidate_id)
    # Any shard's error, not only this event's: a planner that lags sees every shard at the first one's event.
    error = event.error or next((s.error for s in shards if s.error), None)
    if error and candidate_id == SUBMITTED:
        return Reaction(events=[JobFailed(event_id=derived_id(event.event_id, "JobFailed"), stream_id=event.stream_id,
                                          stage="tuning", reason=error)])
    if len(shards) < requested:
        return NOTHING  # the merge waits for the last shard
    # Whichever shard's event gets here first merges: the ids derive from the job, so a second merge is a no-op.
    best = _fastest(shards)
    speedup = job.baseline_ms / best.best_ms if best and job.baseline_ms else None
    merged = derived_id(event.stream_id, candidate_id)
    completed = TuningCompleted(event_id=derived_id(merged, "TuningCompleted"), stream_id=event.stream_id,
                                candidate_id=candidate_id, best_params=best.best_params if best else None,
                                best_time_ms=best.best_ms if best else None,
                                configs_evaluated=sum(s.configs for s in shards),
                                configs_failed=sum(s.failed for s in shards), speedup=speedup)
    if candidate_id != SUBMITTED:
        gpu = gpus[_home_gpu(event.stream_id, gpus)]
        errors = [s.error for s in shards if s.error]
        return Reaction(events=[completed, *step_flow.after_tuning(completed, merged, opt, verifier_queue(gpu),
                                                                   benchmark_queue(gpu), errors)])
    if best is None:
        return Reaction(events=[completed, JobFailed(event_id=derived_id(merged, "JobFailed"),
                                                     stream_id=event.stream_id, stage="tuning",
                                                     reason=f"none of {completed.configs_evaluated} configurations "
                                                            "ran correctly; see the ConfigFailed events")])
    submitted = job.spec.baseline_params()
    if {**submitted, **best.best_params} != submitted and best.best_ms < job.baseline_ms:
        # Another configuration won, and by the tuning's times it is faster: time it against the submitted one.
        return Reaction(events=[completed, step_flow.overall_comparison(
            completed, job, job.spec.as_candidate(), {**submitted, **best.best_params}, best.best_ms,
            _home_queue(event.stream_id, gpus))])
    return Reaction(events=[completed, JobCompleted(event_id=derived_id(merged, "JobCompleted"),
                                                    stream_id=event.stream_id, summary=_tuned(job, best, None))])


def _fastest(shards: tuple[ShardTuned, ...]) -> ShardTuned | None:
    """The shard whose best configuration was fastest; None when no shard measured one."""
    return min((s for s in shards if s.best_ms is not None), key=lambda s: s.best_ms, default=None)


def _tuned(job: JobView, best: ShardTuned, overall: KernelsCompared | None) -> str:
    """A tune job's summary: its best configuration, its speedup, and what the search went through."""
    _, shards = job.shards_of(SUBMITTED)
    label = " (replayed measurements)" if best.replay else ""
    gain = step_flow.overall_text(overall, job.baseline_ms, best.best_ms, "configuration")
    return (f"tuned {best.best_ms:.4f} ms with {best.best_params}, {gain}; {sum(s.configs for s in shards)} "
            f"configurations, {sum(s.failed for s in shards)} rejected, on {best.device}{label}")


@_react.register
def _(event: BaselineFailed, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    return Reaction(events=[JobFailed(event_id=derived_id(event.event_id, "JobFailed"), stream_id=event.stream_id,
                                      stage=event.stage, reason=event.reason)])


@_react.register
def _(event: CandidateVerified, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    if job.spec.strategy.generates:
        if event.candidate_id.endswith(TUNED_SUFFIX):
            gpu = gpus[_home_gpu(event.stream_id, gpus)]
            return Reaction(events=[step_flow.compare(event, opt, benchmark_queue(gpu))])
        return Reaction(events=_tuning(event, job, gpus, event.candidate_id))
    skipped = f"; {len(event.skipped)} trial(s) skipped, the submitted kernel itself failed them" if event.skipped else ""
    summary = (f"candidate verified on {event.device}: {len(event.trials)} trials "
               f"({', '.join(t.label for t in event.trials)}), largest error {event.max_abs_error:.3g} absolute, "
               f"{event.max_rel_error:.3g} relative{skipped}")
    return Reaction(events=[JobCompleted(event_id=derived_id(event.event_id, "JobCompleted"), stream_id=event.stream_id,
                                         summary=summary)])


@_react.register
def _(event: KernelsCompared, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    if event.candidate_id != OVERALL:
        return Reaction(events=[step_flow.judge(event, opt)])
    if event.error and event.error.startswith("output"):
        # Proven by the verifier, and then inconsistent when timed again: nothing is delivered as proven.
        return Reaction(events=[JobFailed(
            event_id=derived_id(event.event_id, "JobFailed"), stream_id=event.stream_id, stage="compare",
            reason=f"the best kernel's outputs changed when it was timed in turn with the submitted kernel "
                   f"({event.error}); it is not delivered. Its steps are in the job's events: rerun the job, "
                   "and report it with the job id if it happens again")])
    if job.spec.strategy.generates:
        return Reaction(events=step_flow.advance(event, job, opt, _home_queue(event.stream_id, gpus)))
    best = _fastest(job.shards_of(SUBMITTED)[1])
    return Reaction(events=[JobCompleted(event_id=derived_id(event.event_id, "JobCompleted"), stream_id=event.stream_id,
                                         summary=_tuned(job, best, event))])


@_react.register
def _(event: CandidateRejected, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    if job.spec.strategy.generates:
        return Reaction(events=[step_flow.discard_rejected(event, opt)])
    where = f" [{event.trial}]" if event.trial else ""
    return Reaction(events=[JobFailed(event_id=derived_id(event.event_id, "JobFailed"), stream_id=event.stream_id,
                                      stage=f"verify: {event.check}", reason=event.reason + where)])


@_react.register
def _(event: VerificationIncomplete, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    return Reaction(events=[JobFailed(event_id=derived_id(event.event_id, "JobFailed"), stream_id=event.stream_id,
                                      stage="device", reason=f"{', '.join(event.passed)} checks passed, but the "
                                                             f"candidate is not proven: {event.reason}")])


# --- the generator's answers move a rewriting strategy on ---------------------------------------------------
@_react.register(PlanProposed)
@_react.register(StepValidated)
@_react.register(StepBrokenDown)
@_react.register(StepSkipped)
@_react.register(StepAccepted)
@_react.register(StepDiscarded)
def _(event: Event, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    return Reaction(events=step_flow.advance(event, job, opt, _home_queue(event.stream_id, gpus)))


@_react.register
def _(event: GenerationFailed, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    if event.step_id is None:  # a plan: the strategy sees the failure and decides
        return Reaction(events=step_flow.advance(event, job, opt, _home_queue(event.stream_id, gpus)))
    return Reaction(events=[StepDiscarded(event_id=derived_id(event.event_id, "StepDiscarded"), stream_id=event.stream_id,
                                          step_id=event.step_id, candidate_id=None, stage="generate",
                                          reason=f"{event.kind}: {event.reason}")])


@_react.register
def _(event: CandidateGenerated, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    gpu = gpus[_home_gpu(event.stream_id, gpus)]
    return Reaction(events=[VerificationRequested(
        event_id=derived_id(event.event_id, "VerificationRequested"), stream_id=event.stream_id,
        queue=verifier_queue(gpu), candidate_id=event.candidate_id, candidate=event.candidate)])


@_react.register
def _(event: TaskFailed, job: JobView, gpus: list[str], opt: Optimisation | None) -> Reaction:
    # The job fails, even where a failed answer would only discard a step (a rewrite, a verification): the
    # fault is kforge's, not the candidate's, and a job that went on would report a step judged that never
    # was. (A webhook's task fails after its job has ended: react() leaves a finished job as it is.)
    service = event.task.split(".")[0]
    reason = (f"the {service} task failed after {event.attempts} attempt(s): {event.error_type}: {event.error}; "
              f"report it with the job id {job.job_id} (the worker's log holds the traceback)")
    return Reaction(events=[JobFailed(event_id=derived_id(event.event_id, "JobFailed"), stream_id=event.stream_id,
                                      stage=event.task, reason=reason)])


TRIGGERS = frozenset([*(cls.__name__ for cls in _react.registry if cls not in (object, Event)),
                      *(cls.__name__ for cls in ANNOUNCING)])
