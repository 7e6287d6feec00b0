"""row_in_registers: a row that a kernel passes over several times (row_passes.py) held in registers.

Each pass `for (int c = START; c < END; c += STEP) BODY` becomes a fully unrolled loop over the first row_chunks
elements of the thread, then the loop as written for the elements past them:

    #pragma unroll
    for (int k = 0; k < row_chunks; k++) {
        const int c = START + k * STEP;
        if (c < END) BODY        // X[BASE + c] read as regs[k]; the first pass stores regs[k] = X[BASE + c] first
    }
    for (int c = START + row_chunks * STEP; c < END; c += STEP) BODY

So each thread handles the elements it did, in the same order, with the same arithmetic: every value and every
reduction is the submitted kernel's. The row is read from global memory once where row_chunks block widths cover
it; at any other length (the verifier's odd sizes) the elements past them are read by each pass as before. A
thread reads back only what it stored itself, so no barrier is needed; and once the loops are unrolled, regs is
indexed by constants only, so it stays in registers rather than local memory. The loop past them keeps the
submitted loop's unroll pragma, if it had one (the unrolled loop takes its place).

row_chunks is tuned over the powers of two that keep at most REGISTER_BYTES of the row per thread, restricted to
the fewest block widths that cover the spec's row (more only hold idle registers, fewer read the rest again);
a row that no block size of the spec covers within that budget is refused. The grid and the block are the
submitted ones (partition.py). The block's reductions stay trees that shuffle_reduction replaces, and the unroll
rule takes the loops past the registers. vectorize_loops would widen the passes another way (four elements a
thread at a time, read from global memory by every pass): the two are alternatives (catalog.py).
"""
import re

from services.generator.rules.cuda_text import fresh_name, identifiers, mask
from services.generator.rules.points import INDENT, replace_spans
from services.generator.rules.row_passes import Pass, RowPasses, at_the_top, indent_at, pass_body, row_length
from services.generator.rules.shape import Layout
from services.generator.rules.tree import unroll_pragma
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


def render(model: RowPasses, spec: KernelSpec) -> tuple[str, Layout]:
    source = spec.source
    taken = identifiers(source)
    registers, k = fresh_name(f"{model.array}_regs", taken), fresh_name("k", taken)
    edits = [at_the_top(source, model, [
        f"// The loops below pass over {model.array}[{model.subscript}] several times: the first keeps the first "
        f"{CHUNKS} elements",
        "// each thread reads in registers and the later ones read them there (the loops over them are unrolled, so",
        "// every index is a constant); the elements past them, if any, each pass reads from the row as before.",
        f"{model.element} {registers}[{CHUNKS}];"])]
    for number, p in enumerate(model.passes):
        store = f"{registers}[{k}] = {model.array}[{model.subscript}];" if number == 0 else None
        start, pragma = unroll_pragma(source, p.loop.start)
        text = _chunked(source, p, f"{registers}[{k}]", k, store, pragma)
        if text.startswith("\n"):  # off the line of the code before it, spaces and all
            start = len(source[:start].rstrip(" \t"))
        edits.append((start, p.loop.end, text))
    x_name = spec.block_size_names[0]
    length = model.length if re.fullmatch(r"\w+", model.length) else f"({model.length})"
    default = _covering(model, spec, spec.baseline_params()[x_name])
    layout = Layout(tune_params={CHUNKS: _chunk_values(model)},
                    defaults={CHUNKS: default} if default in _chunk_values(model) else {},
                    restrictions=(f"{CHUNKS} * {x_name} >= {length}",
                                  f"{CHUNKS} == 1 or {CHUNKS} * {x_name} < 2 * {length}"))
    return replace_spans(source, edits), layout


def _chunked(source: str, p: Pass, register: str, k: str, store: str | None, pragma: str) -> str:
    """The pass as an unrolled loop over the thread's first row_chunks elements (the row read as `register`),
    then the loop as written past them, under the submitted loop's own unroll pragma if it had one. Two loops
    where one was: braced when the pass is the body of an if or a loop, and a pragma begins its own line."""
    head, indent = p.head, indent_at(source, p.loop.start)
    start = head.start if re.fullmatch(r"[\w.]+", head.start) else f"({head.start})"
    step = head.step if re.fullmatch(r"[\w.]+", head.step) else f"({head.step})"
    depth = "" if p.in_block else INDENT
    c = head.index
    lines = ["#pragma unroll",
             f"for (int {k} = 0; {k} < {CHUNKS}; {k}++) {{",
             f"{INDENT}const {head.type} {c} = {start} + {k} * {step};",
             f"{INDENT}if ({c} < {head.end}) {_deeper(pass_body(source, p, register, store), depth + INDENT)}",
             "}",
             *([pragma] if pragma else []),
             f"for ({head.type} {c} = {start} + {CHUNKS} * {step}; {c} < {head.end}; {c} += {head.step}) "
             f"{_deeper(source[p.loop.body.start:p.loop.body.end], depth)}"]
    if not p.in_block:
        lines = ["{", *(INDENT + line for line in lines), "}"]
    text = "\n".join(lines[:1] + [indent + line for line in lines[1:]])
    after_code = source[source.rfind("\n", 0, p.loop.start) + 1:p.loop.start].strip()
    return f"\n{indent}{text}" if after_code and p.in_block else text


def _deeper(text: str, by: str) -> str:
    """`text` with each line after its first indented `by` more."""
    return re.sub(r"\n(?=[ \t]*\S)", "\n" + by, text)


def _chunk_values(model: RowPasses) -> list[int]:
    """The powers of two that keep at most REGISTER_BYTES of the row per thread."""
    return [1 << i for i in range((REGISTER_BYTES // model.itemsize).bit_length())]


def _covering(model: RowPasses, spec: KernelSpec, x: int) -> int:
    """The fewest chunks, a power of two, whose block widths of x threads cover the spec's row."""
    widths = max(1, -(-row_length(model, spec) // x))
    return 1 << (widths - 1).bit_length()
