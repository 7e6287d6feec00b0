"""Window sums (2D convolutions, correlations, filters): each thread computes a 4 x window_rows patch of outputs
from a window of its input held in registers.

Recognised: a 2D kernel of one point per thread (services/generator/rules/points.py) whose point body declares an
accumulator, `T SUM = INIT;`, and then adds a window into it with two loops of its own:

    for (int i = I0; i < I1; i++)        (or i <= I1, as for a window centred on the point, from -r to r)
        for (int j = J0; j < J1; j++)
            SUM += EXPR;

and nothing else in them but locals and guards (window_nest.py: a zero-padded or clamped window adds EXPR where
its guards hold), where EXPR reads the input at `IN[(y + i) * P + x + j + OFFSET]` (any spelling the index
arithmetic parses to: one along x and j, the same pitch P along y and i, P and OFFSET made of parameters),
directly or through __ldg, and otherwise only the loop variables, parameters, locals of parameters alone and const
local arrays (declared again in the registers' code), and names the kernel does not declare (a __constant__
filter). The starts and bounds are made of literals, integer scalar parameters and locals of those alone; a
parameter they name is specialised to its value at the spec's sizes, as a library specialises a convolution for
its filter size. Where guards hold, the registers serve a thread whose patch's points and window offsets make a
box at whose 16 corners every guard holds; its other threads run the point body as written. A count of the taps
kept beside the update (`count++;`: a mean over the taps inside the image) ends, where every point adds its whole
window, at its start plus a step per tap; whole numbers below 2^24, so as exact added at once as one by one.

Rendered: each thread owns the points (x0 + c, y0 + r), c < 4, r < window_rows. Where the bounds have the spec's
values and every one of its points reaches the window loops, the thread reads each input row it needs once, a
128-bit vector at a time where aligned, into registers, and adds every point's window from there in the
original order (i, then j): the same operations on the same values, so the same sums. Where a padded window
chose its whole term by a ternary (`sum += inside ? a * b : 0.0f`), the kernel rounded the product before adding
it, so the registers add it with __fadd_rn, which NVRTC fuses into nothing (review, helper-99: the product fused
into an FMA differed in half the points on the H200). A choice inside the term (`w * (inside ? v : 0.0f) + c`)
is not kept apart so: there NVRTC may fuse differently than in the kernel, a rounding per term, which the
verifier's tolerance takes; the CPU emulation, which fuses nothing, cannot tell. Each point then runs the
rest of its body with SUM set to its sum. Any other thread (an edge, another filter size) has its points run by
the point body as written, dealt out among the lanes of its warp with the other such threads' points, so that one
edge thread does not hold 31 idle lanes for its whole patch; and the rows of blocks start from both ends of the
grid, so the bottom edge's slower blocks do not end the launch. Reading a row once for four outputs is what lifts a
convolution from L1 traffic to DRAM bandwidth (on the H100, 3.0x over the submitted conv2d, 1.8 TB/s, with k = 5).

Where the rest of the body writes memory only by one plain store, `OUT[I] = E;`, as its last deed, each point's
rest records its store instead (the value, E converted as the store converts it, then the address), and the
row's stores are then issued together: one 128-bit vector where the four lie side by side, aligned, and the
element has a vector of four, else one after another. The points of a thread were threads of their own in the
submitted kernel, so no point may read what another one stores: recording a store changes no value. What it
changes is the L2's work: a row's four 4-byte stores interleaved with its points' other code reached the L2 as
separate partial writes of the same sectors (on the H100, 3.5 million sectors written for box_blur's 33 MB, 61%
of the copy), where stores issued together wrote 1.3 million (the rule now reaches 85-86%).
"""
import ast
import math
import operator
import re
from dataclasses import dataclass

from services.generator.rules import affine, loops, points, window_nest
from services.generator.rules.cuda_text import fresh_name, identifiers, mask
from services.generator.rules.points import INTEGER_TYPE, Access, Axis, PointKernel
from services.generator.rules.reduction import TYPE_WORDS
from services.generator.rules.rows import ACCUMULATOR_TYPES
from services.generator.rules.shape import Layout, NotRecognised, one_thread_per_point
from services.generator.rules.statements import Statement
from shared.domain.spec import KernelSpec

COLUMNS = 4  # the points along x a thread owns: one 128-bit vector of 4-byte elements
ROWS, ROW_VALUES, LARGEST_WINDOW = "window_rows", [1, 2, 4, 8], 16
_HEADER = re.compile(rf"\s*(?P<type>{INTEGER_TYPE})\s+(?P<name>[A-Za-z_]\w*)\s*=(?P<start>[^;]+);"
                     rf"\s*(?P<tested>\w+|\(\s*(?P<around>\w+)\s*\+\s*(?P<offset>\w+)\s*\))\s*"
                     rf"(?P<test><=|<(?!=))(?P<bound>[^;]+);"
                     rf"\s*(?:(?P<a>\w+)\s*\+\+|\+\+\s*(?P<b>\w+)|(?P<c>\w+)\s*\+=\s*1)\s*")
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")  # not a literal's suffix (0.0f) nor a member
_WORDS = TYPE_WORDS | {"signed", "bool", "true", "false"}
_UNSIGNED = re.compile(r"\bunsigned\b|\bsize_t\b|\buint\w*_t\b|\bbool\b")
_CONST_ARRAY = r"(?:static\s+)?const\s+(?:float|double|int)\s+"  # a const local array's declaration, to its name
_UNREACHABLE = "__builtin_unreachable();"


@dataclass(frozen=True)
class Loop:
    variable: str
    type: str
    first: int  # where it starts, at the spec's sizes
    count: int  # how many values it takes there
    named: tuple[str, ...]  # the parameters its start and bound name


@dataclass(frozen=True)
class Window:
    kernel: PointKernel
    nest: Statement  # the outer window loop (with an unroll pragma before it)
    rows: Loop
    columns: Loop
    accumulator: str
    accumulator_type: str
    initial: str  # the accumulator's initialiser
    read: Access  # IN[...] inside EXPR (window_nest.Nest.expression: the nest's locals spelled out)
    term: tuple[str, str]  # EXPR before and after what the registers replace: IN[...], or __ldg(&IN[...])
    address: str  # IN[...] as the point body reads it at the window loops' start
    guards: tuple[str, ...]  # what holds wherever a point adds a term into its window (window_nest.Nest.guards)
    chosen: bool  # the term is all a choice's value (window_nest.Nest.chosen)
    element: str  # IN's element type
    specialised: tuple[tuple[str, str, int], ...]  # (parameter, its declared type, value) for each one the loops
    # name
    constants: tuple[str, ...]  # declarations of the locals of parameters alone EXPR reads (`const int r = k / 2;`)
    counter: tuple[str, str] | None = None  # (name, step) of a count of the taps added (window_nest.Nest.counter)


def recognise(spec: KernelSpec) -> Window:
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel as exc:
        raise NotRecognised(str(exc)) from None
    if len(kernel.axes) != 2 or len(spec.block_size_names) < 2:
        raise NotRecognised("a window sum here is 2D: two indices (x and y) and block sizes for both")
    for axis in (0, 1):
        # A thread's 4 x window_rows patch rounds the grid up to whole patches: points past the ones the submitted
        # grid covers must stop at a guard of their own (review, helper-84: a kernel guarding nothing, whose
        # grid fit its rows exactly, read and wrote past its arrays).
        if (why := one_thread_per_point(spec, axis) or points.unbounded(kernel, axis, spec)) is not None:
            raise NotRecognised(why)
    if (why := points.changed_parameter(kernel)) is not None:
        raise NotRecognised(why)
    masked = mask(spec.source)
    outer, inner = window_nest.loops(kernel, masked)
    rows, columns = (_loop(kernel, masked, loop, spec) for loop in (outer, inner))
    found = window_nest.read(kernel, masked, outer, inner, {*kernel.index_names, rows.variable, columns.variable})
    if found.guards and (unsigned := [t for t in (*(a.type for a in kernel.axes), rows.type, columns.type)
                                      if _UNSIGNED.search(t)]):
        raise NotRecognised(f"its window loops test guards of indices of type {unsigned[0]}; an unsigned index "
                            f"wraps where a guard would tell a point outside the image")
    name, nest = found.accumulator, found.outer
    declared_type, initial = _declaration(kernel, masked, name, nest)
    read, term, address, constants = _window_read(kernel, masked, found, rows, columns)
    element = kernel.array_types.get(read.array)
    if element is None:
        raise NotRecognised(f"it reads its window from {read.array}, which is not a pointer parameter")
    prefix = masked[kernel.body_start:nest.start]
    # The rewrite runs this part again for every probe, row address and point's rest: it must write nothing, and
    # read nothing the kernel writes, so that every run takes the path the probe took (review, helper-102: writes
    # through a reference or a helper were run by the probe, and a later row's rest saw an earlier row's stores).
    if any(a.write and not _declared_const(masked, a) for a in kernel.accesses if a.start < nest.start) or \
            re.search(r"\batomic\w*\s*\(|\bprintf\s*\(|(?:^|[;{}])\s*\*", prefix):
        raise NotRecognised("it writes memory before its window loops, so a point cannot be probed without its "
                            "effects")
    if (why := points.hidden_effects(kernel, nest.start)) is not None:
        raise NotRecognised(f"before its window loops, {why.removeprefix('its point body ')}, so a point cannot be "
                            f"probed without its effects")
    if re.search(r"\)\s*\[", prefix):  # `(out + y * w)[x]`, which no access records
        raise NotRecognised("it indexes an expression before its window loops, which may read what the kernel "
                            "writes: the rewrite runs that part again after other points' stores")
    written = _written(kernel, masked)
    if read_back := next((a.array for a in kernel.accesses if a.start < nest.start and a.array in written), None):
        raise NotRecognised(f"it reads {read_back} before its window loops, and writes it: the rewrite runs that part "
                            f"again after other points' stores")
    if re.search(rf"\b(?:{rows.variable}|{columns.variable})\b", prefix):
        raise NotRecognised(f"it uses the names {rows.variable} or {columns.variable} before its window loops")
    named = dict.fromkeys((*rows.named, *columns.named))
    specialised = tuple((p, _scalar_type(kernel.parameters[p], p), _parameter_value(p, spec)) for p in named)
    if found.counter is not None:
        _, start = _declaration(kernel, masked, found.counter[0], nest, "count of taps")
        # Whole numbers to 2^24 are exact in every arithmetic type, so the count's steps may be added at once
        # (review, helper-101: a float count from 2^24 stayed there one step at a time).
        if not re.fullmatch(window_nest.WHOLE, start) or \
                _whole(start) + rows.count * columns.count * _whole(found.counter[1]) > 2 ** 24:
            raise NotRecognised(f"its count of taps {found.counter[0]} starts from {start}, not a whole number below "
                                f"2^24 less its taps, so the count's sum could round")
    return Window(kernel, nest, rows, columns, name, declared_type, initial, read, term, address, found.guards,
                  found.chosen, element, specialised, constants, found.counter)


def _loop(kernel: PointKernel, masked: str, loop: Statement, spec: KernelSpec) -> Loop:
    """The window loop's variable and its values at the spec's sizes: `for (int i = START; i < END; i++)` (or
    `<= END`), START and END made of literals and integer scalar parameters."""
    header = masked[loop.head[0]:loop.head[1]]
    match = _HEADER.fullmatch(header)
    variable = match and match["name"]
    around = match and match["around"]
    if not match or (match["offset"] if around else match["tested"]) != variable or \
            variable not in {match["a"], match["b"], match["c"]} or around and around not in kernel.index_names:
        raise NotRecognised(f"its window loop `for ({' '.join(header.split())})` does not count up by one to a "
                            f"bound (`for (int i = 0; i < k; i++)`, or from -r to r)")
    # A loop around the point, `(y + i) <= y + r` (canonical.py's respelling of `r <= y + r`), tests i <= r
    # where the comparison is signed, so that y + i does not wrap: the loop's type, y's and the bound's parameters'.
    bound = f"({match['bound']}) - ({around})" if around else match["bound"]
    (first, start_names), (end, end_names) = (_evaluated(kernel, masked, text, spec)
                                              for text in (match["start"], bound))
    axis_type = next((axis.type for axis in kernel.axes if axis.name == around), "")
    named = (kernel.parameters[name] for name in (*start_names, *end_names))
    unsigned = [t for t in (match["type"], axis_type, *named) if _UNSIGNED.search(t)]
    # A start below 0 tested against an unsigned bound, or itself unsigned (`-K / 2` of an unsigned K), converts
    # to a number past every bound: the loop runs no step (review, helper-99). Locals of parameters are signed.
    written = [kernel.parameters.get(name, name) for name in re.findall(r"(?<![\w.])[A-Za-z_]\w*", match["start"] +
                                                                      match["bound"])]
    if around and unsigned or first < 0 and (_UNSIGNED.search(" ".join([match["type"], *written])) or
                                             re.search(r"\d[lL]*[uU]", match["start"] + match["bound"])):
        raise NotRecognised(f"its window loop `for ({' '.join(header.split())})` counts in an unsigned type, where "
                            f"a start below 0 or a test around the point wraps")
    count = end - first + (match["test"] == "<=")
    if not 1 <= count <= LARGEST_WINDOW:
        raise NotRecognised(f"its window loop over {variable} takes {count} values at the spec's sizes; a window "
                            f"held in registers is 1 to {LARGEST_WINDOW} wide")
    return Loop(variable, " ".join(match["type"].split()), first, count, (*start_names, *end_names))


def _whole(literal: str) -> float:
    """The value of a window_nest.WHOLE literal."""
    return float(literal.rstrip("fFuUlL"))


def _evaluated(kernel: PointKernel, masked: str, text: str, spec: KernelSpec) -> tuple[int, tuple[str, ...]]:
    """The value of a window loop's start or bound at the spec's sizes, and the parameters it names: made of
    literals, integer scalar parameters and locals of those alone (window_nest.constant_local: `int r = k / 2;`)."""
    spelled = re.sub(r"(?<![\w.])[A-Za-z_]\w*", lambda m: f"({local[1]})" if m.group() not in kernel.parameters and
                     (local := window_nest.constant_local(kernel, masked, m.group())) else m.group(), text)
    try:
        poly = affine.parse(spelled)
    except affine.NotAffine:
        poly = None
    values = {name: _parameter_value(name, spec) if name in kernel.parameters else None
              for name in (affine.names(poly) if poly is not None else ())}
    atoms = {atom: values.get(atom) if not atom.startswith("?") else _integer(atom[1:], values)
             for term in (poly or {}) for atom in term}
    if poly is None or None in values.values() or None in atoms.values():
        raise NotRecognised(f"its window loop's {' '.join(text.split())} is not made of literals, integer scalar "
                            f"parameters and locals of those alone")
    value = sum(coefficient * math.prod(atoms[atom] for atom in term) for term, coefficient in poly.items())
    return value, tuple(sorted(values))


_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: lambda a, b: abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1),  # C's: toward zero
               ast.Mod: lambda a, b: a - b * (abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)),
               ast.LShift: lambda a, b: a << b if 0 <= b < 64 else a // 0, ast.RShift: operator.rshift}


def _integer(text: str, values: dict[str, int]) -> int | None:
    """The value of C integer arithmetic of literals and `values` (+ - * / % << >>, unary -), else None."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            return values[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            return -value(node.operand) if isinstance(node.op, ast.USub) else value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
            return _ARITHMETIC[type(node.op)](value(node.left), value(node.right))
        raise ValueError(ast.dump(node))
    try:
        return value(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def _parameter_value(name: str, spec: KernelSpec) -> int | None:
    """An integer scalar argument's value at the spec's sizes, else None."""
    arg = next((a for a in spec.args if a.name == name and not a.is_array), None)
    if arg is None or not arg.dtype.startswith(("int", "uint")):
        return None
    return int(spec.scalar_of(arg, spec.baseline_params()))


def _declaration(kernel: PointKernel, masked: str, name: str, nest: Statement,
                 what: str = "accumulator") -> tuple[str, str]:
    """The accumulator's (or the count's, `what`) type and initialiser: declared once in the point body before the
    window loops, and changed nowhere between, so every point's window sum starts from the initialiser."""
    body = masked[kernel.body_start:nest.start]
    declared = list(re.finditer(rf"(?:^|[;{{}}])\s*((?:const\s+)?{ACCUMULATOR_TYPES})\s+{name}\s*=(?!=)([^;,]*);",
                                body))
    if len(declared) != 1:
        raise NotRecognised(f"its {what} {name} is not declared once, as a number with a value, before the "
                            f"window loops")
    after = body[declared[0].end():]
    if re.search(points.changing(name), after):
        raise NotRecognised(f"it changes {name} between its declaration and the window loops")
    start = kernel.body_start
    initial = kernel.source[start + declared[0].start(2):start + declared[0].end(2)].strip()
    free = set(_NAME.findall(declared[0].group(2))) - _WORDS
    if free - set(kernel.parameters) or "[" in initial:
        raise NotRecognised(f"its {what} starts from {initial}, which depends on more than the parameters")
    return " ".join(kernel.source[start + declared[0].start(1):start + declared[0].end(1)].split()), initial


def _window_read(kernel: PointKernel, masked: str, nest: window_nest.Nest, rows: Loop,
                 columns: Loop) -> tuple[Access, tuple[str, str], str, tuple[str, ...]]:
    """The one read of EXPR that moves with the point, IN[(y + i) * P + x + j + OFFSET]; EXPR before and after
    what the registers replace; the read's text; and the declarations of the locals of parameters EXPR reads."""
    x, y, i, j = kernel.axes[0].name, kernel.axes[1].name, rows.variable, columns.variable
    text = nest.expression
    spelled = mask(text)
    inside = points.accesses_in(kernel, spelled, text, 0, len(text))
    moving = [a for a in inside if a.poly is None or affine.names(a.poly) & {x, y}]
    if len(moving) != 1:
        raise NotRecognised(f"its window update reads {len(moving)} arrays at the point; a window sum reads one")
    read = moving[0]
    pitch = affine.stride(read.poly, y) if read.poly is not None else None
    if pitch is None or not affine.is_unit(affine.stride(read.poly, x)) \
            or not affine.is_unit(affine.stride(read.poly, j)) or affine.stride(read.poly, i) != pitch \
            or not pitch or affine.names(pitch) & {x, y, i, j}:
        raise NotRecognised(f"its window {read.array}[{read.subscript}] is not read along rows, "
                            f"`({y} + {i}) * pitch + {x} + {j}`")
    if varying := sorted(affine.names(read.poly) - {x, y, i, j} - set(kernel.parameters)):
        raise NotRecognised(f"its window {read.array}[{read.subscript}] moves with {', '.join(varying)}, which is "
                            f"not a parameter")
    if any(a.array == read.array for a in kernel.accesses if a.write):
        raise NotRecognised(f"it writes {read.array}, the array its window reads")
    span = (read.start, read.end)
    if through := re.search(r"__ldg\s*\(\s*&\s*$", spelled[:read.start]):
        after = re.match(r"\s*\)", spelled[read.end:])
        span = (through.start(), read.end + after.end()) if after else span
    elif re.search(r"&\s*$", spelled[:read.start]):
        raise NotRecognised(f"it takes the address of {read.array}[{read.subscript}]")
    rest = spelled[:span[0]] + spelled[span[1]:]
    elsewhere = masked[kernel.kernel.body_open:nest.update.start] + masked[nest.update.end:kernel.body_end]
    declared_here = identifiers(elsewhere) - set(kernel.parameters)
    free = {n for n in _NAME.findall(rest) if not re.search(rf"\b{n}\s*\(", rest)} - _WORDS - {i, j}
    constants = {name: declared for name in sorted(free & declared_here)
                 if (declared := _constant_declaration(kernel, masked, name)) is not None}
    if locals_used := sorted(free & declared_here - set(constants)):
        raise NotRecognised(f"its window update uses {', '.join(locals_used)}, which the kernel's body uses "
                            f"elsewhere too: it may use parameters, the window loop variables, locals of parameters "
                            f"alone, and names the body uses nowhere else (a __constant__ filter)")
    written = _written(kernel, masked)
    if other := next((a for a in inside if a is not read and a.array in written), None):
        raise NotRecognised(f"its window update reads {other.array}, which the kernel writes")
    return read, (text[:span[0]], text[span[1]:]), text[read.start:read.end], tuple(constants.values())


def _written(kernel: PointKernel, masked: str) -> set[str]:
    """The arrays the kernel writes (a const local array's declaration is no write)."""
    return {a.array for a in kernel.accesses if a.write and not _declared_const(masked, a)}


def _declared_const(masked: str, access: Access) -> bool:
    """Whether the access declares a const local array (`const float w[3] = {...}`): no write of memory."""
    return bool(re.search(rf"(?:^|[;{{}}])\s*{_CONST_ARRAY}$", masked[:access.start]))


def _constant_declaration(kernel: PointKernel, masked: str, name: str) -> str | None:
    """A declaration of `name` the registers' sums may repeat, where it holds the same at every point: a
    window_nest.constant_local, or a const array of numbers the point body declares once (`const float w[3] =
    {0.25f, 0.5f, 0.25f};`, `const float g[3][3] = {{...}, ...};`); else None."""
    if local := window_nest.constant_local(kernel, masked, name):
        return f"const {local[0]} {name} = {local[1]};"
    body = masked[kernel.body_start:kernel.body_end]
    declared = list(re.finditer(rf"(?:^|[;{{}}])\s*({_CONST_ARRAY}{re.escape(name)}"
                                rf"\s*(?:\[\s*\d*\s*\]\s*)+=\s*\{{[-+.\w\s,{{}}]*\}}\s*;)", body))
    if len(declared) != 1 or len(re.findall(rf"(?<![\w.]){re.escape(name)}\b", body)) != \
            1 + len(re.findall(rf"(?<![\w.]){re.escape(name)}\s*\[", body[declared[0].end():])):
        return None
    start = kernel.body_start + declared[0].start(1)
    return " ".join(mask(kernel.source, literals=False)[start:start + len(declared[0][1])].split())


def _scalar_type(declaration: str, name: str) -> str:
    return " ".join(w for w in declaration[:declaration.rindex(name)].split() if w != "const")


# --- rendering -------------------------------------------------------------------------------------------
def _render(model: Window) -> str:
    kernel = model.kernel
    ax, ay = kernel.axes
    names = _Names(identifiers(kernel.source))
    index = [ax, ay]
    condition = " && ".join(f"{name} == {number}" for name, _, number in model.specialised)
    lines = [
        f"// A register window: each thread computes {COLUMNS} x {ROWS} points, reading each input row it needs",
        f"// once ({COLUMNS} + {model.columns.count} - 1 values, 128 bits at a time where aligned) and adding every "
        f"point's window",
        "// from registers in the original order. Edge threads and other window sizes run the point body as "
        "written,",
        "// their points dealt out among the lanes of their warp.",
        f"const {ax.type} {names.x0} = (({ax.type})blockIdx.x * {ax.block} + threadIdx.x) * {COLUMNS};",
        # The rows of blocks from both ends toward the middle: the blocks at the bottom edge, whose warps deal out
        # their edge threads' points and take longest, start among the first instead of ending the launch (on the
        # H200, mean_filter_valid went from 28.3 to 25.8 us; box_blur, whose edge points return, did not change).
        f"const unsigned {names.block_row} = blockIdx.y % 2 == 0 ? blockIdx.y / 2 : gridDim.y - 1 - blockIdx.y / 2;",
        f"const {ay.type} {names.y0} = (({ay.type}){names.block_row} * {ay.block} + threadIdx.y) * {ROWS};",
        *points.lambda_of(names.point, index, points.point_body(kernel)),
        f"bool {names.done} = false;",
        f"if ({condition}) {{" if condition else "{",
        *(points.INDENT + line for line in _fast_path(model, names)),
        "}",
        *_shared_points(kernel, names),
    ]
    return points.with_body(kernel, lines)


def _shared_points(kernel: PointKernel, n: "_Names") -> list[str]:
    """The points of the threads that did not take the registers, dealt out among the lanes that run here together
    (point bodies read no thread's identity, so any lane may run any point). A thread at the image's edge has its
    whole patch to run; alone, it held its warp for that many points, and the edge's warps cost mean_filter_valid
    13 of its 35 us on the H200. The loop is not unrolled: NVRTC (CUDA 13) unrolling points with unsigned indices
    shared one point's `y * w + x - 1`, zero-extended, with a point whose guard did not keep it from wrapping below
    0 (gaussian3x3 read 16 GB past its input)."""
    ax, ay = kernel.axes
    each = f"{ROWS} * {COLUMNS}"
    return [
        "{",
        f"    const unsigned {n.group} = __activemask();",
        f"    const unsigned {n.pending} = __ballot_sync({n.group}, !{n.done});",
        f"    const unsigned {n.lane} = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;",
        f"    const int {n.lanes} = __popc({n.group}), {n.rank} = __popc({n.group} & ((1u << {n.lane}) - 1));",
        f"    const int {n.count} = __popc({n.pending}) * {each};",
        "    #pragma unroll 1",
        f"    for (int {n.base} = 0; {n.base} < {n.count}; {n.base} += {n.lanes}) {{",
        f"        const int {n.k} = {n.base} + {n.rank} < {n.count} ? {n.base} + {n.rank} : {n.count} - 1;",
        f"        unsigned {n.owners} = {n.pending};  // point k's lane: one lowest bit dropped per earlier owner",
        f"        for (int {n.dropped} = 0; {n.dropped} < {n.k} / ({each}); {n.dropped}++)",
        f"            {n.owners} &= {n.owners} - 1;",
        f"        const int {n.owner} = __ffs({n.owners}) - 1;",
        f"        const {ax.type} {n.px} = ({ax.type})__shfl_sync({n.group}, (long long){n.x0}, {n.owner});",
        f"        const {ay.type} {n.py} = ({ay.type})__shfl_sync({n.group}, (long long){n.y0}, {n.owner});",
        f"        if ({n.base} + {n.rank} < {n.count}) {n.point}({n.px} + {n.k} % {COLUMNS}, "
        f"{n.py} + {n.k} / {COLUMNS} % {ROWS});",
        "    }",
        "}",
    ]


class _Names:
    """The rendering's fresh identifiers, none of them the kernel's."""

    def __init__(self, taken: set[str]):
        for name, base in (("x0", "x_first"), ("y0", "y_first"), ("point", "point"), ("reaches", "reaches"),
                           ("at", "at"), ("finish", "finish"), ("value", "window_value"), ("inside", "inside"),
                           ("done", "done"), ("total", "window_sum"), ("row", "row"), ("last", "last"), ("r", "r"),
                           ("c", "c"), ("v", "v"), ("chunk", "chunk"), ("quad", "quad"), ("p", "p"),
                           ("stored_at", "stored_at"), ("stored", "stored"), ("slot", "slot"),
                           ("holds", "holds"), ("corner", "corner"), ("reached", "reached"), ("group", "group"),
                           ("pending", "pending"), ("lane", "lane"), ("lanes", "lanes"), ("rank", "rank"),
                           ("count", "shared_points"), ("base", "base"), ("k", "k"), ("owner", "owner"),
                           ("owners", "owners"), ("dropped", "dropped"), ("block_row", "block_row"),
                           ("px", "point_x"), ("py", "point_y")):
            setattr(self, name, fresh_name(base, taken))


def _each_point(names: _Names, statement: str, rolled: bool = False) -> list[str]:
    """`statement` for each of the thread's points, r and c naming the point's row and column in the patch."""
    pragma = "#pragma unroll 1" if rolled else "#pragma unroll"
    return [pragma,
            f"for (int {names.r} = 0; {names.r} < {ROWS}; {names.r}++) {{",
            f"    {pragma}",
            f"    for (int {names.c} = 0; {names.c} < {COLUMNS}; {names.c}++) {statement}",
            "}"]


def _fast_path(model: Window, names: _Names) -> list[str]:
    """Fixing the window's size, probing the thread's points, and where all reach the window, the registers."""
    kernel, n = model.kernel, names
    index = list(kernel.axes)
    i, j = model.rows.variable, model.columns.variable
    probe = points.point_body(kernel, _returning(model, "return false;") + _cut(model, "true", "return false;"))
    # `at` and `finish` run only for the patch's points, all of which `reaches` found reaching the window: telling
    # NVRTC so (__builtin_unreachable elsewhere) drops the guard each would test again, per input row and per point
    # (on the H200, conv2d went from 14.3 to 14.0 us at its best).
    address = points.point_body(kernel, _returning(model, _UNREACHABLE) + _cut(model, f"&{model.address}",
                                                                             _UNREACHABLE))
    # Where every point adds its whole window, a count of its taps adds one step for each
    counted = f" {model.counter[0]} += {model.rows.count * model.columns.count} * ({model.counter[1]});" \
        if model.counter else ""
    finished = (model.nest.start, model.nest.end, f"{model.accumulator} = {n.value};{counted}")
    window = [Axis(0, i, model.rows.type, "", ""), Axis(0, j, model.columns.type, "", "")]
    store = _store_after(model)
    vector = loops.VECTORS.get(model.element)
    if vector is None:
        rows = _row_loop(model, n, _one_by_one(model, n))
    else:
        # Rows a pitch apart are all aligned where the first two are: one test, and a loop of loads each way.
        skipped = model.columns.first % 4
        first, second = (f"{n.at}({n.x0}, {n.y0}, {model.rows.first + k}, {model.columns.first}) - {skipped}"
                         for k in (0, 1))
        rows = [f"if ({loops.aligned_16(first)} && {loops.aligned_16(second)}) {{",
                *("    " + line for line in _row_loop(model, n, _vectors(model, n, vector))),
                "} else {",
                *("    " + line for line in _row_loop(model, n, _one_by_one(model, n))),
                "}"]
    return [
        *(f"const {t} {name} = {number};" for name, t, number in model.specialised),
        *model.constants,
        *points.lambda_of(n.reaches, index, probe),
        *points.lambda_of(n.at, [*index, *window], address, returns=f"const {model.element} *"),
        *_guarded(model, n, window),
        *_finishing(model, n, finished, store),
        f"bool {n.inside} = true;",
        *_each_point(n, f"{n.inside} = {n.inside} && {n.reaches}({n.x0} + {n.c}, {n.y0} + {n.r});"),
        *_corners(model, n),
        f"if ({n.inside}) {{",
        f"    {model.accumulator_type} {n.total}[{ROWS}][{COLUMNS}];",
        *("    " + line for line in _each_point(n, f"{n.total}[{n.r}][{n.c}] = {model.initial};")),
        *("    " + line for line in rows),
        *("    " + line for line in _finish_points(model, n, store)),
        f"    {n.done} = true;",
        "}",
    ]


def _guarded(model: Window, n: _Names, window: list[Axis]) -> list[str]:
    """Where the window loops test guards: the lambda telling whether all hold at a point and window offsets."""
    if not model.guards:
        return []
    holds = points.point_body(model.kernel, _returning(model, "return false;") +
                              _cut(model, " && ".join(model.guards), "return false;"))
    return points.lambda_of(n.holds, [*model.kernel.axes, *window], holds)


def _corners(model: Window, n: _Names) -> list[str]:
    """The guards tested at the 16 corners of the box of the patch's points and the window's offsets: where they
    hold at every corner, they hold throughout (window_nest.py), so every point adds its whole window."""
    if not model.guards:
        return []
    rows, columns = model.rows, model.columns
    return ["#pragma unroll",
            f"for (int {n.corner} = 0; {n.corner} < 16; {n.corner}++)",
            f"    {n.inside} = {n.inside} && {n.holds}({n.x0} + ({n.corner} & 1) * {COLUMNS - 1}, "
            f"{n.y0} + ({n.corner} >> 1 & 1) * ({ROWS} - 1), ({n.corner} & 4) ? {rows.first + rows.count - 1} : "
            f"{rows.first}, ({n.corner} & 8) ? {columns.first + columns.count - 1} : {columns.first});"]


def _row_loop(model: Window, n: _Names, loads: list[str]) -> list[str]:
    """Each input row the patch needs, read by `loads` into v, added into the windows of the points it is in."""
    rows, columns = model.rows, model.columns
    i, j = rows.variable, columns.variable
    shift = f" - ({columns.first})" if columns.first else ""
    term = f"{model.term[0]}{n.v}[{n.c} + {j}{shift}]{model.term[1]}"
    total = f"{n.total}[{n.r}][{n.c}]"
    rounded = {"float": "__fadd_rn", "double": "__dadd_rn"}.get(model.accumulator_type) if model.chosen else None
    # A term the kernel chose by a ternary was rounded before its add; an add that fuses nothing keeps it so.
    add = f"{total} = {rounded}({total}, {term});" if rounded else f"{total} += {term};"
    return [
        "#pragma unroll",
        f"for (int {n.row} = 0; {n.row} < {ROWS} + {rows.count - 1}; {n.row}++) {{",
        f"    // an input row: row {n.row} - {n.last} of the windows of the patch's points on its row {n.last}",
        f"    const int {n.last} = {n.row} < {ROWS} ? {n.row} : {ROWS} - 1;",
        f"    const {model.element} *{n.p} = {n.at}({n.x0}, {n.y0} + {n.last}, {n.row} - {n.last} + "
        f"({rows.first}), {columns.first});",
        f"    {model.element} {n.v}[{COLUMNS + columns.count - 1}];",
        *("    " + line for line in loads),
        "    #pragma unroll",
        f"    for (int {n.r} = 0; {n.r} < {ROWS}; {n.r}++) {{",
        f"        const {rows.type} {i} = {n.row} - {n.r} + ({rows.first});",
        f"        if ({n.row} >= {n.r} && {n.row} - {n.r} < {rows.count}) {{",
        "            #pragma unroll",
        f"            for (int {n.c} = 0; {n.c} < {COLUMNS}; {n.c}++) {{",
        "                #pragma unroll",
        f"                for ({columns.type} {j} = {columns.first}; {j} < {columns.first + columns.count}; {j}++) "
        f"{add}",
        "            }",
        "        }",
        "    }",
        "}",
    ]


def _finishing(model: Window, n: _Names, finished: tuple[int, int, str],
               store: tuple[Statement, Access] | None) -> list[str]:
    """The lambda running the rest of a point's body with SUM set to its window's sum; where its one effect is a
    plain store, the lambda records it in the slot it is given instead (and the arrays it records into): the value
    first, then the address, the order C++17 evaluates an assignment in. It runs only for points that reach the
    window, so a path that does not is marked unreachable."""
    kernel, source = model.kernel, model.kernel.source
    parameters = [*kernel.axes, Axis(0, n.value, model.accumulator_type, "", "")]
    start, end, text = finished
    spans = [*_returning(model, _UNREACHABLE), (start, end, f"{{ {text} {n.reached} = true; }}")]
    recording = []
    if store is not None:
        statement, target = store
        value = source[mask(source).index("=", target.end) + 1:statement.end - 1]
        spans.append((statement.start, statement.end, f"{{ {n.stored}[{n.slot}] ={value}; "
                                                      f"{n.stored_at}[{n.slot}] = &{source[target.start:target.end]}; }}"))
        parameters.append(Axis(0, n.slot, "int", "", ""))
        recording = [f"decltype(&{target.array}[0]) {n.stored_at}[{COLUMNS}];",
                     f"{kernel.array_types[target.array]} {n.stored}[{COLUMNS}];"]
    body = "\n".join([f"bool {n.reached} = false;", points.point_body(kernel, spans),
                      f"if (!{n.reached}) {_UNREACHABLE}"])
    return [*recording, *points.lambda_of(n.finish, parameters, body)]


def _finish_points(model: Window, n: _Names, store: tuple[Statement, Access] | None) -> list[str]:
    """Every point's rest of the body, row by row; a recorded store is issued after its row's points."""
    finish = f"{n.finish}({n.x0} + {n.c}, {n.y0} + {n.r}, {n.total}[{n.r}][{n.c}]"
    if store is None:
        return _each_point(n, f"{finish});")
    one_by_one = (f"for (int {n.c} = 0; {n.c} < {COLUMNS}; {n.c}++) "
                  f"if ({n.stored_at}[{n.c}] != nullptr) *{n.stored_at}[{n.c}] = {n.stored}[{n.c}];")
    target = store[1]
    vector = loops.VECTORS.get(model.kernel.array_types[target.array])
    if vector is None:
        stores = ["// the row's stores one after another, which the L2 takes as whole writes", "#pragma unroll",
                  one_by_one]
    else:
        # A subscript written with the point's indices, numbers and names the same for the four points alone,
        # moving by one along x, stores the four points side by side wherever each stores; any other (a cast that
        # may wrap, a call, a local of the indices) is compared.
        moving = target.poly is not None and \
            affine.is_unit(affine.stride(target.poly, model.kernel.axes[0].name)) and \
            set(_NAME.findall(mask(target.subscript))) <= {axis.name for axis in model.kernel.axes} | _row_constants(model)
        side_by_side = " && ".join([
            *(f"{n.stored_at}[{c}] != nullptr" if moving else
              f"{n.stored_at}[{c}] == {n.stored_at}[0] + {c}" if c else f"{n.stored_at}[0] != nullptr"
              for c in range(COLUMNS)),
            loops.aligned_16(f"{n.stored_at}[0]")])
        values = ", ".join(f"{n.stored}[{c}]" for c in range(COLUMNS))
        stores = ["// the row's stores together, which the L2 takes as whole writes: one vector where they lie side by "
                  "side",
                  f"if ({side_by_side}) {{",
                  f"    *reinterpret_cast<{vector} *>({n.stored_at}[0]) = {{{values}}};",
                  "} else {",
                  "    #pragma unroll",
                  f"    {one_by_one}",
                  "}"]
    return ["#pragma unroll",
            f"for (int {n.r} = 0; {n.r} < {ROWS}; {n.r}++) {{",
            "    #pragma unroll",
            f"    for (int {n.c} = 0; {n.c} < {COLUMNS}; {n.c}++) {{",
            f"        {n.stored_at}[{n.c}] = nullptr;",
            f"        {finish}, {n.c});",
            "    }",
            *("    " + line for line in stores),
            "}"]


def _row_constants(model: Window) -> set[str]:
    """The names whose value is the same at every point: scalar parameters the point body does not declare again,
    and its locals defined once from those alone (conv2d's `out_w = width - k + 1`, whatever conversions)."""
    kernel = model.kernel
    body = mask(kernel.source)[kernel.body_start:kernel.body_end]
    scalars = set(kernel.parameters) - set(kernel.array_types) - points.declared_names(body)
    return scalars | {name for name, poly in kernel.locals.items()
                      if affine.names(poly) <= scalars and points.declared_once(body, name)}


def _store_after(model: Window) -> tuple[Statement, Access] | None:
    """The statement `OUT[I] = E;` and its target, where it is the only memory the point body writes after its
    window loops (a loop there the recogniser refuses, so it runs at most once) and the last thing the point does;
    else None. Nothing else may change memory there: no atomic, no call of the source's functions, no write
    through a pointer."""
    kernel = model.kernel
    masked = mask(kernel.source)
    writes = [a for a in kernel.accesses if a.write and a.start >= model.nest.end]
    if len(writes) != 1 or not writes[0].plain_store or points.hidden_effects(kernel) is not None:
        return None
    target = writes[0]
    declared = kernel.parameters.get(target.array, "")
    if target.array not in kernel.array_types or re.search(r"\bvolatile\b", declared) or \
            re.search(r"\batomic\w*\s*\(|\basm\b", masked[model.nest.end:kernel.body_end]):
        return None
    own = points.own_statement(kernel, masked, target)
    if own is None or not re.fullmatch(r"\s*=(?!=)[^;]*;", masked[target.end:own[0].end]):
        return None
    statement = own[0]
    # The point's last deed: nothing after it may read the element it stores, as a reference or an intrinsic would.
    if re.sub(r"\breturn\s*;|[\s;}]", "", masked[statement.end:kernel.body_end]):
        return None
    return statement, target


def _vectors(model: Window, n: _Names, vector: str) -> list[str]:
    """The row's 4 + KW - 1 values into v, 128-bit vectors at a time, the row's start aligned. Its first value is
    at column x0 + J0, x0 a multiple of 4, so it lies J0 mod 4 elements past a 16-byte boundary: the vectors are
    read from that boundary. A vector's lanes the row does not need lie in the same aligned 16 bytes as one it
    does, so on a page it may read."""
    span = COLUMNS + model.columns.count - 1
    skipped = model.columns.first % 4  # the lanes before the row's first value
    start = f"{n.p} - {skipped}" if skipped else n.p
    quads = []
    for chunk in range(-(-(span + skipped) // 4)):
        lanes = " ".join(f"{n.v}[{at}] = {n.quad}.{lane};" for lane, at in
                         zip(loops.LANES, range(4 * chunk - skipped, 4 * chunk - skipped + 4)) if 0 <= at < span)
        quads.append(f"{{ const {vector} {n.quad} = *reinterpret_cast<const {vector} *>({start} + {4 * chunk}); "
                     f"{lanes} }}")
    return quads


def _one_by_one(model: Window, n: _Names) -> list[str]:
    """The row's 4 + KW - 1 values into v, one by one: an element with no vector of four, or rows not aligned."""
    span = COLUMNS + model.columns.count - 1
    return ["#pragma unroll",
            f"for (int {n.chunk} = 0; {n.chunk} < {span}; {n.chunk}++) {n.v}[{n.chunk}] = {n.p}[{n.chunk}];"]


def _cut(model: Window, reached: str, otherwise: str) -> list[tuple[int, int, str]]:
    """The point body up to its window loops, returning `reached` there and running the statement `otherwise` past
    the blocks it had opened: a point's probe, which runs what the point runs before its window and writes
    nothing."""
    kernel, source = model.kernel, model.kernel.source
    opened = mask(source)[kernel.body_start:model.nest.start]
    depth = opened.count("{") - opened.count("}")
    first = kernel.statements[0].start
    indent = first - source.rindex("\n", 0, first) - 1
    closers = [" " * (indent + 4 * level) + "}" for level in reversed(range(depth))]
    text = "\n".join([f"return {reached};", *closers, " " * indent + otherwise])
    return [(model.nest.start, kernel.body_end, text)]


def _returning(model: Window, statement: str) -> list[tuple[int, int, str]]:
    """A probe runs `statement` wherever the point body returns before reaching its window."""
    kernel = model.kernel
    masked = mask(kernel.source)
    return [(kernel.body_start + m.start(), kernel.body_start + m.end(), statement)
            for m in re.finditer(r"\breturn\s*;", masked[kernel.body_start:model.nest.start])]


class WindowShape:
    name = "window"
    kind = "a window sum (each point adds up a window of an input read along rows, as a 2D convolution does)"
    rules = ("register_window",)

    def recognise(self, spec: KernelSpec) -> Window:
        return recognise(spec)

    def reason(self, rule_id: str, model: Window, spec: KernelSpec) -> str | None:
        return None

    def render(self, model: Window, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        bx, by = spec.block_size_names[:2]
        # At most 256 threads a block: ptxas gives a thread up to 255 registers, and a block of more threads
        # could then not launch (a window of 8 rows of 4 points at 64 x 16 threads did not, on the H100).
        layout = Layout(tune_params={ROWS: ROW_VALUES}, defaults={ROWS: 4}, restrictions=(f"{bx} * {by} <= 256",),
                        grid_div={"x": [bx, COLUMNS], "y": [by, ROWS]})
        return _render(model), layout
