"""128-bit vectors along the rows of kernels of one point per thread (vectorize; elementwise.py gives 1D elementwise
kernels theirs, and a 1D kernel it does not read, a stencil or a difference `d[i] = x[i + 1] - x[i]`, is one row).

Recognised: a kernel of one point per thread on a 1D, 2D or 3D grid (points.py) whose point body is one guard, `if (x <
W && ...) BODY` (an early return reads so, canonical.py), where x, the thread's index along x, appears in the
condition only as `x < W` (or `x <= W - 1`), W arithmetic of scalar arguments the problem size along x covers, and
in lower bounds `x >= L` or `x > L`, L free of x: the condition then holds for a row's consecutive points where it
holds for the first and the last. BODY is statements and ifs (no loop,
return or jump; no reference, pointer or lambda declared) that change no parameter and make no atomic. The arrays it
takes as vectors are array parameters (of 1-, 2-, 4- or 8-byte elements, declared as plain pointers) it indexes at one
subscript moving by exactly 1 along x, of the indices and scalar parameters alone, used no other way (no pointer
passed on or offset, no address taken but a read's through `__ldg(&a[i])`, no element passed to a function of the
source, which may take it by reference), no index cast narrower; at least one must be. An array it only reads is
taken so where every access is made whenever BODY runs (none in an if's branch, under `?:`, `&&` or `||`); one it
writes under a condition too (a mask, a clamp in place), where its subscript is the point's place in the box the
guard bounds, `x + W * y + W * H * z` (no two points share an element, so a lane that does not store writes back
what it read and undoes nobody's store), and its elements exist (BODY touches it wherever it runs, or its shape in
args holds the box). An array it only reads around the point (a stencil's input: subscripts each moving by
exactly 1 along x, apart by offsets free of the indices, `in[i - 1]`, `in[i + nx]`, `in[i - plane]`), every access
made whenever BODY runs, is read into a window of registers (Window). Every other array it only reads (a bias per
row, a gather, neighbours under a condition), and each lane reads it as written, where its point would. Each
point is then computed once, by one lane, as by one thread, and touches the elements it touched.

Rendered: each thread takes V consecutive points of its row, x0 = (blockIdx.x * block_size_x + threadIdx.x) * V,
V the lanes of 16 bytes of the widest array taken as vectors (2 doubles, 4 floats, 8 halves, 16 bytes), the grid
along x V times smaller; with elements_per_thread (register_blocking) a thread takes that many rows along the
slowest axis,
and in 1D that many vectors, a block width apart, so that a warp's vectors stay consecutive.
Where the guard holds for the last of them (so for all, x0 + V - 1 < W and the rest of the condition not reading
x) and every vector's first element is aligned to what the vector moves (a row pitch or a slice may leave it
otherwise), each vector's array is loaded as a struct of V elements so aligned (16 bytes for the widest arrays; 4
for bytes beside floats) unless BODY writes it before reading it, BODY runs once
per lane on the lane's elements, and the written arrays are stored whole (a lane that stores nothing keeps what was
loaded). A window's subscripts are grouped by their part other than a number; a group's elements that some lane
reads come into a register array before the lanes run, each aligned vector all of whose elements are read as one
struct (its alignment tested with the others'), the rest one by one, and each lane reads its element from there.
So the rows a stencil reads come from memory once, 16 bytes a load, and no element its points do not read is
touched. A stencil takes the vectors where the guard holds for some of the V points (a row's edges too): each lane
runs, and stores, only where its own point's guard holds. Where some lane is not active, the vectors serve the row
only where each lies in its array: each of its elements is one an active lane reads, or the array's shape in args,
written in the kernel's scalar parameters, holds it (as it does at most rows' edges); beside an array's last row, an
element only an inactive lane reads may lie past it. Otherwise the thread runs the point body as written, guard
included, for each of its V points. Every point is thus computed as the kernel wrote it.
"""
import dataclasses
import re
import textwrap
from dataclasses import dataclass

from services.generator.rules import affine, coverage, points
from services.generator.rules.cuda_text import (IDENTIFIER, LAMBDA, declared_parameters, fresh_name, identifiers, mask,
                                                passed_by_reference, pointee, reference_places, top_level_conjuncts)
from services.generator.rules.elementwise import ELEMENT_BYTES, VECTOR_BYTES
from services.generator.rules.points import INDENT, PointKernel
from services.generator.rules.shape import NotRecognised, one_thread_per_point
from services.generator.rules.statements import made_whenever_run, statements, walk
from shared.domain.spec import KernelSpec


@dataclass(frozen=True)
class Rows:
    kernel: PointKernel
    condition: tuple[int, int]  # the guard's condition, in the source
    body: tuple[int, int]  # what the guard guards: a block's inside or the one statement
    arrays: dict[str, str]  # each array BODY indexes -> its element type as declared
    subscripts: dict[str, str]  # each array -> its subscript as C arithmetic of the indices and parameters
    loaded: tuple[str, ...]  # the arrays loaded as vectors before the lanes run (read before written)
    stored: tuple[str, ...]  # the arrays stored as vectors after
    lanes: int
    moved: dict[str, int]  # each array -> the bytes its vector moves, and so the alignment it needs
    reads: dict[int, tuple[int, int]]  # each access (by its start) -> the span its lane's element replaces
    windows: dict[str, "Window"] = dataclasses.field(default_factory=dict)  # neighbourhoods read into registers
    lower_bounded: bool = False  # the guard bounds x from below too, so it is tested at the row's first point
    held: dict[str, affine.Poly] = dataclasses.field(default_factory=dict)  # each array's elements, by its shape
    # The arrays taken as vectors that BODY touches only under a condition (`if (want) grad[at] = v;`): the caller
    # may pass them null, which the kernel as written then never touches but a vector would.
    optional: tuple[str, ...] = ()


@dataclass(frozen=True)
class Window:
    """An array read around the point (a stencil's input): its subscripts, each the point's place plus an offset
    free of the indices, grouped by the offset's part other than a number. A group's elements for the V lanes are
    read once into a register array, the aligned vectors wholly read by some lane as vectors, the rest one by one."""
    element: str  # its element type as declared
    groups: tuple[tuple[affine.Poly, tuple[int, ...]], ...]  # (the subscript less its number, the numbers added)
    at: dict[int, tuple[int, int]]  # each access (by its start) -> (its group, the number it adds)


def model(kernel: PointKernel, spec: KernelSpec) -> Rows:
    """The kernel read for vectors along its rows; NotRecognised saying what did not match."""
    masked = mask(kernel.source)
    x = kernel.axes[0].name
    if (why := one_thread_per_point(spec, 0)) is not None:
        raise NotRecognised(why)
    if len(kernel.statements) != 1 or kernel.statements[0].kind != "if" or kernel.statements[0].orelse is not None:
        raise NotRecognised("its point body is not one guard, `if (x < width && ...) { ... }`")
    guard = kernel.statements[0]
    condition = masked[guard.head[0]:guard.head[1]]
    conjuncts = top_level_conjuncts(condition)
    bounds = [c for c in conjuncts if re.search(rf"\b{x}\b", c)]
    uppers = [found for c in bounds if (found := re.fullmatch(
        rf"\s*{x}\s*<\s*(?P<w>{_OPERAND})|\s*(?P<v>{_OPERAND})>\s*{x}\s*"
        rf"|\s*{x}\s*<=\s*(?P<last>{_OPERAND})|\s*(?P<last_>{_OPERAND})>=\s*{x}\s*", c))]
    # x is the launch's index, never negative: `x != 0` (an early return on `x == 0`, negated) is `x >= 1`
    lowers = [c for c in bounds if re.fullmatch(rf"\s*{x}\s*>=?\s*{_OPERAND}|\s*{_OPERAND}<=?\s*{x}\s*"
                                                rf"|\s*{x}\s*!=\s*0[uU]?\s*|\s*0[uU]?\s*!=\s*{x}\s*", c)]
    if len(uppers) != 1 or len(uppers) + len(lowers) != len(bounds) or \
            any(len(re.findall(rf"\b{x}\b", c)) != 1 for c in bounds):
        raise NotRecognised(f"its guard `{' '.join(condition.split())}` does not bound {x} as `{x} < width` alone "
                            f"(and `{x} >= start`)")
    bound = uppers[0]
    last = bound["last"] or bound["last_"]
    width_bound = f"({last}) + 1" if last else bound["w"] or bound["v"]  # x below it
    if not coverage.bound_covered(spec, 0, width_bound):
        raise NotRecognised(f"its bound on {x}, `{' '.join(width_bound.split())}`, is not a scalar "
                            f"argument the problem size covers, so its grid would reach other points")
    # A read of the same element at every point (`enabled[0] && ...`) is made alike wherever the guard is tested
    if any(guard.head[0] <= a.start < guard.head[1] and not points.made_alike_at_every_point(kernel, masked, a)
           for a in kernel.accesses):
        raise NotRecognised("its guard reads an array other than at one element every point reads alike")
    text = masked[kernel.body_start:kernel.body_end]
    if (why := points.changed_parameter(kernel)) is not None or re.search(r"\batomic\w*\s*\(", text):
        raise NotRecognised(why or "its point body makes atomics")
    body = guard.body.inner if guard.body.kind == "block" else (guard.body.start, guard.body.end)
    if (why := _plain(masked, body)) is not None:
        raise NotRecognised(why)
    axis_bounds = {axis.name: found["b"] for axis in kernel.axes for c in conjuncts
                   if (found := re.fullmatch(rf"\s*{axis.name}\s*<\s*(?P<b>[^<>=!&|?,^]+?)\s*", c))}
    arrays, subscripts, windows = _arrays(kernel, spec, masked, x, body, axis_bounds)
    other = next((name for name in [*arrays, *windows] if len(re.findall(rf"(?<![\w.]){name}\b", text)) !=
                  sum(a.array == name for a in kernel.accesses)), None)
    if other is not None:
        raise NotRecognised(f"it uses {other} otherwise than indexed (a pointer passed on, or offset), which the "
                            f"lanes' registers would not see")
    indexing = " ".join(_index_texts(masked, body, [a.subscript for a in kernel.accesses
                                                    if a.array in arrays or a.array in windows]))
    if re.search(r"\b(?:short|char|u?int(?:8|16)_t)\b", indexing):
        raise NotRecognised("an index is computed in a narrower integer, which may wrap it")
    widths = {name: ELEMENT_BYTES[_dtype(kernel, spec, name)] for name in [*arrays, *windows]}
    lanes = VECTOR_BYTES // max(widths.values())  # 16 bytes of the widest array, elementwise.lanes' choice
    moved = {name: lanes * width for name, width in widths.items()}
    written = {a.array for a in kernel.accesses if a.write}
    for name in (name for name in arrays if name in written):
        number = next(a.poly for a in kernel.accesses if a.array == name).get((), 0)
        if number % lanes:
            raise NotRecognised(f"its stores into {name} are {abs(number)} element{'s' if abs(number) > 1 else ''} "
                                f"{'past' if number > 0 else 'before'} the point's place in its rows (an index "
                                f"offset into an interior, `x + 1`), so vectors of {lanes} from a row's first point "
                                f"would be aligned in no row that starts aligned")
    loaded = tuple(name for name in arrays if name not in written or not _overwritten_first(kernel, masked, body,
                                                                                         name))
    parts = statements(masked, *body)
    optional = tuple(name for name in arrays if not any(made_whenever_run(masked, parts, a.start)
                                                        for a in kernel.accesses if a.array == name))
    return Rows(kernel, guard.head, body, arrays, subscripts, loaded, tuple(n for n in arrays if n in written), lanes,
                moved, {a.start: _ldg_span(masked, a) or (a.start, a.end) for a in kernel.accesses
                        if a.array in arrays or a.array in windows},
                windows, bool(lowers), {name: held for name in [*arrays, *windows]
                                        if (held := _held(kernel, spec, name)) is not None}, optional)


def _held(kernel: PointKernel, spec: KernelSpec, name: str) -> affine.Poly | None:
    """The elements the array holds as its shape in args declares them, in the kernel's scalar parameters, as a
    polynomial: each size its shape names must be the value of an integer scalar parameter (a parameter spelled
    like a size may hold another value, `nx` holding the size nx + 2, or be a pointer). None where it cannot be
    so written."""
    params = list(kernel.parameters)
    place = params.index(name) if name in params else None
    arg = spec.parameters[place] if place is not None and place < len(spec.parameters) else None
    sizes = {str(a.value): {(params[i],): 1} for i, a in enumerate(spec.parameters[:len(params)])
             if not a.is_array and a.dtype in _SIZE_TYPES and isinstance(a.value, str)
             and IDENTIFIER.fullmatch(a.value)}
    if arg is None or not arg.is_array or not arg.shape or \
            not set(IDENTIFIER.findall(" ".join(map(str, arg.shape)))) <= set(sizes):
        return None
    held: affine.Poly = {(): 1}
    try:
        for dim in arg.shape:
            held = affine.product(held, affine.parse(str(dim), sizes))
    except affine.NotAffine:
        return None
    return held if affine.spelled(held) else None


_SIZE_TYPES = ("int32", "uint32", "int64", "uint64")


_OPERAND = r"[^<>=!&|?,^]+"  # a bound's other side: no comparison, logic or comma of its own


def _plain(masked: str, body: tuple[int, int]) -> str | None:
    """Why the lanes may not run BODY with some arrays in registers, else None: BODY must be statements and ifs
    (no loop, return or jump, which decide what a lane touches how often) and declare no reference or pointer,
    nor a lambda, which would reach an element past its lane's register."""
    text = masked[body[0]:body[1]]
    if any(s.kind not in ("simple", "if", "block", "empty") for s, _ in walk(masked, statements(masked, *body))) or \
            re.search(r"\b(?:return|goto|break|continue)\b", text):
        return "its guarded body holds a loop, a return or a jump, which decides what a lane touches"
    if points.ALIAS.search(text) or LAMBDA.search(text):
        return "its guarded body declares a reference, a pointer or a lambda"
    return None


def _index_texts(masked: str, body: tuple[int, int], subscripts: list[str]) -> list[str]:
    """The subscripts, with the declarations in BODY of the locals they read, theirs in turn."""
    found, names, seen = list(subscripts), set(re.findall(r"[A-Za-z_]\w*", " ".join(subscripts))), set()
    while names - seen:
        name = (names - seen).pop()
        seen.add(name)
        for declared in re.finditer(rf"[^;{{}}]*\b{name}\s*=(?!=)[^;]*", masked[body[0]:body[1]]):
            found.append(declared[0])
            names |= set(re.findall(r"[A-Za-z_]\w*", declared[0]))
    return found


def _arrays(kernel: PointKernel, spec: KernelSpec, masked: str, x: str, body: tuple[int, int],
            bounds: dict[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, Window]]:
    """Each array the lanes take as vectors -> its element type, and -> its one subscript as C arithmetic. Such an
    array is indexed at one subscript moving by exactly 1 along x, each access made whenever BODY runs (none in a
    branch of `?:` or after `&&` or `||`): the stores then rewrite only elements the kernel writes, and the loads
    read only elements it reads (an inner condition may be what keeps an index in bounds: a crop, a pad). An array
    only read, otherwise (a bias per row, a gather, neighbours, under a condition), is left to each lane as
    written: the lane reads what its point reads. An array only read around the point, at subscripts each moving
    by exactly 1 along x and apart by offsets free of the indices, every access made whenever BODY runs, is read
    into a Window instead (a stencil's input)."""
    arrays, subscripts, windows = {}, {}, {}
    parts = statements(masked, *body)
    functions = reference_places(declared_parameters(masked[:kernel.kernel.name_at] + masked[kernel.body_end:]))
    for name in dict.fromkeys(a.array for a in kernel.accesses):
        accesses = [a for a in kernel.accesses if a.array == name]
        why = next(filter(None, (_unvectorised(kernel, spec, masked, x, a, accesses[0], functions)
                                 for a in accesses)),
                   None)
        conditional = next((a for a in accesses if not made_whenever_run(masked, parts, a.start)), None)
        if why == _SEVERAL.format(name) and conditional is None and not any(a.write for a in accesses) and \
                (window := _window(kernel, spec, masked, x, accesses, functions)) is not None:
            windows[name] = window
            continue
        if why is None and conditional is not None:
            why = f"{name}[{conditional.subscript}] is read or written only under a condition"
            if any(a.write for a in accesses):
                why = _stored_whole_reason(kernel, spec, masked, parts, accesses, bounds)
        if why is None:
            arrays[name] = pointee(kernel.parameters[name])[1]
            subscripts[name] = affine.spelled(accesses[0].poly)
        elif any(a.write for a in accesses):
            raise NotRecognised(why)
    if not arrays:
        raise NotRecognised(f"no array its point body indexes moves by exactly 1 along {x} at every access")
    return arrays, subscripts, windows


_SEVERAL = "it indexes {} at more than one subscript"
WINDOW_SPAN = 8  # the most elements a group's numbers may spread over: its registers are that plus the lanes


def _window(kernel: PointKernel, spec: KernelSpec, masked: str, x: str, accesses: list,
            functions: dict[str, set[int]]) -> Window | None:
    """The array's accesses as a Window, where each would take vectors but for the others' subscripts (so each
    moves by exactly 1 along x) and the subscripts differ by offsets free of the indices; else None."""
    if any(_unvectorised(kernel, spec, masked, x, a, a, functions) for a in accesses):
        return None
    first = accesses[0].poly
    groups: dict[tuple, set[int]] = {}
    at = {}
    for access in accesses:
        if affine.names(affine.minus(access.poly, first)) & kernel.index_names:
            return None
        key = tuple(sorted((term, c) for term, c in access.poly.items() if term != ()))
        number = access.poly.get((), 0)
        groups.setdefault(key, set()).add(number)
        at[access.start] = (key, number)
    if any(max(numbers) - min(numbers) > WINDOW_SPAN for numbers in groups.values()):
        return None
    keys = list(groups)
    return Window(pointee(kernel.parameters[accesses[0].array])[1],
                  tuple((dict(key), tuple(sorted(groups[key]))) for key in keys),
                  {start: (keys.index(key), number) for start, (key, number) in at.items()})


def _unvectorised(kernel: PointKernel, spec: KernelSpec, masked: str, x: str, access, first,
                  functions: dict[str, set[int]]) -> str | None:
    """Why the access's array cannot be taken as vectors of consecutive elements along x, else None."""
    poly = access.poly
    if poly is None or affine.stride(poly, x) != {(): 1} or \
            not affine.names(poly) <= kernel.index_names | set(kernel.parameters) or \
            any(not re.fullmatch(r"[A-Za-z_]\w*", name) for term in poly for name in term):
        return f"{access.array}[{access.subscript}] does not move by exactly 1 along {x}, in terms of the indices " \
               f"and parameters"
    if poly != first.poly:
        return _SEVERAL.format(access.array)
    if re.search(r"(?<!&)&\s*$", masked[:access.start]) and (access.write or _ldg_span(masked, access) is None):
        return f"it takes the address of {access.array}[{access.subscript}], which a lane has not"
    if (called := passed_by_reference(masked, access.start, access.end, functions)) is not None:
        return f"it passes {access.array}[{access.subscript}] to {called}, which takes it by reference"
    declared = pointee(kernel.parameters.get(access.array, ""))
    if declared is None or declared[0] != access.array or _dtype(kernel, spec, access.array) not in ELEMENT_BYTES:
        return f"{access.array} is not a plain pointer parameter to 1-, 2-, 4- or 8-byte elements"
    return None


def _stored_whole_reason(kernel: PointKernel, spec: KernelSpec, masked: str, parts: list, accesses: list,
                         bounds: dict[str, str]) -> str | None:
    """Why an array written under a condition cannot be stored as whole vectors, else None. A vector stored whole
    writes back, unchanged, the lanes whose points do not write it: that is the same only where no other point
    writes those elements (its subscript is the point's place in the box its guard bounds, x + W * y + W * H * z,
    which no two points share), and where they exist (BODY touches the array wherever it runs, or its shape in
    args holds the box)."""
    name, poly = accesses[0].array, accesses[0].poly
    axes = kernel.axes
    if any(axis.name not in bounds for axis in axes):
        return f"it writes {name} under a condition, and its guard does not bound every index below a scalar"
    try:
        extents = [affine.parse(bounds[axis.name]) for axis in axes]
    except affine.NotAffine:
        return f"it writes {name} under a condition, and its guard's bounds are not arithmetic of its parameters"
    place, size = {}, {(): 1}
    for axis, extent in zip(axes, extents):
        place = affine.add(place, affine.product({(axis.name,): 1}, size))
        size = affine.product(size, extent)
    if poly != place:
        return f"it writes {name} under a condition at {accesses[0].subscript}, not at the point's own place in " \
               f"the box its guard bounds, so a vector stored whole may undo another point's store"
    if not any(made_whenever_run(masked, parts, a.start) for a in accesses) and \
            not coverage.array_covers(spec, name, [bounds[axis.name] for axis in axes]):
        return f"it touches {name} only under a condition, and its shape in args does not hold the box its guard " \
               f"bounds, so a vector may reach past it"
    return None


def _ldg_span(masked: str, access) -> tuple[int, int] | None:
    """The span of `__ldg(&a[i])` around the access, a read through the read-only cache that the lane's element
    stands for; None where the access is not so read."""
    call = re.search(r"\b__ldg\s*\(\s*&\s*$", masked[:access.start])
    close = re.match(r"\s*\)", masked[access.end:])
    return (call.start(), access.end + close.end()) if call and close else None


def _dtype(kernel: PointKernel, spec: KernelSpec, name: str) -> str | None:
    """The dtype of the array parameter `name`: the spec's argument in its place in the signature, as the harness
    passes them (the spec may name it otherwise), as elementwise.py reads it."""
    place = list(kernel.parameters).index(name) if name in kernel.parameters else None
    arg = spec.parameters[place] if place is not None and place < len(spec.parameters) else None
    return arg.dtype if arg is not None and arg.is_array else None


def _overwritten_first(kernel: PointKernel, masked: str, body: tuple[int, int], name: str) -> bool:
    """Whether BODY's first statement that names the array is a plain store into it, its value not reading the
    array: every lane then writes it before anything reads it."""
    for statement in statements(masked, *body):
        text = masked[statement.start:statement.end]
        if not re.search(rf"\b{name}\b", text):
            continue
        store = next((a for a in kernel.accesses if a.array == name and statement.start <= a.start < statement.end),
                     None)
        return statement.kind == "simple" and store is not None and store.plain_store and \
            not masked[statement.start:store.start].strip() and \
            not re.search(rf"\b{name}\b", masked[store.end:statement.end])
    return False


def render(model_: Rows, factor: str | None, spec: KernelSpec, along: int) -> list[str]:
    """The kernel body as lines: V points of a row per thread as above, and, with `factor`, that many rows (planes
    in 3D) per thread along the axis `along`, as elements_per_thread marches (along x, that many vectors)."""
    kernel = model_.kernel
    source = kernel.source
    ax = kernel.axes[0]
    width = model_.lanes
    taken = identifiers(source)
    names = {key: fresh_name(key, taken)
             for key in ("x0", "k", "lane", "point", "whole", "row", "first", "j", "e", "active", "some", "every",
                         "safe")}
    elements = {**model_.arrays, **{name: window.element for name, window in model_.windows.items()}}
    structs = {element: fresh_name(f"{re.sub(r'[^A-Za-z0-9]+', '_', element).strip('_')}_x{width}", taken)
               for element in dict.fromkeys(elements.values())}
    registers = {name: fresh_name(f"{name}_x{width}", taken) for name in model_.arrays}
    rows = {name: [(fresh_name(f"{name}_row{g}", taken), fresh_name(f"{name}_vector{g}", taken))
                   for g in range(len(window.groups))] for name, window in model_.windows.items()}
    anchors = {name: fresh_name(f"{name}_at", taken) for name in model_.windows}
    places = {name: fresh_name(f"{name}_place", taken) for name in model_.windows if name in model_.held}
    x0, k, lane = names["x0"], names["k"], names["lane"]
    lanes_body = points.replace_spans(source[:model_.body[1]], [
        (*model_.reads[a.start], _lane_element(model_, a, registers, rows, lane, k)) for a in kernel.accesses
        if model_.body[0] <= a.start < model_.body[1] and a.start in model_.reads])[model_.body[0]:]
    address = {name: f"&{name}[{subscript}]" for name, subscript in model_.subscripts.items()}
    # A stencil's row edges take the vectors too, each lane computed and stored only where its own point's guard
    # holds: else every warp holding a row's first or last point would also run the points one by one.
    active = names["active"] if model_.windows else None
    every = names["every"]
    loads, tests = [], []
    for name in model_.arrays:
        struct = structs[model_.arrays[name]]
        if name not in model_.loaded:
            loads.append(f"{struct} {registers[name]};")
            continue
        loads.append(f"{'' if name in model_.stored else 'const '}{struct} {registers[name]} = "
                     f"*reinterpret_cast<const {struct} *>({address[name]});")
        if active is not None:  # an inactive lane's element may lie past the array
            tests.append(_within(model_, name, model_.subscripts[name]) if name in model_.held else None)
    window_loads, window_vectors, window_tests = _window_loads(model_, rows, anchors, places, structs, lane,
                                                               names["e"], active)
    tests += window_tests
    aligned = " | ".join(f"(reinterpret_cast<unsigned long long>({at}) & {model_.moved[name] - 1})"
                         for name, at in [*((name, address[name]) for name in model_.arrays), *window_vectors])
    # where some lane is not active, the vectors serve the row only where each lies in its array; the test is held
    # in a bool before the one that takes the vectors (inside it, the H100 ran laplace3d at 72% of a copy, not 86%)
    safe = None if not tests else every if None in tests else \
        f"{every} || {' && '.join(f'({test})' if len(tests) > 1 else test for test in tests)}"
    tested = "" if safe is None else f" && {every if safe == every else names['safe']}"
    alignments = {element: model_.moved[name] for name, element in elements.items()}
    stores = [f"*reinterpret_cast<{structs[model_.arrays[name]]} *>({address[name]}) = {registers[name]};"
              for name in model_.stored]
    condition = " ".join(mask(source, literals=False)[model_.condition[0]:model_.condition[1]].split())
    lanes_run = textwrap.indent(textwrap.dedent(lanes_body.strip("\n").rstrip()), INDENT).split("\n")
    served = names["whole"] if active is None else names["some"]  # the test that the vectors serve this row
    if active is None:
        whole = [f"bool {names['whole']};",
                 f"{{ const {ax.type} {ax.name} = {x0} + ({width} - 1); {names['whole']} = {condition}; }}",
                 *([f"{{ const {ax.type} {ax.name} = {x0}; {names['whole']} = {names['whole']} && ({condition}); }}"]
                   if model_.lower_bounded else [])]
    else:
        whole = [f"bool {active}[{width}];",
                 "#pragma unroll",
                 f"for (int {k} = 0; {k} < {width}; {k}++) {{ const {ax.type} {ax.name} = {x0} + {k}; "
                 f"{active}[{k}] = {condition}; }}",
                 f"const bool {names['some']} = {' || '.join(f'{active}[{lane_}]' for lane_ in range(width))};",
                 f"const bool {every} = {' && '.join(f'{active}[{lane_}]' for lane_ in range(width))};"]
        lanes_run = [f"{INDENT}if ({active}[{k}]) {{", *(INDENT + line for line in lanes_run), f"{INDENT}}}"]
        stores = [f"if ({every}) {{", *(INDENT + line for line in stores), "} else {",
                  *(f"{INDENT}for (int {k} = 0; {k} < {width}; {k}++) if ({active}[{k}]) "
                    f"{name}[{model_.subscripts[name]} + {k}] = {registers[name]}.{lane}[{k}];"
                    for name in model_.stored), "}"]
    row = [
        *points.lambda_of(names["point"], [ax], points.point_body(kernel)),
        *whole,
        f"const {ax.type} {ax.name} = {x0};",
        # each window's rows addressed from one place, the offsets between them of parameters alone
        *(f"const long long {place} = {affine.spelled(model_.windows[name].groups[0][0])};"
          for name, place in places.items()),
        *(f"const {window.element} *{anchors[name]} = {served} ? "
          f"&{name}[{places.get(name) or affine.spelled(window.groups[0][0])}] : nullptr;"
          for name, window in model_.windows.items()),
        *([] if safe in (None, every) else [f"const bool {names['safe']} = {safe};"]),
        f"if ({served} && {''.join(f'{name} != nullptr && ' for name in model_.optional)}({aligned}) == 0"
        f"{tested}) {{",
        *(INDENT + line for line in [
            *loads,
            *window_loads,
            "#pragma unroll",
            f"for (int {k} = 0; {k} < {width}; {k}++) {{",
            f"{INDENT}const {ax.type} {ax.name} = {x0} + {k};",
            *lanes_run,
            "}",
            *stores]),
        "} else {",
        f"{INDENT}for (int {k} = 0; {k} < {width}; {k}++) {names['point']}({x0} + {k});",
        "}"]
    start = f"(({ax.type})blockIdx.x * {ax.block} + threadIdx.x) * {width}"
    around = f"; the elements of {', '.join(model_.windows)} its points read around them, once, into registers" \
        if model_.windows else ""
    row_of = " of a row" if len(kernel.axes) > 1 else ""
    head = [f"// 128-bit vectors along x: a thread takes {width} consecutive points{row_of}, the {width} elements of "
            f"{', '.join(model_.arrays)}{around}",
            f"// as one aligned struct each, each lane computed as the kernel wrote it, where the guard holds "
            f"for {'one of the' if model_.windows else 'all'} {width}",
            "// and those arrays are aligned there (each lane where its own point is in the guard); else the points "
            "one by one." if model_.windows else "// and those arrays are aligned there; else the points one by one.",
            *(f"struct __align__({alignments[element]}) {struct} {{ {element} {lane}[{width}]; }};"
              for element, struct in structs.items()),
            f"const {ax.type} {x0} = {start};"]
    if factor is None:
        return [*head, *(points.definition(a) for a in kernel.axes[1:]), *row]
    if along == 0:  # the thread's vectors a block width apart, so a warp's stay consecutive
        first, j, vectors = names["first"], names["j"], names["row"]
        return [*head[:-1], *(points.definition(a) for a in kernel.axes[1:]),
                f"// and {factor} such vectors, a block width apart.",
                f"const {ax.type} {first} = ({ax.type})blockIdx.x * ({ax.block} * {factor}) + threadIdx.x;",
                f"auto {vectors} = [&](const {ax.type} {x0}) {{", *(INDENT + line for line in row), "};",
                "#pragma unroll",
                f"for (int {j} = 0; {j} < {factor}; {j}++) "
                f"{vectors}(({first} + ({ax.type}){j} * {ax.block}) * {width});"]
    marching = {"first": names["first"], "k": names["j"], "point": names["row"]}
    return [*head, *points.march(kernel, along, factor, marching, body="\n".join(row), undefined=(0,))]


def _lane_element(model_: Rows, access, registers: dict[str, str], rows: dict[str, list[tuple[str, str]]],
                  lane: str, k: str) -> str:
    """What a lane reads for the access: its element of the array's vector, or of the window's registers."""
    if access.array in model_.arrays:
        return f"{registers[access.array]}.{lane}[{k}]"
    window = model_.windows[access.array]
    group, number = window.at[access.start]
    return f"{rows[access.array][group][0]}[{k} + {number - min(window.groups[group][1])}]"


def _window_loads(model_: Rows, rows: dict[str, list[tuple[str, str]]], anchors: dict[str, str],
                  places: dict[str, str], structs: dict[str, str], lane: str, j: str,
                  active: str | None) -> tuple[list[str], list[tuple[str, str]], list[str | None]]:
    """The lines reading each window group's elements into its registers, (array, address) of each vector among
    them, and the test that each vector some lane does not read lies in its array. Element e of a group (the
    subscript less its number, plus e, at the row's first point) is read by a lane where e less one of the group's
    numbers is a lane; an aligned vector all of whose elements are read is loaded whole, the other elements read
    one by one: no element the points do not read is touched. With `active` (the lanes whose points the guard
    admits), an element is read only where one of its lanes is active; a vector lies in the array where each of
    its elements has an active reader or, its array's shape in args giving its elements, it lies within them
    (`places` naming the index of the window's first element at the row's first point); None where neither test
    can be written (its lanes all read only their own element, and no shape is known)."""
    width = model_.lanes
    lines, vectors, tests = [], [], []
    for name, window in model_.windows.items():
        struct = structs[window.element]
        anchor = window.groups[0][0]
        for (rest, numbers), (row, vector) in zip(window.groups, rows[name]):
            offset = affine.minus(rest, anchor)
            low, high = min(numbers), max(numbers) + width - 1
            readers = {e: tuple(sorted({e - n for n in numbers if 0 <= e - n < width})) for e in range(low, high + 1)}
            read = {e for e, lanes_ in readers.items() if lanes_}
            lines.append(f"{window.element} {row}[{high - low + 1}];")
            covered = set()
            for start in range(low // width * width, high + 1, width):
                span = range(start, start + width)
                if not all(e in read for e in span):
                    continue
                at = f"&{anchors[name]}[{affine.spelled(affine.add(offset, {(): start}))}]"
                vectors.append((name, at))
                covered |= set(span)
                lines += [f"{{ const {struct} {vector} = *reinterpret_cast<const {struct} *>({at});",
                          f"{INDENT}#pragma unroll",
                          f"{INDENT}for (int {j} = 0; {j} < {width}; {j}++) "
                          f"{row}[{start - low} + {j}] = {vector}.{lane}[{j}]; }}"]
                # each element's readers, less those holding another's (its test implies theirs) and all the lanes
                # (the vectors serve only a row where some lane is active)
                needed = {readers[e] for e in span if len(readers[e]) < width}
                needed = sorted(lanes_ for lanes_ in needed if not any(set(o) < set(lanes_) for o in needed))
                if active is None or not needed:
                    continue
                own = len(needed) == width and all(len(lanes_) == 1 for lanes_ in needed)  # that is, every lane
                either = [*([] if own else [" && ".join(_any(active, lanes_, len(needed) > 1) for lanes_ in needed)]),
                          *([_within(model_, name, places[name], affine.add(offset, {(): start}))]
                            if name in places else [])]
                tests.append(" || ".join(f"({test})" if len(either) > 1 else test for test in either) or None)
            for e in sorted(read - covered):
                load = f"{row}[{e - low}] = {anchors[name]}[{affine.spelled(affine.add(offset, {(): e}))}];"
                lines.append(load if active is None or len(readers[e]) == width else
                             f"if ({_any(active, readers[e])}) {load}")
    return lines, vectors, tests


def _within(model_: Rows, name: str, first: str, more: affine.Poly | None = None) -> str:
    """The test that the vector of the array's elements from index `first` (C text) plus `more` lies in the
    elements its shape declares."""
    start = f"{first} + {affine.spelled(more)}".replace("+ -", "- ") if more else first
    return f"{start} >= 0 && {start} + {model_.lanes - 1} < {affine.spelled(model_.held[name])}"


def _any(active: str, lanes_: tuple[int, ...], grouped: bool = False) -> str:
    """The test that one of the lanes is active, parenthesised where `grouped` joins it to others by &&."""
    test = " || ".join(f"{active}[{r}]" for r in lanes_)
    return f"({test})" if grouped and len(lanes_) > 1 else test
