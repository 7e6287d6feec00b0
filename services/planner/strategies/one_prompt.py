"""One prompt: the whole optimisation asked for in a single rewrite."""
from services.planner.strategies import register
from services.planner.strategies.decisions import Ask, Decision, Finish
from shared.domain.spec import StrategySpec, TuningStep
from shared.domain.steps import Optimisation

STEP = TuningStep(
    id="one_prompt", description="optimise the kernel in one rewrite, with tunable parameters", skip_evaluation=True,
    prompt_template="Rewrite this CUDA kernel to run as fast as possible on the target GPU, with what you change "
                    "made tunable through parameters (compile-time defines, e.g. block_size_x).\n\n"
                    "```cuda\n{kernel_string}\n```")


@register("one_prompt")
class OnePrompt:
    def decide(self, optimisation: Optimisation, spec: StrategySpec) -> Decision:
        record = optimisation.record(STEP.id)
        if record is None:
            return Ask("rewrite", STEP)
        return Finish(f"the one rewrite was {record.status}" + (f": {record.reason}" if record.reason else ""))
