"""What a job delivered for its kernel, folded from its events: the baseline, the best kernel found and the
samples behind both. Comparisons, the slow-kernel list and suggestions are built on these."""
from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field, computed_field

from shared.domain.events import (BaselineMeasured, CandidateGenerated, ConfigMeasured, Event, JobSubmitted,
                                  KernelsCompared, StepAccepted, TuningRequested)
from shared.domain.expressions import ExpressionError
from shared.domain.projections import job_id_of, project_job
from shared.domain.spec import KernelSpec, ParamValue
from shared.domain.steps import OVERALL, SUBMITTED, timed_in_turn



class Measurement(BaseModel):
    """One timed configuration: its samples and where it sits against the roofline."""

    model_config = ConfigDict(frozen=True)
    params: dict[str, ParamValue]
    median_ms: float
    samples_ms: list[float]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    gbps: float | None = None
    tflops: float | None = None
    pct_of_peak: float | None = None


class KernelResult(BaseModel):
    """A job's kernel at its sizes: the baseline, the best correct version found, and how they compare."""

    model_config = ConfigDict(frozen=True)
    job_id: str
    run: str | None
    kernel: str = Field(description="kernel name and sizes: what comparisons match runs on")
    kernel_name: str
    sizes: dict[str, int]
    strategy: str
    status: str
    device: str | None
    replay: bool
    baseline: Measurement | None
    best: Measurement | None = Field(description="the fastest correct kernel: the baseline until something beat it")
    best_source: str = Field(description="the CUDA source of the best kernel")
    best_step: str | None = Field(description="the accepted step that produced the best kernel, if one did")
    best_candidate: str | None = Field(description="the candidate whose tuning found the best time (submitted for "
                                                   "the kernel's own space); none when the baseline is the best")
    reference_ms: float | None = Field(description="the time to beat the spec gave (strategy.reference_ms)")
    speedup_in_turn: float | None = Field(None, description="the best kernel's speedup timed in turn with the "
                                                            "submitted kernel; None: not timed so")
    speedup_in_turn_ci: tuple[float, float] | None = Field(None, description="its 95% interval")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speedup(self) -> float | None:
        """Best over baseline, what kforge gained: timed in turn where it was, else from their medians."""
        if self.speedup_in_turn is not None:
            return self.speedup_in_turn
        if self.baseline and self.best:
            return self.baseline.median_ms / self.best.median_ms
        return None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speedup_vs_reference(self) -> float | None:
        """Against the reference time when the spec gave one (as multiturn optimisation counts it), else the
        gain over the baseline."""
        if self.reference_ms and self.best:
            return self.reference_ms / self.best.median_ms
        return self.speedup


def stored_figure(compute: Callable[[], float | None]) -> float | None:
    """A figure computed from a stored spec, or None when it cannot be: a spec stored before expressions
    were bounded may hold one such as (10**64)**64, and the report leaves that figure out instead of failing."""
    try:
        return compute()
    except (ExpressionError, ArithmeticError):
        return None


def kernel_key(spec: KernelSpec) -> str:
    return f"{spec.kernel_name}[{','.join(f'{k}={v}' for k, v in sorted(spec.sizes.items()))}]"


def kernel_result(events: Sequence[Event]) -> KernelResult | None:
    """The result of one job's events; None before the job was submitted."""
    submitted = next((e for e in events if isinstance(e, JobSubmitted)), None)
    if submitted is None:
        return None
    spec, view = submitted.spec, project_job(events)
    baseline_event = next((e for e in events if isinstance(e, BaselineMeasured)), None)
    baseline = _baseline(baseline_event, spec) if baseline_event else None
    candidate_of = {e.event_id: e.candidate_id for e in events if isinstance(e, TuningRequested)}
    measured: dict[str, list[ConfigMeasured]] = {}
    for e in events:
        if isinstance(e, ConfigMeasured) and not e.abandoned and e.request_id in candidate_of:
            measured.setdefault(candidate_of[e.request_id], []).append(e)
    accepted = [e for e in events if isinstance(e, StepAccepted)]
    best, source, step, candidate = baseline, spec.source, None, None
    if accepted:
        last = accepted[-1]
        best = _fastest(measured.get(last.candidate_id, ())) or baseline
        source, step, candidate = _accepted_source(events, last), last.step_id, last.candidate_id
    elif SUBMITTED in measured:  # the search's best so far, finished or stopped (a cancelled job keeps it)
        tuned = _fastest(measured[SUBMITTED])
        if tuned and (baseline is None or tuned.median_ms < baseline.median_ms):
            best, candidate = tuned, SUBMITTED
    return KernelResult(job_id=job_id_of(submitted.stream_id), run=submitted.run, kernel=kernel_key(spec),
                        kernel_name=spec.kernel_name, sizes=spec.sizes, strategy=spec.strategy.name,
                        status=view.status, device=view.device, replay=view.replay, baseline=baseline, best=best,
                        best_source=source, best_step=step, best_candidate=candidate,
                        reference_ms=spec.strategy.reference_ms, **_in_turn(events, best is not baseline))


def _in_turn(events: Sequence[Event], improved: bool) -> dict:
    """The OVERALL comparison's speedup and interval, where it timed the best kernel against the submitted one."""
    overall = next((e for e in reversed(events) if isinstance(e, KernelsCompared) and e.candidate_id == OVERALL
                    and timed_in_turn(e)), None)
    if overall is None or not improved:
        return {}
    return {"speedup_in_turn": overall.speedup, "speedup_in_turn_ci": overall.speedup_ci}


def _baseline(e: BaselineMeasured, spec: KernelSpec) -> Measurement:
    """The benchmark records rates per tuned configuration; the baseline's come from the same figures."""
    seconds = e.median_ms / 1e3
    moved, flops = stored_figure(spec.bytes_per_launch), stored_figure(spec.flops_per_launch)
    gbps = moved / seconds / 1e9 if moved is not None else None
    tflops = flops / seconds / 1e12 if flops is not None else None
    pct = None
    if e.facts and (gbps is not None or tflops is not None):
        pct = 100 * max((gbps or 0.0) / e.facts.dram_gbps, (tflops or 0.0) / e.facts.fp32_tflops)
    return Measurement(params=e.params, median_ms=e.median_ms, samples_ms=e.samples_ms, grid=e.grid, block=e.block,
                       gbps=gbps, tflops=tflops, pct_of_peak=pct)


def _fastest(measured: Iterable[ConfigMeasured]) -> Measurement | None:
    best = min(measured, key=lambda e: e.median_ms, default=None)
    if best is None:
        return None
    return Measurement(params=best.params, median_ms=best.median_ms, samples_ms=best.samples_ms, grid=best.grid,
                       block=best.block, gbps=best.gbps, tflops=best.tflops, pct_of_peak=best.pct_of_peak)


def _accepted_source(events: Sequence[Event], accepted: StepAccepted) -> str:
    generated = next(e for e in events if isinstance(e, CandidateGenerated) and e.candidate_id == accepted.candidate_id)
    return generated.candidate.source
