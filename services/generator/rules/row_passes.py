"""The shape the row rules restructure: a kernel that passes over each row several times (row_in_shared in
row_cache.py, row_in_registers in row_registers.py).

Recognised: a kernel whose block (or each warp of a 2D block, along threadIdx.y) walks a row in several loops
`for (int c = threadIdx.x; c < END; c += blockDim.x)` (the block-size define, a local equal to either, or the
literal x block size when the spec has one), and which reads one input row `X[BASE + c]` in two or more of
them: softmax (maximum, sum of exponentials, outputs), layer normalisation (mean, variance, outputs), a norm
and its scaling. Every such loop gives a thread the same elements c (threadIdx.x, then a block width apart),
so what a thread reads of the row in a later loop is exactly what it read in the first one. The row is an
input the kernel never writes, its base and length do not change between the passes, and the first pass is a
statement of a block that holds the later ones, with no way out of its loop: so it reads the whole row before
any later pass reads it again.
"""
import re
from dataclasses import dataclass

from services.generator.rules import affine
from services.generator.rules.cuda_text import Kernel, closing, find_kernel, mask
from services.generator.rules.loops import CountedLoop, affine_locals, counted_loop
from services.generator.rules.points import ASSIGNMENT, INDENT, replace_spans
from services.generator.rules.shape import NotRecognised
from services.generator.rules.statements import Statement, body_of, made_whenever_run, statements, walk
from shared.domain.expressions import ExpressionError, evaluate
from shared.domain.spec import KernelSpec

SIZES = {"float": 4, "double": 8, "int": 4, "unsigned": 4, "unsigned int": 4, "signed": 4, "signed int": 4,
         "int32_t": 4, "uint32_t": 4, "long long": 8, "unsigned long long": 8, "int64_t": 8, "uint64_t": 8,
         "short": 2, "unsigned short": 2, "int16_t": 2, "uint16_t": 2, "char": 1, "signed char": 1,
         "unsigned char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1, "__half": 2, "half": 2, "__nv_bfloat16": 2,
         "float2": 8, "float4": 16, "int2": 8, "int4": 16, "double2": 16}
QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict"}


@dataclass(frozen=True)
class Pass:
    loop: Statement
    head: CountedLoop  # `for (int c = START; c < END; c += STEP)` as written
    reads: tuple[tuple[int, int], ...]  # spans of the row's reads X[BASE + c] in its body
    in_block: bool  # a statement of a block, not the body of an if or a loop


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
    x_values: tuple[int, ...]  # the values the spec gives the x block size
    container: tuple[int, int]  # the inside of the block (or the kernel's body) that holds the first pass


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
            head = _block_loop(masked, uncommented, statement, widths, literal, aliases)
            if head is not None:
                loops.append((statement, head))
    if not loops:
        raise NotRecognised("it has no loop of a block over a row (`for (int c = threadIdx.x; c < end; c += "
                            "blockDim.x)`)")
    rows: dict[tuple, list[tuple[int, int, int, str]]] = {}  # (X, BASE) -> (loop, start, end, subscript)
    for number, (loop, head) in enumerate(loops):
        inside = loop.body.inner if loop.body.kind == "block" else (loop.body.start, loop.body.end)
        # An index each loop declares for itself (`const int idx = row * cols + c;` in every pass) is the loop's.
        known = {**aliases, **affine_locals(masked, *inside, aliases)}
        for match in re.finditer(r"(?<![\w.>\]])([A-Za-z_]\w*)\s*\[", masked[inside[0]:inside[1]]):
            opening = inside[0] + match.end() - 1
            close = closing(masked, opening)
            subscript = uncommented[opening + 1:close]
            try:
                poly = affine.parse(subscript, known)
            except affine.NotAffine:
                continue
            if not affine.is_unit(affine.stride(poly, head.index)):
                continue
            base = affine.without(poly, {head.index})
            key = (match.group(1), tuple(sorted(base.items())))
            rows.setdefault(key, []).append((number, inside[0] + match.start(), close + 1, subscript))
    repeated = {key: reads for key, reads in rows.items() if len({r[0] for r in reads}) >= 2}
    if not repeated:
        raise NotRecognised(f"no row is read in more than one of its {len(loops)} loop(s) over a row: a single "
                            f"pass reads each element once already")
    refusals = []
    for key in sorted(repeated, key=lambda k: (-len({r[0] for r in repeated[k]}), repeated[k][0][1])):
        try:
            return _model(spec, kernel, masked, body, loops, key[0], repeated[key], aliases)
        except NotRecognised as exc:
            refusals.append(str(exc))
    raise NotRecognised("; ".join(refusals))


def _model(spec: KernelSpec, kernel: Kernel, masked: str, body: list[Statement], loops: list, array: str,
           reads: list[tuple[int, int, int, str]], aliases: dict[str, affine.Poly]) -> RowPasses:
    numbers = sorted({r[0] for r in reads})
    kernel_span = (kernel.body_open + 1, kernel.body_close)
    passes = tuple(Pass(*loops[n], tuple((a, b) for m, a, b, _ in reads if m == n),
                        _container(masked, body, kernel_span, loops[n][0]) is not None) for n in numbers)
    first = passes[0]
    source = spec.source
    # The rewrites keep what the first pass reads of the row by reading it first in its body, so the first pass
    # must read it wherever its body runs: read under a condition (the last chunk's bound, an optional array),
    # the row may end there, or the pointer be null, where the kernel as written reads nothing.
    inner = first.loop.body.inner if first.loop.body.kind == "block" else (first.loop.body.start, first.loop.body.end)
    if not made_whenever_run(masked, statements(masked, *inner), first.reads[0][0]):
        raise NotRecognised(f"its first pass over {array} reads it only under a condition: a copy of the row read "
                            f"before that condition would read where the kernel as written does not")
    if len({p.head.end for p in passes}) != 1:
        raise NotRecognised(f"its loops over {array} end at {', '.join(sorted({p.head.end for p in passes}))}: one "
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
    names = set(affine.names(affine.parse(subscript, affine_locals(masked, *inner, aliases)))) | \
        set(re.findall(r"[A-Za-z_]\w*", first.head.end)) | {array}
    for name in sorted(n for n in names if "." not in n and n != first.head.index):
        if re.search(rf"(?<![\w.])\b{name}\s*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*{name}\b", span):
            raise NotRecognised(f"{name}, which says where the row lies or how long it is, changes between its "
                                f"passes")
    for p in passes:
        inside, c = masked[p.loop.body.start:p.loop.body.end], p.head.index
        if re.search(rf"(?<![\w.])\b{c}\s*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*{c}\b", inside):
            raise NotRecognised(f"a loop over the row changes its index {c}")
    escape = re.search(r"\b(break|return|goto)\b", masked[first.loop.body.start:first.loop.body.end])
    if escape:
        raise NotRecognised(f"its first pass over the row uses {escape[1]}, so it may not read the whole row")
    container = _container(masked, body, kernel_span, first.loop)
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
    length = _length(first.head.end, parameters, spec)
    per_y = None
    y_values: tuple[int, ...] = (1,)
    if len(spec.block_size_names) >= 3 and any(v > 1 for v in _values(spec, spec.block_size_names[2])):
        raise NotRecognised("its blocks are 3D")
    if len(spec.block_size_names) >= 2:
        y_values = tuple(_values(spec, spec.block_size_names[1]))
        if any(v > 1 for v in y_values):
            per_y = spec.block_size_names[1]
    return RowPasses(kernel, array, element, SIZES[element], " ".join(subscript.split()), length, passes, per_y,
                     y_values, tuple(_values(spec, spec.block_size_names[0])), container)


def _values(spec: KernelSpec, name: str) -> list[int]:
    values = [v for v in spec.tune_params.get(name, []) if isinstance(v, int)]
    baseline = spec.baseline_params().get(name)
    return values or ([baseline] if isinstance(baseline, int) else [1])


def _block_loop(masked: str, uncommented: str, loop: Statement, widths: set[str], literal: int | None,
                aliases: dict[str, affine.Poly]) -> CountedLoop | None:
    """The head of `for (int c = threadIdx.x; c < END; c += width)`, else None."""
    counted = counted_loop(masked, uncommented, loop, aliases)
    if counted is None or counted.first != {("threadIdx.x",): 1}:
        return None
    if not any(counted.stride == {(w,): 1} for w in widths) and \
            not (literal is not None and counted.stride == {(): literal}):
        return None
    return counted


def _parameters(source: str, kernel: Kernel, spec: KernelSpec) -> dict[str, tuple[str, str, object]]:
    """Each parameter's name -> (declaration, role, value expression of a scalar)."""
    spans = kernel.parameters(source)
    if len(spans) != len(spec.parameters):
        raise NotRecognised(f"the kernel has {len(spans)} parameters but args lists {len(spec.parameters)}")
    found = {}
    for (a, b), arg in zip(spans, spec.parameters):
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
    return " ".join(w for w in declaration.split() if w not in QUALIFIERS)


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


def row_length(model: RowPasses, spec: KernelSpec) -> int:
    """The row's elements at the spec's sizes."""
    return int(evaluate(model.length, spec.variables(spec.baseline_params())))


# --- what the renderings of every row rule print ------------------------------------------------------------
def pass_body(source: str, p: Pass, read: str, store: str | None = None) -> str:
    """The statement a pass's loop runs, each read of the row in it replaced by `read`; `store`, when given,
    comes right before the statement of the pass's first read (made wherever the body runs, after the locals its
    subscript may name), or first in a single statement, braced to hold both."""
    body = p.loop.body
    edits = [(a - body.start, b - body.start, read) for a, b in p.reads]
    if store is not None:
        loop_indent = indent_at(source, p.loop.start)
        if body.kind == "block":
            reading = next(s for s in statements(mask(source), *body.inner) if s.start <= p.reads[0][0] < s.end)
            edits.append((reading.start - body.start, reading.start - body.start,
                          f"{store}\n{indent_at(source, reading.start)}"))
        else:
            edits += [(0, 0, f"{{\n{loop_indent}{INDENT}{store}\n{loop_indent}{INDENT}"),
                      (body.end - body.start, body.end - body.start, f"\n{loop_indent}}}")]
    return replace_spans(source[body.start:body.end], edits)


def at_the_top(source: str, model: RowPasses, lines: list[str]) -> tuple[int, int, str]:
    """The edit that puts `lines` first in the kernel's body, indented as its first statement."""
    opening = model.kernel.body_open + 1
    indent = indent_at(source, statements(mask(source), opening, model.kernel.body_close)[0].start)
    return opening, opening, "".join(f"\n{indent}{line}" for line in lines)


def indent_at(source: str, at: int) -> str:
    line_start = source.rfind("\n", 0, at) + 1
    return re.match(r"[ \t]*", source[line_start:]).group()


def barrier_between(masked: str, kernel: Kernel, start: int, end: int, warp: bool = False) -> bool:
    """Whether masked[start:end] calls __syncthreads (or __syncwarp, for a warp's row), itself or through a
    function of the source whose body does."""
    called = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", masked[start:end]))
    return bool(called & ({"__syncthreads"} | ({"__syncwarp"} if warp else set()))) or \
        any(_calls_barrier(masked, name, kernel) for name in called)


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
