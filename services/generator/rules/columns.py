"""Column-wise loops of one thread per column (column sums, means, maxima or norms of a row-major matrix),
restructured so that block_size_y threads split each column's loop.

Recognised: a kernel rows.py reads as loops of one point per thread (rows.loops_of_one_point: accumulators, effects
and stores as its docstring says), with a single loop, which reads an array contiguously along the point's index
(neighbouring threads read neighbouring addresses) at an address that moves with the loop's: a thread walking
its column down the rows. Its loads are coalesced already, but a matrix of a few thousand columns gives the GPU a
few thousand threads, each waiting on one load at a time: on the H100 a 2,048 x 4,096 column sum ran at 7% of a
device copy of its bytes, and at 68% with its rows split 32 ways (83% with batch_loads' passes of 16 rows too).

Rendered: a block of block_size_x x block_size_y threads. The block_size_y threads of a column (one threadIdx.x)
run the point body as written, except that they split its loop: the index starts block_size_y apart, at START +
threadIdx.y, and steps block_size_y. A sum that does not enter the loop at zero enters it at zero in every thread
but threadIdx.y == 0. After the loop each thread puts its accumulators in shared memory and counts itself in at
its column's count; the last of the column's threads to arrive combines their partial results in the order of
threadIdx.y and goes on with the column alone, and the others leave. Nothing in the column's code waits at a
barrier, which threads of the block's other columns may have left (the one barrier, first in the kernel, follows
the clearing of the counts), and the point body, as a point kernel's, reads no thread geometry and uses no
barrier, shuffle or shared memory (points.py), so a column's threads all run it alike. Partial sums are added in another order (within float rounding); a maximum or minimum
is the same in any order (a NaN aside, as in rows.py).
"""
import re
from dataclasses import dataclass

from services.generator.rules import affine, points, rows
from services.generator.rules.cuda_text import fresh_name, identifiers, mask
from services.generator.rules.points import INDENT
from services.generator.rules.rows import Accumulator, RowLoop, RowPass
from services.generator.rules.shape import Layout, NotRecognised, default_in
from shared.domain.spec import KernelSpec

SPLITS = [2, 4, 8, 16, 32]
MAX_THREADS = 1024


@dataclass(frozen=True)
class ColumnLoop:
    rows: RowLoop  # the loop as rows.py reads it; its one pass walks the column

    @property
    def walk(self) -> RowPass:
        return self.rows.passes[0]


def recognise(spec: KernelSpec) -> ColumnLoop:
    model = rows.loops_of_one_point(spec)
    kernel = model.kernel
    if len(model.passes) != 1:
        raise NotRecognised("it walks its column in several loops; a column split combines its threads' results "
                            "once, after one loop")
    walk = model.passes[0]
    j = kernel.axes[0].name
    inside = [a for a in kernel.accesses if walk.loop.body.start <= a.start < walk.loop.body.end
              and a.poly is not None and not a.write]
    if not any(affine.is_unit(affine.stride(a.poly, j)) and affine.stride(a.poly, walk.variable) for a in inside):
        raise NotRecognised(f"its loop reads no array contiguously along {j} at an address that moves with "
                            f"{walk.variable}, so it does not walk columns side by side")
    return ColumnLoop(model)


def _render(model: ColumnLoop, spec: KernelSpec) -> str:
    kernel, walk = model.rows.kernel, model.walk
    columns, splits = spec.block_size_names[0], spec.block_size_names[1]
    taken = identifiers(kernel.source)
    arrived = fresh_name("arrived", taken)
    parts = {a.name: fresh_name(f"{a.name}_parts", taken) for a in walk.accumulators}
    k = fresh_name("k", taken)
    source = kernel.source
    line_start = source.rfind("\n", 0, walk.loop.start) + 1
    indent = re.match(r"[ \t]*", source[line_start:]).group()
    first = "threadIdx.y" if walk.start == "0" else f"({walk.start}) + ({walk.type})threadIdx.y"
    replacements = [(walk.loop.head[0], walk.loop.head[1],
                     f"{walk.type} {walk.variable} = {first}; {walk.variable} < {walk.end}; "
                     f"{walk.variable} += {splits}")]
    resets = [f"if (threadIdx.y != 0) {a.name} = 0;  // threadIdx.y 0 alone carries what {a.name} holds into the "
              f"loop" for a in walk.accumulators if a.kind == "sum" and not a.zero_at_entry]
    if resets:
        replacements.append((walk.loop.start, walk.loop.start, "".join(f"{line}\n{indent}" for line in resets)))
    after = []
    if walk.accumulators or re.search(r"[^\s}]", mask(source)[walk.loop.end:kernel.body_end]):
        names = ", ".join(a.name for a in walk.accumulators)
        after += ([f"// The column's {splits} threads each hold part of {names}: the last to arrive combines",
                   "// the parts in order and goes on alone."] if names else
                  [f"// The last of the column's {splits} threads to finish its loop goes on alone."])
        after += [*(f"{parts[a.name]}[threadIdx.y][threadIdx.x] = {a.name};" for a in walk.accumulators),
                  "__threadfence_block();",
                  f"if (atomicAdd(&{arrived}[threadIdx.x], 1u) != {splits} - 1) return;",
                  "__threadfence_block();",
                  *(f"{a.name} = {parts[a.name]}[0][threadIdx.x];" for a in walk.accumulators)]
        if walk.accumulators:
            after += [f"for (int {k} = 1; {k} < {splits}; {k}++) {{",
                      *(INDENT + line for a in walk.accumulators
                        for line in _combined(a, f"{parts[a.name]}[{k}][threadIdx.x]")),
                      "}"]
    rest_of_line = re.match(r"[ \t]*(?:\n|$)", source[walk.loop.end:]) is None  # a line comment must not take it
    replacements.append((walk.loop.end, walk.loop.end, "".join(f"\n{indent}{line}" for line in after) +
                         (f"\n{indent}" if after and rest_of_line else "")))
    body = points.point_body(kernel, replacements)
    lines = [f"// {splits} threads per column split its loop, so more of its loads are in flight at once.",
             f"__shared__ unsigned int {arrived}[{columns}];",
             *(f"__shared__ {a.type} {parts[a.name]}[{splits}][{columns}];" for a in walk.accumulators),
             f"if (threadIdx.y == 0) {arrived}[threadIdx.x] = 0u;",
             "__syncthreads();",
             *(points.definition(axis) for axis in kernel.axes),
             *body.split("\n")]
    return points.with_body(kernel, lines)


def _combined(accumulator: Accumulator, part: str) -> list[str]:
    name = accumulator.name
    if accumulator.kind == "sum":
        return [f"{name} += {part};"]
    if accumulator.function is not None:
        return [f"{name} = {accumulator.function}({name}, {part});"]
    keeps = ">" if accumulator.kind == "max" else "<"
    return [f"if ({part} {keeps} {name}) {name} = {part};"]


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
        fitting = [s for s in SPLITS if not isinstance(width, int) or width * s <= MAX_THREADS] or SPLITS[:1]
        layout = Layout(tune_params={splits: SPLITS},
                        defaults={splits: default_in(fitting, spec.params.get(splits), min(8, fitting[-1]))},
                        restrictions=(f"{columns} * {splits} <= {MAX_THREADS}",))
        return _render(model, spec), layout
