"""Row-wise loops of one thread per row (GEMV, sparse rows, row sums), restructured as a warp per row.

Recognised: a kernel of one point per thread along x (the row) whose point body runs one loop over the row,
`for (int c = START; c < END; c++)`, adding into accumulators declared before it at zero (`sum += A[r * cols +
c] * x[c]`, `sum = sum + E`, `sum = E + sum`, or a float or double `sum = fmaf(A[r * cols + c], x[c], sum)`);
the loop's other assignments are to its own locals. What the row does after the loop (`y[r] =
sum`) comes after it in the same block. Neighbouring threads read addresses a row apart, so no load is
coalesced.

Rendered: a block of block_size_x (32) x block_size_y threads takes block_size_y rows, one per warp
(row = blockIdx.x * block_size_y + threadIdx.y). The lanes split the loop (c = START + lane, stepping 32), so a
warp reads 32 consecutive elements of its row at once, then add their sums with __shfl_xor_sync; lane 0 goes on
with the rest of the row alone. The loop body stays as written, so each lane accumulates as the thread did (an
fmaf chain stays one), and only the partial sums are added in another order (within float rounding). The lane
loop is one the vectorize_loops rule can widen to 128-bit loads.
"""
import re
from dataclasses import dataclass

from services.generator.rules import affine, points
from services.generator.rules.cuda_text import closing, fresh_name, identifiers, mask, split_top_level
from services.generator.rules.points import ASSIGNMENT, INDENT, INTEGER_TYPE, PointKernel
from services.generator.rules.shape import Layout, NotRecognised, default_in, one_thread_per_point
from services.generator.rules.statements import Statement, walk
from shared.domain.spec import KernelSpec

ACCUMULATOR_TYPES = r"(?:float|double|int|unsigned\s+int|unsigned|long\s+long|unsigned\s+long\s+long)"
ZERO = r"(?:0+(?:\.0*)?[fF]?|0*\.0+[fF]?|0[uUlL]*)"
ROWS_PER_BLOCK = [1, 2, 4, 8, 16, 32]
# `sum = fmaf(X, Y, sum)` adds X * Y with one rounding: a sum for a float or double accumulator (for an integer one
# the float result is truncated at each step, which lanes' partial sums would not repeat).
FUSED = r"(?:fmaf|fma|__fmaf_rn|__fma_rn)"
FLOATING = ("float", "double")


@dataclass(frozen=True)
class RowLoop:
    kernel: PointKernel
    loop: Statement  # the loop over the row
    variable: str  # its index, e.g. c
    type: str
    start: str  # where it starts, as written
    end: str  # its bound
    accumulators: dict[str, str]  # name -> type


def recognise(spec: KernelSpec) -> RowLoop:
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel as exc:
        raise NotRecognised(str(exc)) from None
    if len(kernel.axes) != 1:
        raise NotRecognised("it has a 2D or 3D grid; a row per thread has one index")
    if len(spec.block_size_names) < 2:
        raise NotRecognised("the spec names no y block size for the rows of a block")
    if (why := one_thread_per_point(spec, 0)) is not None:
        raise NotRecognised(why)
    masked = mask(spec.source)
    uncommented = mask(spec.source, literals=False)
    outer = [s for s, depth in walk(masked, list(kernel.statements)) if s.kind in ("for", "while", "do") and depth == 0]
    if len(outer) != 1 or outer[0].kind != "for":
        raise NotRecognised(f"its row body has {len(outer)} outer loops; a row loop kernel has one for loop")
    loop = outer[0]
    init, condition, step = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
    declared = re.fullmatch(rf"\s*(?:const\s+)?(?P<type>{INTEGER_TYPE})\s+(?P<name>[A-Za-z_]\w*)\s*=(?P<start>.*)",
                            init, re.DOTALL)
    if declared is None:
        raise NotRecognised("its loop does not declare its index, as in `for (int c = 0; c < cols; c++)`")
    c = declared["name"]
    bound = re.fullmatch(rf"\s*{c}\s*<\s*(?P<end>.+?)\s*", condition, re.DOTALL)
    if bound is None:
        raise NotRecognised(f"its loop runs while `{' '.join(condition.split())}`, not while `{c} < end`")
    if not re.fullmatch(rf"\s*(?:{c}\s*\+\+|\+\+\s*{c}|{c}\s*\+=\s*1|{c}\s*=\s*{c}\s*\+\s*1)\s*", step):
        raise NotRecognised(f"its loop steps by `{' '.join(step.split())}`, not by one")
    start_at = loop.head[0] + declared.start("start")
    end_at = loop.head[0] + len(init) + 1 + bound.start("end")
    start = " ".join(uncommented[start_at:start_at + len(declared["start"])].split())
    end = " ".join(uncommented[end_at:end_at + len(bound["end"])].split())
    if masked[kernel.body_start:loop.start].rstrip()[-1:] not in (";", "{", "}", ""):
        raise NotRecognised("its row loop is the body of another statement, not a statement of a block")
    inside = masked[loop.body.start:loop.body.end]
    escape = re.search(r"\b(break|return|goto)\b", inside)
    if escape:
        raise NotRecognised(f"its loop body uses {escape[1]}, whose meaning changes when lanes split the loop")
    accumulators = _accumulators(kernel, masked, loop, inside, c)
    _check_effects(kernel, masked, loop)
    r = kernel.axes[0].name
    inside_loop = [a for a in kernel.accesses if loop.body.start <= a.start < loop.body.end and a.poly is not None]
    row_start = r in re.findall(r"[A-Za-z_]\w*", start)  # the loop starts where the row does (CSR)
    rows_apart = [a for a in inside_loop if affine.is_unit(affine.stride(a.poly, c))
                  and (r in affine.names(a.poly) or row_start)]
    if not rows_apart:
        raise NotRecognised(f"its loop reads no array contiguously along {c} at an address that changes with the "
                            f"row, so neighbouring threads do not read rows apart")
    along_rows = [a for a in inside_loop if affine.is_unit(affine.stride(a.poly, r))]
    if along_rows:
        raise NotRecognised(f"{along_rows[0].array}[{along_rows[0].subscript}] is contiguous along the rows already: "
                            f"a warp per row would scatter it")
    return RowLoop(kernel, loop, c, " ".join(declared["type"].split()), start, end, accumulators)


def _accumulators(kernel: PointKernel, masked: str, loop: Statement, inside: str, c: str) -> dict[str, str]:
    local = set(re.findall(r"(?:^|[;{(,]\s*)(?:const\s+)?[A-Za-z_][\w:<>]*(?:\s*\*)*\s+([A-Za-z_]\w*)\s*[=;,\[]",
                           inside))
    assigned: dict[str, set[str]] = {}
    for match in re.finditer(rf"(?<![\w.\]>])\s*\b([A-Za-z_]\w*)\s*({ASSIGNMENT}|\+\+|--)", inside):
        assigned.setdefault(match.group(1), set()).add(match.group(2))
    for match in re.finditer(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", inside):
        assigned.setdefault(match.group(1), set()).add("++")
    if c in assigned:
        raise NotRecognised(f"its loop body changes the loop index {c}")
    accumulators = {}
    for name, operators in assigned.items():
        if name in local:
            continue
        if not operators <= {"+=", "="}:
            raise NotRecognised(f"its loop changes {name} by {', '.join(sorted(operators))}; a row loop only adds "
                                f"into accumulators (+=) and assigns its own locals")
        declaration = re.search(rf"\b({ACCUMULATOR_TYPES})\s+{name}\s*=\s*{ZERO}\s*[;,]",
                                masked[kernel.body_start:loop.start])
        if declaration is None:
            raise NotRecognised(f"{name}, which the loop adds into, is not declared before it at zero as a float, "
                                f"double or integer")
        accumulators[name] = " ".join(declaration.group(1).split())
    if not accumulators:
        raise NotRecognised("its loop adds into no accumulator")
    for name, type_ in accumulators.items():
        uses = len(re.findall(rf"\b{name}\b", inside))
        if uses != len(re.findall(rf"\b{name}\s*\+=", inside)) + 2 * _sums_assigned(masked, loop, name, type_):
            raise NotRecognised(f"its loop reads the accumulator {name}, so the partial sums of lanes would differ "
                                f"from the row's")
    return accumulators


def _sums_assigned(masked: str, loop: Statement, name: str, type_: str) -> int:
    """How many plain assignments to the accumulator add into it, each a statement of its own mentioning it
    twice: `name = name + E`, `name = E + name` (E's operators at its top level all binding tighter than +, so E
    is added whole) and, for a float or double, `name = fmaf(X, Y, name)`; NotRecognised for any other. The loop
    body stays as written, so each lane keeps the thread's arithmetic (an fmaf chain stays one)."""
    why = (f"a row loop only adds into accumulators (+=, {name} = {name} + x, or for a float or double {name} = "
           f"fmaf(x, y, {name})) and assigns its own locals")
    assigned = re.compile(rf"(?<![\w.\]>])\b{name}\s*=(?!=)")
    statements = [masked[s.start:s.end] for s, _ in walk(masked, [loop.body]) if s.kind == "simple"]
    expressions = [m["expression"] for text in statements
                   if (m := re.fullmatch(rf"\s*{assigned.pattern}(?P<expression>.*);\s*", text, re.DOTALL))]
    if len(expressions) != len(assigned.findall(masked, loop.body.start, loop.body.end)):
        raise NotRecognised(f"its loop assigns {name} within an expression; {why}")
    for expression in expressions:
        fused = re.match(rf"\s*{FUSED}\s*\(", expression)
        if fused and type_ in FLOATING:
            close = closing(expression, fused.end() - 1)
            arguments = split_top_level(expression[fused.end():close], ",")
            if len(arguments) == 3 and arguments[2].strip() == name and not expression[close + 1:].strip():
                continue
        added = (re.fullmatch(rf"\s*{name}\s*\+(?P<term>.+)", expression, re.DOTALL)
                 or re.fullmatch(rf"(?P<term>.+?)\+\s*{name}\s*", expression, re.DOTALL))
        if added and not re.search(r"[-+*/%]\s*$", added["term"]) and \
                all(len(split_top_level(added["term"], operator)) == 1 for operator in "?:<>=&|^,"):
            continue
        raise NotRecognised(f"its loop assigns {name} `{' '.join(expression.split())}`; {why}")
    return len(expressions)


def _check_effects(kernel: PointKernel, masked: str, loop: Statement) -> None:
    """Outside the loop, the row's effects (stores, atomics) must come after it in the block around it: lane 0
    alone gets there."""
    enclosing = (kernel.body_start, kernel.body_end)
    for statement, _ in walk(masked, list(kernel.statements)):
        if statement.kind == "block" and statement.inner[0] <= loop.start and loop.end <= statement.inner[1]:
            enclosing = statement.inner
    effects = [a.start for a in kernel.accesses if a.write]
    effects += [kernel.body_start + m.start() for m in re.finditer(r"\batomic\w+\s*\(",
                                                                    masked[kernel.body_start:kernel.body_end])]
    for at in effects:
        if loop.start <= at < loop.end:
            continue
        if not (loop.end <= at < enclosing[1]):
            raise NotRecognised("it writes memory before its row loop or outside the block that holds it")


def _render(model: RowLoop, spec: KernelSpec) -> str:
    kernel = model.kernel
    axis = kernel.axes[0]
    lanes, rows = spec.block_size_names[0], spec.block_size_names[1]
    taken = identifiers(kernel.source)
    offset = fresh_name("offset", taken)
    source = kernel.source
    line_start = source.rfind("\n", 0, model.loop.start) + 1
    indent = re.match(r"[ \t]*", source[line_start:]).group()
    first = "threadIdx.x" if model.start == "0" else f"({model.start}) + threadIdx.x"
    head = f"{model.type} {model.variable} = {first}; {model.variable} < {model.end}; {model.variable} += {lanes}"
    after = [f"// The row's {lanes} lanes add their partial sums; lane 0 goes on with the row's result.",
             "#pragma unroll",
             f"for (int {offset} = 16; {offset} > 0; {offset} /= 2) {{",
             *(f"{INDENT}{name} += __shfl_xor_sync(0xffffffffu, {name}, {offset});" for name in model.accumulators),
             "}",
             "if (threadIdx.x != 0) return;"]
    tail = "".join(f"\n{indent}{line}" for line in after)
    body = points.point_body(kernel, [(model.loop.head[0], model.loop.head[1], head),
                                      (model.loop.end, model.loop.end, tail)])
    lines = ["// A warp per row: the lanes split the row's loop, so each warp load reads consecutive elements.",
             f"const {axis.type} {axis.name} = ({axis.type})blockIdx.x * {rows} + threadIdx.y;",
             *body.split("\n")]
    return points.with_body(kernel, lines)


class RowLoopShape:
    name = "row_loop"
    kind = "a row loop of one thread per row"
    rules = ("warp_per_row",)

    def recognise(self, spec: KernelSpec) -> RowLoop:
        return recognise(spec)

    def reason(self, rule_id: str, model: RowLoop, spec: KernelSpec) -> str | None:
        return None

    def render(self, model: RowLoop, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        lanes, rows = spec.block_size_names[0], spec.block_size_names[1]
        layout = Layout(tune_params={lanes: [32], rows: ROWS_PER_BLOCK},
                        defaults={lanes: 32, rows: default_in(ROWS_PER_BLOCK, spec.params.get(rows), 4)},
                        grid_div={"x": [rows]})
        return _render(model, spec), layout
