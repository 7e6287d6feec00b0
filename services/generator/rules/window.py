"""Window sums (2D convolutions, correlations, filters): each thread computes a 4 x window_rows patch of outputs
from a window of its input held in registers.

Recognised: a 2D kernel of one point per thread (services/generator/rules/points.py) whose point body declares an
accumulator, `T SUM = INIT;`, and then adds a window into it with two loops of its own and nothing else in them:

    for (int i = 0; i < KH; i++)
        for (int j = 0; j < KW; j++)
            SUM += EXPR;

where EXPR reads the input at `IN[(y + i) * P + x + j + OFFSET]` (any spelling the index arithmetic parses to:
one along x and j, the same pitch P along y and i) and otherwise only the loop variables and parameters (the
filter, `filt[i * KW + j]`). Each bound is a literal or a scalar parameter; a parameter is specialised to its
value at the spec's sizes, as a library specialises a convolution for its filter size.

Rendered: each thread owns the points (x0 + c, y0 + r), c < 4, r < window_rows. Where the bounds have the spec's
values and every one of its points reaches the window loops, the thread reads each input row it needs once, a
128-bit vector at a time where aligned, into registers, and adds every point's window from there in the
original order (i, then j): the same operations on the same values, so the same sums. Each point then runs the
rest of its body with SUM set to its sum. Any other thread (an edge, another filter size) runs the point body
as written for each of its points. Reading a row once for four outputs is what lifts a convolution from L1
traffic to DRAM bandwidth (on the H100, 2.4x over the submitted kernel, 96% of a copy, with k = 5).
"""
import re
from dataclasses import dataclass

from services.generator.rules import affine, points
from services.generator.rules.cuda_text import fresh_name, identifiers, mask
from services.generator.rules.points import Access, PointKernel
from services.generator.rules.shape import Layout, NotRecognised, one_thread_per_point
from services.generator.rules.statements import Statement, walk
from shared.domain.spec import KernelSpec

COLUMNS = 4  # the points along x a thread owns: one 128-bit vector of 4-byte elements
ROW_VALUES, LARGEST_WINDOW = [1, 2, 4, 8], 16
VECTORS = {"float": "float4", "int": "int4", "unsigned": "uint4", "unsigned int": "uint4"}
_HEADER = re.compile(r"\s*(?:int|unsigned|unsigned\s+int|long|long\s+long|size_t)\s+([A-Za-z_]\w*)\s*=\s*0\s*;"
                     r"\s*(\w+)\s*<\s*([^;]+?)\s*;\s*(?:(\w+)\s*\+\+|\+\+\s*(\w+)|(\w+)\s*\+=\s*1)\s*")
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")  # not a literal's suffix (0.0f) nor a member
_WORDS = {"const", "unsigned", "signed", "int", "long", "short", "float", "double", "char", "bool", "size_t",
          "static_cast", "reinterpret_cast", "true", "false"}


@dataclass(frozen=True)
class Loop:
    variable: str
    bound: str  # as written
    value: int  # at the spec's sizes


@dataclass(frozen=True)
class Window:
    kernel: PointKernel
    nest: Statement  # the outer window loop
    rows: Loop
    columns: Loop
    accumulator: str
    accumulator_type: str
    initial: str  # the accumulator's initialiser
    update: tuple[int, int]  # the span of EXPR in the source
    read: Access  # IN[...] inside EXPR
    element: str  # IN's element type
    specialised: tuple[tuple[str, str, int], ...]  # (parameter, its declared type, value) for each bound named


def recognise(spec: KernelSpec) -> Window:
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel as exc:
        raise NotRecognised(str(exc)) from None
    if len(kernel.axes) != 2 or len(spec.block_size_names) < 2:
        raise NotRecognised("a window sum here is 2D: two indices (x and y) and block sizes for both")
    for axis in (0, 1):
        if (why := one_thread_per_point(spec, axis)) is not None:
            raise NotRecognised(why)
    masked = mask(spec.source)
    nest, inner, update = _nest(kernel, masked)
    rows, columns = (_loop(kernel, masked, loop, spec) for loop in (nest, inner))
    accumulator = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*\+=(.*);\s*", masked[update.start:update.end], re.DOTALL)
    if accumulator is None:
        raise NotRecognised("its window loops do not add into an accumulator (`sum += ...;`)")
    name = accumulator.group(1)
    expression = (update.start + accumulator.start(2), update.start + accumulator.end(2))
    declared_type, initial = _declaration(kernel, masked, name, nest)
    read = _window_read(kernel, masked, expression, rows, columns)
    element = kernel.array_types.get(read.array)
    if element is None:
        raise NotRecognised(f"it reads its window from {read.array}, which is not a pointer parameter")
    prefix = masked[kernel.body_start:nest.start]
    if any(a.write for a in kernel.accesses if a.start < nest.start) or re.search(r"\batomic\w*\s*\(", prefix):
        raise NotRecognised("it writes memory before its window loops, so a point cannot be probed without its "
                            "effects")
    if re.search(rf"\b(?:{rows.variable}|{columns.variable})\b", prefix):
        raise NotRecognised(f"it uses the names {rows.variable} or {columns.variable} before its window loops")
    named = {}
    for loop in (rows, columns):
        if loop.bound in kernel.parameters:
            named[loop.bound] = (_scalar_type(kernel.parameters[loop.bound], loop.bound), loop.value)
    return Window(kernel, nest, rows, columns, name, declared_type, initial, expression, read, element,
                  tuple((p, t, v) for p, (t, v) in named.items()))


def _nest(kernel: PointKernel, masked: str) -> tuple[Statement, Statement, Statement]:
    """(outer loop, inner loop, the one statement inside) of the only loop nest of the point body."""
    loops = [(s, depth) for s, depth in walk(masked, list(kernel.statements)) if s.kind in ("for", "while", "do")]
    if not loops:
        raise NotRecognised("its point body has no loop over a window")
    outer, depth = loops[0]
    if depth or len(loops) != 2:
        raise NotRecognised("its point body does not have exactly one pair of nested window loops")
    inner = _only(outer.body, masked)
    if inner is None or inner.kind != "for" or inner.start != loops[1][0].start:
        raise NotRecognised("its outer window loop holds more than the inner loop")
    update = _only(inner.body, masked)
    if update is None or update.kind != "simple":
        raise NotRecognised("its inner window loop holds more than one statement")
    return outer, inner, update


def _only(statement: Statement, masked: str) -> Statement | None:
    """The statement itself, or the one statement of a block."""
    while statement.kind == "block":
        inside = [s for s in statement.children(masked) if s.kind != "empty"]
        if len(inside) != 1:
            return None
        statement = inside[0]
    return statement


def _loop(kernel: PointKernel, masked: str, loop: Statement, spec: KernelSpec) -> Loop:
    header = masked[loop.head[0]:loop.head[1]]
    match = _HEADER.fullmatch(header)
    variable = match and match.group(1)
    if not match or match.group(2) != variable or variable not in {match.group(4), match.group(5), match.group(6)}:
        raise NotRecognised(f"its window loop `for ({' '.join(header.split())})` does not count up by one from 0 "
                            f"to a bound (`for (int i = 0; i < k; i++)`)")
    bound = match.group(3).strip()
    if re.fullmatch(r"\d+", bound):
        value = int(bound)
    else:
        arg = next((a for a in spec.args if a.name == bound and not a.is_array), None)
        if arg is None or bound not in kernel.parameters:
            raise NotRecognised(f"its window bound {bound} is neither a literal nor a scalar parameter")
        value = int(spec.scalar_of(arg, spec.baseline_params()))
    if not 1 <= value <= LARGEST_WINDOW:
        raise NotRecognised(f"its window bound {bound} is {value} at the spec's sizes; a window held in registers is "
                            f"1 to {LARGEST_WINDOW} wide")
    return Loop(variable, bound, value)


def _declaration(kernel: PointKernel, masked: str, name: str, nest: Statement) -> tuple[str, str]:
    """The accumulator's type and initialiser: declared once in the point body before the window loops, and
    changed nowhere between, so every point's window sum starts from the initialiser."""
    body = masked[kernel.body_start:nest.start]
    declared = list(re.finditer(rf"(?:^|[;{{}}])\s*((?:const\s+)?[A-Za-z_][\w\s]*?)\s+\b{name}\s*=(?!=)([^;,]*);",
                                body))
    if len(declared) != 1:
        raise NotRecognised(f"its accumulator {name} is not declared once, with a value, before the window loops")
    after = body[declared[0].end():]
    if re.search(rf"\b{name}\s*{points.ASSIGNMENT}|(?:\+\+|--)\s*{name}\b|\b{name}\s*(?:\+\+|--)", after):
        raise NotRecognised(f"it changes {name} between its declaration and the window loops")
    start = kernel.body_start
    initial = kernel.source[start + declared[0].start(2):start + declared[0].end(2)].strip()
    free = set(_NAME.findall(declared[0].group(2))) - _WORDS
    if free - set(kernel.parameters) or "[" in initial:
        raise NotRecognised(f"its accumulator starts from {initial}, which depends on more than the parameters")
    return " ".join(kernel.source[start + declared[0].start(1):start + declared[0].end(1)].split()), initial


def _window_read(kernel: PointKernel, masked: str, expression: tuple[int, int], rows: Loop, columns: Loop) -> Access:
    """The one read of EXPR that moves with the point: IN[(y + i) * P + x + j + OFFSET]."""
    x, y, i, j = kernel.axes[0].name, kernel.axes[1].name, rows.variable, columns.variable
    inside = [a for a in kernel.accesses if expression[0] <= a.start < expression[1]]
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
    if any(a.array == read.array for a in kernel.accesses if a.write):
        raise NotRecognised(f"it writes {read.array}, the array its window reads")
    if re.search(r"&\s*$", masked[:read.start]):
        raise NotRecognised(f"it takes the address of {read.array}[{read.subscript}]")
    text = masked[expression[0]:read.start] + masked[read.end:expression[1]]
    free = {n for n in _NAME.findall(text) if not re.search(rf"\b{n}\s*\(", text)} - _WORDS - {i, j}
    if free - set(kernel.parameters):
        raise NotRecognised(f"its window update uses {', '.join(sorted(free - set(kernel.parameters)))}, which are "
                            f"not parameters or window loop variables")
    written = {a.array for a in kernel.accesses if a.write}
    if other := next((a for a in inside if a is not read and a.array in written), None):
        raise NotRecognised(f"its window update reads {other.array}, which the kernel writes")
    return read


def _scalar_type(declaration: str, name: str) -> str:
    return " ".join(w for w in declaration[:declaration.rindex(name)].split() if w != "const")


# --- rendering -------------------------------------------------------------------------------------------
def _render(model: Window, spec: KernelSpec) -> str:
    kernel, source = model.kernel, model.kernel.source
    ax, ay = kernel.axes
    rows_name = "window_rows"
    taken = identifiers(source)
    (x0, y0, point, reaches, at, finish, value, inside, done, total, row, last, r, c, v, chunk, quad, p) = (
        fresh_name(n, taken) for n in ("x_first", "y_first", "point", "reaches", "at", "finish", "window_value",
                                       "inside", "done", "window_sum", "row", "last", "r", "c", "v", "chunk", "quad",
                                       "p"))
    i, j = model.rows.variable, model.columns.variable
    read = source[model.read.start:model.read.end]
    probe = points.point_body(kernel, _returning(kernel, model, "false") + _cut(model, "true", "false"))
    address = points.point_body(kernel, _returning(kernel, model, "nullptr") + _cut(model, f"&{read}", "nullptr"))
    finishing = points.point_body(kernel, [(model.nest.start, model.nest.end, f"{model.accumulator} = {value};")])
    term = source[model.update[0]:model.read.start] + f"{v}[{c} + {j}]" + source[model.read.end:model.update[1]]
    width = f"({model.columns.bound})"
    span = f"{COLUMNS} + {width} - 1"
    index = [ax, ay]
    condition = " && ".join(f"{name} == {number}" for name, _, number in model.specialised)
    shadows = [f"const {t} {name} = {number};" for name, t, number in model.specialised]
    vector = VECTORS.get(model.element)
    loads = [f"for (int {chunk} = 0; {chunk} < {span}; {chunk}++) {v}[{chunk}] = {p}[{chunk}];"]
    if vector:
        loads = [f"if (reinterpret_cast<unsigned long long>({p}) % 16 == 0) {{",
                 "    #pragma unroll",
                 f"    for (int {chunk} = 0; {chunk} + 4 <= {span}; {chunk} += 4) {{",
                 f"        const {vector} {quad} = *reinterpret_cast<const {vector} *>({p} + {chunk});",
                 f"        {v}[{chunk}] = {quad}.x; {v}[{chunk} + 1] = {quad}.y; {v}[{chunk} + 2] = {quad}.z; "
                 f"{v}[{chunk} + 3] = {quad}.w;",
                 "    }",
                 "    #pragma unroll",
                 f"    for (int {chunk} = ({span}) / 4 * 4; {chunk} < {span}; {chunk}++) {v}[{chunk}] = {p}[{chunk}];",
                 "} else {",
                 "    #pragma unroll",
                 f"    {loads[0]}",
                 "}"]
    else:
        loads = ["#pragma unroll", *loads]
    fast = [
        *shadows,
        *points.lambda_of(reaches, index, probe),
        *_typed(points.lambda_of(at, [*index, _axis(i), _axis(j)], address), f"const {model.element} *"),
        *points.lambda_of(finish, [*index, points.Axis(0, value, model.accumulator_type, "", "")], finishing),
        f"bool {inside} = true;",
        "#pragma unroll",
        f"for (int {r} = 0; {r} < {rows_name}; {r}++) {{",
        "    #pragma unroll",
        f"    for (int {c} = 0; {c} < {COLUMNS}; {c}++) {inside} = {inside} && {reaches}({x0} + {c}, {y0} + {r});",
        "}",
        f"if ({inside}) {{",
        f"    {model.accumulator_type} {total}[{rows_name}][{COLUMNS}];",
        "    #pragma unroll",
        f"    for (int {r} = 0; {r} < {rows_name}; {r}++) {{",
        "        #pragma unroll",
        f"        for (int {c} = 0; {c} < {COLUMNS}; {c}++) {total}[{r}][{c}] = {model.initial};",
        "    }",
        "    #pragma unroll",
        f"    for (int {row} = 0; {row} < {rows_name} + ({model.rows.bound}) - 1; {row}++) {{",
        f"        // input row {y0} + {row}: row {row} - {last} of the windows of the points on row {last}",
        f"        const int {last} = {row} < {rows_name} ? {row} : {rows_name} - 1;",
        f"        const {model.element} *{p} = {at}({x0}, {y0} + {last}, {row} - {last}, 0);",
        f"        {model.element} {v}[{span}];",
        *("        " + line for line in loads),
        "        #pragma unroll",
        f"        for (int {r} = 0; {r} < {rows_name}; {r}++) {{",
        f"            const int {i} = {row} - {r};",
        f"            if ({i} >= 0 && {i} < ({model.rows.bound})) {{",
        "                #pragma unroll",
        f"                for (int {c} = 0; {c} < {COLUMNS}; {c}++) {{",
        "                    #pragma unroll",
        f"                    for (int {j} = 0; {j} < {width}; {j}++) {total}[{r}][{c}] +={term};",
        "                }",
        "            }",
        "        }",
        "    }",
        "    #pragma unroll",
        f"    for (int {r} = 0; {r} < {rows_name}; {r}++) {{",
        "        #pragma unroll",
        f"        for (int {c} = 0; {c} < {COLUMNS}; {c}++) {finish}({x0} + {c}, {y0} + {r}, {total}[{r}][{c}]);",
        "    }",
        f"    {done} = true;",
        "}",
    ]
    lines = [
        f"// A register window: each thread computes {COLUMNS} x {rows_name} points, reading each input row it needs",
        f"// once ({COLUMNS} + {model.columns.bound} - 1 values, 128 bits at a time where aligned) and adding every "
        f"point's window",
        "// from registers in the original order. Edge threads and other window sizes run the point body as "
        "written.",
        f"const {ax.type} {x0} = (({ax.type})blockIdx.x * {ax.block} + threadIdx.x) * {COLUMNS};",
        f"const {ay.type} {y0} = (({ay.type})blockIdx.y * {ay.block} + threadIdx.y) * {rows_name};",
        *points.lambda_of(point, index, points.point_body(kernel)),
        f"bool {done} = false;",
        f"if ({condition}) {{" if condition else "{",
        *("    " + line if line else line for line in fast),
        "}",
        f"if (!{done}) {{",
        "    #pragma unroll",
        f"    for (int {r} = 0; {r} < {rows_name}; {r}++) {{",
        "        #pragma unroll",
        f"        for (int {c} = 0; {c} < {COLUMNS}; {c}++) {point}({x0} + {c}, {y0} + {r});",
        "    }",
        "}",
    ]
    return points.with_body(kernel, lines)


def _cut(model: Window, reached: str, otherwise: str) -> list[tuple[int, int, str]]:
    """The point body up to its window loops, returning `reached` there and `otherwise` past the blocks it had
    opened: a point's probe, which runs what the point runs before its window and writes nothing."""
    kernel, source = model.kernel, model.kernel.source
    opened = mask(source)[kernel.body_start:model.nest.start]
    depth = opened.count("{") - opened.count("}")
    indent = model.kernel.statements[0].start - source.rindex("\n", 0, model.kernel.statements[0].start) - 1
    closers = [" " * (indent + 4 * level) + "}" for level in reversed(range(depth))]
    text = "\n".join([f"return {reached};", *closers, " " * indent + f"return {otherwise};"])
    return [(model.nest.start, kernel.body_end, text)]


def _returning(kernel: PointKernel, model: Window, value: str) -> list[tuple[int, int, str]]:
    """A probe returns `value` wherever the point body returns before reaching its window."""
    masked = mask(kernel.source)
    return [(kernel.body_start + m.start(), kernel.body_start + m.end(), f"return {value};")
            for m in re.finditer(r"\breturn\s*;", masked[kernel.body_start:model.nest.start])]


def _axis(name: str) -> points.Axis:
    return points.Axis(0, name, "int", "", "")


def _typed(lines: list[str], returned: str) -> list[str]:
    """A lambda_of lambda declaring what it returns."""
    return [lines[0].replace(") {", f") -> {returned} {{", 1), *lines[1:]]


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
        layout = Layout(tune_params={"window_rows": ROW_VALUES}, defaults={"window_rows": 4},
                        restrictions=(f"{bx} * {by} <= 256",), grid_div={"x": [bx, COLUMNS], "y": [by, "window_rows"]})
        return _render(model, spec), layout
