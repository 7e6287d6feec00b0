"""What to try next on a kernel, read from what its job measured: where the best version sits against the
roofline, how much of the GPU its grid fills, which configurations could not launch, and whether the
search stopped at the edge of its space. Every suggestion quotes the measurement it rests on."""
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from shared.domain.events import (BaselineMeasured, CandidateGenerated, ConfigFailed, ConfigMeasured, DeviceFacts,
                                  Event, JobSubmitted, TuningRequested)
from shared.domain.reports.results import KernelResult, Measurement, kernel_result, stored_figure
from shared.domain.spec import KernelSpec
from shared.domain.steps import SUBMITTED

REACHABLE_BANDWIDTH_PCT = 85.0  # well-written streaming kernels reach 85-90% of DRAM peak on recent GPUs
REACHABLE_FLOPS_PCT = 75.0
OUT_OF_RESOURCES = "OUT_OF_RESOURCES"


class SuggestionType(StrEnum):
    MEMORY = "memory"
    ALGORITHM = "algorithm"
    PARALLELISM = "parallelism"
    OCCUPANCY = "occupancy"
    LAUNCH_CONFIG = "launch_config"
    CACHING = "caching"


class Priority(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


PRIORITY_ORDER = list(Priority)


class OptimizationSuggestion(BaseModel):
    model_config = ConfigDict(frozen=True)
    kernel: str
    type: SuggestionType
    priority: Priority
    description: str
    evidence: str = Field(description="the measurement the suggestion rests on")
    implementation_hint: str
    expected_improvement: str
    current_time_ms: float
    estimated_time_ms: float | None = Field(description="none when nothing measured allows an estimate")
    potential_speedup: float | None


@dataclass(frozen=True)
class Evidence:
    """What a rule may read: the job's result, its spec, the device and every configuration's outcome."""

    result: KernelResult
    best: Measurement
    spec: KernelSpec
    facts: DeviceFacts | None
    measured: Sequence[ConfigMeasured]
    failed: Sequence[ConfigFailed]

    def bandwidth_pct(self) -> float | None:
        if self.facts and self.best.gbps is not None:
            return 100 * self.best.gbps / self.facts.dram_gbps
        return None

    def flops_pct(self) -> float | None:
        if self.facts and self.best.tflops is not None:
            return 100 * self.best.tflops / self.facts.fp32_tflops
        return None

    def suggestion(self, kind: SuggestionType, priority: Priority, description: str, evidence: str, hint: str,
                   estimated_ms: float | None) -> OptimizationSuggestion:
        current = self.best.median_ms
        speedup = current / estimated_ms if estimated_ms else None
        expected = (f"about {speedup:.2f}x ({current:.4f} -> {estimated_ms:.4f} ms)" if speedup
                    else "no estimate: nothing measured to extrapolate from")
        return OptimizationSuggestion(kernel=self.result.kernel, type=kind, priority=priority,
                                      description=description, evidence=evidence, implementation_hint=hint,
                                      expected_improvement=expected, current_time_ms=current,
                                      estimated_time_ms=estimated_ms, potential_speedup=speedup)


Rule = Callable[[Evidence], OptimizationSuggestion | None]


def _by_gap(pct: float) -> Priority:
    return Priority.CRITICAL if pct < 25 else Priority.HIGH if pct < 50 else Priority.MEDIUM


def memory_bound(ev: Evidence) -> OptimizationSuggestion | None:
    bw, fl = ev.bandwidth_pct(), ev.flops_pct()
    if bw is None or (fl is not None and fl > bw) or bw >= REACHABLE_BANDWIDTH_PCT * 0.9:
        return None
    return ev.suggestion(
        SuggestionType.MEMORY, _by_gap(bw),
        f"memory-bound at {bw:.0f}% of DRAM bandwidth: the kernel waits on memory it could stream faster",
        f"best configuration {_params(ev.best.params)}: {ev.best.gbps:,.0f} GB/s of {ev.facts.dram_gbps:,.0f} GB/s",
        "coalesce accesses (consecutive threads on consecutive addresses), load 16 bytes per thread (float4), "
        "process several elements per thread in a grid-stride loop, mark inputs const __restrict__; kforge's "
        "vectorize and elements_per_thread steps do this",
        ev.best.median_ms * bw / REACHABLE_BANDWIDTH_PCT)


def compute_bound(ev: Evidence) -> OptimizationSuggestion | None:
    bw, fl = ev.bandwidth_pct(), ev.flops_pct()
    if fl is None or (bw is not None and bw > fl) or fl >= REACHABLE_FLOPS_PCT * 0.9:
        return None
    return ev.suggestion(
        SuggestionType.ALGORITHM, Priority.HIGH if fl < 30 else Priority.MEDIUM,
        f"compute-bound at {fl:.0f}% of FP32 peak: the arithmetic is not fed fast enough",
        f"best configuration {_params(ev.best.params)}: {ev.best.tflops:,.1f} TFLOP/s of "
        f"{ev.facts.fp32_tflops:,.1f} TFLOP/s",
        "tile through shared memory and registers so each loaded value feeds many operations, unroll the inner "
        "loop, and consider tensor cores (mma/WMMA, TF32 or lower precision) which exceed the FP32 peak",
        ev.best.median_ms * fl / REACHABLE_FLOPS_PCT)


def grid_too_small(ev: Evidence) -> OptimizationSuggestion | None:
    if not ev.facts or not ev.facts.sm_count:
        return None
    blocks, sms = math.prod(ev.best.grid), ev.facts.sm_count
    if blocks >= sms:
        return None
    return ev.suggestion(
        SuggestionType.PARALLELISM, Priority.CRITICAL if blocks * 4 <= sms else Priority.HIGH,
        f"the grid has {blocks} blocks for {sms} SMs: {sms - blocks} SMs sit idle",
        f"best configuration {_params(ev.best.params)} launches grid {ev.best.grid} x block {ev.best.block}",
        "give each block less work (smaller tiles or blocks), split the reduction or K dimension across blocks "
        "and combine partial results, or add a tune parameter for the work per block",
        ev.best.median_ms * blocks / sms)


def out_of_resources(ev: Evidence) -> OptimizationSuggestion | None:
    starved = [f for f in ev.failed if f.stage == "launch" and OUT_OF_RESOURCES in f.reason]
    if not starved:
        return None
    threads = sorted({_threads(ev.spec, f.params) for f in starved})
    launched = max((math.prod(m.block) for m in ev.measured), default=0)
    if launched < threads[0]:  # every block that large failed: the thread count itself is the limit
        restriction = f"a restriction keeping threads per block <= {launched}"
    else:  # blocks that large ran with other parameters: what each thread does costs the registers
        restriction = "restrictions excluding these combinations: " + "; ".join(_params(f.params) for f in starved[:3])
    return ev.suggestion(
        SuggestionType.OCCUPANCY, Priority.LOW,
        f"{len(starved)} configurations could not launch: too many registers or too much shared memory per block",
        f"{len(starved)} ConfigFailed at launch with {OUT_OF_RESOURCES}, at {threads} threads per block; "
        f"the largest block that ran had {launched} threads",
        "cap registers with __launch_bounds__(threads, min_blocks) or skip these configurations, so tuning "
        f"time goes to those that can run: {restriction}",
        ev.best.median_ms)


def _threads(spec: KernelSpec, params: dict) -> int:
    try:
        return math.prod(spec.launch_geometry(params)[1])
    except (KeyError, ValueError, ArithmeticError):  # ExpressionError is a ValueError: a stored spec's bomb
        return 0


def best_at_edge(ev: Evidence) -> OptimizationSuggestion | None:
    """A best value at the end of its list may mean the optimum lies beyond what was tried."""
    for name, values in ev.spec.tune_params.items():
        numeric = sorted(v for v in values if isinstance(v, int | float) and not isinstance(v, bool))
        value = ev.best.params.get(name)
        if len(numeric) < 3 or value not in (numeric[0], numeric[-1]):
            continue
        upward = value == numeric[-1]
        if upward and name in ev.spec.block_size_names and math.prod(ev.best.block) >= 1024:
            continue  # already at the 1024 threads a block may have
        neighbour = numeric[-2] if upward else numeric[1]
        rivals = [m.median_ms for m in ev.measured if m.params.get(name) == neighbour
                  and all(m.params.get(k) == v for k, v in ev.best.params.items() if k != name)]
        ratio = ev.best.median_ms / min(rivals) if rivals else None
        side = "largest" if upward else "smallest"
        return ev.suggestion(
            SuggestionType.LAUNCH_CONFIG, Priority.MEDIUM if ratio and ratio < 0.91 else Priority.LOW,
            f"the best {name} is {value}, the {side} value tried: the optimum may lie beyond the space",
            f"{name}={value}: {ev.best.median_ms:.4f} ms"
            + (f"; {name}={neighbour}: {min(rivals):.4f} ms" if rivals else ""),
            f"extend tune_params.{name} {'above' if upward else 'below'} {value} and tune again",
            ev.best.median_ms * ratio if ratio else None)
    return None


def untuned(ev: Evidence) -> OptimizationSuggestion | None:
    if ev.spec.tune_params:
        return None
    return ev.suggestion(
        SuggestionType.LAUNCH_CONFIG, Priority.MEDIUM,
        "the launch configuration is fixed: nothing was tuned",
        f"one configuration measured: {_params(ev.best.params)}, block {ev.best.block}",
        "add tune_params (e.g. block_size_x: [64, 128, 256, 512, 1024]) and run strategy tune",
        None)


def redundant_traffic(ev: Evidence) -> OptimizationSuggestion | None:
    """A kernel declared to move several times its arrays re-reads them from memory."""
    if ev.spec.work.bytes is None:
        return None
    arrays, declared = stored_figure(ev.spec.array_bytes), stored_figure(ev.spec.bytes_per_launch)
    if not arrays or declared is None or declared < 2 * arrays:
        return None
    bw = ev.bandwidth_pct()
    memory_limited = bw is not None and bw > (ev.flops_pct() or 0.0)
    return ev.suggestion(
        SuggestionType.CACHING, Priority.HIGH if memory_limited else Priority.MEDIUM,
        f"each launch moves {declared / arrays:.1f}x its arrays: data is fetched from memory again and again",
        f"work.bytes {declared / 1e6:,.1f} MB against {arrays / 1e6:,.1f} MB of arrays",
        "stage the reused data in shared memory or registers (tiling) so each element crosses DRAM about once",
        ev.best.median_ms * arrays / declared if memory_limited else None)


RULES: tuple[Rule, ...] = (memory_bound, compute_bound, grid_too_small, redundant_traffic, best_at_edge,
                           out_of_resources, untuned)


def suggest(events: Sequence[Event]) -> list[OptimizationSuggestion]:
    """Suggestions for one job's kernel, the largest expected gain first."""
    result = kernel_result(events)
    if result is None or result.best is None:
        return []
    spec = next(e for e in events if isinstance(e, JobSubmitted)).spec
    candidate = result.best_candidate or SUBMITTED  # the baseline is best: its own space's search still counts
    generated = next((e for e in events if isinstance(e, CandidateGenerated) and e.candidate_id == candidate), None)
    if generated is not None:  # the best kernel is a rewrite: its own space and configurations count
        spec = spec.for_candidate(generated.candidate)
    requests = {e.event_id for e in events if isinstance(e, TuningRequested) and e.candidate_id == candidate}
    baseline = next((e for e in events if isinstance(e, BaselineMeasured)), None)
    evidence = Evidence(result=result, best=result.best, spec=spec, facts=baseline.facts if baseline else None,
                        measured=[e for e in events if isinstance(e, ConfigMeasured) and not e.abandoned
                                  and e.request_id in requests],
                        failed=[e for e in events if isinstance(e, ConfigFailed) and e.request_id in requests])
    found = [s for rule in RULES if (s := rule(evidence)) is not None]
    return sorted(found, key=lambda s: (PRIORITY_ORDER.index(s.priority), -(s.potential_speedup or 1.0)))


def _params(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(no parameters)"
