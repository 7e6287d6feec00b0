"""Transpose-like kernels, restructured around a shared-memory tile.

Recognised: a 2D (or 3D, launched one thread deep along z) kernel of one point per thread
(services/generator/rules/points.py) whose point body
stores one value, `OUT[W] = VALUE;`, where W moves by 1 along y but by more along x (neighbouring threads write
a row apart), while every load in VALUE moves by 1 (or 0) along x (neighbouring threads read neighbours). The
loads are coalesced, the store is not. Or the reverse, as a transpose is as often written (`out[y * w + x] =
in[x * h + y]`): W moves by 1 along x and by more along y, and the loads by 1 (or 0) along y, one by more along x.
The rewrite runs the point body twice per point, so the store is made outside any loop of it, and the body changes
no parameter and nothing but its own locals besides (points.hidden_effects).

Rendered: a block of block_size_x x block_size_y threads handles a block_size_x x block_size_x tile. First
each thread runs the point body for the points (x0 + threadIdx.x, y0 + j), j stepping by block_size_y, with the
store replaced by one into tile[y - y0][x - x0]: threads along x load along x. After a barrier it runs the
point body for the points (x0 + j, y0 + threadIdx.x) with VALUE replaced by tile[y - y0][x - x0]: threads along
x now store along y, where W is contiguous. Each point is still computed once, by the same point body with the
same guard, so the results are identical; the tile's extra column keeps both passes free of bank conflicts. For
the reverse, the passes swap: threads along x load the points (x0 + j, y0 + threadIdx.x), reading along y, and
store the points (x0 + threadIdx.x, y0 + j), writing along x.
"""
import re
from dataclasses import dataclass

from services.generator.rules import affine, points
from services.generator.rules.cuda_text import fresh_name, identifiers, mask, split_top_level
from services.generator.rules.points import Access, PointKernel
from services.generator.rules.shape import Layout, NotRecognised, block_widths, one_thread_per_point
from services.generator.rules.statements import walk
from shared.domain.spec import KernelSpec

TILE_SIZES, ROW_COUNTS = [16, 32, 64], [2, 4, 8, 16]


@dataclass(frozen=True)
class Transposed:
    kernel: PointKernel
    store: Access  # OUT[W]
    value: tuple[int, int]  # the span of VALUE in the source
    element: str  # OUT's element type
    load_side: bool = False  # the loads strided along x and the store contiguous along it: the tile's passes swap
    value_locals: tuple[tuple[int, int], ...] = ()  # the spans of `T v = load;` statements only VALUE reads


def recognise(spec: KernelSpec) -> Transposed:
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel as exc:
        raise NotRecognised(str(exc)) from None
    if len(kernel.axes) < 2 or len(spec.block_size_names) < 2:
        raise NotRecognised("a transpose has at least two indices (x and y) and block sizes for both")
    for axis in (0, 1):
        # The tiles round the grid up to whole tiles: points past the ones the submitted grid covers must stop at a
        # guard of their own (review, helper-82: a transpose guarding nothing read and wrote past its arrays).
        if (why := one_thread_per_point(spec, axis) or points.unbounded(kernel, axis, spec)) is not None:
            raise NotRecognised(why)
    if any(len(block_widths(spec, axis)) > 1 for axis in (0, 1)):
        raise NotRecognised("a restriction ties another parameter to its block size, which the tile sets")
    if len(kernel.axes) == 3 and not points.one_thread_along(spec, 2):
        raise NotRecognised("its blocks may be more than one thread deep along z, and those threads would share "
                            "one tile")
    masked = mask(spec.source)
    if re.search(r"\batomic\w*\s*\(", masked[kernel.body_start:kernel.body_end]):
        raise NotRecognised("it uses atomics")
    stores = [a for a in kernel.accesses if a.write]
    if len(stores) != 1:
        raise NotRecognised(f"it makes {len(stores)} stores; a transpose makes one plain store (`out[w] = value;`)")
    if not stores[0].plain_store:
        raise NotRecognised("its store is not a plain one (`out[w] = value;`, not `+=` or the like), as a "
                            "transpose's is")
    store = stores[0]
    own = points.own_statement(kernel, masked, store)
    if own is None:
        raise NotRecognised("its store is not a statement of its own")
    statement, loops = own
    if loops:
        raise NotRecognised("its store is made in a loop, which the tile would run whole in each of its passes")
    if (why := points.changed_parameter(kernel) or points.hidden_effects(kernel)) is not None:
        raise NotRecognised(f"{why}; the tile runs the point body twice, in its two passes")
    equals = masked.index("=", store.end)
    value = (equals + 1, masked.rindex(";", 0, statement.end))
    x, y = kernel.axes[0].name, kernel.axes[1].name
    reads = [a for a in kernel.accesses if not a.write and not (store.start <= a.start < store.end)]
    loaded = [(a, _value_local(kernel, masked, a, value)) for a in reads if not value[0] <= a.start < value[1]]
    outside = [a for a, statement in loaded if statement is None]
    if outside:
        raise NotRecognised(f"it reads {outside[0].array}[{outside[0].subscript}] outside the value it stores, "
                            f"and not into a local only the value reads")
    if _strided_along(store, x, y):
        if not _coalesced_along(reads, x):
            raise NotRecognised(f"its loads do not move by one along {x}, so a tile would not make them coalesced")
        load_side = False
    elif _strided_along(store, y, x) and _coalesced_along(reads, y) and \
            any(_strided_along(a, x, y) for a in reads):
        load_side = True  # out[y * w + x] = in[x * h + y]: the tile makes the loads coalesced
    else:
        raise NotRecognised(f"its store {store.array}[{store.subscript}] does not move by one along {y} and by more "
                            f"along {x}, nor along {x} against loads moving by one along {y}")
    element = kernel.array_types.get(store.array)
    if element is None:
        raise NotRecognised(f"it stores into {store.array}, which is not a pointer parameter")
    return Transposed(kernel, store, value, element, load_side, tuple(sorted({statement for _, statement in loaded})))


def _value_local(kernel: PointKernel, masked: str, access: Access, value: tuple[int, int]) -> tuple[int, int] | None:
    """The span of the statement declaring a local whose initialiser holds the read, where the local is declared
    once, in a statement of its own outside any loop (`float v = in[i];`), and nothing but the stored value reads
    it; else None. The storing pass, its value replaced by the tile's element, leaves that statement out."""
    statement = next((s for s, loops in walk(masked, list(kernel.statements))
                      if s.kind == "simple" and s.start <= access.start < s.end and not loops), None)
    declared = statement and re.match(r"\s*(?:const\s+)?[A-Za-z_][\w:]*(?:\s+[A-Za-z_][\w:]*)*\s+([A-Za-z_]\w*)\s*=",
                                      masked[statement.start:statement.end])
    # one declarator (every other mention of the name, a second declaration or an assignment among them, must lie
    # in VALUE below); declared_once would read `s * v;` in VALUE as a pointer v declared
    if not declared or len(split_top_level(masked[statement.start:statement.end], ",")) > 1:
        return None
    uses = [m.start() for m in re.finditer(rf"\b{declared[1]}\b", masked[:kernel.body_end])
            if m.start() >= kernel.body_start and not statement.start <= m.start() < statement.end]
    return (statement.start, statement.end) if uses and all(value[0] <= at < value[1] for at in uses) else None


def _whole_lines(source: str, span: tuple[int, int]) -> tuple[int, int, str]:
    """The replacement leaving out the statement at `span`, with its line where it is alone on it."""
    start, end = span
    before, after = source.rfind("\n", 0, start), source.find("\n", end)
    if source[before + 1:start].strip() or (after >= 0 and source[end:after].strip()):
        return start, end, ""
    return before + 1, (after + 1 if after >= 0 else end), ""


def _strided_along(access: Access, strided: str, unit: str) -> bool:
    """Whether the access moves by one along `unit` and by more along `strided`."""
    if access.poly is None:
        return False
    along = affine.stride(access.poly, strided)
    return affine.is_unit(affine.stride(access.poly, unit)) and along is not None and bool(along) and \
        not affine.is_unit(along)


def _coalesced_along(reads: list[Access], axis: str) -> bool:
    """Whether every load moves by one or not at all along the axis, and one moves by one."""
    strides = [affine.stride(a.poly, axis) if a.poly is not None else None for a in reads]
    return all(s is not None and (not s or affine.is_unit(s)) for s in strides) and \
        any(affine.is_unit(s) for s in strides)


def _render(model: Transposed, spec: KernelSpec) -> str:
    kernel = model.kernel
    side, rows = spec.block_size_names[0], spec.block_size_names[1]
    ax, ay = kernel.axes[0], kernel.axes[1]
    taken = identifiers(kernel.source)
    tile, x0, y0, j, load, store = (fresh_name(n, taken) for n in ("tile", "x0", "y0", "j", "load", "store"))
    at = f"{tile}[{ay.name} - {y0}][{ax.name} - {x0}]"
    along_x, along_y = f"{x0} + threadIdx.x, {y0} + {j}", f"{x0} + {j}, {y0} + threadIdx.x"  # threads along x, y
    loading = points.point_body(kernel, [(model.store.start, model.store.end, at)])
    storing = points.point_body(kernel, [(model.value[0], model.value[1], f" {at}"),
                                         *(_whole_lines(kernel.source, span) for span in model.value_locals)])
    first, then = ("y", "x") if model.load_side else ("x", "y")
    lines = [f"// A shared-memory tile: the block first loads a tile with threads along x reading along {first}, "
             f"where the input",
             f"// is contiguous, then stores it with threads along x writing along {then}, where the output is. "
             f"One column of",
             "// padding keeps both passes free of shared-memory bank conflicts.",
             f"__shared__ {model.element} {tile}[{side}][{side} + 1];",
             *(points.definition(a) for a in kernel.axes[2:]),
             f"const {ax.type} {x0} = ({ax.type})blockIdx.x * {side};",
             f"const {ay.type} {y0} = ({ay.type})blockIdx.y * {side};",
             *points.lambda_of(load, [ax, ay], loading),
             *points.lambda_of(store, [ax, ay], storing),
             f"for (int {j} = threadIdx.y; {j} < {side}; {j} += {rows}) {{",
             f"    {load}({along_y if model.load_side else along_x});",
             "}",
             "__syncthreads();",
             f"for (int {j} = threadIdx.y; {j} < {side}; {j} += {rows}) {{",
             f"    {store}({along_x if model.load_side else along_y});",
             "}"]
    return points.with_body(kernel, lines)


class TransposedShape:
    name = "transposed"
    kind = "a transpose-like kernel (a strided store of coalesced loads, or strided loads of a coalesced store)"
    rules = ("shared_tile",)

    def recognise(self, spec: KernelSpec) -> Transposed:
        return recognise(spec)

    def reason(self, rule_id: str, model: Transposed, spec: KernelSpec) -> str | None:
        return None

    def render(self, model: Transposed, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        side, rows = spec.block_size_names[0], spec.block_size_names[1]
        layout = Layout(tune_params={side: TILE_SIZES, rows: ROW_COUNTS},
                        defaults={side: 32, rows: 8}, restrictions=(f"{rows} <= {side}",),
                        grid_div={"x": [side], "y": [side]})
        return _render(model, spec), layout
