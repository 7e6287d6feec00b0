"""A nest of grid-stride loops, read as the kernel of one point per thread it stands for.

    for (int y = blockIdx.y * blockDim.y + threadIdx.y; y < rows; y += blockDim.y * gridDim.y)
        for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < cols; x += blockDim.x * gridDim.x)
            BODY

runs BODY once for each point of the box below (cols, rows), on whatever grid launches it. Where BODY depends on
the thread only through its indices (points.py checks that of the respelling), that is the kernel

    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (y < rows && x < cols) {
        BODY
    }

launched one thread per point along those axes, a `continue` of the innermost loop becoming `return`. The shapes
read that spelling, with that grid; a rewrite then launches the grid it chooses (engine.py gives the axes a
rendering leaves alone the reading's grid).

The respelling is exact or not made. It is made only where:
- the kernel's body is the nest alone, after integer locals of the launch geometry at most (`const int stride =
  blockDim.x * gridDim.x;`, or declared after the index in a loop's head), which only the loops' starts and steps
  read, or the thread's index along an axis no loop strides (a batch's row `b = blockIdx.y`, a column's x index);
  the nest may stand under a guard of those indices and parameters alone (`if (c >= cols) return;` before rows
  strided along y), which the point's guard then tests first, and after locals the guard declares (`const float b
  = bias[c];`), which each point declares again; each loop starts at the thread's index along its
  own axis (the loops and those indices together the axes x, then y, then z, in any order of nesting), steps by
  the grid's width along it, and runs while the index is below a bound;
- each bound is arithmetic of scalar arguments of given values, which the nest does not change: the new grid must
  reach every point the loops reach, so it is launched over the spec's problem size where that covers the bound
  at the spec's sizes and at sizes around them (each size one less or one more, as verification trials take
  them), else over the bound itself (a fixed grid, launched whatever the sizes). Along y and z that grid must
  also stay within CUDA's 65535 blocks at the smallest block size the spec tunes;
- BODY leaves the nest no other way (no return, which ends the whole nest, and no break of a grid-stride loop),
  and holds no preprocessor directive but a pragma, nor a macro of the source, whose text is not read here;
- the points are independent, as one point per thread runs them: a thread runs its grid-stride points one after
  another, and a small grid can make a kernel rely on that order (a column summed by one thread), so each array
  BODY writes is written at an element of its own point (its subscript moves with every index, at the spec's
  values too) and read only there, and BODY changes nothing else but its own locals (points.hidden_effects: no
  alias, dereference, static, call of a function of the source, or atomic whose result it reads).
"""
import math
import re
import textwrap
from dataclasses import dataclass

from services.generator.rules import affine, points
from services.generator.rules.coverage import GRID_LIMIT, launched_for, values_around
from services.generator.rules.cuda_text import (INTEGER_TYPE, WIDE_INTEGER_TYPE, constant_macros, defined_macros,
                                                find_kernel, mask, outside_brackets, split_top_level,
                                                unparenthesised)
from services.generator.rules.statements import Statement, Unparsed, statements, walk
from shared.domain.expressions import ExpressionError, evaluate
from shared.domain.spec import KernelSpec

_INIT = re.compile(rf"\s*(?P<type>(?:const\s+)?{INTEGER_TYPE})\s+(?P<index>[A-Za-z_]\w*)\s*=(?P<start>.*)", re.DOTALL)
_LOCALS = re.compile(rf"\s*(?:const\s+)?{INTEGER_TYPE}\s+(?P<declarators>[^;]*);\s*")
_ONE_LOCAL = re.compile(rf"\s*(?:const\s+)?(?P<type>{INTEGER_TYPE})\s+(?P<name>[A-Za-z_]\w*)\s*=(?P<init>[^;,]*);\s*")
_LAUNCH = {f"{v}.{a}" for v in ("threadIdx", "blockIdx", "blockDim", "gridDim") for a in "xyz"}
_HOISTED = re.compile(rf"\s*(?:const\s+)?(?:{INTEGER_TYPE}|float|double)\s+(?P<name>[A-Za-z_]\w*)\s*=(?!=)"
                      rf"(?P<init>[^;,]*);\s*")


@dataclass(frozen=True)
class _Loop:
    statement: Statement
    axis: int
    type: str  # the index's declared type, const kept
    index: str
    start: str  # the thread's first index, without the locals before the nest
    bound: str  # as written, comments removed


def point_form(spec: KernelSpec) -> KernelSpec | None:
    """The spec with its grid-stride nest respelt as one point per thread, launched so; None where the kernel is
    not such a nest or the respelling could differ."""
    try:
        kernel = find_kernel(spec.source, spec.kernel_name)
        masked = mask(spec.source)
        *setup, outer = statements(masked, kernel.body_open + 1, kernel.body_close)
        known = _launch_locals(setup, masked)
        nest, tested, hoisted = _under_its_guard(masked, outer)
        if nest.kind != "for" or known is None or _unread_text(masked, kernel.body_open, kernel.body_close):
            return None
        loops, inner = _nest(spec, masked, nest, known)
    except (Unparsed, ValueError):
        return None
    text = masked[outer.start:outer.end]
    rows = _row_indices(spec, setup, masked, {loop.axis for loop in loops})
    axes = sorted([loop.axis for loop in loops] + [axis for axis, _ in rows.values()])
    if not loops or axes[:len(set(axes))] != list(range(len(set(axes)))) or len(set(axes)) != len(axes) or \
            any(re.search(rf"\b{name}\b", masked[inner.start:inner.end] + " ".join(loop.bound for loop in loops) +
                          " ".join(masked[start:end] for _, (start, end) in hoisted))
                for name in set(known) - set(rows)) or \
            tested is not None and not set(re.findall(r"[A-Za-z_]\w*", tested)) <= set(rows) | set(
                points.parameters_of(spec.source, kernel)) or \
            (jumps := _continues(masked, inner)) is None or (launched := _launched(spec, loops, text)) is None or \
            any(re.search(points.changing(name), masked[inner.start:inner.end]) or
                points.address_taken(masked[inner.start:inner.end], name) for name, _ in hoisted):
        return None
    guard = " && ".join([*([_conjunct(tested)] if tested else []),
                         *(f"{loop.index} < {_operand(loop.bound)}" for loop in loops)])
    span = inner.inner if inner.kind == "block" else (inner.start, inner.end)
    body = points.replace_spans(spec.source[:span[1]], [(at, at + len("continue"), "return") for at in jumps])
    body = textwrap.dedent(body[span[0]:].strip("\n").rstrip())
    uncommented = mask(spec.source, literals=False)
    values = [" ".join(uncommented[start:end].split()) for _, (start, end) in hoisted]
    lines = [*(f"{loop.type} {loop.index} = {loop.start};" for loop in loops), *(d for _, d in rows.values()),
             f"if ({guard}) {{", *(points.INDENT + value for value in values),
             textwrap.indent(body, points.INDENT), "}"]
    first = setup[0].start if setup else outer.start
    source = spec.source[:first] + textwrap.indent("\n".join(lines), points.INDENT).lstrip() + \
        spec.source[outer.end:]
    grid = {f"grid_div_{'xyz'[loop.axis]}": [spec.block_size_names[loop.axis]] for loop in loops}
    pointed = spec.model_copy(update={"source": source, "problem_size": launched, **grid})
    return pointed if _independent(pointed, {loop.index for loop in loops}) else None


def _row_indices(spec: KernelSpec, setup: list[Statement], masked: str,
                 looped: set[int]) -> dict[str, tuple[int, str]]:
    """The locals before the nest that are the thread's index along an axis no loop strides (`const int b =
    blockIdx.y;` in blocks one thread deep along y: a batch's row; a column's x index beside rows strided along
    y), each declared alone, by name with its axis and declaration: the point body may read them, as a point
    kernel reads its indices."""
    found = {}
    for statement in setup:
        declared = _ONE_LOCAL.fullmatch(masked, statement.start, statement.end)
        axis = declared and points.thread_index_axis(declared["init"], spec)
        if axis and axis[0] not in looped:
            found[declared["name"]] = (axis[0], f"{declared['type'].strip()} {declared['name']} = "
                                                f"{declared['init'].strip()};")
    return found


def _under_its_guard(masked: str, statement: Statement) -> tuple[Statement, str | None,
                                                                  list[tuple[str, tuple[int, int]]]]:
    """The nest; the condition of a guard around it (`if (c < cols) for (...) ...`, an early return on the
    thread's index read as the guard it means), or None without one; and the locals the guard declares before the
    nest, each one of arithmetic type with a value (`float b = bias[c];`), by name with its statement's span. Each
    point computes those again: the same value where nothing changes what they read, which the points'
    independence (each array the body writes read only where written) and their unchanged names make sure of."""
    if statement.kind != "if" or statement.orelse is not None:
        return statement, None, []
    inside, hoisted = statement.body, []
    if inside.kind == "block":
        *before, last = inside.children(masked) or [inside]
        for local in before:
            declared = _HOISTED.fullmatch(masked, local.start, local.end) if local.kind == "simple" else None
            if declared is None or re.search(r"\+\+|--|(?<![=!<>])=(?!=)", declared["init"]):
                return statement, None, []
            hoisted.append((declared["name"], (local.start, local.end)))
        inside = last
    return inside, masked[statement.head[0]:statement.head[1]], hoisted


def _independent(spec: KernelSpec, indices: set[str]) -> bool:
    """Whether the points may run in any order, at once: the point body is one points.py reads, each array it
    writes is written at a subscript that reads every loop index and read only where written, and it changes
    nothing else but its own locals (points.hidden_effects). A thread runs its grid-stride points one after
    another, which a small grid can make a kernel rely on (a column summed by one thread)."""
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel:
        return False
    written: dict[str, list[affine.Poly]] = {}
    values = _scalar_values(spec)
    for access in kernel.accesses:
        if access.write:
            if access.poly is None or not indices <= affine.names(access.poly) or \
                    any(affine.value(affine.stride(access.poly, index), values) == 0 for index in indices):
                return False  # a subscript that may not move with a point (`a[r * incx + c]`, incx given as 0)
            written.setdefault(access.array, []).append(access.poly)
    if any(a.array in written and a.poly not in written[a.array] for a in kernel.accesses if not a.write):
        return False
    return points.changed_parameter(kernel) is None and points.hidden_effects(kernel) is None


def _scalar_values(spec: KernelSpec) -> dict[str, float]:
    """The value of each scalar argument at the spec's sizes, where it evaluates."""
    variables, found = spec.variables(spec.baseline_params()), {}
    for arg in spec.args:
        if not arg.is_array and arg.value is not None:
            try:
                found[arg.name] = evaluate(arg.value, variables)
            except ExpressionError:
                continue
    return found


def _unread_text(masked: str, start: int, end: int) -> bool:
    """Whether the body holds what this module does not read: a directive other than a pragma, or a macro of the
    source other than a constant (whose text, a `return` say, is not seen here)."""
    body = masked[start:end]
    macros = defined_macros(masked) - constant_macros(masked)
    return bool(re.search(r"^[ \t]*#[ \t]*(?!pragma\b)\w", body, re.M)) or \
        any(re.search(rf"\b{name}\b", body) for name in macros)


def _launch_locals(setup: list[Statement], masked: str) -> dict[str, affine.Poly] | None:
    """The integer locals declared before the nest, each of the launch geometry alone, as polynomials; None when a
    statement is anything else."""
    known: dict[str, affine.Poly] = {}
    for statement in setup:
        declared = _LOCALS.fullmatch(masked, statement.start, statement.end) if statement.kind == "simple" else None
        if declared is None:
            return None
        for declarator in split_top_level(declared["declarators"], ","):
            local = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(.*)", declarator, re.DOTALL)
            poly = None if local is None else affine.reading_only(local[2], known, _LAUNCH)
            if poly is None:
                return None
            known[local[1]] = poly
    return known


def _nest(spec: KernelSpec, masked: str, loop: Statement,
          known: dict[str, affine.Poly]) -> tuple[list[_Loop], Statement]:
    """The grid-stride loops nested from `loop`, outermost first, and the statement the innermost runs."""
    found: list[_Loop] = []
    statement = loop
    while statement.kind == "for" and (read := _grid_stride(spec, masked, statement, known)) is not None:
        found.append(read)
        statement = statement.body
        if statement.kind == "block" and len(children := statement.children(masked)) == 1 and \
                children[0].kind == "for":
            statement = children[0]
    return found, statement


def _grid_stride(spec: KernelSpec, masked: str, loop: Statement, known: dict[str, affine.Poly]) -> _Loop | None:
    """`for (T i = <thread index along an axis>; i < BOUND; i += <the grid's width along it>)`, read; else None."""
    parts = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
    if len(parts) != 3:
        return None
    init, condition, step = parts
    declared = _INIT.fullmatch(init)
    if declared is None:
        return None
    first, *more = split_top_level(declared["start"], ",")
    for declarator in more:  # `int i = ..., stride = blockDim.x * gridDim.x`: locals of the launch geometry
        local = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(.*)", declarator, re.DOTALL)
        poly = None if local is None else affine.reading_only(local[2], known, _LAUNCH)
        if poly is None:
            return None
        known[local[1]] = poly
    index = declared["index"]
    found = points.thread_index_axis(first, spec, known)
    bound = re.fullmatch(rf"\s*{index}\s*<(?P<bound>[^<>=!&|?,]+)", condition)
    increment = re.fullmatch(rf"\s*{index}\s*\+=(?P<step>[^,]+)", step)
    if found is None or bound is None or increment is None:
        return None
    axis, width = found
    letter = "xyz"[axis]
    widths = {tuple(sorted((width, f"gridDim.{letter}")))}
    alone = affine.parse(first, known) == {(f"blockIdx.{letter}",): 1}
    if alone:
        widths.add((f"gridDim.{letter}",))  # blockIdx.z alone, over blocks one thread deep, steps by gridDim.z
    try:
        stride = affine.parse(increment["step"], known)
    except affine.NotAffine:
        return None
    if list(stride.values()) != [1] or next(iter(stride)) not in widths:
        return None
    kind = " ".join(declared["type"].split())
    wide = f"({kind.removeprefix('const ')})" if re.fullmatch(WIDE_INTEGER_TYPE, kind.removeprefix("const ")) else ""
    start = f"{wide}blockIdx.{letter}" + ("" if alone else f" * {width} + threadIdx.{letter}")
    bound_at = loop.head[0] + len(init) + 1 + bound.start("bound")
    return _Loop(loop, axis, kind, index, start,
                 " ".join(mask(spec.source, literals=False)[bound_at:bound_at + len(bound["bound"])].split()))


def _continues(masked: str, inner: Statement) -> list[int] | None:
    """Where the innermost body continues its grid-stride loop (each becomes a return: the point is done); None
    where it leaves the nest otherwise: a return, goto or throw, or a break of a grid-stride loop."""
    if re.search(r"\b(?:return|goto|throw|longjmp)\b", masked[inner.start:inner.end]):
        return None
    nested = [s for s, _ in walk(masked, [inner]) if s.kind in ("for", "while", "do", "switch")]
    found = []
    for jump in re.finditer(r"\b(break|continue)\b", masked[inner.start:inner.end]):
        at, kinds = inner.start + jump.start(), ("for", "while", "do", "switch")[:3 + (jump[1] == "break")]
        if not any(s.kind in kinds and s.body.start <= at < s.body.end for s in nested):
            if jump[1] == "break":
                return None
            found.append(at)
    return found


def _launched(spec: KernelSpec, loops: list[_Loop], nest: str) -> list[str] | None:
    """The problem size one point per thread is launched over: the spec's, where it counts the grid's threads (the
    grid divided by the block size alone, the problem size of the spec's sizes) and covers each loop's bound
    (bound_covered); else, along a loop's axis, the bound itself in the spec's sizes (a grid-stride loop launched on
    a fixed grid, `problem_size: [1024]` blocks with `grid_div_x: []`, runs every point below its bound whatever
    that grid; review, helper-91: 1,024 read as threads skipped the points past them). None where a bound is not
    arithmetic of scalar arguments of given values or the nest changes it, where the spec names no block size for
    a loop's axis, or where at the spec's sizes or around them the grid would be empty or pass CUDA's 65535 blocks
    along y or z."""
    dims = spec.dimensions
    for loop in loops:
        if loop.axis >= len(spec.block_size_names) or \
                any(re.search(points.changing(name), nest) for name in re.findall(r"[A-Za-z_]\w*", loop.bound)) or \
                (launched := launched_for(spec, loop.axis, loop.bound)) is None:
            return None
        dims[loop.axis] = launched[loop.axis]
        extents = values_around(spec, dims[loop.axis])
        if extents is None or min(extents) < 1 or \
                loop.axis and math.ceil(max(extents) / smallest_block(spec, loop.axis)) > GRID_LIMIT:
            return None
    return dims


def smallest_block(spec: KernelSpec, axis: int) -> int:
    """The smallest block size the spec tunes along the axis (its value where it is not tuned)."""
    name = spec.block_size_names[axis]
    values = [v for v in spec.tune_params.get(name, []) if isinstance(v, int)]
    return max(1, min(values or [int(spec.baseline_params().get(name, 1))]))


def _conjunct(condition: str) -> str:
    """The condition as a conjunct of a chain of &&: parenthesised unless it is one such chain already."""
    bare = " ".join(unparenthesised(condition).split())
    return bare if not re.search(r"\|\||\?|,|=(?!=)(?<![<>!=]=)", outside_brackets(bare)) else f"({bare})"


def _operand(bound: str) -> str:
    return bound if re.fullmatch(r"[A-Za-z_]\w*|\d+", bound) else f"({bound})"
