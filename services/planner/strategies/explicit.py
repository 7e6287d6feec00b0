"""Explicit: predefined steps tried in order, each kept only when it makes the kernel faster.

A step runs only if every step it depends on was accepted, and, unless `skip_evaluation`, only after the
generator judged it worth doing for the current kernel."""
from services.planner.strategies import register
from services.planner.strategies.decisions import Ask, Decision, Finish, Skip
from shared.domain.spec import StrategySpec
from shared.domain.steps import Optimisation


@register("explicit")
class Explicit:
    def decide(self, optimisation: Optimisation, spec: StrategySpec) -> Decision:
        current = optimisation.current
        if current is not None:  # validated, so it is executed now
            return Ask("rewrite", current.step)
        for step in optimisation.queue:
            unmet = [d for d in step.depends_on if getattr(optimisation.record(d), "status", None) != "accepted"]
            if unmet:
                return Skip(step, f"depends on {', '.join(unmet)}, which brought no improvement")
            return Ask("rewrite", step) if step.skip_evaluation else Ask("validate", step)
        accepted = sum(r.status == "accepted" for r in optimisation.steps)
        return Finish(f"all {len(optimisation.steps)} steps tried, {accepted} kept")
