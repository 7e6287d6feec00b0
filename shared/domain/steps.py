"""The optimisation of a job, folded from its events: which steps were planned, tried and kept, and the
best kernel so far. The planner's strategies decide from this alone; reports are built on it too."""
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import singledispatch

from shared.domain.events import (BaselineMeasured, CandidateGenerated, ComparisonRequested, Event, GenerationFailed,
                                  GenerationRequested, GeneratorCalled, JobSubmitted, KernelsCompared, PlanProposed,
                                  StepAccepted, StepBrokenDown, StepDiscarded, StepSkipped, StepValidated,
                                  TuningCompleted, TuningRequested)
from shared.domain.spec import CandidateSpec, KernelSpec, ParamValue, TuningStep

FINAL = ("accepted", "discarded", "skipped", "invalid", "broken_down")
SUBMITTED = "submitted"  # the candidate id of the submitted kernel's own tuning
TUNED_SUFFIX = ".tuned"  # the candidate id under which a tuned candidate's best configuration is verified again
# The candidate id of a job's last comparison: its best kernel timed in turn against the submitted kernel as
# submitted. Each step's speedup is against the best of its day, and the baseline and the best were timed
# apart, so neither gives the job's own speedup; this comparison does.
OVERALL = "overall"


@dataclass(frozen=True)
class StepRecord:
    """A step from the moment the planner first acts on it."""

    step: TuningStep
    status: str  # validating | valid | breaking_down | generating | verifying | tuning | comparing | FINAL...
    depth: int = 0  # how many breakdowns led to it
    validated: bool = False
    breakdown_asked: bool = False
    reason: str = ""
    candidate_id: str | None = None
    candidate: CandidateSpec | None = None
    provider: str | None = None
    renames: dict[str, str] = field(default_factory=dict)
    lineage: tuple[str, ...] = ()
    old_ms: float | None = None  # the best time when the step was decided
    new_ms: float | None = None  # the candidate's best tuned time
    best_params: dict[str, ParamValue] | None = None
    speedup: float | None = None  # best so far / candidate, timed in turn
    speedup_ci: tuple[float, float] | None = None  # its 95% interval; None: not measured

    @property
    def finished(self) -> bool:
        return self.status in FINAL


@dataclass(frozen=True)
class Best:
    """The fastest correct kernel so far: the submitted one until a step is accepted."""

    candidate: CandidateSpec
    time_ms: float | None = None
    params: dict[str, ParamValue] = field(default_factory=dict)
    step_id: str | None = None
    lineage: tuple[str, ...] = ()


@dataclass(frozen=True)
class Optimisation:
    spec: KernelSpec | None = None
    baseline_ms: float | None = None
    planned: tuple[TuningStep, ...] = ()  # every step planned or given, in the order to try them
    steps: tuple[StepRecord, ...] = ()  # steps acted on, in the order they were started
    plans: int = 0
    replans: int = 0
    plan_failure: str | None = None
    last_plan_size: int = 0  # steps the latest plan or replan proposed
    depths: dict[str, int] = field(default_factory=dict)  # breakdowns that led to a planned substep
    pending: str | None = None  # the kind of generator request awaiting its answer
    best: Best | None = None
    overall_requested: bool = False
    overall: KernelsCompared | None = None  # the answer to the OVERALL comparison
    llm_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0

    def record(self, step_id: str) -> StepRecord | None:
        return next((r for r in self.steps if r.step.id == step_id), None)

    def by_candidate(self, candidate_id: str) -> StepRecord | None:
        base = candidate_id.removesuffix(TUNED_SUFFIX)
        return next((r for r in self.steps if r.candidate_id == base), None)

    @property
    def queue(self) -> tuple[TuningStep, ...]:
        """Planned steps not acted on yet, in order."""
        started = {r.step.id for r in self.steps}
        return tuple(s for s in self.planned if s.id not in started)

    @property
    def current(self) -> StepRecord | None:
        """The step in progress, if any: one step at a time."""
        return next((r for r in self.steps if not r.finished), None)


def timed_in_turn(compared: KernelsCompared | None) -> bool:
    """Whether a comparison timed the two kernels in turn on a device: not one that failed, nor the tuning's
    medians standing in where no device could (device "none"), nor recordings paired after the fact (replay)."""
    return (compared is not None and compared.error is None and compared.speedup is not None
            and not compared.replay and compared.device != "none")


def project_optimisation(events: Iterable[Event]) -> Optimisation:
    view = Optimisation()
    for event in events:
        view = evolve(event, view)
    return view


def _with_step(view: Optimisation, step_id: str, **changes) -> Optimisation:
    return replace(view, steps=tuple(replace(r, **changes) if r.step.id == step_id else r for r in view.steps))


def _started(view: Optimisation, step: TuningStep, status: str) -> Optimisation:
    if view.record(step.id) is not None:
        return _with_step(view, step.id, status=status)
    return replace(view, steps=(*view.steps, StepRecord(step=step, status=status, depth=view.depths.get(step.id, 0))))


@singledispatch
def evolve(event: Event, view: Optimisation) -> Optimisation:
    return view


@evolve.register
def _(event: JobSubmitted, view: Optimisation) -> Optimisation:
    spec = event.spec
    planned = tuple(spec.strategy.explicit_steps()) if spec.strategy.name == "explicit" else ()
    return replace(view, spec=spec, planned=planned, best=Best(candidate=spec.as_candidate()))


@evolve.register
def _(event: BaselineMeasured, view: Optimisation) -> Optimisation:
    best = view.best if view.best and view.best.step_id else replace(view.best, time_ms=event.median_ms,
                                                                      params=event.params)
    return replace(view, baseline_ms=event.median_ms, best=best)


@evolve.register
def _(event: GenerationRequested, view: Optimisation) -> Optimisation:
    view = replace(view, pending=event.kind)
    if event.kind == "plan":
        return replace(view, plans=view.plans + 1)
    if event.kind == "replan":
        return replace(view, replans=view.replans + 1)
    status = {"validate": "validating", "breakdown": "breaking_down", "rewrite": "generating"}[event.kind]
    view = _started(view, event.step, status)
    if event.kind == "breakdown":
        view = _with_step(view, event.step.id, breakdown_asked=True)
    if event.kind == "rewrite":
        view = _with_step(view, event.step.id, candidate_id=event.candidate_id)
    return view


@evolve.register
def _(event: GeneratorCalled, view: Optimisation) -> Optimisation:
    return replace(view, llm_calls=view.llm_calls + 1, tokens=view.tokens + event.input_tokens + event.output_tokens,
                   cost_usd=view.cost_usd + event.cost_usd)


@evolve.register
def _(event: PlanProposed, view: Optimisation) -> Optimisation:
    return replace(view, pending=None, planned=(*view.planned, *event.steps), last_plan_size=len(event.steps))


@evolve.register
def _(event: StepValidated, view: Optimisation) -> Optimisation:
    view = replace(view, pending=None)
    if event.valid:
        return _with_step(view, event.step_id, status="valid", validated=True, reason=event.reason)
    return _with_step(view, event.step_id, status="invalid", reason=event.reason)


@evolve.register
def _(event: StepBrokenDown, view: Optimisation) -> Optimisation:
    view = replace(view, pending=None)
    if not event.substeps:
        return _with_step(view, event.step_id, status="valid")
    depth = view.record(event.step_id).depth + 1
    ids = [s.id for s in view.planned]
    at = ids.index(event.step_id) + 1 if event.step_id in ids else len(ids)
    view = replace(view, planned=(*view.planned[:at], *event.substeps, *view.planned[at:]),
                   depths={**view.depths, **{s.id: depth for s in event.substeps}})
    return _with_step(view, event.step_id, status="broken_down",
                      reason=f"broken down into {', '.join(s.id for s in event.substeps)}")


@evolve.register
def _(event: CandidateGenerated, view: Optimisation) -> Optimisation:
    return _with_step(replace(view, pending=None), event.step_id, status="verifying", candidate=event.candidate,
                      provider=event.provider, renames=event.renames, lineage=view.best.lineage)


@evolve.register
def _(event: GenerationFailed, view: Optimisation) -> Optimisation:
    view = replace(view, pending=None)
    if event.kind in ("plan", "replan"):
        return replace(view, plan_failure=event.reason)
    return _with_step(view, event.step_id, reason=event.reason) if event.step_id else view


@evolve.register
def _(event: TuningRequested, view: Optimisation) -> Optimisation:
    record = view.by_candidate(event.candidate_id)
    return _with_step(view, record.step.id, status="tuning") if record else view


@evolve.register
def _(event: TuningCompleted, view: Optimisation) -> Optimisation:
    record = view.by_candidate(event.candidate_id)
    if record is None:
        return view
    return _with_step(view, record.step.id, new_ms=event.best_time_ms, best_params=event.best_params)


@evolve.register
def _(event: ComparisonRequested, view: Optimisation) -> Optimisation:
    if event.candidate_id == OVERALL:
        return replace(view, overall_requested=True)
    return _with_step(view, view.by_candidate(event.candidate_id).step.id, status="comparing")


@evolve.register
def _(event: KernelsCompared, view: Optimisation) -> Optimisation:
    if event.candidate_id == OVERALL:
        return replace(view, overall=event)
    return _with_step(view, view.by_candidate(event.candidate_id).step.id, speedup=event.speedup,
                      speedup_ci=event.speedup_ci)


@evolve.register
def _(event: StepAccepted, view: Optimisation) -> Optimisation:
    record = view.record(event.step_id)
    view = _with_step(view, event.step_id, status="accepted", old_ms=event.old_time_ms, new_ms=event.new_time_ms,
                      best_params=event.best_params, speedup=event.speedup, speedup_ci=event.speedup_ci)
    best = Best(candidate=record.candidate, time_ms=event.new_time_ms, params=event.best_params, step_id=event.step_id,
                lineage=(*record.lineage, event.step_id))
    return replace(view, best=best)


@evolve.register
def _(event: StepDiscarded, view: Optimisation) -> Optimisation:
    old = view.best.time_ms if view.best else None
    return _with_step(replace(view, pending=None), event.step_id, status="discarded", reason=event.reason,
                      old_ms=old, new_ms=event.new_time_ms)


@evolve.register
def _(event: StepSkipped, view: Optimisation) -> Optimisation:
    view = _started(view, _planned(view, event.step_id), "skipped")
    return _with_step(view, event.step_id, reason=event.reason)


def _planned(view: Optimisation, step_id: str) -> TuningStep:
    return next((s for s in view.planned if s.id == step_id), TuningStep(id=step_id))
