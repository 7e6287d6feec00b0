"""Column-wise loops of one thread per column (column sums, means, maxima or norms of a row-major matrix),
restructured so that block_size_y threads split each column's loop.

Recognised: a kernel rows.py reads as loops of one point per thread (rows.loops_of_one_point: accumulators, effects
and stores as its docstring says), with a single loop, which reads an array contiguously along the point's index
(neighbouring threads read neighbouring addresses) at an address that moves with the loop's: a thread walking
its column down the rows. Its loads are coalesced already, but a matrix of a few thousand columns gives the GPU a
few thousand threads, each waiting on one load at a time: on the H100 a 2,048 x 4,096 column sum ran at 7% of a
device copy of its bytes, and at 68% with its rows split 32 ways (83% with batch_loads' passes of 16 rows too)
in a hand-written experiment.

Rendered: a block of block_size_x x block_size_y threads. The block_size_y threads of a column (one threadIdx.x)
first run the point body as written up to the end of the loop, with the loop split among them: the index starts
block_size_y apart, at START + threadIdx.y, and steps block_size_y (a sum that does not enter the loop at zero
enters it at zero in every thread but threadIdx.y == 0). Each then puts its accumulators in shared memory, in a
lambda, so that a guard's `return` leaves only the walk and every thread of the block meets the barrier that
follows (threads of the block's other columns may have left the point body early; a barrier some threads skip is
undefined, and compute-sanitizer's racecheck, which the verifier runs, follows barriers, not fences and atomics).
After it the column's first thread runs the point body again with the loop replaced by the combination of the
parts in the order of threadIdx.y, and goes on alone to the loop's effects (which come only after it,
rows.py's _check_effects); running the body before the loop twice changes nothing, since it writes nothing. The
point body, as a point kernel's, reads no thread geometry and uses no barrier, shuffle or shared memory of its
own (points.py). Partial sums are added in another order (within float rounding); a maximum or minimum is the
same in any order (a NaN aside, as in rows.py, and the sign of a zero maximum where -0.0 and 0.0 tie).
"""
import re
from dataclasses import dataclass

from services.generator.rules import affine, points, rows
from services.generator.rules.cuda_text import fresh_name, identifiers, mask
from services.generator.rules.points import INDENT, PointKernel
from services.generator.rules.rows import RowLoop, RowPass
from services.generator.rules.shape import Layout, NotRecognised, default_in
from services.generator.rules.statements import walk as walk_statements
from shared.domain.spec import KernelSpec

SPLITS = [2, 4, 8, 16, 32]
MAX_THREADS = 1024
SHARED_BYTES = 48 * 1024  # static shared memory a block may declare


@dataclass(frozen=True)
class ColumnLoop:
    rows: RowLoop  # the loop as rows.py reads it; its one pass walks the column

    @property
    def walk(self) -> RowPass:
        return self.rows.passes[0]


def recognise(spec: KernelSpec) -> ColumnLoop:
    model = rows.loops_of_one_point(spec, _check_columns)
    kernel = model.kernel
    directive = re.search(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|else|endif)\b",
                          mask(spec.source)[kernel.body_start:kernel.body_end], re.MULTILINE)
    if directive is not None:
        raise NotRecognised("its point body holds a conditional directive, which the walk and the combination "
                            "would each cut")
    return ColumnLoop(model)


def _check_columns(kernel: PointKernel, masked: str, passes: tuple[RowPass, ...]) -> None:
    """One loop, reading an array side by side across threads (contiguous along the point's index) at an address
    that moves with the loop's."""
    if len(passes) != 1:
        raise NotRecognised("it walks its column in several loops; a column split combines its threads' results "
                            "once, after one loop")
    walk, j = passes[0], kernel.axes[0].name
    placed = next((a for a in walk.accumulators if a.place is not None), None)
    if placed is not None:
        raise NotRecognised(f"it records where its {placed.kind}imum lies ({placed.place}), which a column split's "
                            f"parts do not combine")
    inside = [a for a in kernel.accesses if walk.loop.body.start <= a.start < walk.loop.body.end
              and a.poly is not None and not a.write]
    if not any(affine.is_unit(affine.stride(a.poly, j)) and affine.stride(a.poly, walk.variable) for a in inside):
        raise NotRecognised(f"its loop reads no array contiguously along {j} at an address that moves with "
                            f"{walk.variable}, so it does not walk columns side by side")


def _render(model: ColumnLoop, spec: KernelSpec) -> str:
    kernel, walk = model.rows.kernel, model.walk
    columns, splits = spec.block_size_names[0], spec.block_size_names[1]
    taken = identifiers(kernel.source)
    parts = {a.name: fresh_name(f"{a.name}_parts", taken) for a in walk.accumulators}
    k = fresh_name("k", taken)
    source, masked = kernel.source, mask(kernel.source)
    line_start = source.rfind("\n", 0, walk.loop.start) + 1
    indent = re.match(r"[ \t]*", source[line_start:]).group()
    first = "threadIdx.y" if walk.start == "0" else f"({walk.start}) + ({walk.type})threadIdx.y"
    pragma = re.search(r"#[ \t]*pragma[ \t]+unroll[^\n]*\n\s*$", masked[:walk.loop.start])  # comments are blank
    loop_start = pragma.start() if pragma else walk.loop.start
    split = [(walk.loop.head[0], walk.loop.head[1],
              f"{walk.type} {walk.variable} = {first}; {walk.variable} < {walk.end}; {walk.variable} += {splits}")]
    split += [(loop_start, loop_start,
               f"if (threadIdx.y != 0) {a.name} = 0;  // threadIdx.y 0 alone carries what {a.name} holds into the "
               f"loop\n{indent}") for a in walk.accumulators if a.kind == "sum" and not a.zero_at_entry]
    # The walk ends at the loop: its part goes to shared memory, and what follows in the loop's block is left to
    # the combination (effects come only there, rows.py's _check_effects).
    enclosing_end = min((s.inner[1] for s, _ in walk_statements(masked, list(kernel.statements))
                         if s.kind == "block" and s.inner[0] <= walk.loop.start and walk.loop.end <= s.inner[1]),
                        default=kernel.body_end)
    kept_end = len(source[:enclosing_end].rstrip())  # the closing brace keeps its line
    split.append((walk.loop.end, max(walk.loop.end, kept_end),
                  "".join(f"\n{indent}{parts[a.name]}[threadIdx.y][threadIdx.x] = {a.name};"
                          for a in walk.accumulators)))
    combination = [f"{a.name} = {parts[a.name]}[0][threadIdx.x];" for a in walk.accumulators]
    if walk.accumulators:
        combination += [f"for (int {k} = 1; {k} < {splits}; {k}++) {{",
                        *(INDENT + line for a in walk.accumulators
                          for line in rows.combined(a, f"{parts[a.name]}[{k}][threadIdx.x]")),
                        "}"]
    combined = [(loop_start, walk.loop.end,
                 f"\n{indent}".join(combination) or ";")]
    lines = [*(f"__shared__ {a.type} {parts[a.name]}[{splits}][{columns}];" for a in walk.accumulators),
             *(points.definition(axis) for axis in kernel.axes),
             f"// The column's {splits} threads each walk every {splits}-th row, and put their parts in shared",
             "// memory.",
             "[&]() {",
             *(INDENT + line if line else line for line in points.point_body(kernel, split).split("\n")),
             "}();",
             "__syncthreads();  // every thread gets here, whatever its guards (they return from the walk)",
             "if (threadIdx.y != 0) return;",
             "// The column's first thread combines the parts in order of threadIdx.y and goes on alone.",
             *points.point_body(kernel, combined).split("\n")]
    return points.with_body(kernel, lines)


class ColumnLoopShape:
    name = "column_loop"
    kind = "a column loop of one thread per column"
    rules = ("split_columns",)

    def recognise(self, spec: KernelSpec) -> ColumnLoop:
        return recognise(spec)

    def reason(self, rule_id: str, model: ColumnLoop, spec: KernelSpec) -> str | None:
        return None

    def render(self, model: ColumnLoop, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        columns, splits = spec.block_size_names[0], spec.block_size_names[1]
        width = spec.params.get(columns, 256)
        part_bytes = sum(8 if a.type in ("double", "long long", "unsigned long long") else 4
                         for a in model.walk.accumulators)
        fitting = [s for s in SPLITS if not isinstance(width, int) or
                   width * s <= MAX_THREADS and part_bytes * width * s <= SHARED_BYTES] or SPLITS[:1]
        restrictions = [f"{columns} * {splits} <= {MAX_THREADS}"]
        if part_bytes:  # the parts' shared arrays within a block's static shared memory
            restrictions.append(f"{part_bytes} * {columns} * {splits} <= {SHARED_BYTES}")
        layout = Layout(tune_params={splits: SPLITS},
                        defaults={splits: default_in(fitting, spec.params.get(splits), min(8, fitting[-1]))},
                        restrictions=tuple(restrictions))
        return _render(model, spec), layout
