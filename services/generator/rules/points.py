"""Kernels where each thread handles one point of a 1D, 2D or 3D grid, and the rewrite that marches a thread
over several points.

Such a kernel starts by defining its indices (`int x = blockIdx.x * blockDim.x + threadIdx.x;` and likewise
for y and z, any spelling of the product, block_size_x for blockDim.x, casts, several on one line), and
everything after them, the *point body*, depends on the thread only through those indices: it reads no
threadIdx, blockIdx, blockDim or gridDim, talks to no other thread (no barrier, shuffle, shared memory) and
never changes an index. Which thread runs a point then does not matter, so the point body can run for several
points per thread, or in another thread: it is wrapped, verbatim, in a lambda taking the indices that change
(`return` keeps its meaning), and called once per point.
"""
import re
import textwrap
from dataclasses import dataclass

from services.generator.rules import affine, coverage
from services.generator.rules.cuda_text import (CALLED, GROUP_TILES, IDENTIFIER, INTEGER_TYPE, WARP_COLLECTIVES,
                                                WIDE_INTEGER_TYPE, Kernel, closing, const_referent, defined_functions,
                                                find_kernel, functions_named, macro_definitions, mask,
                                                passed_by_reference, reference_places, split_top_level,
                                                template_types, top_level_conjuncts, unparenthesised)
from services.generator.rules.shape import block_widths
from services.generator.rules.statements import Statement, body_of, expression_end, walk
from shared.domain.spec import KernelSpec

AXES = "xyz"
INDENT = "    "
ASSIGNMENT = r"(?:[-+*/%&|^]|<<|>>)?=(?!=)"
_DECLARATION = re.compile(rf"\s*(?:const\s+)?(?P<type>{INTEGER_TYPE})\s+(?P<rest>[^;]*);\s*", re.DOTALL)
# What a point body must not contain: anything tied to the thread that runs it, or to other threads.
THREAD_BOUND = ("threadIdx", "blockIdx", "blockDim", "gridDim", "__syncthreads", "__syncwarp", "__shared__",
                *WARP_COLLECTIVES, "__syncthreads_or", "__syncthreads_and", "__syncthreads_count",
                "this_thread_block", "this_grid", *GROUP_TILES, "goto", "asm")

# What inline assembly in a function the point body calls may not name: the thread's registers, or instructions
# that talk to other threads. (The point body's own asm is refused whatever it does.)
_SPECIAL = re.compile(r"%(?:tid|ntid|ctaid|nctaid|laneid|warpid|nwarpid|smid|nsmid|gridid|lanemask\w*|clock\w*|"
                      r"globaltimer\w*|cluster\w*|dynamic_smem_size|total_smem_size)|\b(?:bar|barrier|shfl|vote|match|"
                      r"redux|activemask|elect|mbarrier|cp\.async|red|atom)\b|\.shared\b")


class NotPointKernel(ValueError):
    """The kernel is not one point per thread; the message names what did not match."""


@dataclass(frozen=True)
class Axis:
    axis: int  # 0 (x), 1 (y) or 2 (z)
    name: str  # the index variable
    type: str  # its declared type, without const
    expression: str  # its initialiser as written
    block: str  # what it multiplies blockIdx by: blockDim.<axis> or the axis's block-size define


@dataclass(frozen=True)
class Access:
    array: str
    subscript: str  # as written (comments removed)
    start: int  # offset of the array's name in the source
    end: int  # one past its closing ]
    write: bool  # assigned, incremented or decremented
    plain_store: bool  # the target of a plain `=`
    poly: affine.Poly | None  # the subscript with the body's index locals substituted; None: not affine


@dataclass(frozen=True)
class PointKernel:
    source: str
    kernel: Kernel
    axes: tuple[Axis, ...]  # x first, then y and z where defined
    body_start: int  # offset where the point body starts (after the index definitions)
    statements: tuple[Statement, ...]  # the point body's top-level statements
    locals: dict[str, affine.Poly]  # integer locals of the point body defined once, by affine expressions
    loop_variables: frozenset[str]  # variables declared in the headers of the point body's for loops
    accesses: tuple[Access, ...]
    parameters: dict[str, str]  # each parameter's name -> its declaration as written
    array_types: dict[str, str]  # each pointer parameter -> its element type as written (const dropped)
    template_types: dict[str, str]  # each type parameter of a kernel template -> the type its instance names

    @property
    def body_end(self) -> int:
        return self.kernel.body_close

    @property
    def index_names(self) -> set[str]:
        return {axis.name for axis in self.axes}

    def poly(self, text: str) -> affine.Poly | None:
        try:
            return affine.parse(text, self.locals)
        except affine.NotAffine:
            return None


def recognise(spec: KernelSpec) -> PointKernel:
    source = spec.source
    kernel = find_kernel(source, spec.kernel_name)
    masked, uncommented = mask(source), mask(source, literals=False)
    body = body_of(kernel, masked, NotPointKernel)
    axes: list[Axis] = []
    helpers: dict[str, affine.Poly] = {}  # locals of the launch geometry the indices are defined from (tid)
    taken = 0
    read_by_indices: dict[str, affine.Poly] = {}  # the helpers declared up to the last index definition
    for number, statement in enumerate(body):
        found = _index_definitions(statement, masked, uncommented, spec, helpers)
        if found is None:
            break
        if found:  # helper statements count as taken only where an index definition follows them
            axes.extend(found)
            taken, read_by_indices = number + 1, dict(helpers)
    helpers = read_by_indices
    if not axes:
        raise NotPointKernel("it does not start by defining its thread index, e.g. "
                             "`int i = blockIdx.x * blockDim.x + threadIdx.x;`")
    by_axis = sorted(axes, key=lambda a: a.axis)
    if [a.axis for a in by_axis] != list(range(len(by_axis))):
        raise NotPointKernel(f"its indices cover the axes {', '.join(AXES[a.axis] for a in by_axis)}; a point "
                             f"kernel defines x, then y, then z")
    rest = body[taken:]
    if not rest:
        raise NotPointKernel("nothing follows its index definitions")
    body_start = body[taken - 1].end
    text = masked[body_start:kernel.body_close]
    helper = next((name for name in helpers if re.search(rf"\b{name}\b", text)), None)
    if helper is not None:
        raise NotPointKernel(f"after its index definitions it reads {helper}, a local of the launch geometry, so "
                             f"its work depends on more than its indices")
    bound = next((word for word in THREAD_BOUND if re.search(rf"\b{word}\b", text)), None)
    if bound is not None:
        raise NotPointKernel(f"after its index definitions it uses {bound}, so its work depends on more than "
                             f"its indices")
    if (helper := thread_bound_helper(kernel, masked, uncommented)) is not None:
        raise NotPointKernel(f"after its index definitions it {helper}, so its work depends on more than its "
                             f"indices")
    # a point's index is a const parameter of the renderings' lambdas: nothing may change it, take its address,
    # or bind it to a reference (review, helper-96: `int &j` of a helper)
    if (why := parameter_changed(kernel, masked, body_start, [a.name for a in by_axis], "index")) is not None:
        raise NotPointKernel(f"it {why}")
    parameters = parameters_of(source, kernel)
    if {a.name for a in by_axis} & set(parameters):
        raise NotPointKernel("an index shadows a parameter")
    local_polys, loop_variables = _locals(masked, uncommented, rest, body_start, kernel.body_close)
    kernel_point = PointKernel(source, kernel, tuple(by_axis), body_start, tuple(rest), local_polys,
                               frozenset(loop_variables), (), parameters, _array_types(parameters),
                               template_types(kernel, spec.kernel_name))
    accesses = accesses_in(kernel_point, masked, uncommented, body_start, kernel.body_close)
    return PointKernel(**{**kernel_point.__dict__, "accesses": tuple(accesses)})


def reached_functions(kernel: Kernel, masked: str) -> list[tuple[str, str, tuple[int, int]]]:
    """(name, parameter list, the span of the body) of each definition of a function of the source that the
    kernel's body calls, and of those they call in turn."""
    definitions = {name: [d for d in found if not kernel.name_at <= d[1] < kernel.body_close]
                   for name, found in defined_functions(masked).items()}
    found, seen, spans = [], set(), [(kernel.body_open, kernel.body_close)]
    while spans:
        start, end = spans.pop()
        for match in CALLED.finditer(masked, start, end):
            if definitions.get(match[1]) and match[1] not in seen:
                seen.add(match[1])
                found += [(match[1], parameters, (opening + 1, close)) for parameters, opening, close in
                          definitions[match[1]]]
                spans += [(opening + 1, close) for _, opening, close in definitions[match[1]]]
    return found


def address_taken(masked: str, name: str) -> bool:
    """Whether `&name` appears as the unary address-of (not as the second operand of & or &&), parenthesised too,
    of the name itself rather than of an element it points to (`&out[i]`)."""
    for match in re.finditer(rf"&\s*(?:\(\s*)*\b{name}\b(?!\s*(?:\[|->))", masked):
        before = masked[:match.start()].rstrip()
        if not before or not (before[-1].isalnum() or before[-1] in "_)]&"):
            return True
    return False


def _index_definitions(statement: Statement, masked: str, uncommented: str, spec: KernelSpec,
                       helpers: dict[str, affine.Poly]) -> list[Axis] | None:
    """The thread indices a declaration defines, each maybe through `helpers`; a declaration of locals of the
    launch geometry alone (`int tid = threadIdx.x;`) defines none and adds them to `helpers`; None for any other
    statement. An index defined through helpers is written out without them, as the helpers' own statements are
    not kept."""
    if statement.kind != "simple":
        return None
    declaration = _DECLARATION.fullmatch(masked[statement.start:statement.end])
    if declaration is None:
        return None
    found, at, declared = [], statement.start + declaration.start("rest"), {}
    kind = " ".join(declaration["type"].split())
    for part in split_top_level(declaration["rest"], ",", "([{<"):
        named = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(?!=)(.*)", part, re.DOTALL)
        if named is None:
            return None
        expression_at = at + named.start(2)
        expression = uncommented[expression_at:expression_at + len(named.group(2))].strip()
        known = {**helpers, **declared}
        axis = thread_index_axis(named.group(2), spec, known)
        if axis is not None:
            if affine.names(affine.parse(named.group(2))) & set(known) or axis[1] == "blockDim." + AXES[axis[0]] \
                    and "threadIdx" not in named.group(2):
                wide = re.fullmatch(WIDE_INTEGER_TYPE, kind)
                letter = AXES[axis[0]]
                expression = f"{f'({kind})' if wide else ''}blockIdx.{letter} * {axis[1]} + threadIdx.{letter}"
            found.append(Axis(axis[0], named.group(1), kind, expression, axis[1]))
        elif poly := affine.reading_only(named.group(2), known, _launch_names(spec)):
            declared[named.group(1)] = poly
        else:
            return None
        at += len(part) + 1
    helpers.update(declared)
    return found


def _launch_names(spec: KernelSpec) -> set[str]:
    """The names of the launch geometry a thread index is defined from: threadIdx, blockIdx, blockDim, and the
    block-size defines."""
    return {f"{v}.{a}" for v in ("threadIdx", "blockIdx", "blockDim") for a in AXES} | \
        {name for axis in range(len(AXES)) for name in block_widths(spec, axis)}


def thread_index_axis(expression: str, spec: KernelSpec,
                      known: dict[str, affine.Poly] | None = None) -> tuple[int, str] | None:
    """(axis, block width) when the expression is blockIdx.a * width + threadIdx.a, width being blockDim.a or
    the axis's block-size define, the names in `known` read as their polynomials."""
    try:
        poly = affine.parse(expression, known)
    except affine.NotAffine:
        return None
    for axis, letter in enumerate(AXES):
        widths = [f"blockDim.{letter}", *block_widths(spec, axis)]
        for width in widths:
            if poly == {tuple(sorted((f"blockIdx.{letter}", width))): 1, (f"threadIdx.{letter}",): 1}:
                return axis, width
        if axis and poly == {(f"blockIdx.{letter}",): 1} and one_thread_along(spec, axis):
            return axis, f"blockDim.{letter}"  # blockIdx.z alone, as written for a batch: blocks one thread deep
    return None


def one_thread_along(spec: KernelSpec, axis: int) -> bool:
    """Whether the spec launches blocks one thread deep along the y or z axis (its block size 1, not tuned, or not
    named at all: block_size_names [THREADS] launches blocks of THREADS x 1 x 1, as Kernel Tuner does): there
    blockIdx.z is blockIdx.z * blockDim.z + threadIdx.z."""
    if axis >= len(spec.block_size_names):
        return True
    name = spec.block_size_names[axis]
    return name not in spec.tune_params and spec.params.get(name, 1) == 1


def parameters_of(source: str, kernel: Kernel) -> dict[str, str]:
    found = {}
    for start, end in kernel.parameters(source):
        text = mask(source[start:end]).strip()
        names = IDENTIFIER.findall(text)
        if names:
            found[names[-1]] = " ".join(text.split())
    return found


def _array_types(parameters: dict[str, str]) -> dict[str, str]:
    """Element types of the single-level pointer parameters: `const float *__restrict__ x` -> float."""
    types = {}
    for name, text in parameters.items():
        if text.count("*") != 1:
            continue
        before = text.split("*")[0].split()
        words = [w for w in before if w not in ("const", "volatile", "__restrict__", "__restrict")]
        if words:
            types[name] = " ".join(words)
    return types


def _locals(masked: str, uncommented: str, body: list[Statement], start: int,
            end: int) -> tuple[dict[str, affine.Poly], set[str]]:
    text = masked[start:end]
    polys: dict[str, affine.Poly] = {}
    loop_variables: set[str] = set()
    for statement, _ in walk(masked, body):
        if statement.kind == "for":
            init = masked[statement.head[0]:statement.head[1]].split(";")[0]
            declared = re.match(rf"\s*(?:const\s+)?(?:{INTEGER_TYPE}|auto)\s+([A-Za-z_]\w*)", init)
            if declared:
                loop_variables.add(declared.group(1))
            continue
        if statement.kind != "simple":
            continue
        declaration = _DECLARATION.fullmatch(masked[statement.start:statement.end])
        if declaration is None:
            continue
        for part in split_top_level(declaration["rest"], ",", "([{<"):
            named = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(?!=)(.*)", part, re.DOTALL)
            if named is None:
                continue
            name = named.group(1)
            assigned = len(re.findall(changing(name), text))
            if assigned > 1:  # its definition, then changed again: no one polynomial holds it
                continue
            try:
                polys[name] = affine.parse(named.group(2), polys)
            except affine.NotAffine:
                pass
    return polys, loop_variables


def accesses_in(kernel: PointKernel, masked: str, uncommented: str, begin: int, end: int) -> list[Access]:
    """The array accesses of masked[begin:end], their offsets those of the text given."""
    found = []
    for match in re.finditer(r"(?<![\w.>])([A-Za-z_]\w*)\s*\[", masked[begin:end]):
        start = begin + match.start()
        opening = begin + match.end() - 1
        close = closing(masked, opening)
        subscript = " ".join(uncommented[opening + 1:close].split())
        after = masked[close + 1:close + 40]
        before = masked[max(0, start - 3):start]
        write = bool(re.match(rf"\s*(?:\+\+|--|{ASSIGNMENT})", after) or re.search(r"(?:\+\+|--)\s*$", before))
        plain = bool(re.match(r"\s*=(?!=)", after))
        if re.match(r"\s*\[", after):  # a second subscript: a 2D local array, not a global access
            continue
        found.append(Access(match.group(1), subscript, start, close + 1, write, plain, kernel.poly(subscript)))
    return found


# --- rendering -----------------------------------------------------------------------------------------
def point_body(kernel: PointKernel, replacements: list[tuple[int, int, str]] = ()) -> str:
    """The point body as written (comments kept), dedented, with `replacements` ((start, end, text) in source
    offsets, inside the body) made."""
    text = replace_spans(kernel.source[:kernel.body_end], list(replacements))[kernel.body_start:]
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return textwrap.dedent("\n".join(line.rstrip() for line in lines))


def definition(axis: Axis) -> str:
    return f"{axis.type} {axis.name} = {axis.expression};"


def lambda_of(name: str, parameters: list[Axis], body: str, returns: str | None = None) -> list[str]:
    """A lambda running `body` for the given indices, everything else captured by reference; `returns` declares
    what it returns where its return statements differ in type (a pointer and nullptr)."""
    head = ", ".join(f"const {axis.type} {axis.name}" for axis in parameters)
    declared = f" -> {returns}" if returns else ""
    return [f"auto {name} = [&]({head}){declared} {{", *textwrap.indent(body, INDENT).split("\n"), "};"]


def changing(name: str) -> str:
    """The pattern of `name` assigned, incremented or decremented, parenthesised too (`(n) *= 2`)."""
    return rf"\b{name}\s*(?:\)\s*)*(?:\+\+|--|{ASSIGNMENT})|(?:\+\+|--)\s*(?:\(\s*)*{name}\b"


_DEREFERENCE = re.compile(r"(?:^|[=(,?:+\-*/%&|^!<>~{};\[])\s*\*|->|\(\s*(?:const\s+)?(?:unsigned\s+|signed\s+)?"
                          r"(?:int|float|double|long|short|char|bool|half|__half|size_t|[A-Za-z_]\w*_t)\s*\)\s*\*")
ALIAS = re.compile(r"(?:^|[;{}(])\s*(?:const\s+)?(?:(?:unsigned|signed|long|short|volatile)\s+)*[A-Za-z_][\w:<>]*"
                   r"\s*[*&]+\s*(?:(?:const|volatile|__restrict__|__restrict)\s+)*[A-Za-z_]\w*\s*(?:=(?!=)|;)")
# a pointer or reference declared (`const unsigned char *p = ...;`)
_MEMBER_WRITE = re.compile(rf"\.\s*[A-Za-z_]\w*\s*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*[A-Za-z_]\w*\s*\.")
_ADDING_ATOMIC = re.compile(r"(?:^|[;{}]|\)|\belse)\s*atomic(?:Add|Sub|Max|Min|And|Or|Xor)\w*\s*\(")
_DECLARED = re.compile(r"(?<![\w.])(?!(?:else|return|case|goto|do|throw|delete|new|sizeof)\b)[A-Za-z_][\w:<>]*"
                       r"[\s*&]+([A-Za-z_]\w*)\s*(?:=(?!=)|;|,|\[|\))")


def hidden_effects(kernel: PointKernel, end: int | None = None) -> str | None:
    """Why the point body (up to the offset `end`, where given) may change more than the array elements it indexes
    and its own locals, which a rewrite running it elsewhere, twice or in another order would change too; else
    None. Such changes: through a pointer, a dereference or a member; into a pointer or reference it declares (an
    alias); in a function of the source it calls; by an atomic whose result it reads or that does not add up
    (atomicExch, atomicCAS); in a static; or to a name it does not declare (a parameter, parenthesised too)."""
    masked = mask(kernel.source)
    body = masked[kernel.body_start:kernel.body_end if end is None else end]
    outside = masked[:kernel.kernel.name_at] + masked[kernel.body_end:]
    if _DEREFERENCE.search(body) or _MEMBER_WRITE.search(body):
        return "its point body reads or writes through a pointer or a member"
    if re.search(rf"\)\s*\[[^\]]*\]\s*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*\([^;]*\)\s*\[", body):
        return "its point body writes through an indexed expression (`(out + i)[0] = v;`)"
    more = _more_declarators(body)
    if ALIAS.search(body) or any(indirect for _, indirect in more) or re.search(r"\bstatic\b", body):
        return "its point body declares a pointer, a reference or a static"
    functions = functions_named(outside)
    called = next((m[1] for m in CALLED.finditer(body) if m[1] in functions), None)
    if called is not None:
        return f"its point body calls {called}, a function of the source"
    atomics = len(re.findall(r"\batomic\w*\s*\(", body))
    if atomics != len(_ADDING_ATOMIC.findall(body)):
        return "its point body reads an atomic's result, or makes an atomic that does not add up"
    declared = set(_DECLARED.findall(body)) | {name for name, _ in more}
    changed = {m[1] or m[2] for m in re.finditer(
        rf"(?<![\w.\]])([A-Za-z_]\w*)\s*(?:\)\s*)*(?:{ASSIGNMENT}|\+\+|--)|(?:\+\+|--)\s*(?:\(\s*)*([A-Za-z_]\w*)",
        body)}
    foreign = sorted(changed - declared - {a.array for a in kernel.accesses if a.write})
    return f"its point body changes {foreign[0]}, which it does not declare" if foreign else None


def declared_names(body: str) -> set[str]:
    """The names `body` (masked) declares, each declarator of a list too (`int w = a, h = b;`)."""
    return set(_DECLARED.findall(body)) | {name for name, _ in _more_declarators(body)}


def declared_once(body: str, name: str) -> bool:
    """Whether `body` (masked) declares `name` exactly once, and nowhere in a form declared_names does not read
    (`int n(5);`, `int n{5};`), so that one definition holds for it throughout."""
    count = sum(match[1] == name for match in _DECLARED.finditer(body)) + \
        sum(found == name for found, _ in _more_declarators(body))
    return count == 1 and not re.search(rf"(?<![\w.]){name}\s*[({{]", body)


def _more_declarators(body: str) -> list[tuple[str, str]]:
    """(name, `*` or `&` or "") of each declarator after the first of a declaration that begins a statement or a
    for's initialiser: `int w = a, h = b;`. A comma expression (`t = a * b, g = 1;`) declares nothing."""
    found = []
    for match in _DECLARED.finditer(body):
        before = re.sub(r"(?:\b(?:const|volatile|unsigned|signed|long|short)\s*)+$", "", body[:match.start()].rstrip())
        if before.rstrip() and before.rstrip()[-1] not in ";{}" and not re.search(r"\bfor\s*\(\s*$", before[-64:]):
            continue
        end = expression_end(body, match.end(1), len(body), ";")
        for declarator in split_top_level(body[match.end(1):end], ",")[1:]:
            if name := re.match(r"\s*([*&]?)[*&\s]*([A-Za-z_]\w*)\s*(?:=(?!=)|\[|$)", declarator):
                found.append((name[2], name[1]))
    return found


def own_statement(kernel: PointKernel, masked: str, access: Access) -> tuple[Statement, int] | None:
    """The simple statement `access` begins (`out[i] = value;`) and how many loops enclose it; None where the
    access lies inside a larger statement."""
    statement, loops = next(((s, depth) for s, depth in walk(masked, list(kernel.statements))
                             if s.kind == "simple" and s.start <= access.start < s.end), (None, 0))
    if statement is None or masked[statement.start:access.start].strip():
        return None
    return statement, loops


def changed_parameter(kernel: PointKernel) -> str | None:
    """Why a rewrite running the point body for several points a thread cannot take this kernel: its body may
    change a parameter, and would hand the next point the changed value (parameter_changed); else None."""
    masked = mask(kernel.source)
    changed = parameter_changed(kernel.kernel, masked, kernel.body_start, list(kernel.parameters))
    return changed and f"its point body {changed}, which a thread's next point would see changed"


def parameter_changed(kernel: Kernel, masked: str, start: int, parameters: list[str],
                      kind: str = "parameter") -> str | None:
    """What the kernel's body from `start` on does that may change one of its parameters, else None: it assigns,
    increments or decrements the parameter or a member of it, takes its address, binds a reference to it that
    is not const (`float &g = gain;`), or passes it to a function of the source taking that argument by such a
    reference (an RNG's state)."""
    text = masked[start:kernel.body_close]
    by_reference = _by_reference_arguments(text, [(name, parameters) for name, parameters, _ in
                                                  reached_functions(kernel, masked)], parameters)
    for name in parameters:
        if re.search(changing(name), text) or re.search(_member_changing(name), text):
            return f"changes its {kind} {name}"
        if address_taken(text, name) or name in by_reference or _referenced(text, name):
            return f"may change its {kind} {name} (through its address or a reference)"
    return None


def thread_bound_helper(kernel: Kernel, masked: str, uncommented: str) -> str | None:
    """What a function of the source that the kernel calls (or one those call) does that ties its work to the
    thread running it, else None: it reads the thread's place, talks to other threads, or runs assembly naming
    either."""
    # A macro of the source whose text does so, used in a helper, does so too (review, helper-92: a shuffle
    # through `#define SH(v) __shfl_xor_sync(...)`); the kernel's own body is read with its macros expanded.
    words = [*THREAD_BOUND, *(name for name, text in macro_definitions(masked)
                              if any(re.search(rf"\b{word}\b", text) for word in THREAD_BOUND))]
    for function, _, (start, end) in reached_functions(kernel, masked):
        bound = next((word for word in words if re.search(rf"\b{word}\b", masked[start:end])
                      and (word != "asm" or _SPECIAL.search(uncommented[start:end]))), None)
        if bound is not None:
            return f"calls {function}, which uses {bound}"
    return None


def _member_changing(name: str) -> str:
    """The pattern of a member of `name` assigned, incremented or decremented (`state.seed += 1`)."""
    member = r"(?:\s*\.\s*[A-Za-z_]\w*)+"
    return rf"\b{name}{member}\s*(?:\+\+|--|{ASSIGNMENT})|(?:\+\+|--)\s*{name}{member}"


def _referenced(text: str, name: str) -> bool:
    """Whether `text` (masked) binds a reference that is not const to `name` (`float &g = gain;`, `auto &s{st};`)."""
    for match in re.finditer(rf"(?<![&\w])&\s*[A-Za-z_]\w*\s*(?:=|\{{|\()\s*(?:\(\s*)*{name}\b(?!\s*(?:\[|->|\())",
                             text):
        declared = text[max(text.rfind(c, 0, match.start()) for c in ";{}(,") + 1:match.start()]
        if not const_referent(declared):
            return True
    return False


def _by_reference_arguments(text: str, functions: list[tuple[str, str]], names: list[str]) -> set[str]:
    """Those of `names` that `text` (masked) passes, bare, parenthesised or by a member, as an argument that a
    function of the source takes by a reference that is not const, in any declaration of that name."""
    places = reference_places(functions)
    found = set()
    for match in re.finditer(rf"(?<![\w.])({'|'.join(map(re.escape, names)) or '(?!)'})\b(?:\s*\.\s*[A-Za-z_]\w*)*",
                             text):
        start, end = match.start(), match.end()
        while (opened := re.search(r"\(\s*$", text[:start])) and (closed := re.match(r"\s*\)", text[end:])) and \
                re.search(r"[(,]\s*$", text[:opened.start()]):
            start, end = opened.start(), end + closed.end()  # (name) is the argument, its call's ( before it
        if passed_by_reference(text, start, end, places) is not None:
            found.add(match[1])
    return found


def replace_spans(source: str, replacements: list[tuple[int, int, str]]) -> str:
    for start, end, text in sorted(replacements, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def with_body(kernel: PointKernel, lines: list[str]) -> str:
    """The source with the kernel's whole body replaced by `lines`."""
    body = "\n".join(INDENT + line if line else line for line in lines)
    return f"{kernel.source[:kernel.kernel.body_open + 1]}\n{body}\n{kernel.source[kernel.kernel.body_close:]}"


def march(kernel: PointKernel, axis: int, factor: str, names: dict[str, str], body: str | None = None,
          prologue: list[str] = (), epilogue: list[str] = (), undefined: tuple[int, ...] = (),
          interior: tuple[str, str] | None = None) -> list[str]:
    """The kernel body as lines: each thread runs the point body for `factor` points along `axis` (a
    compile-time constant), in a `#pragma unroll` loop. Along x the points are a block width apart, so a warp's
    accesses stay as coalesced as before; along y or z they are consecutive, so neighbouring points (a
    stencil's rows or planes) are loaded by the same thread, where the unrolled code can keep them in
    registers. The grid along `axis` must be `factor` times smaller: its candidate divides it by that too. The
    `undefined` axes' indices are left to `body` (vectors along x define their own). With `interior`, (B, a body
    for points below B, a condition or ''), a thread whose last point is below B (and where the condition holds)
    runs that body for each of its points instead (bounded_by_guard and interior say why that is the same)."""
    marched = next(a for a in kernel.axes if a.axis == axis)
    others = [definition(a) for a in kernel.axes if a.axis != axis and a.axis not in undefined]
    first, k, point = names["first"], names["k"], names["point"]
    if axis == 0:
        start = f"({marched.type})blockIdx.x * ({marched.block} * {factor}) + threadIdx.x"
        argument, last = (f"{first} + ({marched.type}){step} * {marched.block}" for step in (k, f"({factor} - 1)"))
    else:
        start = f"({marched.expression}) * {factor}"
        argument, last = f"{first} + {k}", f"{first} + ({factor} - 1)"

    def unrolled(called: str) -> list[str]:
        return ["#pragma unroll", f"for (int {k} = 0; {k} < {factor}; {k}++) {{", f"{INDENT}{called}({argument});",
                "}"]

    lines = [*others,
             *prologue,
             f"const {marched.type} {first} = {start};",
             *lambda_of(point, [marched], body if body is not None else point_body(kernel))]
    if interior is None:
        return [*lines, *unrolled(point), *epilogue]
    bound, inside, rest = interior
    whole = names["interior"]
    tested = f"({marched.type})({last}) < ({bound})" + (f" && {rest}" if rest else "")
    return [*lines,
            *lambda_of(whole, [marched], inside),
            f"if ({tested}) {{  // the thread's last point, so each, is below the bound"
            + (", and the rest of the guard holds" if rest else ""),
            *(INDENT + line for line in unrolled(whole)),
            "} else {",
            *(INDENT + line for line in unrolled(point)),
            "}",
            *epilogue]


def interior(kernel: PointKernel, axis: int,
             replacements: list[tuple[int, int, str]]) -> tuple[str, str, str] | None:
    """march's `interior` for the point body with `replacements` made, where bounded_by_guard finds the conjunct
    `x < B`: (B, the body for points below B, the rest of the guard tested once for all of a thread's points, or
    ''). Where the guard's other conjuncts are comparisons of the other indices and parameters alone (`y <
    height`), they hold at every point of the thread or at none: they are tested once, and the body below B is
    the guard's own, so no point's loads wait behind a branch of their own (on the H200, one such branch per
    point kept a 2D sum's loads one at a time, 1.5x slower); else the body with `x < B` made true."""
    bounded = bounded_by_guard(kernel, axis)
    if bounded is None:
        return None
    (start, end), bound = bounded
    guard = kernel.statements[0]
    masked, uncommented = mask(kernel.source), mask(kernel.source, literals=False)
    rest, at = [], guard.head[0]
    for part in top_level_conjuncts(masked[guard.head[0]:guard.head[1]]):
        if at + len(part) - len(part.lstrip()) != start:
            rest.append((part, " ".join(uncommented[at:at + len(part)].split())))
        at += len(part) + len("&&")
    fixed = set(kernel.parameters) | {a.name for a in kernel.axes if a.axis != axis}  # neither changes in a march
    if not rest or any(re.search(r"[\[(?,]|\|\||=|\+\+|--", re.sub(r"[<>!=]=", "", part)) or
                       not set(IDENTIFIER.findall(part)) <= fixed for part, _ in rest):
        return bound, point_body(kernel, [*replacements, (start, end, "true")]), ""
    inside = guard.body.inner if guard.body.kind == "block" else (guard.body.start, guard.body.end)
    text = replace_spans(kernel.source[:inside[1]], [r for r in replacements if inside[0] <= r[0] < inside[1]])
    lines = [line.rstrip() for line in text[inside[0]:].split("\n")]
    body = textwrap.dedent("\n".join(line for line in lines if line.strip()))
    return bound, body, " && ".join(shown for _, shown in rest)


def flattened_block(dimensions: int) -> tuple[str, str]:
    """(a thread's place in its block, the block's threads) over the block's first `dimensions` axes, x fastest,
    as the hardware makes warps of them."""
    thread, threads = "threadIdx.x", "blockDim.x"
    for axis in "yz"[:dimensions - 1]:
        thread = f"{thread} + {threads} * threadIdx.{axis}"
        threads = f"{threads} * blockDim.{axis}"
    return thread, threads


def marched_under_its_guard(kernel: PointKernel, axis: int, spec: KernelSpec) -> str | None:
    """Why a reduction's threads cannot march along the axis: unless the point body is one guard bounding it (`if
    (y < height) ...`, bounded_by_guard) below the problem size, some of its work (an atomic of a count, a read
    through `*(p + i)`) may lie outside every guard, or at points the submitted grid never reached, and a grid
    shrunk by a march, covering whole marches, would do it at points past those the submitted grid covers."""
    bounded = bounded_by_guard(kernel, axis)
    name = next(a.name for a in kernel.axes if a.axis == axis)
    if bounded is None:
        return (f"its point body is not one guard bounding {name} from above (`if ({name} < bound && ...)`, or an "
                f"early return), so a grid shrunk by a march along {name} would do its work past the points the "
                f"submitted grid covers")
    covered = coverage.bound_covered(spec, axis, _spelled(kernel, bounded[1]))
    return None if covered else _beyond_the_grid(name, bounded[1], axis)


def _spelled(kernel: PointKernel, bound: str) -> str:
    """A guard's bound with the point body's affine locals spelled out (`out_h` as `height - k + 1`), which
    coverage reads in the spec's sizes; as written where it is not affine."""
    return affine.spelled(kernel.poly(bound) or {("?",): 1}) or bound


def _beyond_the_grid(name: str, bound: str, axis: int) -> str:
    return (f"its guard's bound on {name}, {bound}, may pass the problem size along {AXES[axis]}: the submitted grid "
            f"stops at the problem size, and a grid shrunk by a march, covering whole marches, would compute points "
            f"between them")


def unbounded(kernel: PointKernel, axis: int, spec: KernelSpec) -> str | None:
    """Why a thread cannot march along the axis: an access of the point body lies in no guard (an if without else at
    its top level) bounding the axis's index from above (`y < E`, `y <= E`) within the problem size along it (the
    grid launched for it reaches every point below E: coverage.bound_covered). The submitted kernel may rely on its
    grid covering exactly the rows there are (a size every block size divides), or on a grid covering a band of an
    image its guard bounds further (review, helper-82); a grid shrunk by a march covers a whole number of marches,
    and the points past the rows would then touch memory no point of it touches. A read the same at every point,
    made by each in a statement of the point body's own (`float c = coef[0];`), reads nothing new at more points."""
    masked = mask(kernel.source)
    name = next(a.name for a in kernel.axes if a.axis == axis)
    above = rf"\s*{name}\s*(?P<o><=?)\s*(?P<e>[^<>=!&|?,]+)|\s*(?P<f>[^<>=!&|?,]+?)\s*(?P<p>>=?)\s*{name}\s*"
    uncovered = []

    def bounding(part: str) -> bool:
        found = re.fullmatch(above, unparenthesised(part))
        if found is None or re.search(rf"\b{name}\b", found["e"] or found["f"]):
            return False
        bound = found["e"] or found["f"]
        spelled = _spelled(kernel, bound)
        if coverage.bound_covered(spec, axis, f"({spelled}) + 1" if "=" in (found["o"] or found["p"]) else spelled):
            return True
        uncovered.append(" ".join(bound.split()))
        return False
    # Where each guard starts guarding: after its first bounding conjunct, since && evaluates an access in the
    # condition before that conjunct at every point (review, helper-82: `mask[i] != 0 && y < h` read past mask).
    guarded = []
    for s in kernel.statements:
        if s.kind != "if" or s.orelse is not None:
            continue
        head, at = masked[s.head[0]:s.head[1]], 0
        for part in top_level_conjuncts(head):
            at = head.index(part, at) + len(part)
            if bounding(part):
                guarded.append((s.head[0] + at, s.end))
                break
    outside = next((a for a in kernel.accesses if not any(start <= a.start < end for start, end in guarded)
                    and not made_alike_at_every_point(kernel, masked, a)), None)
    if outside is None:
        return None
    if uncovered:
        return _beyond_the_grid(name, uncovered[0], axis)
    return (f"{outside.array}[{outside.subscript}] is under no guard bounding {name} from above, so a grid shrunk by "
            f"a march along {name} would reach past the points the submitted grid covers")


def made_alike_at_every_point(kernel: PointKernel, masked: str, access: Access) -> bool:
    """Whether the access is a read of one element whatever the point (its subscript names parameters alone, which a
    marched body does not change), made by every point alike: in a statement of the point body's top level that
    every point reaches (before any statement that may return), or in a guard's condition after conjuncts of
    parameters alone (`if (enabled[0] && y < h)`), which every point evaluates alike."""
    fixed = set(kernel.parameters)
    if access.write or access.poly is None or not affine.names(access.poly) <= fixed:
        return False
    for statement in kernel.statements:
        if statement.start <= access.start < statement.end:
            if statement.kind == "simple":
                return True
            if statement.kind != "if" or not statement.head[0] <= access.start < statement.head[1]:
                return False
            before = masked[statement.head[0]:access.start]
            conjuncts = top_level_conjuncts(masked[statement.head[0]:statement.head[1]])
            earlier = conjuncts[:len(top_level_conjuncts(before)) - 1]
            return all(set(IDENTIFIER.findall(re.sub(r"\[[^\[\]]*\]", "", part))) <= fixed and
                       not re.search(r"[=(]|\+\+|--", re.sub(r"[<>!=]=", "", part)) for part in earlier)
        if re.search(r"\breturn\b", masked[statement.start:statement.end]):
            return False
    return False


def bounded_by_guard(kernel: PointKernel, axis: int) -> tuple[tuple[int, int], str] | None:
    """Where the point body is one guard without else, `if (x < B && REST) ...`, B arithmetic of parameters the
    body does not change: the span of `x < B` in the source and B; else None. A thread's points along the axis
    increase, so where its last is below B the conjunct holds at each, and the body with it replaced by `true`
    does what the body does. Loads the guard kept conditional are then made at every point, and a thread's
    unrolled points can issue them together."""
    masked = mask(kernel.source)
    if len(kernel.statements) != 1 or kernel.statements[0].kind != "if" or \
            kernel.statements[0].orelse is not None or changed_parameter(kernel) is not None:
        return None
    name = next(a.name for a in kernel.axes if a.axis == axis)
    at = kernel.statements[0].head[0]
    for part in top_level_conjuncts(masked[at:kernel.statements[0].head[1]]):
        bounded = re.fullmatch(rf"{name}\s*<\s*(?P<bound>[\w\s+\-*/%()]+)", unparenthesised(part))
        if bounded and set(IDENTIFIER.findall(bounded["bound"])) <= set(kernel.parameters) and \
                not re.search(r"\w\s*\(", bounded["bound"]):
            start = at + len(part) - len(part.lstrip())
            return (start, at + len(part.rstrip())), " ".join(bounded["bound"].split())
        at += len(part) + len("&&")
    return None
