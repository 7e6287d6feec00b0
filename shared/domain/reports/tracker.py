"""The PerformanceTracker of a job, in LLM Kernel Tuner's terms, rebuilt from the job's events.

Times are milliseconds (kforge measures in ms throughout, as Kernel Tuner does). `steps` holds the steps that
made the kernel faster, in order; `tried` holds every step acted on, kept or not, with the reason. A step's
speedup comes with its 95% interval from timing it in turn with the kernel it replaced; None where there is
none (no device, a strategy tune search, a step recorded before intervals were)."""
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, computed_field

from shared.domain.events import Event, JobSubmitted, StepAccepted, TuningCompleted
from shared.domain.projections import job_id_of, project_job
from shared.domain.spec import ParamValue
from shared.domain.speedup import speedup_text
from shared.domain.steps import SUBMITTED, project_optimisation, timed_in_turn


class PerformanceStep(BaseModel):
    """One step that made the kernel faster."""

    model_config = ConfigDict(frozen=True)
    step_id: str
    step_description: str
    kernel_code: str = Field(description="the kernel's source after this step")
    old_execution_time: float | None = Field(description="ms: the best time before this step (the baseline for "
                                                         "the first step)")
    new_execution_time: float = Field(description="ms: the tuned time after this step")
    improvement_percentage: float | None
    speedup: float | None = Field(description="times faster than the kernel it replaced")
    speedup_ci: tuple[float, float] | None = Field(description="95% interval of the speedup; None: not measured")
    tunable_parameters: dict[str, list[ParamValue]]
    restrictions: list[str]
    best_tune_params: dict[str, ParamValue]
    timestamp: datetime


class TriedStep(BaseModel):
    """A step the job acted on, whatever became of it."""

    model_config = ConfigDict(frozen=True)
    step_id: str
    description: str
    status: str
    reason: str
    old_ms: float | None
    new_ms: float | None
    speedup: float | None
    speedup_ci: tuple[float, float] | None


class PerformanceTracker(BaseModel):
    model_config = ConfigDict(frozen=True)
    job_id: str
    kernel_name: str
    strategy: str
    status: str
    device: str | None
    replay: bool
    baseline_time: float | None = Field(description="ms: the submitted kernel as submitted")
    speedup_in_turn: float | None = Field(None, description="the final kernel's speedup timed in turn with the "
                                                            "submitted kernel; None: not timed so (nothing kept, "
                                                            "a stopped job, no device)")
    speedup_in_turn_ci: tuple[float, float] | None = Field(None, description="its 95% interval")
    steps: list[PerformanceStep]
    tried: list[TriedStep]
    llm_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def final_time(self) -> float | None:
        """ms: after the last step kept."""
        return self.steps[-1].new_execution_time if self.steps else self.baseline_time

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speedup(self) -> float | None:
        """Timed in turn where it was; else the ratio of the baseline and the final time, measured apart."""
        if self.speedup_in_turn is not None:
            return self.speedup_in_turn
        return self.baseline_time / self.final_time if self.baseline_time and self.final_time else None

    def get_total_improvement(self) -> float:
        """Per cent of the baseline time saved by all steps together (from `speedup`); 0 without a baseline or
        a step."""
        if not self.baseline_time or not self.steps:
            return 0.0
        return 100 * (1 - 1 / self.speedup)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_improvement_percent(self) -> float:
        return self.get_total_improvement()

    def has_improvements(self) -> bool:
        return bool(self.steps)

    def generate_overview(self) -> str:
        label = " [REPLAY]" if self.replay else ""
        lines = [f"Performance overview: {self.kernel_name}, job {self.job_id}, strategy {self.strategy} "
                 f"({self.status}) on {self.device or 'no device'}{label}"]
        if self.baseline_time is None:
            return "\n".join([*lines, "  no baseline was measured, so there is nothing to compare"])
        tried = len(self.tried) or len(self.steps)
        lines.append(f"  optimisation steps kept: {len(self.steps)} of {tried} tried" if self.steps else
                     f"  no step made the kernel faster ({tried} tried): the submitted kernel stays the best")
        timing = (f"{speedup_text(self.speedup_in_turn, self.speedup_in_turn_ci)} timed in turn"
                  if self.speedup_in_turn is not None else f"{self.speedup:.2f}x timed apart")
        lines.append(f"  baseline {self.baseline_time:.4f} ms -> final {self.final_time:.4f} ms: "
                     f"{self.get_total_improvement():.2f}% faster, {timing}")
        for i, step in enumerate(self.steps, 1):
            gain = f"{step.improvement_percentage:+.2f}%" if step.improvement_percentage is not None else "-"
            lines.append(f"  {i}. {step.step_id}: {step.step_description}")
            speedup = f", {speedup_text(step.speedup, step.speedup_ci)}" if step.speedup is not None else ""
            lines.append(f"     {step.old_execution_time or 0:.4f} -> {step.new_execution_time:.4f} ms ({gain}{speedup}) "
                         f"at {step.timestamp:%Y-%m-%d %H:%M:%S} UTC")
            lines.append(f"     tunable parameters: {_space(step.tunable_parameters)}")
            if step.restrictions:
                lines.append(f"     restrictions: {'; '.join(step.restrictions)}")
            lines.append(f"     best parameters: {_params(step.best_tune_params)}")
        for tried in (t for t in self.tried if t.status != "accepted"):
            lines.append(f"  not kept: {tried.step_id} ({tried.status}): {tried.reason}")
        if self.llm_calls:
            lines.append(f"  generator: {self.llm_calls} calls, {self.tokens} tokens, ${self.cost_usd:.4f}")
        return "\n".join(lines)


def _space(tune_params: dict[str, list]) -> str:
    return ", ".join(f"{k} {v}" for k, v in tune_params.items()) or "none"


def _params(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "none"


def performance_tracker(events: Sequence[Event]) -> PerformanceTracker | None:
    """The tracker of one job's events; None before the job was submitted."""
    submitted = next((e for e in events if isinstance(e, JobSubmitted)), None)
    if submitted is None:
        return None
    spec, view, opt = submitted.spec, project_job(events), project_optimisation(events)
    steps = []
    in_turn = timed_in_turn(opt.overall)
    for event in events:
        if isinstance(event, StepAccepted):
            record = opt.record(event.step_id)
            candidate = record.candidate
            steps.append(PerformanceStep(
                step_id=event.step_id, step_description=record.step.description or record.step.id,
                kernel_code=candidate.source, old_execution_time=event.old_time_ms,
                new_execution_time=event.new_time_ms,
                improvement_percentage=_gain(event.old_time_ms, event.new_time_ms), speedup=event.speedup,
                speedup_ci=event.speedup_ci, tunable_parameters=candidate.tune_params or {},
                restrictions=candidate.restrictions or [],
                best_tune_params=event.best_params, timestamp=event.occurred_at))
        elif isinstance(event, TuningCompleted) and event.candidate_id == SUBMITTED and event.best_time_ms is not None \
                and view.baseline_ms and event.best_time_ms < view.baseline_ms:
            # Strategy tune: searching the submitted kernel's own space is the one step.
            steps.append(PerformanceStep(
                step_id="tune", step_description=f"search tune_params ({event.configs_evaluated} configurations)",
                kernel_code=spec.source, old_execution_time=view.baseline_ms, new_execution_time=event.best_time_ms,
                improvement_percentage=_gain(view.baseline_ms, event.best_time_ms),
                speedup=view.speedup if in_turn else event.speedup, speedup_ci=view.speedup_ci,
                tunable_parameters=spec.tune_params,
                restrictions=spec.restrictions, best_tune_params=event.best_params or {}, timestamp=event.occurred_at))
    searched = any(isinstance(e, TuningCompleted) and e.candidate_id == SUBMITTED for e in events)
    if not spec.strategy.generates and not searched and view.best_ms is not None and view.baseline_ms \
            and view.best_ms < view.baseline_ms:
        # A search stopped before it finished (cancelled, interrupted) keeps the best configuration it measured.
        steps.append(PerformanceStep(
            step_id="tune", step_description=f"search tune_params, stopped after {view.configs_measured} "
                                             f"configurations measured (the job {view.status})",
            kernel_code=spec.source, old_execution_time=view.baseline_ms, new_execution_time=view.best_ms,
            improvement_percentage=_gain(view.baseline_ms, view.best_ms), speedup=view.baseline_ms / view.best_ms,
            speedup_ci=None, tunable_parameters=spec.tune_params, restrictions=spec.restrictions,
            best_tune_params=view.best_params or {}, timestamp=events[-1].occurred_at))
    tried = [TriedStep(step_id=r.step.id, description=r.step.description, status=r.status, reason=r.reason,
                       old_ms=r.old_ms, new_ms=r.new_ms, speedup=r.speedup, speedup_ci=r.speedup_ci) for r in opt.steps]
    return PerformanceTracker(job_id=job_id_of(submitted.stream_id), kernel_name=spec.kernel_name,
                              strategy=spec.strategy.name, status=view.status, device=view.device, replay=view.replay,
                              baseline_time=view.baseline_ms, speedup_in_turn=view.speedup if in_turn else None,
                              speedup_in_turn_ci=view.speedup_ci, steps=steps, tried=tried, llm_calls=opt.llm_calls,
                              tokens=opt.tokens, cost_usd=opt.cost_usd)


def _gain(old: float | None, new: float) -> float | None:
    return 100 * (old - new) / old if old else None
