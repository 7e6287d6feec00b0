"""Autonomous: plan, then for each planned step validate it, optionally break it down, execute it; when the
plan is used up, optionally replan from what the kernel has become.

With the offline rules as the generator, the plan is what their recognisers find in the kernel (the
restructuring of its shape first, then the edits that apply), and a replan finds what applies to the kernel
as the accepted steps left it. A rule is one atomic code change, so its steps are not broken down."""
from services.planner.strategies import register
from services.planner.strategies.decisions import Ask, Decision, Finish
from shared.domain.spec import StrategySpec
from shared.domain.steps import Optimisation


def offline_rules(optimisation: Optimisation) -> bool:
    """Whether the job's generator is the offline rules: named in the spec, or the provider of a step so far."""
    spec = optimisation.spec
    return (spec is not None and spec.generator.provider == "rules") or any(
        record.provider == "rules" for record in optimisation.steps)


@register("autonomous")
class Autonomous:
    def decide(self, optimisation: Optimisation, spec: StrategySpec) -> Decision:
        if optimisation.plans == 0:
            return Ask("plan")
        if optimisation.plan_failure and not optimisation.planned:
            return Finish(f"no plan: {optimisation.plan_failure}", failed=True)
        current = optimisation.current
        if current is not None:  # validated
            if (spec.breakdown_steps and not current.breakdown_asked and current.depth < spec.max_breakdowns
                    and not offline_rules(optimisation)):
                return Ask("breakdown", current.step)
            return Ask("rewrite", current.step)
        if optimisation.queue:
            return Ask("validate", optimisation.queue[0])
        if optimisation.plan_failure:
            return Finish(f"the replan failed: {optimisation.plan_failure}")
        if not spec.with_replanning:
            return Finish("the plan is done (replanning is off)")
        if optimisation.replans >= spec.max_replanning:
            return Finish(f"the plan is done after {optimisation.replans} replans (max_replanning)")
        if optimisation.replans and optimisation.last_plan_size == 0:
            return Finish("the replan proposed no further step")
        return Ask("replan")
