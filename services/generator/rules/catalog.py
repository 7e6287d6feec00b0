"""The offline rules kforge knows, and the order a refinement tries them in for each performance category.

Their ids double as kforge's default explicit steps, and their tune parameters are the names the rewritten
code uses, so a step's tune_params and its candidate's agree by construction.
"""
from dataclasses import dataclass

from shared.spec import KernelSpec, ParamValue


@dataclass(frozen=True)
class Rule:
    id: str
    description: str  # one sentence: the description of the step that applies the rule
    parameter: str | None = None  # the tune parameter the rule introduces, if any
    values: tuple[ParamValue, ...] = ()
    default: ParamValue | None = None  # the value a new candidate starts from
    elementwise: bool = False  # rendered from the submitted kernel's model rather than edited into the current one

    def parameter_name(self, spec: KernelSpec) -> str | None:
        """The identifier the code and the tune_params use; for block_size, whatever the spec calls the x block
        size (block_size_names[0], block_size_x unless the spec says otherwise)."""
        return spec.block_size_names[0] if self.id == "block_size" else self.parameter

    def tune_params(self, spec: KernelSpec) -> dict[str, list[ParamValue]]:
        name = self.parameter_name(spec)
        return {name: list(self.values)} if name else {}


CATALOG = (
    Rule("block_size", "Make the thread block size a tune parameter, replacing blockDim.x in the code by that "
                       "compile-time constant.", "block_size_x", (32, 64, 128, 256, 512, 1024), 256),
    Rule("restrict", "Mark the pointer parameters __restrict__ (and the pure inputs const), so the compiler may "
                     "keep values in registers and read inputs through the read-only cache."),
    Rule("elements_per_thread", "Let each thread handle several elements in a grid-stride loop, with the grid "
                                "shrunk by the tunable elements_per_thread.",
         "elements_per_thread", (1, 2, 4, 8, 16), 4, elementwise=True),
    Rule("vectorize", "Load and store four elements at a time through 128-bit vector types (float4, int4, uint4), "
                      "with a scalar loop for the last n % 4 elements.", elementwise=True),
    Rule("unroll", "Unroll every loop that has no unroll pragma yet by the tunable loop_unroll_factor.",
         "loop_unroll_factor", (1, 2, 4, 8), 4),
    Rule("launch_bounds", "Declare __launch_bounds__ with the block size, so the compiler budgets registers for "
                          "exactly that many threads per block."),
)
RULES = {rule.id: rule for rule in CATALOG}

# Multiturn refinement names the category of the current kernel's speed; each order tries first what most
# often helps a kernel in that category.
FOCUS_ORDERS = {
    "SLOW": ("vectorize", "elements_per_thread", "restrict", "block_size", "launch_bounds", "unroll"),  # memory first
    "MODERATE": ("block_size", "elements_per_thread", "vectorize", "restrict", "launch_bounds", "unroll"),
    "GOOD": ("unroll", "launch_bounds", "block_size", "restrict", "elements_per_thread", "vectorize"),  # fine tuning
}


def in_focus_order(focus: str | None) -> tuple[Rule, ...]:
    """The rules in the order for `focus` (SLOW, MODERATE or GOOD), or in catalog order without one."""
    if focus is None:
        return CATALOG
    order = FOCUS_ORDERS.get(focus.upper())
    if order is None:
        raise ValueError(f"no rule order for focus {focus!r}; the foci are {', '.join(FOCUS_ORDERS)}")
    return tuple(RULES[rule_id] for rule_id in order)
