"""row_in_registers: a row that a kernel passes over several times (row_passes.py) held in registers.

Each pass `for (int c = START; c < END; c += STEP) BODY` becomes a fully unrolled loop over the thread's first
elements, then the loop as written for the elements past them:

    #pragma unroll
    for (int k = 0; k < CHUNKS; k++) {
        const int c = START + k * STEP;
        if (c < END) BODY        // X[BASE + c] read as regs[k]; the first pass stores regs[k] = X[BASE + c] first
    }
    for (int c = START + CHUNKS * STEP; c < END; c += STEP) BODY

So each thread handles the elements it did, in the same order, with the same arithmetic. A row of 4-byte elements
(float, int, unsigned) is read as 128-bit vectors where it can be: when &X[BASE] is 16-byte aligned and END a
multiple of four (tested at run time, once, before the first pass: the base and length do not change between the
passes), each pass takes a vector path instead, the loops above over vectors v = START + k * STEP (elements
4v .. 4v+3, the first pass loading each vector into regs[4k] .. regs[4k+3]), BODY run for the four elements in
turn; CHUNKS is then 4 * row_chunks in the scalar path, so both hold as many registers. The vector path gives a
thread other elements (four consecutive ones a block width of vectors apart, as vectorize_loops does): what the
block reduces over its threads only rounds otherwise (a sum reordered), while what a thread makes of its own
elements alone changes as it does under another block size. Every pass of a thread takes the same path, so it
reads back only what it stored itself, and no barrier is needed. Once the loops are unrolled,
regs is indexed by constants only, so it stays in registers rather than local memory. The row is read from global
memory once where the registers cover it; at any other length (the verifier's odd sizes) the elements past them
are read by each pass as before. The loops past the registers keep the submitted loop's unroll pragma, if it had
one (the unrolled loops take its place).

row_chunks is tuned over the powers of two that keep at most REGISTER_BYTES of the row per thread, restricted to
the fewest block widths (of vectors, where the row's elements have one) that cover the spec's row (more only hold
idle registers, fewer read the rest again); a row that no block size of the spec covers within that budget is
refused. The grid and the block are the submitted ones (partition.py). The block's reductions stay trees that
shuffle_reduction replaces, and the unroll rule takes the loops past the registers. vectorize_loops would widen
the passes another way (read from global memory by every pass): the two are alternatives (catalog.py).
"""
import re
from dataclasses import dataclass

from services.generator.rules.cuda_text import fresh_name, identifiers, mask
from services.generator.rules.loops import LANES, VECTORS, aligned_16
from services.generator.rules.points import INDENT, replace_spans
from services.generator.rules.row_passes import Pass, RowPasses, at_the_top, indent_at, pass_body, row_length
from services.generator.rules.shape import Layout
from shared.domain.spec import KernelSpec

CHUNKS = "row_chunks"
REGISTER_BYTES = 128  # of the row per thread: 32 registers of 4 bytes, beside what the kernel needs of its own


def reason(model: RowPasses, spec: KernelSpec) -> str | None:
    masked = mask(spec.source)
    for p in model.passes:
        escape = re.search(r"\b(break|goto)\b", masked[p.loop.body.start:p.loop.body.end])
        if escape:
            return (f"a pass over the row uses {escape[1]}, which in its unrolled loop would leave the elements "
                    f"past the registers to the loop after it")
    if not any(_covering(model, spec, x) in _chunk_values(model) for x in model.x_values):
        return (f"the row of {model.array} has {row_length(model, spec)} elements at the spec's sizes: even a block of "
                f"{max(model.x_values)} threads would hold more than {REGISTER_BYTES} bytes of it per thread in "
                f"registers")
    return None


@dataclass(frozen=True)
class _Names:
    """The rewrite's identifiers, fresh in the kernel."""
    registers: str
    k: str
    vectors: str  # the run-time test that the row takes the vector path
    v: str
    lane: str
    loaded: str  # the vector the first pass loads


def render(model: RowPasses, spec: KernelSpec) -> tuple[str, Layout]:
    source = spec.source
    taken = identifiers(source)
    names = _Names(*(fresh_name(base, taken) for base in (f"{model.array}_regs", "k", f"{model.array}_vectors", "v",
                                                          "lane", f"{model.array}4")))
    held = _held(model)
    top = [f"// The loops below pass over {model.array}[{model.subscript}] several times: the first keeps the "
           f"first {held} elements",
           "// each thread reads in registers and the later ones read them there (the loops over them are unrolled, so",
           "// every index is a constant); the elements past them, if any, each pass reads from the row as before."]
    if _lanes(model) > 1:
        top += [f"// A 16-byte aligned row whose length is a multiple of {len(LANES)} is read as {CHUNKS} vectors of "
                f"{len(LANES)} per thread, a block",
                "// width of vectors apart; any other row element by element, a block width apart."]
    edits = [at_the_top(source, model, [*top, f"{model.element} {names.registers}[{held}];"])]
    for number, p in enumerate(model.passes):
        start, pragma = _unroll_pragma(source, p.loop.start)
        lines = _rendered(source, model, p, names, number == 0, pragma)
        if not p.in_block:
            lines = ["{", *(INDENT + line for line in lines), "}"]
        indent = indent_at(source, p.loop.start)
        text = "\n".join(lines[:1] + [indent + line if line.strip() else line for line in lines[1:]])
        after_code = source[source.rfind("\n", 0, p.loop.start) + 1:p.loop.start].strip()
        if after_code and p.in_block:  # off the line of the code before it, spaces and all
            start, text = len(source[:start].rstrip(" \t")), f"\n{indent}{text}"
        edits.append((start, p.loop.end, text))
    x_name = spec.block_size_names[0]
    length = model.length if re.fullmatch(r"\w+", model.length) else f"({model.length})"
    default = _covering(model, spec, spec.baseline_params()[x_name])
    layout = Layout(tune_params={CHUNKS: _chunk_values(model)},
                    defaults={CHUNKS: default} if default in _chunk_values(model) else {},
                    restrictions=(f"{held} * {x_name} >= {length}",
                                  f"{CHUNKS} == 1 or {held} * {x_name} < 2 * {length}"))
    return replace_spans(source, edits), layout


def _rendered(source: str, model: RowPasses, p: Pass, names: _Names, first: bool, pragma: str) -> list[str]:
    """The lines of a pass: the scalar loops alone, or (a row with vectors) the run-time test, first, and the
    vector loops where it holds, the scalar loops where not."""
    scalar = _scalar(source, model, p, names, first, pragma)
    if _lanes(model) == 1:
        return scalar
    test = [f"const bool {names.vectors} = {_operand(p.head.end)} % {len(LANES)} == 0 && "
            f"{aligned_16(_row(model))};"] if first else []
    return [*test,
            f"if ({names.vectors}) {{",
            *(INDENT + line for line in _vector(source, model, p, names, first, pragma)),
            "} else {",
            *(INDENT + line for line in scalar),
            "}"]


def _scalar(source: str, model: RowPasses, p: Pass, names: _Names, first: bool, pragma: str) -> list[str]:
    """The pass as an unrolled loop over the thread's first elements (the row read from the registers), then the
    loop as written past them."""
    head, k, held = p.head, names.k, _held(model)
    start, step, c = _operand(head.start), _operand(head.step), head.index
    store = f"{names.registers}[{k}] = {model.array}[{model.subscript}];" if first else None
    loop_indent = indent_at(source, p.loop.start)
    return ["#pragma unroll",
            f"for (int {k} = 0; {k} < {held}; {k}++) {{",
            f"{INDENT}const {head.type} {c} = {start} + {k} * {step};",
            *_statement(f"{INDENT}if ({c} < {head.end}) ",
                        pass_body(source, p, f"{names.registers}[{k}]", store), loop_indent),
            "}",
            *([pragma] if pragma else []),
            *_statement(f"for ({head.type} {c} = {start} + {held} * {step}; {c} < {head.end}; {c} += {head.step}) ",
                        source[p.loop.body.start:p.loop.body.end], loop_indent)]


def _vector(source: str, model: RowPasses, p: Pass, names: _Names, first: bool, pragma: str) -> list[str]:
    """The pass over the thread's vectors: an unrolled loop over its first row_chunks (the first pass loading
    each into four registers), then a loop over the vectors past them; BODY runs for each vector's elements in
    turn."""
    head, k, v, lanes = p.head, names.k, names.v, len(LANES)
    start, step, vectors = _operand(head.start), _operand(head.step), f"{_operand(head.end)} / {lanes}"
    vector = VECTORS[model.element]
    register = f"{names.registers}[{lanes} * {k} + {names.lane}]"
    load = [f"const {vector} {names.loaded} = reinterpret_cast<const {vector} *>({_row(model)})[{v}];",
            *(f"{names.registers}[{lanes} * {k} + {i}] = {names.loaded}.{letter};" for i, letter in enumerate(LANES))
            ] if first else []
    return ["#pragma unroll",
            f"for (int {k} = 0; {k} < {CHUNKS}; {k}++) {{",
            f"{INDENT}const {head.type} {v} = {start} + {k} * {step};",
            f"{INDENT}if ({v} < {vectors}) {{",
            *(INDENT * 2 + line for line in load),
            *(INDENT * 2 + line for line in _lanes_of(source, p, names, pass_body(source, p, register))),
            f"{INDENT}}}",
            "}",
            *([pragma] if pragma else []),
            f"for ({head.type} {v} = {start} + {CHUNKS} * {step}; {v} < {vectors}; {v} += {head.step}) {{",
            *(INDENT + line for line in _lanes_of(source, p, names, source[p.loop.body.start:p.loop.body.end])),
            "}"]


def _lanes_of(source: str, p: Pass, names: _Names, body: str) -> list[str]:
    """`body` run for the four elements of vector v in turn, in a loop the compiler unrolls (the registers'
    index a constant); its own index only where it reads it."""
    c = p.head.index
    index = [f"{INDENT}const {p.head.type} {c} = {len(LANES)} * {names.v} + {names.lane};"] \
        if re.search(rf"\b{c}\b", mask(body)) else []
    return ["#pragma unroll",
            f"for (int {names.lane} = 0; {names.lane} < {len(LANES)}; {names.lane}++) {{",
            *index,
            *_statement(INDENT, body, indent_at(source, p.loop.start)),
            "}"]


def _statement(head: str, text: str, indent: str) -> list[str]:
    """The lines of `head` followed by the statement `text`, written in a loop at `indent`: its later lines keep
    their place relative to that loop, under head's own indentation."""
    first, *rest = text.split("\n")
    at = head[:len(head) - len(head.lstrip())]
    return [head + first, *(at + line[len(indent):] if line.startswith(indent) else line for line in rest)]


def _row(model: RowPasses) -> str:
    """&X[BASE]: where the row begins (the subscript is the first pass's, in its index)."""
    base = re.sub(rf"\b{model.passes[0].head.index}\b", "0", model.subscript)
    return f"&{model.array}[{base}]"


def _operand(text: str) -> str:
    return text if re.fullmatch(r"[\w.]+", text) else f"({text})"


def _unroll_pragma(source: str, at: int) -> tuple[int, str]:
    """Where the edit of the loop at `at` starts, and the `#pragma unroll` line right before it ('' without one,
    the edit then starting at the loop)."""
    before = mask(source)[:at].rstrip()
    line_start = before.rfind("\n") + 1
    if not re.match(r"\s*#\s*pragma\s+unroll\b", before[line_start:]):
        return at, ""
    hash_at = before.index("#", line_start)
    return hash_at, source[hash_at:len(before)]


def _lanes(model: RowPasses) -> int:
    """The elements of a chunk: a vector's where the row's element type has one, else one."""
    return len(LANES) if model.element in VECTORS else 1


def _held(model: RowPasses) -> str:
    """The registers a thread holds, as the code writes their count."""
    return f"{_lanes(model)} * {CHUNKS}" if _lanes(model) > 1 else CHUNKS


def _chunk_values(model: RowPasses) -> list[int]:
    """The powers of two that keep at most REGISTER_BYTES of the row per thread."""
    return [1 << i for i in range((REGISTER_BYTES // (_lanes(model) * model.itemsize)).bit_length())]


def _covering(model: RowPasses, spec: KernelSpec, x: int) -> int:
    """The fewest chunks, a power of two, whose block widths of x threads cover the spec's row."""
    widths = max(1, -(-row_length(model, spec) // (_lanes(model) * x)))
    return 1 << (widths - 1).bit_length()
