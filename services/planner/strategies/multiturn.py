"""Multiturn refinement: rewrite the best kernel again and again, each turn steered by how fast it is
against the reference, until the target speedup, a plateau, or the iteration limit."""
from services.planner.strategies import register
from services.planner.strategies.decisions import Ask, Decision, Finish
from shared.domain.spec import StrategySpec, TuningStep
from shared.domain.steps import Optimisation

PREFIX = "iteration-"
FOCUS = {
    "SLOW": "memory bandwidth and the algorithm: access patterns, coalescing, vector loads, data reuse",
    "MODERATE": "parallelism and memory patterns: work per thread, block size, occupancy",
    "GOOD": "fine tuning: unrolling, register budgets, launch bounds, instruction-level details",
}


def category(speedup: float) -> str:
    """SLOW below 0.8x the reference, GOOD above 1.2x, MODERATE between."""
    return "SLOW" if speedup < 0.8 else "GOOD" if speedup > 1.2 else "MODERATE"


def improvement(old_ms: float | None, new_ms: float | None, accepted: bool) -> float:
    return (old_ms - new_ms) / old_ms if accepted and old_ms and new_ms else 0.0


@register("multiturn")
class Multiturn:
    def decide(self, optimisation: Optimisation, spec: StrategySpec) -> Decision:
        turns = [r for r in optimisation.steps if r.step.id.startswith(PREFIX)]
        reference = spec.reference_ms or optimisation.baseline_ms
        speedup = reference / optimisation.best.time_ms
        if speedup >= spec.target_speedup:
            return Finish(f"target reached: {speedup:.2f}x the reference (target {spec.target_speedup:.2f}x)")
        if len(turns) >= spec.max_iterations:
            return Finish(f"{len(turns)} iterations done (max_iterations), {speedup:.2f}x the reference")
        stalled = 0
        for turn in reversed(turns):
            if improvement(turn.old_ms, turn.new_ms, turn.status == "accepted") >= spec.min_improvement:
                break
            stalled += 1
        if stalled >= spec.patience:
            return Finish(f"plateau: the last {stalled} iterations improved less than {spec.min_improvement:.0%}")
        focus = category(speedup)
        k = len(turns) + 1
        step = TuningStep(id=f"{PREFIX}{k}", description=f"refinement {k} at {speedup:.2f}x ({focus}): {FOCUS[focus]}",
                          skip_evaluation=True)
        return Ask("rewrite", step, focus=focus)
