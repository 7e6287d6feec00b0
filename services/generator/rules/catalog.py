"""The offline rules kforge knows, the order a plan tries them in, and the order a refinement tries them in for
each performance category.

The first six ids double as kforge's default explicit steps, and their tune parameters are the names the
rewritten code uses, so a step's tune_params and its candidate's agree by construction.
"""
from dataclasses import dataclass

from shared.domain.spec import KernelSpec, ParamValue


@dataclass(frozen=True)
class Rule:
    id: str
    description: str  # one sentence: the description of the step that applies the rule
    parameter: str | None = None  # the tune parameter the rule introduces, if any
    values: tuple[ParamValue, ...] = ()  # none where the rendering sets them from the kernel's shape
    default: ParamValue | None = None  # the value a new candidate starts from
    rendered: bool = False  # printed from a model of the submitted kernel's shape, not edited into the current one
    restrictions: tuple[str, ...] = ()  # added to the candidate's; {x} is the spec's x block size name
    keeps_grid: bool = False  # rendered on the submitted grid and blocks: per-block results keep their elements
    alternatives: tuple[str, ...] = ()  # rules doing the same work another way, each listing this one: a kernel
    # carries one of them (row_in_registers holds a row that row_in_shared would cache and vectorize_loops widen;
    # vectorize_loops and batch_loads each put more of a strided loop's bytes in flight, one of the other's loops)

    def parameter_name(self, spec: KernelSpec) -> str | None:
        """The identifier the code and the tune_params use; for block_size, whatever the spec calls the x block
        size (block_size_names[0], block_size_x unless the spec says otherwise)."""
        return spec.block_size_names[0] if self.id == "block_size" else self.parameter

    def tune_params(self, spec: KernelSpec) -> dict[str, list[ParamValue]]:
        name = self.parameter_name(spec)
        return {name: list(self.values)} if name and self.values else {}  # a rendered rule may set its own

    def restrictions_for(self, spec: KernelSpec) -> list[str]:
        return [r.format(x=spec.block_size_names[0]) for r in self.restrictions]


CATALOG = (
    Rule("block_size", "Make the thread block size a tune parameter, replacing blockDim.x in the code by that "
                       "compile-time constant.", "block_size_x", (32, 64, 128, 256, 512, 1024), 256),
    Rule("restrict", "Mark the pointer parameters __restrict__ (and the pure inputs const), so the compiler may "
                     "keep values in registers and read inputs through the read-only cache."),
    Rule("elements_per_thread", "Let each thread handle several elements (or points of its 2D or 3D grid) in a "
                                "loop, with the grid shrunk by the tunable elements_per_thread.",
         "elements_per_thread", (1, 2, 4, 8, 16), 4, rendered=True),
    Rule("vectorize", "Load and store 128 bits at a time (two doubles, four 4-byte elements, eight halves or "
                      "bfloat16s, or sixteen bytes; a kernel's narrower arrays move as many elements as its widest, "
                      "in fewer bytes) as aligned structs, taken only when every array is aligned at run time (else "
                      "the element loop), each lane computed as the kernel wrote it, with a scalar loop for the last "
                      "elements. On a "
                      "stencil, the input its points read around them comes into registers once, as whole aligned "
                      "vectors and the elements beside them.",
         rendered=True),
    Rule("unroll", "Unroll every loop that has no unroll pragma yet by the tunable loop_unroll_factor.",
         "loop_unroll_factor", (1, 2, 4, 8), 4, alternatives=("batch_loads",)),
    Rule("launch_bounds", "Declare __launch_bounds__ with the block size, so the compiler budgets registers for "
                          "exactly that many threads per block."),
    # The rules that restructure a kernel of a shape their recogniser found (services/generator/rules/shapes.py).
    Rule("hierarchical_reduction", "Replace atomics that add every element (or every warp's sum, or take their "
                                   "minimum or maximum) into a few addresses by a hierarchical reduction: each "
                                   "thread combines elements_per_thread elements in a register, each warp combines "
                                   "its threads' with __shfl_down_sync, and one atomic per block and address takes "
                                   "the block's (a few addresses per row: blocks one row deep; per column: one "
                                   "atomic per thread for its rows); a "
                                   "histogram keeps per-block bins in shared memory, one atomic per bin and block.",
         rendered=True),
    Rule("shared_tile", "Stage a square tile of block_size_x x block_size_x elements in shared memory, padded by "
                        "one column against bank conflicts, so that the strided (transposed) writes become "
                        "coalesced; the block's block_size_y rows of threads walk the tile.", rendered=True),
    Rule("register_blocking", "Let each thread of a stencil compute points_per_thread consecutive points along "
                              "its slowest axis, unrolled, so the input values neighbouring points share are "
                              "loaded once and kept in registers; the grid shrinks by the same factor.",
         "points_per_thread", (1, 2, 4, 8, 16), 4, rendered=True),
    Rule("register_window", "Let each thread of a window sum (a 2D convolution) compute 4 x window_rows points, "
                            "reading each input row its windows need once, 128 bits at a time where aligned, into "
                            "registers, and storing each row's four results together, one 128-bit vector where they "
                            "lie side by side, with the window's size fixed at the spec's value; edge threads and "
                            "other window sizes run the kernel as written, their points dealt out among the lanes "
                            "of their warp.", "window_rows", (1, 2, 4, 8), 4,
         rendered=True),
    Rule("warp_per_row", "Give each row a warp instead of a thread, or for short rows a part of one (block_size_x "
                         "lanes of 4 to 32): the lanes split the row's loop, so their loads are coalesced, and add "
                         "their partial sums with __shfl_xor_sync; block_size_y rows per block.", rendered=True),
    Rule("split_columns", "Split the loop of a thread walking its column down the rows among block_size_y "
                          "threads of the column, each taking every block_size_y-th row, so more loads are in "
                          "flight; after a barrier the column's first thread combines their sums, maxima or minima "
                          "from shared memory in order and goes on with the column alone.", rendered=True),
    Rule("row_in_registers", "Hold a row that a block (or a warp) passes over several times in registers: the "
                             "first pass keeps the row_chunks elements each thread reads, a block width apart, in a "
                             "fully unrolled loop, and the later passes read them there; elements past them are "
                             "read from global memory as before, and row_chunks takes the powers of two that hold "
                             "at most 128 bytes of the row per thread.", "row_chunks", (), 4,
         rendered=True, keeps_grid=True, alternatives=("row_in_shared", "vectorize_loops")),
    Rule("row_in_shared", "Read a row that a block (or a warp) passes over several times from global memory once: "
                          "the first pass keeps each element it reads in dynamic shared memory, sized by the row's "
                          "length, and the later passes read it there.", rendered=True, keeps_grid=True,
         alternatives=("row_in_registers",)),
    Rule("shuffle_reduction", "Replace each shared-memory tree reduction (a halving loop with a barrier per step) "
                              "by warp shuffles: every warp reduces its values in registers, then one warp the "
                              "warps' results, three barriers instead of one per halving.",
         restrictions=("{x} % 32 == 0",)),
    Rule("scan_vectors", "Give each thread of a block scan that walks a row in chunks of the block's width four "
                         "consecutive elements, read and written as one 128-bit vector where aligned: each thread "
                         "adds up its four in registers and the warps scan the threads' totals with shuffles.",
         restrictions=("{x} % 32 == 0", "{x} <= 1024"), alternatives=("shuffle_scan",)),
    Rule("shuffle_scan", "Replace each shared-memory Hillis-Steele block scan (a doubling loop with two barriers "
                         "per step) by warp shuffles: every warp scans its values in registers, one warp the "
                         "warps' totals, three barriers instead of two per doubling.",
         restrictions=("{x} % 32 == 0", "{x} <= 1024"), alternatives=("scan_vectors",)),
    Rule("vectorize_loops", "Load and store the arrays of each strided loop (over a row, or over the grid) four "
                            "elements at a time through 128-bit vectors when all of them are 16-byte aligned at "
                            "run time, with a scalar loop for the remaining elements; each thread loads its next "
                            "vectors_in_flight vectors together before it runs them, in order.",
         "vectors_in_flight", (1, 2, 4), 2, alternatives=("row_in_registers", "batch_loads")),
    Rule("batch_loads", "Run each loop a thread walks a step (or a stride) at a time in passes of batch_iterations "
                        "iterations, loading first what each iteration of a pass reads first, so the loads are in "
                        "flight together (an in-place march through a volume waits on one load at a time "
                        "otherwise).",
         "batch_iterations", (2, 4, 8, 16), 8, alternatives=("unroll", "vectorize_loops")),
)
RULES = {rule.id: rule for rule in CATALOG}
STRUCTURAL = ("hierarchical_reduction", "shared_tile", "register_window", "register_blocking", "warp_per_row",
              "split_columns", "row_in_registers", "row_in_shared", "shuffle_reduction", "scan_vectors", "shuffle_scan")

# The order a plan tries what applies: the restructuring a recogniser found first (it changes the most, and
# the other rules then apply to what it printed), then the others in catalog order.
PLAN_ORDER = (*STRUCTURAL, "block_size", "restrict", "elements_per_thread", "vectorize", "vectorize_loops",
              "batch_loads", "unroll", "launch_bounds")

# Multiturn refinement names the category of the current kernel's speed; each order tries first what most
# often helps a kernel in that category.
FOCUS_ORDERS = {
    "SLOW": (*STRUCTURAL, "vectorize", "vectorize_loops", "batch_loads", "elements_per_thread", "restrict",
             "block_size", "launch_bounds", "unroll"),  # memory first
    "MODERATE": (*STRUCTURAL, "block_size", "elements_per_thread", "vectorize", "vectorize_loops", "batch_loads",
                 "restrict", "launch_bounds", "unroll"),
    "GOOD": ("unroll", "launch_bounds", "block_size", "restrict", "elements_per_thread", "vectorize",
             "vectorize_loops", "batch_loads", *STRUCTURAL),  # fine tuning
}


def in_focus_order(focus: str | None) -> tuple[Rule, ...]:
    """The rules in the order for `focus` (SLOW, MODERATE or GOOD), or in the plan's order without one."""
    if focus is None:
        return tuple(RULES[rule_id] for rule_id in PLAN_ORDER)
    order = FOCUS_ORDERS.get(focus.upper())
    if order is None:
        raise ValueError(f"no rule order for focus {focus!r}; the foci are {', '.join(FOCUS_ORDERS)}")
    return tuple(RULES[rule_id] for rule_id in order)
