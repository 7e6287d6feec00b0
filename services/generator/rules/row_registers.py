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
reduction is the submitted kernel's. The row is read from global memory once where row_chunks block widths
cover it; at any other length (the verifier's odd sizes) the elements past them are read by each pass as before.
A thread reads back only what it stored itself, so no barrier is needed; and once the loops are unrolled, regs is
indexed by constants only, so it stays in registers rather than local memory. The loop past them keeps the
submitted loop's unroll pragma, if it had one (the unrolled loop takes its place).

Where every pass is a loop vectorize_loops can widen (loops.py), the row's elements are 4 bytes, the threads of a
row combine what they hold across all of them (_combined_across_the_row) and nothing but the passes touches their
arrays (_touched_only_by_the_passes), the passes also take vectors of four, as vectorize_loops would: the thread's
first (row_chunks + 3) / 4 vectors of the row are held in vector registers, the vectors past them are read from the
row, and the last END % 4 elements are taken one by one. One test before the first pass, that every array the passes
touch is 16-byte aligned, chooses between the vectors and the elements for all passes, so what a later pass reads
from the registers is what the first stored there; it may, because each array's address is declared before the first
pass, does not change between the passes and does not depend on threadIdx.x (so every thread of a row takes the same
branch). In the vectors, a thread takes other elements than it did, which reorders what it accumulates (float sums
round differently, as any reordered sum does); a kernel whose results still depend on which thread takes which
element (a thread's own maximum written out) fails the verifier there, as it would under vectorize_loops.

row_chunks is tuned over the powers of two that keep at most REGISTER_BYTES of the row per thread, restricted to
the fewest block widths that cover the spec's row (more only hold idle registers, fewer read the rest again);
a row that no block size of the spec covers within that budget is refused. The grid and the block are the
submitted ones (partition.py). The block's reductions stay trees that shuffle_reduction replaces, and the unroll
rule takes the loops past the registers. vectorize_loops would widen the passes without the registers, read
from global memory by every pass: the two are alternatives (catalog.py).
"""
import re

from services.generator.rules.cuda_text import CAST_WORDS, LAUNCH_NAMES, fresh_name, identifiers, mask
from services.generator.rules.loops import VectorLoop, reindent, vector_lines, vector_loops, vector_ready
from services.generator.rules.points import ASSIGNMENT, INDENT, replace_spans
from services.generator.rules.row_passes import (Pass, RowPasses, at_the_top, barrier_between, indent_at, pass_body,
                                                 row_length)
from services.generator.rules.shape import Layout
from services.generator.rules.tree import unroll_pragma
from shared.domain.spec import KernelSpec

CHUNKS = "row_chunks"
REGISTER_BYTES = 128  # of the row per thread: 32 registers of 4 bytes, beside what the kernel needs of its own
# The words of a cast in an address (`(size_t)r * cols`): no name the address reads.
TYPE_WORDS = CAST_WORDS | {"const", "signed", "short", "char", "float", "double"}
HELD = f"({CHUNKS} + 3) / 4"  # the vectors of four a thread holds in the aligned passes: its elements, rounded up


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
    widened = _widened_passes(model, spec)
    comment = [
        f"// The loops below pass over {model.array}[{model.subscript}] several times: the first keeps the first "
        f"{CHUNKS} elements",
        "// each thread reads in registers and the later ones read them there (the loops over them are unrolled, so",
        "// every index is a constant); the elements past them, if any, each pass reads from the row as before."]
    declarations = [f"{model.element} {registers}[{CHUNKS}];"]
    if widened:
        held, flag = fresh_name(f"{model.array}_regs4", taken), fresh_name("aligned", taken)
        names = {"v": fresh_name("v", taken), "vectors": fresh_name("vectors", taken),
                 "read": fresh_name(f"{model.array}4", taken)}
        row_vector = next(a.vector for a in widened[0].arrays if a.name == model.array)
        comment.append("// Where every array the loops touch is 16-byte aligned, they move four consecutive elements "
                       "at a time instead,")
        comment.append("// a thread holding its first row_chunks of them (rounded up to whole vectors) in vector "
                       "registers.")
        declarations.append(f"{row_vector} {held}[{HELD}];")
        tests = dict.fromkeys(vector_ready(a) for loop in widened for a in loop.arrays)
        flag_line = f"const bool {flag} = {' && '.join(tests)};"
    edits = [at_the_top(source, model, [*comment, *declarations])]
    for number, p in enumerate(model.passes):
        store = f"{registers}[{k}] = {model.array}[{model.subscript}];" if number == 0 else None
        start, pragma = unroll_pragma(source, p.loop.start)
        indent = indent_at(source, p.loop.start)
        # The statements the scalar loops are nested in, which the pass was not: the else of the aligned test,
        # and the braces that hold two loops where the pass was the body of an if or a loop.
        nested = INDENT * (bool(widened) + (not p.in_block))
        scalar = _joined(_chunked(source, p, f"{registers}[{k}]", k, store, pragma, nested), indent + nested)
        text = scalar
        if widened:
            at = indent if p.in_block else indent + INDENT
            others = {a.name: fresh_name(f"{a.name}4", taken) for a in widened[number].arrays
                      if a.name != model.array}
            vector = _vector_pass(source, widened[number], model.array, f"{held}[{k}]", others, k, names,
                                  number == 0)
            lines = [*([flag_line] if number == 0 else []), f"if ({flag}) {{", *(INDENT + line for line in vector),
                     "} else {"]
            text = f"{_joined(lines, at)}\n{at}{INDENT}{scalar}\n{at}}}"
        if not p.in_block:
            text = f"{{\n{indent}{INDENT}{text}\n{indent}}}"
        after_code = source[source.rfind("\n", 0, p.loop.start) + 1:p.loop.start].strip()
        if after_code and p.in_block:  # off the line of the code before it, spaces and all
            text, start = f"\n{indent}{text}", len(source[:start].rstrip(" \t"))
        edits.append((start, p.loop.end, text))
    x_name = spec.block_size_names[0]
    length = model.length if re.fullmatch(r"\w+", model.length) else f"({model.length})"
    default = _covering(model, spec, spec.baseline_params()[x_name])
    layout = Layout(tune_params={CHUNKS: _chunk_values(model)},
                    defaults={CHUNKS: default} if default in _chunk_values(model) else {},
                    restrictions=(f"{CHUNKS} * {x_name} >= {length}",
                                  f"{CHUNKS} == 1 or {CHUNKS} * {x_name} < 2 * {length}"))
    return replace_spans(source, edits), layout


def _joined(lines: list[str], indent: str) -> str:
    """`lines` as text, each after the first indented by `indent` (their own later lines carry theirs)."""
    return "\n".join(lines[:1] + [indent + line for line in lines[1:]])


def _chunked(source: str, p: Pass, register: str, k: str, store: str | None, pragma: str, depth: str) -> list[str]:
    """The pass as an unrolled loop over the thread's first row_chunks elements (the row read as `register`),
    then the loop as written past them, under the submitted loop's own unroll pragma if it had one; the body's
    own lines `depth` deeper than they were, where the two loops are nested in a statement the pass was not."""
    head = p.head
    start = head.start if re.fullmatch(r"[\w.]+", head.start) else f"({head.start})"
    step = head.step if re.fullmatch(r"[\w.]+", head.step) else f"({head.step})"
    c = head.index
    return ["#pragma unroll",
            f"for (int {k} = 0; {k} < {CHUNKS}; {k}++) {{",
            f"{INDENT}const {head.type} {c} = {start} + {k} * {step};",
            f"{INDENT}if ({c} < {head.end}) {_deeper(pass_body(source, p, register, store), depth + INDENT)}",
            "}",
            *([pragma] if pragma else []),
            f"for ({head.type} {c} = {start} + {CHUNKS} * {step}; {c} < {head.end}; {c} += {head.step}) "
            f"{_deeper(source[p.loop.body.start:p.loop.body.end], depth)}"]


def _vector_pass(source: str, loop: VectorLoop, array: str, held: str, others: dict[str, str], k: str,
                 names: dict[str, str], first: bool) -> list[str]:
    """The pass over vectors of four: the thread's first HELD vectors of the row in registers (the first pass
    loads them), then the vectors past them read from the row, then the last END % 4 elements one by one."""
    v, vectors = names["v"], names["vectors"]
    start = loop.start if re.fullmatch(r"[\w.]+", loop.start) else f"({loop.start})"
    step = loop.step if re.fullmatch(r"[\w.]+", loop.step) else f"({loop.step})"
    end = loop.end if re.fullmatch(r"\w+", loop.end) else f"({loop.end})"
    row = next(a for a in loop.arrays if a.name == array)
    load = [f"{held} = reinterpret_cast<const {row.vector} *>(&{array}[{row.base}])[{v}];"] if first else []
    pragma = [loop.pragma] if loop.pragma else []
    body = source[loop.loop.body.start:loop.loop.body.end]
    return [f"const {loop.type} {vectors} = {end} / 4;",
            "#pragma unroll",
            f"for (int {k} = 0; {k} < {HELD}; {k}++) {{",
            f"{INDENT}const {loop.type} {v} = {start} + {k} * {step};",
            f"{INDENT}if ({v} < {vectors}) {{",
            *(INDENT * 2 + line for line in [*load, *vector_lines(source, loop, v, {**others, array: held},
                                                                 frozenset({array}))]),
            f"{INDENT}}}",
            "}",
            *pragma,
            f"for ({loop.type} {v} = {start} + {HELD} * {step}; {v} < {vectors}; {v} += {loop.step}) {{",
            *(INDENT + line for line in vector_lines(source, loop, v, {**others, array: names["read"]})),
            "}",
            *pragma,
            *reindent(f"for ({loop.type} {loop.variable} = 4 * {vectors} + {start}; {loop.variable} < {loop.end}; "
                      f"{loop.variable} += {loop.step}) {body}")]


def _widened_passes(model: RowPasses, spec: KernelSpec) -> tuple[VectorLoop, ...]:
    """Each pass as vectorize_loops reads it, where every pass can take vectors of four, the threads of a row
    combine what they hold across all of them, nothing but the passes touches their arrays, and one test before
    the first pass tells, for every thread of a row alike, whether all the arrays they touch are 16-byte aligned:
    each array's address is made of what is declared before that pass, nothing changes it between the passes, and
    none of it depends on threadIdx.x. Else none: the passes then hold the row element by element only."""
    source, masked = spec.source, mask(spec.source)
    if not _combined_across_the_row(model, masked):
        return ()
    declared = {re.findall(r"[A-Za-z_]\w*", masked[a:b])[-1]: masked[a:b] for a, b in model.kernel.parameters(masked)}
    pointers = {name for name, declaration in declared.items() if "*" in declaration}
    found = {loop.loop.start: loop for loop in vector_loops(source, spec)[0]}
    loops = tuple(found.get(p.loop.start) for p in model.passes)
    if None in loops or any(model.array not in {a.name for a in loop.arrays} for loop in loops) or \
            not _touched_only_by_the_passes(model, loops, masked, pointers):
        return ()
    before = masked[model.kernel.body_open + 1:model.passes[0].loop.start]
    between = masked[model.passes[0].loop.start:model.passes[-1].loop.end]
    names = {name for loop in loops for a in loop.arrays for name in (a.name, *_names(a.base))}
    for name in names:
        if name not in declared and not re.search(rf"(?<![\w.]){name}\b", before):
            return ()
        if re.search(rf"(?<![\w.])\b{name}\s*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*{name}\b", between) or \
                _reads_the_lane(name, before, set()):
            return ()
    return loops


def _combined_across_the_row(model: RowPasses, masked: str) -> bool:
    """Whether what the row's threads hold is combined across all of them before the next pass reads it, so that
    which thread takes which element changes no more than a sum's order: a row's threads are a warp at most (the x
    block size fixed at 32 or less, shuffles reaching all of them), or a barrier comes between every two passes (a
    block's reduction in shared memory). A row of several warps that each add up their own lanes
    (rows_of_several_warps_without_a_barrier) gives each warp its own elements' result, which vectors would change."""
    return max(model.x_values) <= 32 or all(barrier_between(masked, model.kernel, earlier.loop.end, later.loop.start)
                                            for earlier, later in zip(model.passes, model.passes[1:]))


def _touched_only_by_the_passes(model: RowPasses, loops: tuple[VectorLoop, ...], masked: str,
                                pointers: set[str]) -> bool:
    """Whether the kernel touches the arrays of the passes, and the parameters they point into (of `pointers`, the
    kernel's pointer parameters), nowhere but in the passes and the declarations of those pointers: the vectors
    give each thread other elements than any other loop over them would, with no barrier between them (an output
    smoothed after its pass, say)."""
    names = {a.name for loop in loops for a in loop.arrays}
    start, end = model.kernel.body_open + 1, model.kernel.body_close
    spans = [(p.loop.start, p.loop.end) for p in model.passes]
    for name in sorted(names):
        definition = re.search(rf"\*\s*(?:const\s+)?(?:__restrict__\s+)?{name}\s*=([^;]*);", masked[start:end])
        if definition:
            names |= _names(definition.group(1)) & pointers
            spans.append((start + definition.start(), start + definition.end()))
    outside = list(masked[start:end])
    for a, b in spans:
        outside[a - start:b - start] = " " * (b - a)
    rest = "".join(outside)
    return not any(re.search(rf"(?<![\w.]){re.escape(name)}\b", rest) for name in names)


def _names(expression: str) -> set[str]:
    """The identifiers an expression reads, members (threadIdx.y's y) and the launch's built-ins left out."""
    return {name for name in re.findall(r"(?<![\w.:])[A-Za-z_]\w*(?!\s*::)", expression)
            if name not in LAUNCH_NAMES and name not in TYPE_WORDS}


def _reads_the_lane(name: str, before: str, seen: set[str]) -> bool:
    """Whether `name`'s definitions in `before` read threadIdx.x, directly or through other locals."""
    if name in seen:
        return False
    seen.add(name)
    for definition in re.finditer(rf"(?<![\w.])\b{name}\s*=(?!=)([^;]*)", before):
        value = definition.group(1)
        if "threadIdx.x" in value or any(_reads_the_lane(other, before, seen) for other in _names(value)):
            return True
    return False


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
