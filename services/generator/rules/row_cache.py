"""row_in_shared: a row that a kernel passes over several times, read from global memory once.

Recognised: a kernel whose block (or each warp of a 2D block, along threadIdx.y) walks a row in several loops
`for (int c = threadIdx.x; c < END; c += blockDim.x)` (the block-size define, a local equal to either, or the
literal x block size when the spec has one), and which reads one input row `X[BASE + c]` in two or more of
them: softmax (maximum, sum of exponentials, outputs), layer normalisation (mean, variance, outputs), a norm
and its scaling. Every such loop gives a thread the same elements c (threadIdx.x, then a block width apart),
so what a thread reads of the row in a later loop is exactly what it read in the first one.

Rendered: the first of those loops keeps each element it reads in dynamic shared memory (`cache[c] = X[BASE +
c];` at the top of its body, its reads of X[BASE + c] then read cache[c]); the later loops read cache[c] instead
of X[BASE + c]. Every value is the one the submitted kernel read: the arithmetic is the submitted kernel's,
element by element and in the same order (its reductions are untouched). A 2D block keeps a row per threadIdx.y.
Each thread reads back the elements it stored itself, but vectorize_loops may later give one pass vectors and
another the scalar loop (their arrays' alignments differ), and then other threads' elements: so a barrier must
come between the first pass and the others. The block's reduction between passes is one (softmax, layernorm: a
__syncthreads, or a call of a helper that has one); else the rule adds __syncwarp() after the first pass when
a row's threads are a warp (x block size 32), or __syncthreads() when the first pass is a statement of the
kernel's body with no return before it, and refuses the kernel otherwise. The candidate's
smem_args asks for the row's bytes, `END * sizeof(element)` (times block_size_y), from the spec's sizes; the
rule refuses a row that, with the kernel's static shared memory, passes the 48 KB a block gets without opting
in (restricting block_size_y where only the larger values do). The grid and the block are the submitted ones,
so each per-block result keeps its elements (partition.py), and the block size stays as tunable as it was.
The loops stay strided loops that vectorize_loops widens (the shared-memory reads too), and the block's
reductions stay trees that shuffle_reduction replaces.
"""
import re
from dataclasses import dataclass

from services.generator.rules import affine
from services.generator.rules.cuda_text import Kernel, closing, find_kernel, fresh_name, identifiers, mask
from services.generator.rules.loops import affine_locals, counted_loop
from services.generator.rules.points import ASSIGNMENT, INDENT, replace_spans
from services.generator.rules.shape import Layout, NotRecognised
from services.generator.rules.statements import Statement, Unparsed, body_of, statements, walk
from shared.domain.expressions import ExpressionError, evaluate
from shared.domain.spec import KernelSpec

SHARED_BYTES = 48 * 1024  # what a block may take without opting in, static and dynamic together
SIZES = {"float": 4, "double": 8, "int": 4, "unsigned": 4, "unsigned int": 4, "signed": 4, "signed int": 4,
         "int32_t": 4, "uint32_t": 4, "long long": 8, "unsigned long long": 8, "int64_t": 8, "uint64_t": 8,
         "short": 2, "unsigned short": 2, "int16_t": 2, "uint16_t": 2, "char": 1, "signed char": 1,
         "unsigned char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1, "__half": 2, "half": 2, "__nv_bfloat16": 2,
         "float2": 8, "float4": 16, "int2": 8, "int4": 16, "double2": 16}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict"}


@dataclass(frozen=True)
class Pass:
    loop: Statement
    variable: str  # its index, e.g. c
    end: str  # its bound as written
    reads: tuple[tuple[int, int], ...]  # spans of the row's reads X[BASE + c] in its body


@dataclass(frozen=True)
class RowPasses:
    kernel: Kernel
    array: str  # X
    element: str  # its element type, qualifiers dropped
    itemsize: int
    subscript: str  # the first pass's first read's subscript, as written
    length: str  # the row length (the loops' bound) as a spec expression
    passes: tuple[Pass, ...]
    per_y: str | None  # the y block size name when a 2D block keeps a row per threadIdx.y
    y_values: tuple[int, ...]  # the values the spec gives it (1 without)
    static_bytes: int | None  # the kernel's static shared memory at its largest configuration; None: unknown
    barrier: str | None  # the barrier to add after the first pass; None when one comes between the passes


def recognise(spec: KernelSpec) -> RowPasses:
    source = spec.source
    kernel = find_kernel(source, spec.kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    body = body_of(kernel, masked, NotRecognised)
    start, end = kernel.body_open + 1, kernel.body_close
    aliases = affine_locals(masked, start, end)
    widths = {"blockDim.x", spec.block_size_names[0]}
    x_values = _values(spec, spec.block_size_names[0])
    literal = x_values[0] if len(set(x_values)) == 1 else None
    loops = []
    for statement, _ in walk(masked, body):
        if statement.kind == "for":
            header = _block_loop(masked, uncommented, statement, widths, literal, aliases)
            if header is not None:
                loops.append((statement, *header))
    if not loops:
        raise NotRecognised("it has no loop of a block over a row (`for (int c = threadIdx.x; c < end; c += "
                            "blockDim.x)`)")
    rows: dict[tuple, list[tuple[int, int, int, str]]] = {}  # (X, BASE) -> (loop, start, end, subscript)
    for number, (loop, c, _) in enumerate(loops):
        inside = loop.body.inner if loop.body.kind == "block" else (loop.body.start, loop.body.end)
        for match in re.finditer(r"(?<![\w.>\]])([A-Za-z_]\w*)\s*\[", masked[inside[0]:inside[1]]):
            opening = inside[0] + match.end() - 1
            close = closing(masked, opening)
            subscript = uncommented[opening + 1:close]
            try:
                poly = affine.parse(subscript, aliases)
            except affine.NotAffine:
                continue
            if not affine.is_unit(affine.stride(poly, c)):
                continue
            base = affine.without(poly, {c})
            key = (match.group(1), tuple(sorted(base.items())))
            rows.setdefault(key, []).append((number, inside[0] + match.start(), close + 1, subscript))
    repeated = {key: reads for key, reads in rows.items() if len({r[0] for r in reads}) >= 2}
    if not repeated:
        raise NotRecognised(f"no row is read in more than one of its {len(loops)} loop(s) over a row: a single "
                            f"pass reads each element once already")
    refusals = []
    for key in sorted(repeated, key=lambda k: (-len({r[0] for r in repeated[k]}), repeated[k][0][1])):
        try:
            return _model(spec, kernel, masked, body, loops, key[0], repeated[key])
        except NotRecognised as exc:
            refusals.append(str(exc))
    raise NotRecognised("; ".join(refusals))


def _model(spec: KernelSpec, kernel: Kernel, masked: str, body: list[Statement], loops: list, array: str,
           reads: list[tuple[int, int, int, str]]) -> RowPasses:
    numbers = sorted({r[0] for r in reads})
    passes = tuple(Pass(loops[n][0], loops[n][1], loops[n][2],
                        tuple((a, b) for m, a, b, _ in reads if m == n)) for n in numbers)
    first = passes[0]
    source = spec.source
    if len({p.end for p in passes}) != 1:
        raise NotRecognised(f"its loops over {array} end at {', '.join(sorted({p.end for p in passes}))}: one "
                            f"row has one length")
    parameters = _parameters(source, kernel, spec)
    root = _root(masked, kernel, array, parameters)
    if root is None:
        raise NotRecognised(f"which argument {array} points into cannot be told")
    if parameters[root][1] != "in":
        where = f"the kernel writes {array}" if root == array else \
            f"{array} points into {root}, which the kernel writes"
        raise NotRecognised(f"{where} (role {parameters[root][1]}): the row could change between its passes")
    text = masked[kernel.body_open + 1:kernel.body_close]
    for match in re.finditer(rf"(?<![\w.>])\b{re.escape(array)}\s*\[", text):
        close = closing(text, match.end() - 1)
        if re.match(rf"\s*(?:{ASSIGNMENT}|\+\+|--)", text[close + 1:]) or \
                text[:match.start()].rstrip().endswith(("++", "--")):
            raise NotRecognised(f"the kernel writes {array}")
    span = masked[first.loop.start:passes[-1].loop.end]
    subscript = next(s for n, a, b, s in reads if a == first.reads[0][0])
    names = set(affine.names(affine.parse(subscript))) | set(re.findall(r"[A-Za-z_]\w*", first.end)) | {array}
    for name in sorted(n for n in names if "." not in n and n != first.variable):
        if re.search(rf"(?<![\w.])\b{name}\s*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*{name}\b", span):
            raise NotRecognised(f"{name}, which says where the row lies or how long it is, changes between its "
                                f"passes")
    for p in passes:
        inside = masked[p.loop.body.start:p.loop.body.end]
        if re.search(rf"(?<![\w.])\b{p.variable}\s*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*{p.variable}\b", inside):
            raise NotRecognised(f"a loop over the row changes its index {p.variable}")
    escape = re.search(r"\b(break|return|goto)\b", masked[first.loop.body.start:first.loop.body.end])
    if escape:
        raise NotRecognised(f"its first pass over the row uses {escape[1]}, so it may not read the whole row")
    container = _container(masked, body, (kernel.body_open + 1, kernel.body_close), first.loop)
    if container is None:
        raise NotRecognised("its first pass over the row is the body of another statement, not a statement of a "
                            "block, so the later passes may run without it")
    if any(later.loop.start < earlier.loop.end for earlier, later in zip(passes, passes[1:])):
        raise NotRecognised("a loop over the row lies inside another")
    if any(p.loop.end > container[1] for p in passes[1:]):
        raise NotRecognised("a later pass over the row lies outside the block of the first")
    element = _element_type(masked, source, kernel, array, parameters)
    if element not in SIZES:
        raise NotRecognised(f"the size of {array}'s element type {element!r} is not known")
    length = _length(first.end, parameters, spec)
    per_y = None
    y_values: tuple[int, ...] = (1,)
    if len(spec.block_size_names) >= 3 and any(v > 1 for v in _values(spec, spec.block_size_names[2])):
        raise NotRecognised("its blocks are 3D")
    if len(spec.block_size_names) >= 2:
        y_values = tuple(_values(spec, spec.block_size_names[1]))
        if any(v > 1 for v in y_values):
            per_y = spec.block_size_names[1]
    barrier = _barrier(spec, masked, kernel, passes, container, per_y)
    return RowPasses(kernel, array, element, SIZES[element], " ".join(subscript.split()), length, passes, per_y,
                     y_values, _static_bytes(source, spec), barrier)


def _barrier(spec: KernelSpec, masked: str, kernel: Kernel, passes: tuple[Pass, ...], container: tuple[int, int],
             per_y: str | None) -> str | None:
    """None when a barrier already comes between the first pass and every later one, else the one to add."""
    warp = set(_values(spec, spec.block_size_names[0])) == {32}
    synchronising = {"__syncthreads"} | ({"__syncwarp"} if warp else set())
    helpers = {name for name in set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", masked))
               if _calls_barrier(masked, name, kernel)}
    first = passes[0]
    between = [set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", masked[first.loop.end:p.loop.start])) for p in passes[1:]]
    if all(names & (synchronising | helpers) for names in between):
        return None
    if warp:
        return "__syncwarp();"
    if per_y is None and container == (kernel.body_open + 1, kernel.body_close) and \
            not re.search(r"\breturn\b", masked[container[0]:first.loop.start]):
        return "__syncthreads();"
    raise NotRecognised("no barrier comes between its first pass over the row and the later ones, and none can be "
                        "added where every thread of the row's block reaches it")


def _calls_barrier(masked: str, name: str, kernel: Kernel) -> bool:
    """Whether `name` is a function of the source (not the kernel) whose body calls __syncthreads."""
    for match in re.finditer(rf"\b{re.escape(name)}\s*\(", masked):
        if match.start() == kernel.name_at or masked.count("{", 0, match.start()) != masked.count("}", 0, match.start()):
            continue  # the kernel, or a call or a statement inside a function
        after = re.match(r"\s*\{", masked[closing(masked, match.end() - 1) + 1:])
        if after is not None:
            opening = closing(masked, match.end() - 1) + 1 + after.end() - 1
            return "__syncthreads" in masked[opening:closing(masked, opening)]
    return False


def _values(spec: KernelSpec, name: str) -> list[int]:
    values = [v for v in spec.tune_params.get(name, []) if isinstance(v, int)]
    baseline = spec.baseline_params().get(name)
    return values or ([baseline] if isinstance(baseline, int) else [1])


def _block_loop(masked: str, uncommented: str, loop: Statement, widths: set[str], literal: int | None,
                aliases: dict[str, affine.Poly]) -> tuple[str, str] | None:
    """(index, bound as written) of `for (int c = threadIdx.x; c < END; c += width)`, else None."""
    counted = counted_loop(masked, uncommented, loop, aliases)
    if counted is None or counted.first != {("threadIdx.x",): 1}:
        return None
    if not any(counted.stride == {(w,): 1} for w in widths) and \
            not (literal is not None and counted.stride == {(): literal}):
        return None
    return counted.index, counted.end


def _parameters(source: str, kernel: Kernel, spec: KernelSpec) -> dict[str, tuple[str, str, object]]:
    """Each parameter's name -> (declaration, role, value expression of a scalar)."""
    spans = kernel.parameters(source)
    if len(spans) != len(spec.args):
        raise NotRecognised(f"the kernel has {len(spans)} parameters but args lists {len(spec.args)}")
    found = {}
    for (a, b), arg in zip(spans, spec.args):
        names = re.findall(r"[A-Za-z_]\w*", mask(source[a:b]))
        if names:
            found[names[-1]] = (" ".join(mask(source[a:b]).split()), arg.effective_role if arg.is_array else "scalar",
                                arg.value)
    return found


def _root(masked: str, kernel: Kernel, array: str, parameters: dict) -> str | None:
    """The pointer parameter the array is, or the one a local pointer is defined from (`row = in + r * n`)."""
    if array in parameters:
        return array if "*" in parameters[array][0] else None
    body = masked[kernel.body_open + 1:kernel.body_close]
    definitions = list(re.finditer(rf"\*\s*(?:const\s+)?(?:__restrict__\s+)?{re.escape(array)}\s*=([^;]*);", body))
    if len(definitions) != 1:
        return None
    if re.search(rf"(?<![\w.])\b{re.escape(array)}\s*(?:{ASSIGNMENT}|\+\+|--)", body[definitions[0].end():]):
        return None
    return next((name for name in re.findall(r"[A-Za-z_]\w*", definitions[0].group(1))
                 if name in parameters and "*" in parameters[name][0]), None)


def _element_type(masked: str, source: str, kernel: Kernel, array: str, parameters: dict) -> str:
    if array in parameters:
        declaration = parameters[array][0].split("*")[0]
    else:
        body = masked[kernel.body_open + 1:kernel.body_close]
        match = re.search(rf"([A-Za-z_][\w ]*?)\s*\*\s*(?:const\s+)?(?:__restrict__\s+)?{re.escape(array)}\s*=", body)
        declaration = match.group(1) if match else ""
    return " ".join(w for w in declaration.split() if w not in _QUALIFIERS)


def _length(end: str, parameters: dict, spec: KernelSpec) -> str:
    """The loops' bound as a spec expression: scalar parameters become their values, defines stay."""
    why = (f"the row's length `{end}` is not a sum or product of the kernel's scalar parameters and defines, so its "
           f"bytes cannot be told from the spec")
    if not re.fullmatch(r"[\w\s+*()]+", end):
        raise NotRecognised(why)
    defines = set(spec.params) | set(spec.tune_params) | set(spec.block_size_names)

    def value(match: re.Match) -> str:
        name = match.group()
        if name in parameters and parameters[name][1] == "scalar" and parameters[name][2] is not None:
            shown = str(parameters[name][2])
            return shown if re.fullmatch(r"\w+", shown) else f"({shown})"
        if name in defines or name.isdigit():
            return name
        raise NotRecognised(why)

    length = re.sub(r"[A-Za-z_]\w*|\d+", value, end)
    try:
        evaluate(length, spec.variables(spec.baseline_params()))
    except (ExpressionError, ValueError):
        raise NotRecognised(why) from None
    return length


def _static_bytes(source: str, spec: KernelSpec) -> int | None:
    """The static __shared__ bytes of the source at the largest value of every tune parameter, or None."""
    masked = mask(source)
    defines = {m.group(1): m.group(2) for m in re.finditer(r"(?m)^\s*#\s*define\s+([A-Za-z_]\w*)\s+(\d+)\s*$", masked)}
    largest = {name: max(v for v in values if isinstance(v, int | float))
               for name, values in spec.tune_params.items() if any(isinstance(v, int | float) for v in values)}
    variables = {**spec.variables({**spec.baseline_params(), **largest}), **{k: int(v) for k, v in defines.items()}}
    total = 0
    pattern = (r"\b__shared__\s+(?:volatile\s+)?(?:__align__\s*\(\s*\d+\s*\)\s*)?"
               r"([A-Za-z_][\w ]*?)\s+[A-Za-z_]\w*\s*((?:\[[^\]]*\]\s*)*)[;=]")
    for match in re.finditer(pattern, masked):
        if re.search(r"\bextern\s*$", masked[:match.start()]):
            continue
        element = " ".join(w for w in match.group(1).split() if w not in _QUALIFIERS)
        count = 1
        for dimension in re.findall(r"\[([^\]]*)\]", match.group(2)):
            try:
                count *= int(evaluate(" ".join(dimension.split()), variables))
            except (ExpressionError, ValueError):
                return None
        if element not in SIZES:
            return None
        total += count * SIZES[element]
    return total


def _container(masked: str, body: list[Statement], span: tuple[int, int],
               target: Statement) -> tuple[int, int] | None:
    """The inside of the block (or the kernel's body) that holds `target` as a statement of its own."""
    for statement in body:
        if (statement.start, statement.end) == (target.start, target.end):
            return span
        if statement.start <= target.start and target.end <= statement.end:
            if statement.kind == "block":
                return _container(masked, statements(masked, *statement.inner), statement.inner, target)
            for child in (statement.body, statement.orelse):
                if child is not None and child.start <= target.start and target.end <= child.end:
                    if child.kind == "block":
                        return _container(masked, statements(masked, *child.inner), child.inner, target)
                    return None if (child.start, child.end) == (target.start, target.end) else \
                        _container(masked, [child], (child.start, child.end), target)
            return None
    return None


# --- the bound, and the rewrite ---------------------------------------------------------------------------
def row_bytes(model: RowPasses, spec: KernelSpec, y: int) -> int:
    return int(evaluate(model.length, spec.variables(spec.baseline_params()))) * model.itemsize * y


def reason(model: RowPasses, spec: KernelSpec) -> str | None:
    if spec.smem_args is not None or re.search(r"\bextern\s+__shared__", mask(spec.source)):
        return "the kernel already uses dynamic shared memory (smem_args), which the row would have to share"
    if model.static_bytes is None:
        return "the kernel's static shared memory cannot be sized, so whether the row fits beside it is unknown"
    room = SHARED_BYTES - model.static_bytes
    if not any(row_bytes(model, spec, y) <= room for y in model.y_values):
        y = min(model.y_values)
        rows = f" for each of {y} rows of a block" if model.per_y else ""
        return (f"the row of {model.array} takes {row_bytes(model, spec, y)} bytes of shared memory at the spec's "
                f"sizes ({model.length} x {model.itemsize}{rows}), more than the {room} left of the "
                f"{SHARED_BYTES} a block gets by default beside its {model.static_bytes} bytes of static shared "
                f"memory")
    return None


def render(model: RowPasses, spec: KernelSpec) -> tuple[str, Layout]:
    source = spec.source
    taken = identifiers(source)
    raw, cache = fresh_name("row_shared", taken), fresh_name(f"{model.array}_cache", taken)
    element = model.element
    end = model.passes[0].end if re.fullmatch(r"\w+", model.passes[0].end) else f"({model.passes[0].end})"
    offset = f" + (size_t)threadIdx.y * {end}" if model.per_y else ""
    replacements = []
    masked = mask(source)
    first_statement = statements(masked, model.kernel.body_open + 1, model.kernel.body_close)[0]
    indent = _indent(source, first_statement.start)
    declarations = [f"// The loops below pass over {model.array}[{model.subscript}] several times: the first keeps each "
                    f"element it reads",
                    "// in shared memory and the later ones read it there, each thread the elements it stored itself.",
                    f"extern __shared__ __align__(16) unsigned char {raw}[];",
                    f"{element} *{cache} = reinterpret_cast<{element} *>({raw}){offset};"]
    replacements.append((model.kernel.body_open + 1, model.kernel.body_open + 1,
                         "".join(f"\n{indent}{line}" for line in declarations)))
    for number, p in enumerate(model.passes):
        replacements += [(a, b, f"{cache}[{p.variable}]") for a, b in p.reads]
        if number:
            continue
        loop_indent = _indent(source, p.loop.start)
        barrier = "" if model.barrier is None else \
            f"\n{loop_indent}{model.barrier}  // the later passes may read elements that other threads stored"
        store = f"{cache}[{p.variable}] = {model.array}[{model.subscript}];"
        if p.loop.body.kind == "block":
            inner = next((s.start for s in statements(masked, *p.loop.body.inner)), None)
            at_indent = _indent(source, inner) if inner is not None else loop_indent + INDENT
            replacements.append((p.loop.body.inner[0], p.loop.body.inner[0], f"\n{at_indent}{store}"))
            replacements.append((p.loop.end, p.loop.end, barrier))
        else:
            replacements.append((p.loop.body.start, p.loop.body.start, f"{{\n{loop_indent}{INDENT}{store}\n"
                                                                     f"{loop_indent}{INDENT}"))
            replacements.append((p.loop.body.end, p.loop.body.end, f"\n{loop_indent}}}{barrier}"))
    rewritten = replace_spans(source, replacements)
    y_name = model.per_y
    size = f"{model.length} * {model.itemsize}" if not y_name else f"{y_name} * {model.length} * {model.itemsize}"
    room = SHARED_BYTES - (model.static_bytes or 0)
    restrictions = ()
    if y_name and any(row_bytes(model, spec, y) > room for y in model.y_values):
        restrictions = (f"{size} <= {room}",)
    return rewritten, Layout(restrictions=restrictions, smem=size)


def _indent(source: str, at: int) -> str:
    line_start = source.rfind("\n", 0, at) + 1
    return re.match(r"[ \t]*", source[line_start:]).group()


class RowPassesShape:
    name = "row_passes"
    kind = "a kernel that passes over each row several times (a block, or a warp, per row)"
    rules = ("row_in_shared",)

    def recognise(self, spec: KernelSpec) -> RowPasses:
        try:
            return recognise(spec)
        except Unparsed as exc:
            raise NotRecognised(f"its body could not be read: {exc}") from None

    def reason(self, rule_id: str, model: RowPasses, spec: KernelSpec) -> str | None:
        return reason(model, spec)

    def render(self, model: RowPasses, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        return render(model, spec)
