"""vectorize_loops: strided loops widened to 128-bit loads and stores, where alignment allows at run time.

A loop `for (int c = START; c < END; c += STEP)` whose threads together cover 0..END-1 once (START threadIdx.x
stepping by the block width, a block walking a row; or the global index stepping by the grid's width, a grid-stride
loop; written with blockDim.x, the block-size define, a local equal to either, or the literal x block size where the
spec fixes it) processes element c with the same code whichever thread runs it. The arrays it indexes `X[BASE + c]`
(BASE not changing in the loop, one BASE per array, 4-byte elements, X indexed no other way in the loop) can be
taken four consecutive elements at a time: vector v (c = 4v .. 4v+3) is loaded as one float4/int4/uint4 per array,
the body runs once per lane with X[BASE + c] read from (or written into) that lane, and the written vectors are
stored back whole; any other access (`hist[data[c]]`) stays as it is, at the lane's c. The last END % 4 elements
take the original loop, started at 4 * (END / 4). The vector loop needs each &X[BASE] 16-byte aligned: a row of a
matrix whose width is not a multiple of four is not, so the rewrite checks every address at run time and runs the
original loop when one is not.

A thread runs its vectors in passes of `vectors_in_flight` (tunable: 1, 2, 4): a pass loads its vectors first, then
runs them in the loop's order, each under the loop's own bound, so a thread's elements are taken in the same
order as by one vector at a time. One 16-byte load per thread in flight leaves DRAM idle between a grid-stride
loop's iterations: a hand-written int32 sum, minimum and maximum of 134 MB on the H200 reached 85% of a device
copy with one vector per iteration and 87% with four loaded ahead. Loading a later vector before an earlier one's
stores reads what the loop as written reads where the arrays are distinct buffers, as the restrict rule assumes:
each element is its own vector's, and no two vectors of a thread share one.

The elements are spread over threads differently, which reorders what a thread accumulates (float sums round
differently, as any reordered sum does), and nothing else: a loop body that breaks out, returns, waits for other
threads, or touches a vectorised array at another index is left alone. A grid-stride loop's vectors also spread
the elements over the blocks differently, so it is left alone in a kernel that writes one result per block
(`out[blockIdx.x]`, services/generator/rules/partition.py): each result would take other elements. A block's
loop over its own row keeps each block's elements.
"""
import re
from dataclasses import dataclass, replace

from services.generator.rules import affine, coverage
from services.generator.rules.canonical import canonical
from services.generator.rules.cuda_text import (ADDRESS_OF_BEFORE, closing, declared_parameters, find_kernel,
                                                fresh_name, identifiers, mask, passed_by_reference, reference_places,
                                                split_top_level)
from services.generator.rules.elementwise import model
from services.generator.rules.partition import array_accesses, partition, per_thread_outputs
from services.generator.rules.points import ASSIGNMENT, INDENT, INTEGER_TYPE, declared_names
from services.generator.rules.shape import one_thread_per_point
from services.generator.rules.statements import (Statement, Unparsed, indexed_whenever_run, made_whenever_run,
                                                 statements, walk)
from shared.domain.spec import KernelSpec

VECTORS = {"float": "float4", "int": "int4", "signed": "int4", "signed int": "int4", "int32_t": "int4",
           "unsigned": "uint4", "unsigned int": "uint4", "uint32_t": "uint4"}
DTYPE_VECTORS = {"float32": "float4", "int32": "int4", "uint32": "uint4"}
LANES = "xyzw"
IN_FLIGHT = "vectors_in_flight"  # the tune parameter: how many vectors a thread loads before it runs them
_ESCAPES = ("break", "continue", "return", "goto", "__syncthreads", "__syncwarp", "__shfl_sync", "__shfl_up_sync",
            "__shfl_down_sync", "__shfl_xor_sync", "__shared__")


@dataclass(frozen=True)
class VectorArray:
    name: str
    base: str  # X[BASE + c] with c = 0, as written
    vector: str  # float4 | int4 | uint4
    written: bool
    loaded: bool  # read before written, or written only in part: the vector is loaded first
    # Indexed only under a condition (`has_w ? w[i] : 1.0f`): the caller may pass a null pointer, which the loop
    # as written never reads but a vector would.
    conditional: bool = False
    partly_stored: bool = False  # written, but not wherever the body runs: its vector writes back lanes not stored


@dataclass(frozen=True)
class VectorLoop:
    loop: Statement
    pragma: str  # a #pragma unroll line right before the loop, or ""
    variable: str
    type: str
    start: str
    end: str
    step: str
    arrays: tuple[VectorArray, ...]
    accesses: tuple[tuple[int, int, str], ...]  # (start, end, array) of each X[BASE + c] in the body
    carries: bool = False  # the body changes a local declared before the loop (a thread's sum)


def vectorize_loops_reason(source: str, spec: KernelSpec) -> str | None:
    try:
        model(canonical(spec))
        # Unless the spec divides the grid otherwise (elements per thread of its own), which vectorize refuses.
        if one_thread_per_point(spec, 0) is None:
            return "the kernel is elementwise: the vectorize rule widens it, with a grid to match"
    except ValueError:  # NotElementwise, or a kernel the elementwise model cannot read
        pass
    return none_or_why(*vector_loops(source, spec),
                       "the kernel has no strided loop (START threadIdx.x stepping by the block width, or a grid-stride "
                       "loop)", "no strided loop can be vectorised: ")


def none_or_why(found: list, reasons: list[str], none_seen: str, refused: str) -> str | None:
    """A loop rule's reason: None where it found loops to rewrite, else `none_seen` where it saw no loop of its
    form, else `refused` and why it refused each."""
    if found:
        return None
    return refused + "; ".join(reasons) if reasons else none_seen


def vectorize_loops_edit(source: str, spec: KernelSpec) -> str:
    loops, _ = vector_loops(source, spec)
    taken = identifiers(source)
    for loop in sorted(loops, key=lambda found: found.loop.start, reverse=True):
        start = source.rfind("#", 0, loop.loop.start) if loop.pragma else loop.loop.start
        source = replaced(source, start, loop.loop.end, _rendered(source, loop, taken))
    return source


def replaced(source: str, start: int, end: int, lines: list[str]) -> str:
    """`source` with source[start:end] replaced by `lines`, the later ones indented as the line `start` is on."""
    line_start = source.rfind("\n", 0, start) + 1
    indent = re.match(r"[ \t]*", source[line_start:]).group()
    text = "\n".join(lines[:1] + [indent + line if line else line for line in lines[1:]])
    return source[:start] + text + source[end:]


def vector_loops(source: str, spec: KernelSpec) -> tuple[list[VectorLoop], list[str]]:
    """The loops of the kernel that can be vectorised, and why each other strided loop cannot."""
    kernel = find_kernel(source, spec.kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    try:
        body = statements(masked, kernel.body_open + 1, kernel.body_close)
    except Unparsed:
        return [], []
    widths = {"blockDim.x", spec.block_size_names[0], *_fixed_width(spec)}
    aliases = affine_locals(masked, kernel.body_open + 1, kernel.body_close)
    types = _element_types(source, kernel, spec, masked)
    places = reference_places(declared_parameters(masked[:kernel.name_at] + masked[kernel.body_close:]))
    found, reasons = [], []
    per_block = partition(source, spec)
    headers = {statement.start: header for statement, _ in walk(masked, body) if statement.kind == "for" and
               (header := strided_loop(masked, uncommented, statement, widths, aliases)) is not None}
    element_loops = [(statement.start, statement.end, headers[statement.start][0])
                     for statement, _ in walk(masked, body) if statement.start in headers]
    for statement, _ in walk(masked, body):
        header = headers.get(statement.start) if statement.kind == "for" else None
        if header is None:
            continue
        try:
            across_grid = "blockIdx.x" in affine.names(affine.parse(header[2], aliases))
            if per_block.outputs and across_grid:
                raise _Refused(f"the loop over {header[0]} shares the elements out among the grid's blocks, and the "
                               f"kernel writes one result per block ({per_block.describe()}): vectors of four would "
                               f"give each block other elements")
            found.append((_vector_loop(source, masked, uncommented, statement, header, types, spec, across_grid,
                                       places), across_grid))
        except _Refused as exc:
            reasons.append(str(exc))
    # Loops the rest of the kernel relies on, given which others take vectors alike (until none more is refused)
    accesses = array_accesses(source, spec)
    refused = True
    while refused:
        refused = False
        for vectors, across_grid in list(found):
            twins = [other for other, _ in found if other is not vectors and _alike(other, vectors)]
            try:
                _check_threads_elsewhere(source, spec, masked, body, vectors, across_grid, element_loops, aliases,
                                         twins, accesses)
            except _Refused as exc:
                reasons.append(str(exc))
                found.remove((vectors, across_grid))
                refused = True
    found = [vectors for vectors, _ in found]
    # A loop inside another is rewritten alone: the outer one's text would change under its rewrite.
    inner = [loop for loop in found if not any(other is not loop and loop.loop.start <= other.loop.start
                                                and other.loop.end <= loop.loop.end for other in found)]
    return inner, reasons


def _check_threads_elsewhere(source: str, spec: KernelSpec, masked: str, body: list[Statement], vectors: "VectorLoop",
                             across_grid: bool, element_loops: list[tuple[int, int, str]],
                             aliases: dict[str, affine.Poly], twins: list["VectorLoop"],
                             accesses: list[tuple[int, set[str], bool]]) -> None:
    """Refuses a loop whose elements the rest of the kernel expects each thread to have taken as written (review,
    helper-86): vectors give a thread other elements. So the loop's state must not reach a result per thread or
    per warp (`partial[gid] = acc`; an element another strided loop stores at its own index is none), and no array
    the loop writes may be touched elsewhere, nor an array it takes as vectors written elsewhere (another loop
    reading back what this one stored), unless a barrier lies between (a block's loops, not in a loop together: the
    block's threads then see each other's elements), or the other access is a vector of a `twin` (a loop taking
    vectors alike: _alike), which the same thread makes. `accesses` are the kernel's (partition.array_accesses)."""
    loop = vectors.loop
    where = f"the loop over {vectors.variable}"
    # A grid-stride loop's thread owns its elements only among the blocks of its row of the grid: blocks (and a
    # block's threads) along y or z walk the same elements unless the array's base tells them apart (review,
    # helper-86: a class per blockIdx.y; helper-87: per threadIdx.y).
    rows = set(re.findall(r"\b(?:blockIdx|threadIdx)\s*\.\s*[yz]\b",
                          masked[body[0].start:body[-1].end] if body else ""))
    for array in vectors.arrays:
        if across_grid and array.partly_stored and \
                not {re.sub(r"\s+", "", r) for r in rows} <= _reached(array.base, aliases):
            raise _Refused(f"{where} stores into {array.name} only under a condition, and the grid's blocks (or the "
                           f"block's threads) along y or z walk the same elements: a vector stored whole could undo "
                           f"another's store")
    if vectors.carries and (outputs := per_thread_outputs(source, spec, (loop.start, loop.end), element_loops)):
        raise _Refused(f"{where} carries values a thread (or warp) writes as its own result ({outputs[0]}), which "
                       f"would come from other elements")
    written = set().union(*(names for at, names, write in accesses if write and loop.start <= at < loop.end))
    taken = set().union(*(names for at, names, _ in accesses
                          if any(start <= at < end for start, end, _ in vectors.accesses)))
    alike = [(start, end) for twin in twins for start, end, _ in twin.accesses]
    for at, names, write in accesses:
        if loop.start <= at < loop.end or not (names & written or (write and names & taken)) or \
                any(start <= at < end for start, end in alike):
            continue
        if across_grid or not _barrier_between(masked, body, loop, at):
            array = sorted(names & written or names & taken)[0]
            raise _Refused(f"{where} touches {array}, which the kernel {'writes' if write else 'reads'} elsewhere "
                           f"too, expecting each element where the loop as written leaves it")


def _alike(one: "VectorLoop", other: "VectorLoop") -> bool:
    """Whether two vectorised loops give each thread the same elements: the same range and step, and the same
    arrays at the same bases, so the same test of alignment sends both to their vectors or both to their elements."""
    def arrays(loop: "VectorLoop") -> set:
        return {(a.name, a.base, a.conditional) for a in loop.arrays}
    return (one.start, one.end, one.step) == (other.start, other.end, other.step) and arrays(one) == arrays(other)


def _poly(text: str, aliases: dict[str, affine.Poly] | None = None) -> affine.Poly | None:
    """A base as a polynomial (casts to integer types looked through, `aliases` substituted), to tell two spellings
    of one apart; None where it is not affine."""
    try:
        return affine.parse(text, aliases)
    except affine.NotAffine:
        return None


def _reached(text: str, aliases: dict[str, affine.Poly]) -> set[str]:
    """The names an expression reaches through the kernel's affine locals (`plane` for blockIdx.y)."""
    poly = _poly(text, aliases)
    return set() if poly is None else affine.names(poly)


def _barrier_between(masked: str, body: list[Statement], loop: Statement, at: int) -> bool:
    """Whether a __syncthreads() lies between the loop and the offset, and no loop holds both (whose next turn
    would bring them together again with no barrier between)."""
    first, last = (loop.end, at) if at >= loop.end else (at, loop.start)
    together = any(s.kind in ("for", "while", "do") and s.start <= min(at, loop.start) and max(at, loop.end) <= s.end
                   for s, _ in walk(masked, body) if s is not loop)
    return not together and re.search(r"\b__syncthreads\s*\(", masked[first:last]) is not None


def _fixed_width(spec: KernelSpec) -> set[str]:
    """The x block size as a literal where the spec fixes it (a warp's loop stepping by 32 in blocks 32 wide)."""
    name = spec.block_size_names[0]
    values = set(spec.tune_params.get(name, [])) or {spec.baseline_params().get(name)}
    value = next(iter(values))
    return {str(value)} if len(values) == 1 and isinstance(value, int) and value > 0 else set()


class _Refused(ValueError):
    pass


def affine_locals(masked: str, start: int, end: int, known: dict[str, affine.Poly] | None = None) \
        -> dict[str, affine.Poly]:
    """Integer locals of masked[start:end] defined once by an affine expression (`const int tid = threadIdx.x;`),
    as polynomials of what they are defined by, through the `known` locals of an enclosing scope; loop indices,
    and locals assigned again, are not. (A member's assignment, `s.tid = 0`, is not one of the local `tid`.)"""
    text = masked[start:end]
    headers = set(re.findall(rf"\bfor\s*\(\s*(?:const\s+)?{INTEGER_TYPE}\s+([A-Za-z_]\w*)", text))
    found: dict[str, affine.Poly] = dict(known or {})
    for match in re.finditer(rf"\b(?:const\s+)?{INTEGER_TYPE}\s+([A-Za-z_]\w*)\s*=\s*([^;,{{}}]+)[;,]", text):
        name = match.group(1)
        if name in headers or len(re.findall(rf"(?<![\w.])\b{name}\s*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*"
                                             rf"{name}\b", text)) > 1:
            continue
        try:
            found[name] = affine.parse(match.group(2), found)
        except affine.NotAffine:
            pass
    return found


def _element_types(source: str, kernel, spec: KernelSpec, masked: str) -> dict[str, str]:
    """The vector type of each pointer the kernel can index: parameters by their dtype in args, local pointers
    by their declared element type."""
    types = {}
    spans = kernel.parameters(source)
    if len(spans) == len(spec.parameters):
        for (start, end), arg in zip(spans, spec.parameters):
            names = re.findall(r"[A-Za-z_]\w*", masked[start:end])
            if arg.is_array and names and arg.dtype in DTYPE_VECTORS:
                types[names[-1]] = DTYPE_VECTORS[arg.dtype]
    body = masked[kernel.body_open:kernel.body_close]
    for match in re.finditer(r"(?:const\s+)?([A-Za-z_][\w ]*?)\s*\*\s*(?:const\s+)?(?:__restrict__\s+)?"
                             r"([A-Za-z_]\w*)\s*=", body):
        element = " ".join(w for w in match.group(1).split() if w not in ("const", "volatile"))
        if element in VECTORS:
            types[match.group(2)] = VECTORS[element]
    return types


@dataclass(frozen=True)
class CountedLoop:
    """`for (TYPE c = START; c < END; c += STEP)` as read from a loop's head: the index and its type, where it
    starts and how it steps as polynomials, and START, END and STEP as written (comments out, spaces collapsed)."""

    index: str
    type: str
    first: affine.Poly
    stride: affine.Poly
    start: str
    end: str
    step: str


def counted_loop(masked: str, uncommented: str, loop: Statement, aliases: dict[str, affine.Poly]) -> CountedLoop | None:
    """The loop's head as a CountedLoop; None for a loop of another form or with a start or step not affine."""
    parts = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
    if len(parts) != 3:
        return None
    init, condition, step = parts
    declared = re.fullmatch(rf"\s*(?:const\s+)?(?P<type>{INTEGER_TYPE})\s+(?P<name>[A-Za-z_]\w*)\s*=(?P<start>.*)",
                            init, re.DOTALL)
    if declared is None:
        return None
    c = declared["name"]
    bound = re.fullmatch(rf"\s*{c}\s*<(?!=)\s*(?P<end>.+?)\s*", condition, re.DOTALL)
    increment = re.fullmatch(rf"\s*{c}\s*\+=(?P<step>.+)", step, re.DOTALL)
    if bound is None or increment is None:
        return None
    try:
        first, stride = affine.parse(declared["start"], aliases), affine.parse(increment["step"], aliases)
    except affine.NotAffine:
        return None

    def text(at: int, part: str) -> str:
        return " ".join(uncommented[at:at + len(part)].split())
    start_at = loop.head[0] + declared.start("start")
    end_at = loop.head[0] + len(init) + 1 + bound.start("end")
    step_at = loop.head[0] + len(init) + 1 + len(condition) + 1 + increment.start("step")
    return CountedLoop(c, " ".join(declared["type"].split()), first, stride, text(start_at, declared["start"]),
                       text(end_at, bound["end"]), text(step_at, increment["step"]))


def strided_loop(masked: str, uncommented: str, loop: Statement, widths: set[str],
                 aliases: dict[str, affine.Poly]) -> tuple | None:
    """(variable, type, start, end, step) of a loop whose threads cover 0..end-1 once; None for another loop."""
    counted = counted_loop(masked, uncommented, loop, aliases)
    if counted is None:
        return None
    for width in widths:
        block = counted.first == {("threadIdx.x",): 1} and counted.stride == _times(width)
        grid = counted.first == {**_times(width, "blockIdx.x"), ("threadIdx.x",): 1} and \
            counted.stride == _times(width, "gridDim.x")
        if block or grid:
            return counted.index, counted.type, counted.start, counted.end, counted.step
    return None


def _times(width: str, *names: str) -> affine.Poly:
    """The block width (a name, or a literal: the x block size the spec fixes) times `names`, as a polynomial."""
    if width.isdigit():
        return {tuple(sorted(names)): int(width)}
    return {tuple(sorted((*names, width))): 1}


def _vector_loop(source: str, masked: str, uncommented: str, loop: Statement, header: tuple,
                 types: dict[str, str], spec: KernelSpec, across_grid: bool, places: dict[str, set[int]]) -> VectorLoop:
    c, type_, start, end, step = header
    inside = (loop.body.inner if loop.body.kind == "block" else (loop.body.start, loop.body.end))
    text = masked[inside[0]:inside[1]]
    where = f"the loop over {c}"
    escape = next((word for word in _ESCAPES if re.search(rf"\b{word}\b", text)), None)
    if escape:
        raise _Refused(f"{where} uses {escape}")
    assigned = set(re.findall(rf"\b([A-Za-z_]\w*)\s*(?:{ASSIGNMENT}|\+\+|--)", text))
    assigned |= set(re.findall(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", text))
    if c in assigned:
        raise _Refused(f"{where} changes {c}")
    arrays: dict[str, VectorArray] = {}
    accesses = []
    other_uses: dict[str, int] = {}
    written_scalars: set[str] = set()
    parts = statements(masked, *inside)
    stored_whenever_run = set()  # the arrays the body stores into wherever it runs
    # Index locals the body defines from c (`const int idx = row * cols + c;`), each as what it is defined by
    indices = {name: poly for name, poly in affine_locals(masked, *inside).items() if c in affine.names(poly)}
    for match in re.finditer(r"(?<![\w.>\]])([A-Za-z_]\w*)\s*\[", text):
        name = match.group(1)
        opening = inside[0] + match.end() - 1
        close = closing(masked, opening)
        subscript = uncommented[opening + 1:close]
        try:
            poly = affine.parse(subscript, indices)
        except affine.NotAffine:
            poly = None
        if poly is None or not affine.is_unit(affine.stride(poly, c)):  # a scalar access, whatever it reads
            other_uses[name] = other_uses.get(name, 0) + 1
            if poly is not None and c not in affine.names(poly) and \
                    re.match(rf"\s*(?:{ASSIGNMENT}|\+\+|--)", masked[close + 1:close + 40]):
                written_scalars.add(name)  # a store at an element the loop's index does not move: a thread's slot
            continue
        if set(re.findall(r"[A-Za-z_]\w*", subscript)) & set(indices):  # X[idx]: its base spelled from idx's definition
            base = affine.spelled(affine.without(poly, {c}))
            if not base:
                raise _Refused(f"the base of {name}[{' '.join(subscript.split())}] is not plain arithmetic")
        else:
            base = " ".join(re.sub(rf"\b{c}\b", "0", subscript).split())
        if set(re.findall(r"[A-Za-z_]\w*", base)) & assigned:
            raise _Refused(f"the base of {name}[{' '.join(subscript.split())}] changes in {where}")
        if name not in types:
            raise _Refused(f"{name} has no 4-byte element type known as float, int or unsigned")
        after = masked[close + 1:close + 40]
        written = bool(re.match(rf"\s*(?:{ASSIGNMENT}|\+\+|--)", after))
        if written and made_whenever_run(masked, parts, inside[0] + match.start()):
            stored_whenever_run.add(name)
        previous = arrays.get(name)
        if previous is not None and previous.base != base and _poly(previous.base) != _poly(base):
            raise _Refused(f"{where} reads {name} at two bases")
        arrays[name] = VectorArray(name, base, types[name], written or (previous is not None and previous.written),
                                   True)
        # A read through the read-only cache, __ldg(&X[BASE + c]), is the lane's element as a whole; any other
        # address of the element is one a vector lane does not have.
        at, stop = inside[0] + match.start(), close + 1
        ldg, shut = re.search(r"\b__ldg\s*\(\s*&\s*$", masked[:at]), re.match(r"\s*\)", masked[stop:])
        if ldg and shut:
            at, stop = ldg.start(), stop + shut.end()
        elif ADDRESS_OF_BEFORE.search(masked[max(0, at - 80):at]):
            raise _Refused(f"{where} takes the address of {name}[{' '.join(subscript.split())}], which a vector "
                           f"lane does not have")
        elif (called := passed_by_reference(masked, at, stop, places)) is not None:
            raise _Refused(f"{where} passes {name}[{' '.join(subscript.split())}] to {called}, which takes it by "
                           f"reference, as a vector lane has it not")
        accesses.append((at, stop, name))
    if not arrays:
        raise _Refused(f"{where} indexes no array by {c}")
    for name in arrays:
        if other_uses.get(name) or re.search(rf"\b{name}\b(?!\s*\[)", text):
            raise _Refused(f"{where} uses {name} other than as {name}[base + {c}]")
        conditional = not indexed_whenever_run(masked, *inside, name)
        arrays[name] = replace(arrays[name], conditional=conditional,
                               partly_stored=arrays[name].written and name not in stored_whenever_run)
        if conditional and not (arrays[name].base == "0" and coverage.array_covers(spec, name, [end])):
            raise _Refused(f"{where} touches {name} only under a condition, and its shape in args does not hold the "
                           f"loop's elements, so a vector of four may reach past it")
        # Stored whole, a vector writes back what its lanes did not store. Each thread of a grid-stride loop owns
        # its elements; a block's loop walks the same ones as every other block's, which may store into them.
        if arrays[name].written and name not in stored_whenever_run and not across_grid:
            raise _Refused(f"{where} stores into {name} only under a condition, and every block walks its elements: "
                           f"a vector stored whole could undo another block's store")
    # A vector written whole must first hold what the lanes do not write: load it unless the body begins (after
    # its index locals) by storing into the element unconditionally, without reading it.
    final = []
    declaring = rf"\s*(?:const\s+)?{INTEGER_TYPE}\s+({'|'.join(indices) or '(?!)'})\s*="
    first = next((part for part in split_top_level(text, ";") if not re.match(declaring, part) or
                  len(split_top_level(part, ",")) > 1 or any(re.search(rf"\b{a}\b", part) for a in arrays)), "")
    for array in arrays.values():
        loaded = True
        if array.written:
            plain = re.match(rf"\s*{array.name}\s*\[[^\]]*\]\s*=(?!=)", first)
            loaded = not (plain and not re.search(rf"\b{array.name}\b", first[plain.end():]))
        final.append(replace(array, loaded=loaded))
    pragma = ""
    before = masked[:loop.start].rstrip().rsplit("\n", 1)[-1].strip()
    if re.match(r"#\s*pragma\s+unroll\b", before):
        line = source[:loop.start].rstrip().rsplit("\n", 1)[-1].strip()
        pragma = line
    carried = assigned - declared_names(text) - {c} - set(arrays)
    if (read := _carried_read(masked, loop, carried)) is not None:
        raise _Refused(f"{where} reads {read}, which it carries from element to element, other than to update it: "
                       f"vectors give a thread other elements in another order")
    fixed = min(written_scalars, default=None)
    if fixed is not None:
        raise _Refused(f"{where} stores into {fixed} at an element that does not move with {c} alone, which a thread "
                       f"with other elements would store otherwise")
    return VectorLoop(loop, pragma, c, type_, start, end, step, tuple(final), tuple(accesses), bool(carried))


def _carried_read(masked: str, loop: Statement, carried: set[str]) -> str | None:
    """A name the loop carries that it reads other than in a statement updating it (`acc += x[c]`, `m = fmaxf(m,
    x[c])`) or in the condition of an if updating it (`if (v > best) { best = v; at = c; }`); else None. Such a
    value passed on (an RNG's state in each output, a running sum stored per element) depends on which elements
    came before in the thread."""
    for name in carried:
        for match in re.compile(rf"(?<![\w.])\b{name}\b").finditer(masked, loop.body.start, loop.body.end):
            owner = None
            for statement, _ in walk(masked, [loop.body]):
                if statement.kind == "simple" and statement.start <= match.start() < statement.end:
                    owner = statement
            if owner is not None and re.match(rf"\s*{name}\s*(?:{ASSIGNMENT}|\+\+|--)|\s*(?:\+\+|--)\s*{name}\b",
                                             masked[owner.start:owner.end]):
                continue
            guarding = next((s for s, _ in walk(masked, [loop.body]) if s.kind == "if" and
                             s.head[0] <= match.start() < s.head[1]), None)
            if guarding is not None and re.search(rf"(?:^|[;{{}}])\s*{name}\s*{ASSIGNMENT}",
                                                  masked[guarding.body.start:guarding.body.end]):
                continue
            return name
    return None


def _rendered(source: str, loop: VectorLoop, taken: set[str]) -> list[str]:
    v, vectors, k, at = (fresh_name(name, taken) for name in ("v", "vectors", "k", "at"))
    registers = {a.name: fresh_name(f"{a.name}4", taken) for a in loop.arrays}
    ahead = {a.name: fresh_name(f"{a.name}4_ahead", taken) for a in loop.arrays if a.loaded}
    c, type_ = loop.variable, loop.type
    end = loop.end if re.fullmatch(r"\w+", loop.end) else f"({loop.end})"
    start = loop.start if re.fullmatch(r"[\w.]+", loop.start) else f"({loop.start})"
    step = loop.step if re.fullmatch(r"[\w.]+", loop.step) else f"({loop.step})"
    original = source[loop.loop.start:loop.loop.end]
    aligned = " && ".join(vector_ready(a) for a in loop.arrays)
    pragma = [loop.pragma] if loop.pragma else []
    body_statement = source[loop.loop.body.start:loop.loop.body.end]
    tail = f"for ({type_} {c} = 4 * {vectors} + {start}; {c} < {loop.end}; {c} += {loop.step}) {body_statement}"
    unrolled = f"#pragma unroll\nfor (int {k} = 0; {k} < {IN_FLIGHT}; {k}++) {{"
    loads = [f"if ({at} < {vectors}) {ahead[a.name]}[{k}] = reinterpret_cast<const {a.vector} *>(&{a.name}[{a.base}])"
             f"[{at}];" for a in loop.arrays if a.loaded]
    taken_ahead = [f"{'' if a.written else 'const '}{a.vector} {registers[a.name]} = {ahead[a.name]}[{k}];"
                   for a in loop.arrays if a.loaded]
    lines = vector_lines(source, loop, at, registers, held=frozenset(ahead))
    return ["{",
            f"{INDENT}// 128-bit loads and stores when every array of the loop is 16-byte aligned at its first element",
            f"{INDENT}// (then four lanes per vector, and the last {end} % 4 elements one by one); else the loop as "
            f"it was.",
            f"{INDENT}// Each thread loads its next {IN_FLIGHT} vectors together, then runs them in order.",
            f"{INDENT}if ({aligned}) {{",
            f"{INDENT * 2}const {type_} {vectors} = {end} / 4;",
            *(INDENT * 2 + line for line in pragma),
            f"{INDENT * 2}for ({type_} {v} = {loop.start}; {v} < {vectors}; {v} += {IN_FLIGHT} * {step}) {{",
            *(f"{INDENT * 3}{a.vector} {ahead[a.name]}[{IN_FLIGHT}];" for a in loop.arrays if a.loaded),
            *(INDENT * 3 + line for line in unrolled.split("\n")),
            f"{INDENT * 4}const {type_} {at} = {v} + {k} * {step};",
            *(INDENT * 4 + line for line in loads),
            f"{INDENT * 3}}}",
            *(INDENT * 3 + line for line in unrolled.split("\n")),
            f"{INDENT * 4}const {type_} {at} = {v} + {k} * {step};",
            f"{INDENT * 4}if ({at} < {vectors}) {{",
            *(INDENT * 5 + line for line in [*taken_ahead, *lines]),
            f"{INDENT * 4}}}",
            f"{INDENT * 3}}}",
            f"{INDENT * 2}}}",
            *(INDENT * 2 + line for line in pragma),
            *(INDENT * 2 + line for line in reindent(tail)),
            f"{INDENT}}} else {{",
            *(INDENT * 2 + line for line in pragma),
            *(INDENT * 2 + line for line in reindent(original)),
            f"{INDENT}}}",
            "}"]


def vector_lines(source: str, loop: VectorLoop, v: str, registers: dict[str, str],
                 held: frozenset[str] = frozenset()) -> list[str]:
    """The statements of `loop`'s vector v: each array's vector loaded into its register (`registers` names them;
    the `held` arrays' registers hold their vector already), the body once per lane with X[BASE + c] read from
    (or written into) the lane, then the written vectors stored whole."""
    c, type_ = loop.variable, loop.type
    body_span = loop.loop.body.inner if loop.loop.body.kind == "block" else (loop.loop.body.start, loop.loop.body.end)
    body_text = mask(source, literals=False)[body_span[0]:body_span[1]]
    loads, stores = [], []
    for a in loop.arrays:
        pointer = f"&{a.name}[{a.base}]"
        if a.name not in held:  # a held array's register is filled already
            qualifier = "" if a.written else "const "
            loads.append(f"{qualifier}{a.vector} {registers[a.name]} = reinterpret_cast<const {a.vector} *>({pointer})"
                         f"[{v}];" if a.loaded else f"{a.vector} {registers[a.name]};")
        if a.written:
            stores.append(f"reinterpret_cast<{a.vector} *>({pointer})[{v}] = {registers[a.name]};")
    lanes = []
    for lane, letter in enumerate(LANES):
        replaced = body_text
        for at, stop, name in sorted(loop.accesses, reverse=True):
            replaced = replaced[:at - body_span[0]] + f"{registers[name]}.{letter}" + replaced[stop - body_span[0]:]
        lines = [line.rstrip() for line in replaced.strip("\n").split("\n") if line.strip()]
        block = dedent(lines)
        index = [f"const {type_} {c} = 4 * {v} + {lane};"] if re.search(rf"\b{c}\b", mask(replaced)) else []
        single = len(split_top_level(mask(replaced), ";")) == 2 and "{" not in replaced and not index
        lanes += block if single else ["{", *(INDENT + line for line in [*index, *block]), "}"]
    return [*loads, *lanes, *stores]


def vector_ready(array: VectorArray) -> str:
    """The run-time test that `array` may be read as vectors: 16-byte aligned, and not null where the loop reads
    it only under a condition (a null pointer is aligned, and the loop as written would not have read it)."""
    aligned = aligned_16(f"&{array.name}[{array.base}]")
    return f"{array.name} != nullptr && {aligned}" if array.conditional else aligned


def aligned_16(pointer: str) -> str:
    """The run-time test that `pointer` may be read as 128-bit vectors (scan_vectors.py takes it too)."""
    return f"(reinterpret_cast<unsigned long long>({pointer}) & 15) == 0"


def dedent(lines: list[str]) -> list[str]:
    widths = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(widths) if widths else 0
    return [line[cut:] for line in lines]


def reindent(text: str) -> list[str]:
    """A statement's lines: the first stripped, the later ones dedented by their common indentation."""
    lines = text.split("\n")
    rest = dedent([line for line in lines[1:]]) if len(lines) > 1 else []
    return [lines[0].strip(), *rest] if rest else [lines[0].strip()]
