"""The row rules: a row that a kernel passes over several times (row_passes.py), read from global memory once and
kept in shared memory (row_in_shared, here) or in registers (row_in_registers, row_registers.py).

row_in_shared: the first of the passes keeps each element it reads in dynamic shared memory (`cache[c] = X[BASE +
c];` at the top of its body, its reads of X[BASE + c] then read cache[c]); the later passes read cache[c] instead
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

from services.generator.rules import row_registers
from services.generator.rules.cuda_text import fresh_name, identifiers, macro_definitions, mask
from services.generator.rules.points import replace_spans
from services.generator.rules.row_passes import (QUALIFIERS, SIZES, RowPasses, at_the_top, barrier_between, indent_at,
                                                 pass_body, recognise, row_length)
from services.generator.rules.shape import Layout, NotRecognised
from services.generator.rules.statements import Unparsed
from shared.domain.expressions import ExpressionError, evaluate
from shared.domain.spec import KernelSpec

SHARED_BYTES = 48 * 1024  # what a block may take without opting in, static and dynamic together


def row_bytes(model: RowPasses, spec: KernelSpec, y: int) -> int:
    return row_length(model, spec) * model.itemsize * y


def reason(model: RowPasses, spec: KernelSpec) -> str | None:
    if spec.smem_args is not None or re.search(r"\bextern\s+__shared__", mask(spec.source)):
        return "the kernel already uses dynamic shared memory (smem_args), which the row would have to share"
    static = static_bytes(spec.source, spec)
    if static is None:
        return "the kernel's static shared memory cannot be sized, so whether the row fits beside it is unknown"
    if (fixed := _fixed_by_a_number(model, spec)) is not None:
        return fixed
    room = SHARED_BYTES - static
    if not any(row_bytes(model, spec, y) <= room for y in model.y_values):
        y = min(model.y_values)
        rows = f" for each of {y} rows of a block" if model.per_y else ""
        return (f"the row of {model.array} takes {row_bytes(model, spec, y)} bytes of shared memory at the spec's "
                f"sizes ({model.length} x {model.itemsize}{rows}), more than the {room} left of the "
                f"{SHARED_BYTES} a block gets by default beside its {static} bytes of static shared memory")
    try:
        barrier(model, spec)
    except NotRecognised as exc:
        return str(exc)
    return None


def _fixed_by_a_number(model: RowPasses, spec: KernelSpec) -> str | None:
    """Why the row's shared memory cannot follow its length: the kernel reads the length from a parameter that
    args gives as a number, so smem_args would hold that number while a call may pass a longer row."""
    end = model.passes[0].head.end
    passed = [name for name in re.findall(r"[A-Za-z_]\w*", end) if any(p.name == name and not p.is_array
                                                                        for p in spec.parameters)]
    if passed and not set(re.findall(r"[A-Za-z_]\w*", model.length)) & set(spec.sizes):
        return (f"the row's length `{end}` comes from {', '.join(passed)}, which args gives as the number "
                f"{model.length}: shared memory sized from that number would overflow on a call with a longer row; "
                f"declare the length as a size (sizes: {{{passed[0]}: {model.length}}}, and value: {passed[0]} in "
                f"args) so that smem_args follows it")
    return None


def render(model: RowPasses, spec: KernelSpec) -> tuple[str, Layout]:
    source = spec.source
    taken = identifiers(source)
    raw, cache = fresh_name("row_shared", taken), fresh_name(f"{model.array}_cache", taken)
    element = model.element
    first = model.passes[0].head
    end = first.end if re.fullmatch(r"\w+", first.end) else f"({first.end})"
    offset = f" + (size_t)threadIdx.y * {end}" if model.per_y else ""
    replacements = [at_the_top(source, model, [
        f"// The loops below pass over {model.array}[{model.subscript}] several times: the first keeps each element "
        f"it reads",
        "// in shared memory and the later ones read it there, each thread the elements it stored itself.",
        f"extern __shared__ __align__(16) unsigned char {raw}[];",
        f"{element} *{cache} = reinterpret_cast<{element} *>({raw}){offset};"])]
    added = barrier(model, spec)
    for number, p in enumerate(model.passes):
        c = p.head.index
        if number:
            replacements += [(a, b, f"{cache}[{c}]") for a, b in p.reads]
            continue
        store = f"{cache}[{c}] = {model.array}[{model.subscript}];"
        replacements.append((p.loop.body.start, p.loop.body.end, pass_body(source, p, f"{cache}[{c}]", store)))
        if added is not None:
            replacements.append((p.loop.end, p.loop.end, f"\n{indent_at(source, p.loop.start)}{added}  // the later "
                                                         f"passes may read elements that other threads stored"))
    rewritten = replace_spans(source, replacements)
    y_name = model.per_y
    size = f"{model.length} * {model.itemsize}" if not y_name else f"{y_name} * {model.length} * {model.itemsize}"
    room = SHARED_BYTES - (static_bytes(source, spec) or 0)
    restrictions = ()
    if y_name and any(row_bytes(model, spec, y) > room for y in model.y_values):
        restrictions = (f"{size} <= {room}",)
    return rewritten, Layout(restrictions=restrictions, smem=size)


def barrier(model: RowPasses, spec: KernelSpec) -> str | None:
    """None when a barrier already comes between the first pass and every later one, else the one to add."""
    masked, kernel, passes = mask(spec.source), model.kernel, model.passes
    warp = set(model.x_values) == {32}
    first = passes[0]
    if all(barrier_between(masked, kernel, first.loop.end, p.loop.start, warp) for p in passes[1:]):
        return None
    if warp:
        return "__syncwarp();"
    if model.per_y is None and model.container == (kernel.body_open + 1, kernel.body_close) and \
            not re.search(r"\breturn\b", masked[model.container[0]:first.loop.start]):
        return "__syncthreads();"
    raise NotRecognised("no barrier comes between its first pass over the row and the later ones, and none can be "
                        "added where every thread of the row's block reaches it")


def static_bytes(source: str, spec: KernelSpec) -> int | None:
    """The static __shared__ bytes of the source at the largest value of every tune parameter, or None."""
    masked = mask(source)
    defines = {name: body.strip() for name, body in macro_definitions(masked) if body.strip().isdigit()}
    largest = {name: max(v for v in values if isinstance(v, int | float))
               for name, values in spec.tune_params.items() if any(isinstance(v, int | float) for v in values)}
    variables = {**spec.variables({**spec.baseline_params(), **largest}), **{k: int(v) for k, v in defines.items()}}
    total = 0
    pattern = (r"\b__shared__\s+(?:volatile\s+)?(?:__align__\s*\(\s*\d+\s*\)\s*)?"
               r"([A-Za-z_][\w ]*?)\s+[A-Za-z_]\w*\s*((?:\[[^\]]*\]\s*)*)[;=]")
    for match in re.finditer(pattern, masked):
        if re.search(r"\bextern\s*$", masked[:match.start()]):
            continue
        element = " ".join(w for w in match.group(1).split() if w not in QUALIFIERS)
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


class RowPassesShape:
    name = "row_passes"
    kind = "a kernel that passes over each row several times (a block, or a warp, per row)"
    rules = ("row_in_registers", "row_in_shared")  # alternatives: a kernel carries one of them (catalog.py)

    def recognise(self, spec: KernelSpec) -> RowPasses:
        try:
            return recognise(spec)
        except Unparsed as exc:
            raise NotRecognised(f"its body could not be read: {exc}") from None

    def reason(self, rule_id: str, model: RowPasses, spec: KernelSpec) -> str | None:
        return row_registers.reason(model, spec) if rule_id == "row_in_registers" else reason(model, spec)

    def render(self, model: RowPasses, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        if "row_in_registers" in features:
            return row_registers.render(model, spec)
        return render(model, spec)
