"""Elementwise kernels: one guarded statement block applied at every index below a bound.

Such a kernel (`int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { BODY }`, or the same BODY in a
grid-stride loop `for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)`, every
array in BODY indexed by exactly [i], or read through the read-only cache as `__ldg(&x[i])` or `__ldg(x + i)`) can
be re-shaped without understanding BODY: run it in a grid-stride loop so each thread handles several elements, or
apply it lane by lane to 128-bit vectors (two lanes of doubles or 64-bit integers, four of 4-byte elements, eight of
2-byte ones such as __half and __nv_bfloat16, sixteen of bytes, as many as 16 bytes of the widest array hold; each
lane runs BODY as written, its __ldg reads taken from the lane, so it rounds exactly as one thread did). The
vectors are taken only when every array is aligned to what its vector moves at run time:
a caller may pass a pointer into the middle of an allocation (a tensor slice starting at element 1), which the
submitted kernel handles and a 128-bit access would fault on, so otherwise the kernel runs the element loop as
written. Both shapes are *rendered* from a model of the submitted kernel rather than edited into the current one,
so the two features compose in either order; both loop over the grid's width, so they are correct for any grid,
the one the candidate's grid_div_x gives included. Anything outside that pattern is refused with what did not match.
"""
import re
import textwrap
from dataclasses import dataclass

from services.generator.rules import affine, coverage, points
from services.generator.rules.points import ALIAS
from services.generator.rules.cuda_text import (CALLED, IDENTIFIER, INTEGER_TYPE, WIDE_INTEGER_TYPE, Kernel, closing,
                                                 declared_parameters, find_kernel, fresh_name, functions_named,
                                                 identifiers, mask, passed_by_reference, pointee, reference_places,
                                                 split_top_level)
from services.generator.rules.statements import Statement, body_of, indexed_whenever_run
from services.generator.rules.shape import Layout, block_widths, one_thread_per_point
from shared.domain.spec import KernelSpec

INDEX_TYPES = INTEGER_TYPE
# The element sizes vectorize takes. A kernel takes 16 bytes of its widest arrays per vector (2 doubles, 4 floats or
# ints, 8 halves, or 16 int8s), as a struct of that many elements of each array's own type, aligned to the bytes it
# moves (its narrower arrays move less: 4 int8s beside floats).
ELEMENT_BYTES = {"int8": 1, "uint8": 1, "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2, "float32": 4, "int32": 4,
                 "uint32": 4, "float64": 8, "int64": 8, "uint64": 8}
VECTOR_BYTES = 16
ESCAPES = ("return", "break", "continue", "goto", "__syncthreads", "__syncwarp", "__shared__")
ASSIGNMENT = r"(?:[-+*/%&|^]|<<|>>)?=(?!=)"
INDENT = "    "


class NotElementwise(ValueError):
    """The kernel is not of the elementwise shape; the message names what did not match."""


@dataclass(frozen=True)
class Elementwise:
    source: str  # the submitted source, which rendering edits (only the kernel's body changes)
    kernel: Kernel
    index: str  # the index variable, e.g. i
    index_type: str  # its type, e.g. int
    block_x: str  # the block width as the kernel writes it: blockDim.x or the x block-size define
    bound: str  # the guard's bound, e.g. n
    body: str  # the guarded statements, comments removed, dedented
    arrays: dict[str, str | None]  # the names BODY subscripts -> their dtype (None: not an array argument)
    grid_stride: bool = False  # submitted as a grid-stride loop: correct for any grid, the spec's included
    prologue: str = ""  # declarations every thread makes alike between its index and its guard, as written
    guard_at: int = 0  # where the guard starts in the source, after the prologue


def model(spec: KernelSpec) -> Elementwise:
    """The submitted kernel as an Elementwise, or NotElementwise saying what did not match."""
    source = spec.source
    kernel = find_kernel(source, spec.kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    start = kernel.body_open + 1
    body = masked[start:kernel.body_close]
    if re.match(r"\s*for\s*\(", body):
        return _grid_stride_model(spec, kernel, masked, uncommented, body_of(kernel, masked, NotElementwise))
    if re.search(r"\b(?:for|while)\b", body):
        try:
            top = body_of(kernel, masked, NotElementwise)
        except NotElementwise:  # read on below as a one-point-per-thread body, as before loops after locals were
            top = []
        if top and top[-1].kind in ("for", "while") and _launch_locals(top[:-1], masked, spec) is not None:
            return _grid_stride_model(spec, kernel, masked, uncommented, top)

    x_name = spec.block_size_names[0]
    definition, helpers = _index_after_helpers(body, spec)
    if definition is None:
        raise NotElementwise("the kernel does not start with an index definition like "
                             "`int i = blockIdx.x * blockDim.x + threadIdx.x;`")
    index = definition["index"]
    block_x = _block_width(definition["expr"], spec, helpers)
    if block_x is None:
        raise NotElementwise(f"the index {index} is `{' '.join(definition['expr'].split())}`, not "
                             f"blockIdx.x * blockDim.x + threadIdx.x (or with {x_name})")
    helper = next((name for name in helpers if re.search(rf"\b{name}\b", body[definition.end():])), None)
    if helper is not None:
        raise NotElementwise(f"the kernel reads {helper}, a local its index is defined from, beyond defining it")

    prologue_end = _prologue_end(body, definition.end(), index, masked[:kernel.name_at] + masked[kernel.body_close:])
    guard = re.match(r"\s*if\s*\(", body[prologue_end:])
    if guard is None:
        raise NotElementwise(f"the index definition is not followed by a guard `if ({index} < bound)`")
    condition_open = prologue_end + guard.end() - 1
    condition_close = closing(body, condition_open)
    condition = re.fullmatch(rf"\s*{index}\s*<\s*(?P<bound>[^<>=!&|?,]+?)\s*", body[condition_open + 1:condition_close])
    if condition is None:
        raise NotElementwise(f"the guard is `if ({' '.join(body[condition_open + 1:condition_close].split())})`, "
                             f"not `if ({index} < bound)`")
    bound_at = start + condition_open + 1 + condition.start("bound")
    bound = uncommented[bound_at:bound_at + len(condition["bound"])]

    guarded_from, guarded_to = _guarded_statements(body, condition_close + 1)
    guarded = body[guarded_from:guarded_to]
    arrays = _check_guarded(guarded, index, _array_parameters(source, kernel, spec))
    text = uncommented[start + guarded_from:start + guarded_to]
    lines = [line.rstrip() for line in text.split("\n") if line.strip()]
    prologue = [line.rstrip() for line in uncommented[start + definition.end():start + prologue_end].split("\n")
                if line.strip()]
    return Elementwise(source, kernel, index, " ".join(definition["type"].split()), block_x, bound.strip(),
                       textwrap.dedent("\n".join(lines)).strip("\n"), arrays,
                       prologue=textwrap.dedent("\n".join(prologue)).strip("\n"), guard_at=start + prologue_end)


def _prologue_end(body: str, at: int, index: str, outside: str) -> int:
    """Where the declarations after the index definition end that every thread makes alike, before its guard: each
    `T name = E;` with E reading neither the index nor the launch geometry, calling no function of the source and
    changing nothing (`const float a = alpha[0];`, a scalar a device pointer holds). The rewrite makes them once per
    thread, before its loop, as every thread of the submitted grid made them."""
    functions = functions_named(outside)
    declared = re.compile(r"\s*(?:const\s+)?(?:(?:unsigned|signed|long|short)\s+)*[A-Za-z_][\w:]*\s+"
                          r"(?:const\s+)?[A-Za-z_]\w*\s*=(?!=)(?P<value>[^;{}]*);")
    while (found := declared.match(body, at)) is not None:
        value = found["value"]
        if re.search(rf"\b(?:{index}|threadIdx|blockIdx|blockDim|gridDim|atomic\w*|__\w*sync\w*)\b|\+\+|--|"
                     rf"(?<![<>=!])=(?!=)", value) or any(m[1] in functions for m in CALLED.finditer(value)):
            break
        at = found.end()
    return at


def _grid_stride_model(spec: KernelSpec, kernel: Kernel, masked: str, uncommented: str,
                       body: list[Statement]) -> Elementwise:
    """A kernel whose whole body is a grid-stride loop, `for (int i = blockIdx.x * blockDim.x + threadIdx.x;
    i < n; i += blockDim.x * gridDim.x) BODY`, or that loop after locals of the launch geometry it starts and steps
    by (`int index = blockIdx.x * blockDim.x + threadIdx.x; int stride = blockDim.x * gridDim.x;`), or, after such
    locals, `while (index < n) { BODY index += stride; }`: elementwise when BODY is, whatever the grid."""
    *setup, loop = body
    if loop.kind not in ("for", "while"):
        raise NotElementwise("code follows the grid-stride loop; an elementwise kernel is the loop alone")
    known = _launch_locals(setup, masked, spec)
    if known is None:
        raise NotElementwise("code precedes the grid-stride loop; an elementwise kernel is the loop alone, after "
                             "locals of the launch geometry at most")
    if loop.kind == "while":
        definition, condition, step, inside = _while_parts(setup, loop, masked)
        condition_at = loop.head[0]
    else:
        init, condition, step = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
        definition = re.fullmatch(rf"\s*(?:const\s+)?(?P<type>{INDEX_TYPES})\s+(?P<index>[A-Za-z_]\w*)\s*=(?P<expr>.*)",
                                  init, re.DOTALL)
        if definition is None:
            raise NotElementwise("the loop does not define its index like "
                                 "`int i = blockIdx.x * blockDim.x + threadIdx.x`")
        condition_at = loop.head[0] + len(init) + 1
        inside = (loop.body.inner if loop.body.kind == "block" else (loop.body.start, loop.body.end))
    index, x_name = definition["index"], spec.block_size_names[0]
    block_x = _block_width(definition["expr"], spec, known)
    if block_x is None:
        raise NotElementwise(f"the loop starts {index} at `{' '.join(definition['expr'].split())}`, not at "
                             f"blockIdx.x * blockDim.x + threadIdx.x (or with {x_name})")
    bound = re.fullmatch(rf"\s*{index}\s*<\s*(?P<bound>[^<>=!&|?,]+?)\s*", condition)
    if bound is None:
        raise NotElementwise(f"the loop runs while `{' '.join(condition.split())}`, not while `{index} < bound`")
    increment = re.fullmatch(rf"\s*{index}\s*\+=(?P<step>.*)", step, re.DOTALL)
    stride = None
    if increment is not None:
        try:
            stride = affine.parse(increment["step"], known)
        except affine.NotAffine:
            pass
    if stride != {tuple(sorted((block_x, "gridDim.x"))): 1}:
        raise NotElementwise(f"the loop steps by `{' '.join(step.split())}`, not by {index} += {block_x} * gridDim.x")
    bound_at = condition_at + bound.start("bound")
    text = masked[inside[0]:inside[1]]
    arrays = _check_guarded(text, index, _array_parameters(spec.source, kernel, spec))
    # The rendering drops the locals before the loop: BODY and the bound must not read them (a while loop's index,
    # one of them, is the rendered loop's).
    used = next((name for name in known if name != index and re.search(rf"\b{name}\b", text + bound["bound"])),
                None)
    if used is not None:
        raise NotElementwise(f"the loop reads {used}, a local defined before it, beyond starting and stepping by it")
    lines = [line.rstrip() for line in uncommented[inside[0]:inside[1]].split("\n") if line.strip()]
    return Elementwise(spec.source, kernel, index, " ".join(definition["type"].split()), block_x,
                       uncommented[bound_at:bound_at + len(bound["bound"])].strip(),
                       textwrap.dedent("\n".join(lines)).strip("\n"), arrays, grid_stride=True)


def _index_after_helpers(body: str, spec: KernelSpec) -> tuple[re.Match | None, dict[str, affine.Poly]]:
    """The declaration of the thread index, maybe after locals of the launch geometry alone that it is defined
    from (`int tid = threadIdx.x;`), and those locals as polynomials; else the body's first declaration, if any,
    and no locals."""
    declaration = re.compile(rf"\s*(?:const\s+)?(?P<type>{INDEX_TYPES})\s+(?P<index>[A-Za-z_]\w*)\s*=\s*"
                             rf"(?P<expr>[^;]*);")
    launch = {"blockIdx.x", "blockDim.x", "threadIdx.x", *block_widths(spec, 0)}
    helpers: dict[str, affine.Poly] = {}
    first = definition = declaration.match(body)
    while definition is not None:
        if _block_width(definition["expr"], spec, helpers) is not None:
            return definition, helpers
        poly = affine.reading_only(definition["expr"], helpers, launch)
        if not poly:
            break
        helpers[definition["index"]] = poly
        definition = declaration.match(body, definition.end())
    return first, {}


def _while_parts(setup: list[Statement], loop: Statement, masked: str) -> tuple[re.Match, str, str, tuple[int, int]]:
    """Of `while (i < n) { BODY i += STEP; }`: the declaration of i among the locals before the loop, the
    condition, the step statement without its `;`, and BODY's span."""
    condition = masked[loop.head[0]:loop.head[1]]
    name = re.match(r"\s*([A-Za-z_]\w*)", condition)
    declared = rf"\s*(?P<type>{INDEX_TYPES})\s+(?P<index>{name[1] if name else ''})\s*=(?P<expr>.*);\s*"
    definition = next((d for s in setup if (d := re.fullmatch(declared, masked[s.start:s.end], re.DOTALL))), None)
    if definition is None:
        raise NotElementwise(f"the while loop runs while `{' '.join(condition.split())}`, not while an index declared "
                             f"before it, like `int i = blockIdx.x * blockDim.x + threadIdx.x;`, is below a bound")
    inner = loop.body.children(masked) if loop.body.kind == "block" else []
    if not inner or inner[-1].kind != "simple":
        raise NotElementwise("the while loop's body is not a block ending with the step of its index, "
                             "`{ BODY i += stride; }`")
    return definition, condition, masked[inner[-1].start:inner[-1].end - 1], (loop.body.inner[0], inner[-1].start)


def _launch_locals(setup: list[Statement], masked: str, spec: KernelSpec) -> dict[str, affine.Poly] | None:
    """The integer locals declared before a grid-stride loop, each by the launch geometry alone (the thread's
    first index, the grid's stride), as polynomials; None when any statement is something else."""
    launch = {"blockIdx.x", "blockDim.x", "threadIdx.x", "gridDim.x", spec.block_size_names[0]}
    known: dict[str, affine.Poly] = {}
    for statement in setup:
        local = re.fullmatch(rf"\s*(?:const\s+)?{INDEX_TYPES}\s+(?P<name>[A-Za-z_]\w*)\s*=(?P<expr>[^;,]*);\s*",
                             masked[statement.start:statement.end])
        poly = None if local is None else affine.reading_only(local["expr"], known, launch)
        if poly is None:
            return None
        known[local["name"]] = poly
    return known


def _block_width(expression: str, spec: KernelSpec, known: dict[str, affine.Poly] | None = None) -> str | None:
    """blockDim.x or a name of the x block size (block_widths), whichever the index expression multiplies
    blockIdx.x by; None if it is not one
    of the usual spellings of the global thread index (casts such as `(size_t)blockIdx.x * blockDim.x` are looked
    through, and the `known` locals replaced by their polynomials)."""
    try:
        poly = affine.parse(expression, known)
    except affine.NotAffine:
        return None
    for width in ("blockDim.x", *block_widths(spec, 0)):
        if poly == {tuple(sorted(("blockIdx.x", width))): 1, ("threadIdx.x",): 1}:
            return width
    return None


def _guarded_statements(body: str, after_condition: int) -> tuple[int, int]:
    """The span (in `body`) of what the guard guards: a braced block's inside or a single statement."""
    rest = body[after_condition:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        block_open = after_condition + len(rest) - len(stripped)
        block_close = closing(body, block_open)
        if body[block_close + 1:].strip():
            raise NotElementwise("code follows the guarded block; an elementwise kernel ends with it")
        return block_open + 1, block_close
    parts = split_top_level(rest, ";")
    if len(parts) != 2 or parts[1].strip():
        raise NotElementwise("code follows the guarded statement; an elementwise kernel ends with it")
    return after_condition, after_condition + len(parts[0]) + 1


def _array_parameters(source: str, kernel: Kernel, spec: KernelSpec) -> dict[str, str]:
    spans = kernel.parameters(source)
    if len(spans) != len(spec.parameters):
        raise NotElementwise(f"the kernel has {len(spans)} parameters but args lists {len(spec.parameters)}")
    names = [IDENTIFIER.findall(mask(source[a:b]))[-1] for a, b in spans]
    return {name: arg.dtype for name, arg in zip(names, spec.parameters) if arg.is_array}


def through_ldg(text: str, index: str) -> str:
    """`text` with each read of an element through the read-only cache, `__ldg(&x[i])` or `__ldg(x + i)`, written
    as the plain read x[i]: the model reads them as such, and the vector loop reads the element from its lane
    instead (the scalar loops keep the body, and the __ldg, as written)."""
    return re.sub(rf"\b__ldg\s*\(\s*(?:&\s*(?P<at>{IDENTIFIER.pattern})\s*\[\s*{index}\s*\]|"
                  rf"(?P<plus>{IDENTIFIER.pattern})\s*\+\s*{index})\s*\)", lambda m: f"{m['at'] or m['plus']}[{index}]",
                  text)


def _check_guarded(guarded: str, index: str, array_parameters: dict[str, str]) -> dict[str, str | None]:
    guarded = through_ldg(guarded, index)
    escape = re.search(rf"\b({'|'.join(ESCAPES)})\b", guarded)
    if escape:
        raise NotElementwise(f"the guarded body uses {escape[1]}, whose meaning changes inside a loop over elements")
    if re.search(rf"(?:\+\+|--)\s*{index}\b|\b{index}\s*(?:\+\+|--|{ASSIGNMENT})", guarded):
        raise NotElementwise(f"the guarded body changes the index {index}")
    arrays: dict[str, str | None] = {}
    for bracket in re.finditer(r"\[", guarded):
        inside = guarded[bracket.start() + 1:closing(guarded, bracket.start())].strip()
        if inside != index:
            raise NotElementwise(f"the subscript [{' '.join(inside.split())}] in the guarded body is not exactly "
                                 f"[{index}]")
        name = re.search(r"([A-Za-z_]\w*)\s*$", guarded[:bracket.start()])
        if name is None:
            raise NotElementwise(f"a [{index}] in the guarded body does not follow an array's name")
        arrays.setdefault(name[1], array_parameters.get(name[1]))
    for name in array_parameters:
        if re.search(rf"\b{name}\b(?!\s*\[)", guarded):
            raise NotElementwise(f"the guarded body uses {name} other than as {name}[{index}]")
    if not arrays:
        raise NotElementwise("the guarded body indexes no array")
    return arrays


# --- vectorize: which elementwise kernels can run on 128-bit vectors ------------------------------------
def vectorize_reason(kernel: Elementwise, spec: KernelSpec) -> str | None:
    body = mask(through_ldg(kernel.body, kernel.index))
    source = mask(kernel.source)
    places = reference_places(declared_parameters(source[:kernel.kernel.name_at] + source[kernel.kernel.body_close:]))
    for element in re.finditer(rf"\b([A-Za-z_]\w*)\s*\[\s*{kernel.index}\s*\]", body):
        if (called := passed_by_reference(body, element.start(), element.end(), places)) is not None:
            return f"the body passes {element[0]} to {called}, which takes it by reference, as a lane has it not"
    for name, dtype in kernel.arrays.items():
        if dtype is None:
            return f"{name} is not one of the kernel's array arguments, so it cannot be loaded as vectors"
        if re.search(rf"&\s*{name}\s*\[", body):
            return f"the body takes the address of {name}[{kernel.index}], which a vector lane does not have"
        if not indexed_whenever_run(body, 0, len(body), name) and \
                not coverage.array_covers(spec, name, [kernel.bound]):
            return (f"the body touches {name} only under a condition, and its shape in args does not hold "
                    f"{kernel.bound} elements, so a vector may reach past it")
    if ALIAS.search(body):  # `float &r = a[i];` would bind a lane's register, const where only read
        return "the body declares a pointer or a reference, which may reach an element past its lane's register"
    pointees = _pointees(kernel)
    for name in kernel.arrays:
        if name not in pointees:
            return (f"{name} is not declared as a plain pointer (`const T *{name}`), so its element type for "
                    f"the vector of {lanes(kernel)} lanes is unknown")
    return None


def lanes(kernel: Elementwise) -> int:
    """The elements per vector: 16 bytes of the widest array's (2 of 8 bytes, 4 of 4, 8 of 2, 16 of 1), so
    every access moves at most 128 bits, and a warp's stores of the widest array are contiguous. Lanes by the
    narrowest would have a thread of an int8-to-float kernel store 64 bytes, four 128-bit stores 64 bytes apart
    per warp instruction: 57% of a copy on the H100, where 4 lanes (4 bytes in, 16 out) reach 99%."""
    sizes = [ELEMENT_BYTES.get(dtype, 4) for dtype in kernel.arrays.values()]
    return VECTOR_BYTES // max(sizes, default=4)


def _vector_bytes(kernel: Elementwise, name: str) -> int:
    """What one vector of the array moves, and so the alignment it needs: 16 bytes for the widest arrays, fewer
    for narrower ones (4 for int8 beside floats)."""
    return lanes(kernel) * ELEMENT_BYTES.get(kernel.arrays[name], 4)


def _pointees(kernel: Elementwise) -> dict[str, str]:
    """The element type each array parameter is declared with (`const __half *__restrict__ x`: __half), for
    the arrays declared as plain pointers to a non-volatile type."""
    declared = (pointee(kernel.source[start:end]) for start, end in kernel.kernel.parameters(kernel.source))
    return {name: element for name, element in filter(None, declared) if name in kernel.arrays}


def render(kernel: Elementwise, elements_per_thread: bool, vectorize: bool) -> str:
    """The submitted source with the kernel's body re-shaped: a grid-stride loop (several elements per
    thread when `elements_per_thread`), over vectors of up to 128 bits plus a scalar tail when `vectorize` (and
    every array is aligned to its vector at run time; else the element loop)."""
    if vectorize:
        lines = _vector_loops(kernel, elements_per_thread)
    else:
        lines = [*_unrolled_by_elements_per_thread(elements_per_thread),
                 *_scalar_loop(kernel, _first(kernel))]
    lines = [*(kernel.prologue.split("\n") if kernel.prologue else []), *lines]
    body = "\n".join(INDENT + line if line else line for line in lines)
    return f"{kernel.source[:kernel.kernel.body_open + 1]}\n{body}\n{kernel.source[kernel.kernel.body_close:]}"


def _unrolled_by_elements_per_thread(enabled: bool) -> list[str]:
    if not enabled:
        return []
    return ["// The grid is elements_per_thread times smaller than one thread per item, so each thread runs",
            "// about that many iterations; unrolling by that count keeps their loads in flight together.",
            "#pragma unroll elements_per_thread"]


def _first(kernel: Elementwise) -> str:
    """The thread's first index, in the index's type when that is 64 bits wide (the kernel may index arrays of
    more than 2^32 elements, where blockIdx.x * blockDim.x in unsigned int would wrap)."""
    return f"{_widened(kernel)}blockIdx.x * {kernel.block_x} + threadIdx.x"


def _stride(kernel: Elementwise) -> str:
    return f"{_widened(kernel)}gridDim.x * {kernel.block_x}"


def _widened(kernel: Elementwise) -> str:
    return f"({kernel.index_type})" if re.fullmatch(WIDE_INTEGER_TYPE, kernel.index_type) else ""


def _scalar_loop(kernel: Elementwise, first: str) -> list[str]:
    i = kernel.index
    return [f"for ({kernel.index_type} {i} = {first}; {i} < {kernel.bound}; {i} += {_stride(kernel)}) {{",
            *textwrap.indent(kernel.body, INDENT).split("\n"), "}"]


def _vector_loops(kernel: Elementwise, elements_per_thread: bool) -> list[str]:
    """Vectors of `lanes(kernel)` elements (4, 8 or 16) when every array is aligned to what its vector moves: each
    array's vector is a struct of that many of its elements, aligned so (16 bytes for the widest arrays, one
    128-bit access: ld.global.v4 / st.global.v4; 4 bytes of int8s beside floats), loaded and stored whole, and an
    unrolled loop over the lanes runs the body as written on each
    lane's elements, so every element is computed (and rounded) as one thread computed it. Then the last
    bound % lanes elements one by one; with an array not aligned (a slice of a tensor, say), the element loop
    alone. The check reads only the kernel's arguments, so every thread of a launch takes the same path."""
    width = lanes(kernel)
    taken = identifiers(kernel.source)
    v, vectors, k, lane = (fresh_name(base, taken) for base in ("v", "vectors", "k", "lane"))
    pointees = _pointees(kernel)
    structs: dict[str, str] = {}
    alignments: dict[str, int] = {}  # each struct's: the bytes it moves
    for name in kernel.arrays:
        element = pointees[name]
        if element not in structs:
            structs[element] = fresh_name(f"{re.sub(r'[^A-Za-z0-9]+', '_', element).strip('_')}_x{width}", taken)
            alignments[element] = _vector_bytes(kernel, name)
    registers = {name: fresh_name(f"{name}{width}", taken) for name in kernel.arrays}
    bound = kernel.bound if re.fullmatch(r"\w+", kernel.bound) else f"({kernel.bound})"
    loads, stores = [], []
    for name, register in registers.items():
        vector = structs[pointees[name]]
        written = _written(kernel, name)
        if not written:
            loads.append(f"const {vector} {register} = reinterpret_cast<const {vector} *>({name})[{v}];")
        elif _overwritten_before_read(kernel, name):
            loads.append(f"{vector} {register};")
        else:
            loads.append(f"{vector} {register} = reinterpret_cast<const {vector} *>({name})[{v}];")
        if written:
            stores.append(f"reinterpret_cast<{vector} *>({name})[{v}] = {register};")
    i, text = kernel.index, through_ldg(kernel.body, kernel.index)
    for name, register in registers.items():
        text = re.sub(rf"\b{name}\s*\[\s*{i}\s*\]", f"{register}.{lane}[{k}]", text)
    index = [f"const {kernel.index_type} {i} = {width} * {v} + {k};"] if re.search(rf"\b{i}\b", mask(text)) else []
    # An array the body indexes only under a condition may be passed null, which the element loop never reads.
    body = mask(through_ldg(kernel.body, kernel.index))
    aligned = " && ".join(
        ("" if indexed_whenever_run(body, 0, len(body), name) else f"{name} != nullptr && ")
        + f"(reinterpret_cast<unsigned long long>({name}) & {_vector_bytes(kernel, name) - 1}) == 0"
        for name in kernel.arrays)
    first = _first(kernel)
    return [f"// Vectors of up to 128 bits when every array is aligned to one: the first {bound} / {width} * {width} "
            f"elements as vectors",
            f"// of {width} lanes, each lane doing what one thread did, then the last {bound} % {width} one by one; "
            f"else all one by one.",
            *(f"struct __align__({alignments[element]}) {struct} {{ {element} {lane}[{width}]; }};"
              for element, struct in structs.items()),
            f"const {kernel.index_type} {vectors} = {bound} / {width};",
            f"if ({aligned}) {{",
            *(INDENT + line for line in [
                *_unrolled_by_elements_per_thread(elements_per_thread),
                f"for ({kernel.index_type} {v} = {first}; {v} < {vectors}; {v} += {_stride(kernel)}) {{",
                *(INDENT + line for line in [
                    *loads,
                    "#pragma unroll",
                    f"for (int {k} = 0; {k} < {width}; {k}++) {{",
                    *(INDENT + line for line in [*index, *text.split("\n")]),
                    "}",
                    *stores]),
                "}",
                *_scalar_loop(kernel, f"{width} * {vectors} + {first}")]),
            "} else {",
            *(INDENT + line for line in _scalar_loop(kernel, first)),
            "}"]


def _written(kernel: Elementwise, name: str) -> bool:
    element = rf"\b{name}\s*\[\s*{kernel.index}\s*\]"
    return re.search(rf"{element}\s*(?:\+\+|--|{ASSIGNMENT})|(?:\+\+|--)\s*{element}", mask(kernel.body)) is not None


def _overwritten_before_read(kernel: Elementwise, name: str) -> bool:
    """Whether the body's first top-level mention of X[i] assigns it without reading it: then the vector need
    not be loaded (a pure output costs no read). Anything less plain keeps the load, which is always right."""
    for statement in split_top_level(mask(kernel.body), ";"):
        plain = re.match(rf"\s*{name}\s*\[\s*{kernel.index}\s*\]\s*=(?!=)", statement)
        if plain:
            return re.search(rf"\b{name}\b", statement[plain.end():]) is None
        if re.search(rf"\b{name}\b", statement):
            return False
    return False


def _depends_on_the_thread(kernel: Elementwise) -> str | None:
    """Why BODY's result depends on which thread runs an element, or on how many it runs, else None: it reads
    the launch geometry, itself or in a function it calls, talks to other threads (a shuffle, a barrier, shared
    memory: review, helper-91, a lane traded with its neighbour's element), keeps a static, or changes something
    it does not declare (a parameter used as per-thread state, `seed = seed * a + c`, or changed through a
    reference or a function taking it by one), which a thread's next element would see changed."""
    body = mask(kernel.body)
    geometry = re.search(rf"\b({'|'.join((*points.THREAD_BOUND, 'static'))})\b", body)
    if geometry:
        return f"its body uses {geometry[1]}, so its elements depend on the thread that runs them"
    masked = mask(kernel.source)
    if (helper := points.thread_bound_helper(kernel.kernel, masked, mask(kernel.source, literals=False))) is not None:
        return f"its body {helper}, so its elements depend on the thread that runs them"
    # The prologue's locals are declared once per thread in the rewrite, before its loop, as parameters are
    # (review, helper-87: a local changed through a reference accumulated over a thread's elements)
    parameters = list(points.parameters_of(kernel.source, kernel.kernel))
    if (changed := points.parameter_changed(kernel.kernel, masked, kernel.kernel.body_open, parameters) or
            points.parameter_changed(kernel.kernel, masked, kernel.guard_at,
                                     sorted(points.declared_names(mask(kernel.prologue))), "local")) is not None:
        return f"its body {changed}, which a thread's next element would see changed"
    declared = set(re.findall(r"\b[A-Za-z_][\w:<>]*[\s*&]+([A-Za-z_]\w*)\s*(?:=|;|\[|,)", body))
    changed = {m.group(1) for m in re.finditer(rf"(?<![\w.\]>])\b([A-Za-z_]\w*)\s*(?:{ASSIGNMENT}|\+\+|--)", body)}
    changed |= set(re.findall(r"(?:\+\+|--)\s*([A-Za-z_]\w*)\b(?!\s*\[)", body))
    outer = sorted(changed - declared - {kernel.index})
    return f"its body changes {outer[0]}, which a thread's next element would see changed" if outer else None


class ElementwiseShape:
    name = "elementwise"
    kind = "an elementwise kernel"
    rules = ("elements_per_thread", "vectorize")

    def recognise(self, spec: KernelSpec) -> Elementwise:
        return model(spec)

    def reason(self, rule_id: str, kernel: Elementwise, spec: KernelSpec) -> str | None:
        """A kernel of one guarded point per thread must be launched as one (a grid divided by more leaves
        points out, which the rewrite would then compute); a grid-stride loop covers its range on any grid."""
        if not kernel.grid_stride and (why := one_thread_per_point(spec, 0)) is not None:
            return why
        if not kernel.grid_stride and not coverage.bound_covered(spec, 0, kernel.bound):
            # The rewrite's grid-stride loop runs up to the bound: the submitted grid must have reached it too.
            return (f"its guard's bound, {kernel.bound}, may pass its problem size: the submitted grid stops at the "
                    f"problem size, and the rewrite's loop would compute the elements between them")
        if (why := _depends_on_the_thread(kernel)) is not None:
            return why
        return vectorize_reason(kernel, spec) if rule_id == "vectorize" else None

    def render(self, kernel: Elementwise, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        """One block per block_size_x threads, each handling elements_per_thread iterations of vectors of
        lanes(kernel) elements (4, 8 or 16): the grid then covers the problem once."""
        ept, vectors = "elements_per_thread" in features, "vectorize" in features
        divisors = [spec.block_size_names[0], *(["elements_per_thread"] if ept else []),
                    *([lanes(kernel)] if vectors else [])]
        submitted = spec.dimensions
        # A grid-stride loop on a grid the spec fixes (problem_size [264] blocks, grid_div_x []), divided so,
        # would be a block or two: it is launched over the loop's bound, where the sizes give it, else as submitted.
        launched = coverage.launched_for(spec, 0, kernel.bound) if kernel.grid_stride else submitted
        if launched is None:
            return render(kernel, ept, vectors), Layout()
        return render(kernel, ept, vectors), Layout(grid_div={"x": divisors},
                                                    problem_size=None if launched == submitted else launched)
