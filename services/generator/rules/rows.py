"""Row-wise loops of one thread per row (GEMV, row sums and maxima, softmax or layer normalisation written a
thread per row), restructured as a warp per row.

Recognised: a kernel of one point per thread along x (the row) whose point body walks the row in one or more loops,
`for (int c = START; c < END; c++)`, each a statement of a block (a `#pragma unroll` may stand above it). What a
loop assigns outside itself is an accumulator declared in the point body before it, which the loop reads nowhere
else: a sum (`sum += E`, `sum -= E`, `sum++`, `sum = sum + E`, `sum = E + sum`, or for a float or double `sum =
fmaf(X, Y, sum)`), or an extreme (`m = fmaxf(m, E)` and fmax, max, fminf, fmin, min; `m = E > m ? E : m`, `if (E >
m) m = E;` and their mirrors), or an extreme kept with its place (`if (E > m) { m = E; at = c; }`, an argmax or an
argmin, under a strict comparison). A loop's stores go to an element that moves with its index; an array the kernel both
writes and reads is read only at the element written, in loops that start at the same place. Outside the loops, the
row writes memory (`y[r] = sum`) only after the last loop, in the block that holds it. A loop's start and bound are
plain arithmetic its body does not change; what every lane would run whole changes nothing a lane does not own (no
call of a function of the source, lambda, printf, or write through a pointer or into a member), and no accumulator
is aliased, declared twice, updated within an expression or, if an integer, given floating-point terms (a
comparison, `count += (v > 0.0f)`, is an int term). Neighbouring threads read addresses a row apart, so no load is
coalesced.

Rendered: a block of block_size_x x block_size_y threads takes block_size_y rows, block_size_x lanes per row (row =
blockIdx.x * block_size_y + threadIdx.y): a warp (32) for long rows, a power-of-two part of one (4 to 16) for short
ones such as CSR's, so that few lanes idle. The lanes split each loop (c = START + lane, stepping block_size_x), so
they read consecutive elements of their row at once, and a lane meets the same elements in every loop that starts at
the same place. After a loop the row's lanes combine their accumulators with __shfl_xor_sync (offsets below
block_size_x, under the mask of just those lanes, which share the row and so its guard and every branch before the
shuffles: a warp's other rows may have ended), which leaves every lane the row's values, so what runs between the
loops runs in every lane as it ran in the thread. A sum that does not enter its loop at zero (a bias, or a second
pass into it) enters it at zero in every lane but lane 0. After the last loop lane 0 goes on with the rest of the
row alone. The loop bodies stay as written, so each lane accumulates as the thread did (an fmaf chain stays one):
partial sums are added in another order (within float rounding), and a maximum or minimum of numbers is the same in
any order: fmaxf and fminf drop a NaN wherever it stands, and a comparison that keeps E where it holds
(`if (E > m) m = E`) never takes one. The mirror form, keeping E where the comparison fails (`m = E < m ? m : E`),
takes a NaN and then drops it for the next element, so where the NaN lies decides the result: it is refused. Among
equal values the lanes may keep another than the first (+0.0 for -0.0, which compare equal). An argmax's lanes
combine their places too, keeping the smaller among equal values: the loop's strict comparison keeps the first of
them in the row, and each lane meets its elements in the row's order. (A comparison taking equal values keeps the
last, which a lane that met none of them cannot tell from its own start: it is refused.)
The lane loops are ones the vectorize_loops rule can widen to 128-bit loads.
"""
import re
from collections.abc import Callable
from dataclasses import dataclass

from services.generator.rules import affine, points
from services.generator.rules.cuda_text import (CALLED, CAST_WORDS, IDENTIFIER, LAMBDA, calls, closing, fresh_name,
                                                functions_named, identifiers, mask, outside_brackets, split_top_level)
from services.generator.rules.points import ASSIGNMENT, INDENT, INTEGER_TYPE, PointKernel
from services.generator.rules.shape import Layout, NotRecognised, block_widths, default_in, one_thread_per_point
from services.generator.rules.statements import Statement, walk
from services.generator.rules.tree import unroll_pragma
from shared.domain.spec import KernelSpec

# Longest first: `unsigned long long q` is not an `unsigned` named `long`.
ACCUMULATOR_TYPES = r"(?:float|double|unsigned\s+long\s+long|long\s+long|unsigned\s+int|unsigned|int)"
ZERO = r"(?:0+(?:\.0*)?[fF]?|0*\.0+[fF]?|0[uUlL]*)"
ROWS_PER_BLOCK = [1, 2, 4, 8, 16, 32]
LANES = [4, 8, 16, 32]  # a row's lanes: a whole warp for long rows, a part of one for short rows (CSR's)
# `sum = fmaf(X, Y, sum)` adds X * Y with one rounding: a sum for a float or double accumulator (for an integer one
# the float result is truncated at each step, which lanes' partial sums would not repeat).
FUSED = r"(?:fmaf|fma|__fmaf_rn|__fma_rn)"
FLOATING = ("float", "double")
EXTREMES = {"fmaxf": "max", "fmax": "max", "max": "max", "fminf": "min", "fmin": "min", "min": "min"}
_COMPARISON = re.compile(r"(?<![<>=!-])(>=|<=|>|<)(?![<>=])")
_FULL_MASK = "0xffffffffu"
_NOT_TYPES = r"(?!(?:else|return|case|goto|do|new|delete|throw|sizeof)\b)"
_DECLARED = (rf"\b(?:{ACCUMULATOR_TYPES}|[A-Za-z_]\w*_t|bool|char|short|long|size_t|float\d|int\d)[\s*&]+"
             r"{}\s*[=;,\[)]")  # a declaration of the name formatted in (a parameter's included)
_FLOATING_TYPES = ("float", "double", "half", "__half", "__nv_bfloat16", "float2", "float4", "double2")


@dataclass(frozen=True)
class Accumulator:
    name: str
    type: str
    kind: str  # sum | max | min
    function: str | None  # the function an extreme is taken with (fmaxf, max, ...); None: by comparison
    zero_at_entry: bool  # a sum declared at zero and not changed before its loop
    place: str | None = None  # an extreme's companion that records where it was found (`at = c;`): an argmax
    place_type: str | None = None


@dataclass(frozen=True)
class RowPass:
    loop: Statement  # a loop over the row
    variable: str  # its index, e.g. c
    type: str
    start: str  # where it starts, as written
    end: str  # its bound
    accumulators: tuple[Accumulator, ...]


@dataclass(frozen=True)
class RowLoop:
    kernel: PointKernel
    passes: tuple[RowPass, ...]


def recognise(spec: KernelSpec) -> RowLoop:
    return loops_of_one_point(spec, _check_rows)


def loops_of_one_point(spec: KernelSpec, oriented: Callable[[PointKernel, str, tuple["RowPass", ...]], None]) \
        -> RowLoop:
    """The loops of a kernel of one point per thread along x that a group of threads may split as this module's
    docstring says, `oriented` checking which way its loads run: a row's here, a column's in columns.py."""
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel as exc:
        raise NotRecognised(str(exc)) from None
    if len(kernel.axes) != 1:
        raise NotRecognised("it has a 2D or 3D grid; a row per thread has one index")
    if len(spec.block_size_names) < 2:
        raise NotRecognised("the spec names no y block size for the rows of a block")
    if (why := one_thread_per_point(spec, 0)) is not None:
        raise NotRecognised(why)
    masked = mask(spec.source)
    uncommented = mask(spec.source, literals=False)
    _check_whole_lanes(kernel, masked, spec)
    loops = [s for s, depth in walk(masked, list(kernel.statements)) if s.kind in ("for", "while", "do") and depth == 0]
    if not loops:
        raise NotRecognised("its row body has no loop over the row")
    passes = tuple(_pass(kernel, masked, uncommented, loop) for loop in loops)
    _check_bounds(kernel, masked, passes)
    _check_accumulators_unaliased(kernel, masked, passes)
    oriented(kernel, masked, passes)
    _check_effects(kernel, masked, passes)
    _check_arrays_read_back(kernel, masked, passes)
    return RowLoop(kernel, passes)


def _check_whole_lanes(kernel: PointKernel, masked: str, spec: KernelSpec) -> None:
    """What every lane runs whole must change nothing a lane does not own: no call of a function of the source
    (what canonical.py could not inline; its effects, or its loop, would run in every lane), no lambda, no printf,
    and no write the recogniser cannot place (through a pointer, into a member, or into a parenthesised name)."""
    body = masked[kernel.body_start:kernel.body_end]
    source_text = masked[:kernel.kernel.name_at] + masked[kernel.body_end:]  # defined before or after the kernel
    functions = functions_named(source_text)
    called = next((m.group(1) for m in CALLED.finditer(body)
                   if m.group(1) in functions - {"if", "for", "while", "switch"} or m.group(1) == "printf"), None)
    if called is not None:
        raise NotRecognised(f"it calls {called}, which every lane would run whole")
    if re.search(r"(?:\.|->)\s*[A-Za-z_]\w*\s*[(\[]|\)\s*\[", body):
        raise NotRecognised("it calls a member function or indexes a member or an expression, which this rule does "
                            "not follow")
    taken = next((m.group(1) for m in re.finditer(r"&\s*([A-Za-z_]\w*)\b(?!\s*[\[.(]|\s*->)", body)
                  if points.address_taken(body, m.group(1))), None)
    if taken is not None:
        raise NotRecognised(f"it takes the address of {taken}, through which a call may change it unseen")
    sizes = {name for axis in (0, 1) for name in block_widths(spec, axis)}
    if len(block_widths(spec, 0)) > 1 or any(re.search(rf"\b{name}\b", body) for name in sizes):
        raise NotRecognised("it reads its block size, or ties another parameter to it, which splitting its "
                            "loops among threads changes")
    if LAMBDA.search(body):
        raise NotRecognised("it defines a lambda, whose effects this rule does not follow")
    hidden = (r"(?:\.|->)\s*[A-Za-z_]\w*\s*(?:{0}|\+\+|--)|(?:\+\+|--)\s*[A-Za-z_]\w*\s*(?:\.|->)"
              r"|(?:^|[;{{}}])\s*(?:\+\+|--)?\s*\*|\)\s*\*\s*[A-Za-z_]\w*\s*{0}|\)\s*{0}"
              r"|\)\s*(?:\+\+|--)\s*(?![\w(])").format(ASSIGNMENT)
    if re.search(hidden, body):
        raise NotRecognised("it writes through a pointer, into a member or into a parenthesised name, which this "
                            "rule does not follow")


def _check_bounds(kernel: PointKernel, masked: str, passes: tuple["RowPass", ...]) -> None:
    """A loop's start and bound are plain arithmetic (loads allowed: a CSR row's start), which its body does
    not change, and loops written to start at the same place do: lanes then own the same elements in each."""
    for p in passes:
        for text in (p.start, p.end):
            if re.search(r"&&|\|\||[?<>=!]|\+\+|--", text) or calls(text):
                raise NotRecognised(f"its loop over {p.variable} runs from `{p.start}` while below `{p.end}`; a row "
                                    f"loop's start and bound are plain arithmetic")
        inside = masked[p.loop.body.start:p.loop.body.end]
        changed = next((n for n in re.findall(r"[A-Za-z_]\w*", p.end) if re.search(points.changing(n), inside)), None)
        if changed is not None:
            raise NotRecognised(f"its loop's bound reads {changed}, which the loop changes")
    span = masked[passes[0].loop.start:passes[-1].loop.end]
    for p in passes:
        changed = next((n for n in re.findall(r"[A-Za-z_]\w*", p.start) if n != p.variable and
                        re.search(points.changing(n), span)), None)
        if changed is not None:
            raise NotRecognised(f"its loop starts at `{p.start}`, and {changed} changes between its loops")


def _check_accumulators_unaliased(kernel: PointKernel, masked: str, passes: tuple["RowPass", ...]) -> None:
    body = masked[kernel.body_start:kernel.body_end]
    for name in {a.name for p in passes for a in p.accumulators}:
        if points.address_taken(body, name) or re.search(rf"&\s*[A-Za-z_]\w*\s*=\s*{name}\b", body):
            raise NotRecognised(f"it takes the address of (or a reference to) its accumulator {name}")


def _pass(kernel: PointKernel, masked: str, uncommented: str, loop: Statement) -> RowPass:
    if loop.kind != "for":
        raise NotRecognised(f"its row body has a {loop.kind} loop; a row loop kernel walks its row with for loops")
    init, condition, step = split_top_level(masked[loop.head[0]:loop.head[1]], ";")
    declared = re.fullmatch(rf"\s*(?:const\s+)?(?P<type>{INTEGER_TYPE})\s+(?P<name>[A-Za-z_]\w*)\s*=(?P<start>.*)",
                            init, re.DOTALL)
    if declared is None:
        raise NotRecognised("its loop does not declare its index, as in `for (int c = 0; c < cols; c++)`")
    c = declared["name"]
    bound = re.fullmatch(rf"\s*{c}\s*<(?!=)\s*(?P<end>.+?)\s*", condition, re.DOTALL)
    if bound is None:
        raise NotRecognised(f"its loop runs while `{' '.join(condition.split())}`, not while `{c} < end`")
    if not re.fullmatch(rf"\s*(?:{c}\s*\+\+|\+\+\s*{c}|{c}\s*\+=\s*1|{c}\s*=\s*{c}\s*\+\s*1)\s*", step):
        raise NotRecognised(f"its loop steps by `{' '.join(step.split())}`, not by one")
    start_at = loop.head[0] + declared.start("start")
    end_at = loop.head[0] + len(init) + 1 + bound.start("end")
    start = " ".join(uncommented[start_at:start_at + len(declared["start"])].split())
    end = " ".join(uncommented[end_at:end_at + len(bound["end"])].split())
    before = re.sub(r"(?m)^[ \t]*#.*$", "", masked[kernel.body_start:loop.start])  # a `#pragma unroll` above it
    if before.rstrip()[-1:] not in (";", "{", "}", ""):
        raise NotRecognised("its row loop is the body of another statement, not a statement of a block")
    escape = re.search(r"\b(break|return|goto)\b", masked[loop.body.start:loop.body.end])
    if escape:
        raise NotRecognised(f"its loop body uses {escape[1]}, whose meaning changes when lanes split the loop")
    return RowPass(loop, c, " ".join(declared["type"].split()), start, end,
                   _accumulators(kernel, masked, loop, c))


def _accumulators(kernel: PointKernel, masked: str, loop: Statement, c: str) -> tuple[Accumulator, ...]:
    inside = masked[loop.body.start:loop.body.end]
    local = set(re.findall(rf"(?:^|[;{{(,]\s*)(?:const\s+)?{_NOT_TYPES}[A-Za-z_][\w:<>]*(?:\s*\*)*\s+"
                           rf"([A-Za-z_]\w*)\s*[=;,\[]", inside))
    declaring = re.compile(rf"\s*(?:const\s+)?{_NOT_TYPES}[A-Za-z_][\w:<>]*(?:\s+[A-Za-z_][\w:<>]*)*\s+"
                           rf"(?P<declarators>[A-Za-z_*][^;]*);\s*", re.DOTALL)
    for statement, _ in walk(masked, [loop.body]):
        simple = statement.kind == "simple"
        declaration = declaring.fullmatch(masked, statement.start, statement.end) if simple else None
        for declarator in split_top_level(declaration["declarators"], ",") if declaration else ():
            named = re.match(r"\s*\**\s*([A-Za-z_]\w*)\s*(?:=|\[|$)", declarator)
            if named:
                local.add(named.group(1))
    outside = masked[kernel.kernel.params_open:loop.body.start] + masked[loop.body.end:kernel.body_end]
    shadowing = next((name for name in sorted(local) if re.search(_DECLARED.format(re.escape(name)), outside)), None)
    if shadowing is not None:
        raise NotRecognised(f"its loop declares {shadowing}, a name also declared outside it")
    assigned: dict[str, set[str]] = {}
    for match in re.finditer(rf"(?<![\w.\]>])\s*\b([A-Za-z_]\w*)\s*({ASSIGNMENT}|\+\+|--)", inside):
        assigned.setdefault(match.group(1), set()).add(match.group(2))
    for match in re.finditer(r"(?:\+\+|--)\s*([A-Za-z_]\w*)", inside):
        assigned.setdefault(match.group(1), set()).add("++")
    if c in assigned:
        raise NotRecognised(f"its loop body changes the loop index {c}")
    places = _places(masked, loop, c)
    found = []
    for name, operators in assigned.items():
        if name in local or name in places.values():
            continue
        type_, zero = _declaration(kernel, masked, loop, name)
        instance = kernel.template_types.get(type_, type_)  # a template's T: the type its instance names
        uses = len(re.findall(rf"(?<![\w.])(?<!->)\b{name}\b", inside))
        if not operators <= {"+=", "-=", "=", "++", "--"}:
            raise NotRecognised(f"its loop changes {name} by {', '.join(sorted(operators))}; a row loop only adds "
                                f"into accumulators (+=), takes their maximum or minimum, and assigns its own locals")
        try:
            counted = _updates(masked, loop, name, instance, kernel)
            counted += 2 * _sums_assigned(masked, loop, name, instance, kernel)
            kind, function = "sum", None
        except NotRecognised as not_a_sum:
            if operators != {"="}:
                raise
            try:
                kind, function, counted = _extreme(masked, loop, name, places.get(name), c)
            except _OrderDependent:
                raise
            except NotRecognised:
                raise not_a_sum from None
        if uses != counted:
            raise NotRecognised(f"its loop reads the accumulator {name}, so the partial results of lanes would "
                                f"differ from the row's")
        place = places.get(name) if kind != "sum" else None
        if place is not None and (len(re.findall(rf"(?<![\w.])(?<!->)\b{place}\b", inside)) != 1 or
                                  assigned[place] != {"="}):
            raise NotRecognised(f"its loop reads {place}, the place of its {kind}imum, or sets it elsewhere")
        if place is not None and not _of_type(kernel, inside, _kept_value(masked, loop, name, place), type_):
            # Converted as it is kept, a later value equal after the conversion but not before it would move the
            # place, keeping the last of equal values (review, helper-87: doubles into a float)
            raise NotRecognised(f"its loop keeps in {name} ({type_}) a value it may convert, so a value equal to "
                                f"{name} after the conversion could move {place}")
        found.append(Accumulator(name, type_, kind, function, zero, place,
                                 place and _declaration(kernel, masked, loop, place)[0]))
    unpaired = next((place for place in places.values() if place not in {a.place for a in found}), None)
    if unpaired is not None:  # beside a sum, it would be left as each lane found it (review, helper-87)
        raise NotRecognised(f"its loop records {unpaired} beside a value that is not a maximum or a minimum")
    return tuple(found)


def _kept_value(masked: str, loop: Statement, name: str, place: str) -> str:
    """E of the loop's `if (E > name) { name = E; place = c; }`."""
    for statement, _ in walk(masked, [loop.body]):
        if statement.kind == "if" and statement.orelse is None and statement.body.kind == "block":
            for inner in statement.body.children(masked):
                kept = re.fullmatch(rf"\s*{name}\s*=(?!=)(.*);\s*", masked[inner.start:inner.end], re.DOTALL)
                if kept and re.search(rf"\b{place}\b", masked[statement.body.start:statement.body.end]):
                    return kept[1].strip()
    return ""


def _of_type(kernel: PointKernel, inside: str, value: str, type_: str) -> bool:
    """Whether the value is, as written, of the type: a local the loop declares so, or an element of an array of it."""
    own = " ".join(type_.split())
    element = re.fullmatch(r"([A-Za-z_]\w*)\s*\[.*\]", value, re.DOTALL)
    if element is not None:
        declared = re.sub(r"\b(?:const|volatile|__restrict__)\b", " ", kernel.array_types.get(element[1], ""))
        return " ".join(declared.split()) == own
    local = re.search(rf"(?:^|[;{{}}(])\s*(?:const\s+)?([A-Za-z_][\w\s]*?)\s+{re.escape(value)}\s*=", inside)
    return bool(re.fullmatch(r"[A-Za-z_]\w*", value)) and local is not None and " ".join(local[1].split()) == own


def _places(masked: str, loop: Statement, c: str) -> dict[str, str]:
    """Each local the loop body sets, in an if without else, with its index beside another (`if (v > best) { best =
    v; at = c; }`): that other -> the local recording its place."""
    found = {}
    for statement, _ in walk(masked, [loop.body]):
        if statement.kind != "if" or statement.orelse is not None or statement.body.kind != "block":
            continue
        inner = statement.body.children(masked)
        texts = [masked[s.start:s.end] for s in inner]
        if len(inner) != 2 or any(s.kind != "simple" for s in inner):
            continue
        assigned = [re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(?!=)(.*);\s*", text, re.DOTALL) for text in texts]
        if None in assigned:
            continue
        at = [a for a in assigned if a[2].strip() == c]
        if len(at) == 1 and (other := next(a for a in assigned if a is not at[0]))[1] != at[0][1]:
            found[other[1]] = at[0][1]
    return found


def _updates(masked: str, loop: Statement, name: str, type_: str, kernel: PointKernel) -> int:
    """How many statements of the loop are `name += E;`, `name -= E;`, `name++;` or `++name;` (or --), each
    mentioning it once; NotRecognised where such an update is made within an expression, whose value is then
    the lane's partial one, or where an integer takes a floating-point term, truncated at each step in the
    thread's order."""
    operators = re.findall(rf"(?<![\w.])\b{name}\s*(?:[-+]=|\+\+|--)|(?:\+\+|--)\s*{name}\b",
                           masked[loop.body.start:loop.body.end])
    count = 0
    for statement, _ in walk(masked, [loop.body]):
        text = masked[statement.start:statement.end]
        added = re.fullmatch(rf"\s*{name}\s*[-+]=(?P<term>.*);\s*", text, re.DOTALL)
        if statement.kind == "simple" and (added or re.fullmatch(
                rf"\s*(?:{name}\s*(?:\+\+|--)|(?:\+\+|--)\s*{name})\s*;\s*", text)):
            if added and type_ not in FLOATING and _floating(added["term"], kernel, masked):
                raise NotRecognised(f"its loop adds `{' '.join(added['term'].split())}`, a floating-point term, "
                                    f"into the integer {name}, truncating at each step")
            count += 1
    if count != len(operators):
        raise NotRecognised(f"its loop updates {name} within an expression, which would read the lane's partial "
                            f"value")
    return count


def _floating(term: str, kernel: PointKernel, masked: str) -> bool:
    """Whether a term may be a floating-point value: a float literal, a call, or a floating-point array or
    local; a comparison or a logical operation (`v > 0.0f`, a count's term) is an int whatever it compares."""
    if _truth_value(term):
        return False
    if re.search(r"\d\.|\.\d|\d[eE][-+]?\d|\b\d+[fF]\b", term) or calls(term):
        return True
    # A C-style cast, `(float)v` or `(double)v`: a parenthesised type name before an operand. Any but an integer
    # type may be a floating-point one (review, helper-83: `acc += (float)codes[i] / 3` truncated at each step).
    types = kernel.template_types  # a template's T, as its instance names it
    for cast in re.finditer(r"\(\s*((?:const\s+)?[A-Za-z_]\w*(?:\s+[A-Za-z_]\w*)*)\s*\)\s*(?=[\w(.])", term):
        if not re.fullmatch(rf"(?:const\s+)?{INTEGER_TYPE}", types.get(cast.group(1), cast.group(1))):
            return True
    for word in set(re.findall(r"[A-Za-z_]\w*", term)):
        if word in kernel.array_types:
            element = " ".join(re.sub(r"\b(?:const|volatile|__restrict__)\b", " ", kernel.array_types[word]).split())
            if not re.fullmatch(INTEGER_TYPE, types.get(element, element)):
                return True  # a float, or a typedef this rule cannot see through
        for declared in re.finditer(rf"\b([A-Za-z_]\w*)\s+(?:const\s+)?{word}\s*[=;,)\[]", masked):
            if declared.group(1) not in ("return", "case", "else") and declared.group(1) not in CAST_WORDS and \
                    not re.fullmatch(INTEGER_TYPE, types.get(declared.group(1), declared.group(1))):
                return True
    return False


def _truth_value(term: str) -> bool:
    """Whether the term is an int whatever it reads: outside its brackets, a comparison or logical operation
    (every arithmetic operator binds tighter, so its value is a bool, or under a bitwise operator an integer); a
    negation (`!v`) or a cast to an integer type of the whole term; or a choice between integer literals
    (`v > 0.0f ? 1 : 0`)."""
    text = term.strip()
    while text.startswith("(") and closing(text, 0) == len(text) - 1:
        text = text[1:-1].strip()
    cast = re.match(rf"\(\s*(?:const\s+)?{INTEGER_TYPE}\s*\)\s*|static_cast\s*<\s*{INTEGER_TYPE}\s*>\s*(?=\()", text)
    if cast and text[cast.end():].startswith("(") and closing(text, cast.end()) == len(text) - 1:
        return True
    if re.fullmatch(r"!\s*(?:[A-Za-z_]\w*(?:\s*\[[^\[\]]*\])*|\(.*\))", text) and \
            (text.rstrip()[-1] != ")" or closing(text, text.index("(")) == len(text) - 1):
        return True  # a negation of a whole operand
    terms = _top_level_terms(text)
    if len(terms) > 1:
        return all(_truth_value(term) for term in terms)  # a sum of truth values: `(v > t) - (v < -t)`
    outside = outside_brackets(text.replace("->", " . "))  # a member through a pointer is no comparison
    if re.search(r"\w\s*<[\w\s:*&,]*>\s*(?:\(|::|\{)", text):
        return False  # a template's arguments (static_cast<float>(v)), not a comparison
    choice = re.fullmatch(r"[^?:]*\?\s*\d+[uUlL]*\s*:\s*\d+[uUlL]*\s*", outside)
    if choice and not re.search(r"[,=]", outside.replace("==", "").replace("!=", "").replace("<=", "")
                                .replace(">=", "")):
        return True
    return bool(re.search(r"[<>]=?|==|!=|&&|\|\|", outside)) and \
        not re.search(r"[?,]|(?<![<>=!])=(?!=)|<<|>>", outside)


def _declaration(kernel: PointKernel, masked: str, loop: Statement, name: str) -> tuple[str, bool]:
    """The accumulator's type, and whether it enters the loop at zero: declared so, and unchanged since. A name
    declared twice (one hiding the other) is refused: which one the loop adds into is not read here."""
    if len(re.findall(_DECLARED.format(name), masked[kernel.kernel.params_open:kernel.body_end])) > 1:
        raise NotRecognised(f"it declares {name} more than once")
    for statement, depth in walk(masked, list(kernel.statements)):
        if statement.kind != "simple" or depth or statement.end > loop.start:
            continue
        declaration = re.fullmatch(rf"\s*(?P<type>{ACCUMULATOR_TYPES}|{_template_names(kernel)})\s+"
                                   rf"(?P<declarators>[^;]*);\s*", masked[statement.start:statement.end], re.DOTALL)
        for declarator in split_top_level(declaration["declarators"], ",") if declaration else ():
            named = re.fullmatch(rf"\s*{name}\s*(?:=(?P<init>.*))?", declarator, re.DOTALL)
            if named:
                zero = named["init"] is not None and re.fullmatch(rf"\s*{ZERO}\s*", named["init"]) is not None
                unchanged = not re.search(points.changing(name), masked[statement.end:loop.start])
                return " ".join(declaration["type"].split()), zero and unchanged
    raise NotRecognised(f"{name}, which the loop accumulates into, is not declared before it in the row's body as "
                        f"a float, double or integer")


def _template_names(kernel: PointKernel) -> str:
    """A pattern of the kernel template's type parameters whose instance is a float, double or integer (`T acc = 0;`
    of `row_dot<double>`, review, helper-93); one matching nothing where there are none."""
    names = [name for name, type_ in kernel.template_types.items() if re.fullmatch(ACCUMULATOR_TYPES, type_)]
    return "|".join(names) or "(?!)"


def _assignments(masked: str, loop: Statement, name: str) -> list[str]:
    """The right-hand sides of the loop's plain assignments to `name`, each a statement of its own;
    NotRecognised where one is made within an expression."""
    assigned = re.compile(rf"(?<![\w.\]>])\b{name}\s*=(?!=)")
    texts = [masked[s.start:s.end] for s, _ in walk(masked, [loop.body]) if s.kind == "simple"]
    expressions = [m["expression"] for text in texts
                   if (m := re.fullmatch(rf"\s*{assigned.pattern}(?P<expression>.*);\s*", text, re.DOTALL))]
    if len(expressions) != len(assigned.findall(masked, loop.body.start, loop.body.end)):
        raise NotRecognised(f"its loop assigns {name} within an expression; a row loop only adds into "
                            f"accumulators, takes their maximum or minimum, and assigns its own locals")
    return expressions


def _sums_assigned(masked: str, loop: Statement, name: str, type_: str, kernel: PointKernel) -> int:
    """How many plain assignments to the accumulator add into it, each a statement of its own mentioning it
    twice: `name = name + E`, `name = E + name`, `name = name - E` (E's operators at its top level all binding
    tighter than + and -, so E is added whole) and, for a float or double, `name = fmaf(X, Y, name)`;
    NotRecognised for any other. The loop body stays as written, so each lane keeps the thread's arithmetic (an
    fmaf chain stays one)."""
    why = (f"a row loop only adds into accumulators (+=, {name} = {name} + x, or for a float or double {name} = "
           f"fmaf(x, y, {name})), takes their maximum or minimum, and assigns its own locals")
    expressions = _assignments(masked, loop, name)
    for expression in expressions:
        fused = re.match(rf"\s*{FUSED}\s*\(", expression)
        if fused and type_ in FLOATING:
            close = closing(expression, fused.end() - 1)
            arguments = split_top_level(expression[fused.end():close], ",")
            if len(arguments) == 3 and arguments[2].strip() == name and not expression[close + 1:].strip():
                continue
        added = (re.fullmatch(rf"\s*{name}\s*[-+](?P<term>.+)", expression, re.DOTALL)
                 or re.fullmatch(rf"(?P<term>.+?)\+\s*{name}\s*", expression, re.DOTALL))
        if added and not re.search(r"[-+*/%]\s*$", added["term"]) and \
                all(len(split_top_level(added["term"], operator)) == 1 for operator in "?:<>=&|^,+-") and \
                (type_ in FLOATING or not _floating(added["term"], kernel, masked)):
            continue
        raise NotRecognised(f"its loop assigns {name} `{' '.join(expression.split())}`; {why}")
    return len(expressions)


class _OrderDependent(NotRecognised):
    """A maximum or minimum whose result depends on the order the loop meets its elements."""


def _extreme(masked: str, loop: Statement, name: str, place: str | None = None, c: str = "") \
        -> tuple[str, str | None, int]:
    """(max | min, the function taken with or None, how often the updates mention `name`) when every assignment
    to `name` in the loop keeps the larger (or smaller) of it and a value E that does not read it:
    `name = fmaxf(name, E)` (either order; fmax, max, fminf, fmin, min), `name = E > name ? E : name` (any
    comparison, either side), or `if (E > name) name = E;`. With a `place`, every assignment is `if (E > name) {
    name = E; place = c; }` under a strict comparison: the first of equal values keeps its place, as lanes combining
    equal values by the smaller place keep it (a comparison taking equal values would keep the last, which a lane
    that met none of them does not know)."""
    why = (f"its loop assigns {name} other than a sum, a maximum or a minimum of it and a value that does not read "
           f"it")
    kinds, functions, counted, inside_ifs = set(), set(), 0, set()
    for statement, _ in walk(masked, [loop.body]):
        if statement.kind == "if" and statement.orelse is None:
            assignment = _lone_assignment(masked, statement.body, name, place, c)
            if assignment is not None:
                condition = masked[statement.head[0]:statement.head[1]]
                kinds.add(_compared(condition, name, assignment[1], name, why))
                if place is not None and re.search(r"[<>]=", condition):
                    raise _OrderDependent(f"its loop moves {place} to a value equal to {name} (`"
                                          f"{' '.join(condition.split())}`), keeping the last of equal values, which "
                                          f"lanes splitting the row cannot tell")
                counted += len(re.findall(rf"\b{name}\b", masked[statement.start:statement.end]))
                inside_ifs.add(assignment[0].start)
    if place is not None and not inside_ifs:
        raise NotRecognised(why)
    for statement, _ in walk(masked, [loop.body]):
        text = masked[statement.start:statement.end]
        assignment = re.fullmatch(rf"\s*{name}\s*=(?!=)(?P<value>.*);\s*", text, re.DOTALL)
        if statement.kind != "simple" or assignment is None or statement.start in inside_ifs:
            continue
        if place is not None:
            raise NotRecognised(f"its loop assigns {name} apart from {place}, the place it records")
        value = assignment["value"].strip()
        called = re.fullmatch(r"(?P<function>\w+)\s*\((?P<arguments>.*)\)", value, re.DOTALL)
        whole = called and closing(value, called.start("arguments") - 1) == len(value) - 1
        if whole and called["function"] in EXTREMES:
            arguments = [a.strip() for a in split_top_level(called["arguments"], ",")]
            if len(arguments) != 2 or sorted(a == name for a in arguments) != [False, True] or \
                    re.search(rf"\b{name}\b", next(a for a in arguments if a != name)):
                raise NotRecognised(why)
            kinds.add(EXTREMES[called["function"]])
            functions.add(called["function"])
        else:
            condition, *branches = split_top_level(value, "?")
            chosen = split_top_level(branches[0], ":") if len(branches) == 1 else []
            if len(chosen) != 2 or "::" in branches[0]:
                raise NotRecognised(why)
            kinds.add(_compared(condition, name, chosen[0].strip(), chosen[1].strip(), why))
            functions.add(None)
        counted += len(re.findall(rf"\b{name}\b", text))
    if len(kinds) != 1:
        raise NotRecognised(why)
    return kinds.pop(), (functions.pop() if len(functions) == 1 else None), counted


def _lone_assignment(masked: str, body: Statement, name: str, place: str | None = None,
                     c: str = "") -> tuple[Statement, str] | None:
    """(the statement, E) where the statement controlled is `name = E;` alone, braced or not, or with a `place`
    beside `place = c;` (in either order); else None."""
    inner = body.children(masked) if body.kind == "block" else [body]
    if place is not None:
        inner = [s for s in inner if not re.fullmatch(rf"\s*{place}\s*=\s*{c}\s*;\s*", masked[s.start:s.end])]
    if len(inner) != 1 or inner[0].kind != "simple":
        return None
    assignment = re.fullmatch(rf"\s*{name}\s*=(?!=)(?P<value>.*);\s*", masked[inner[0].start:inner[0].end],
                              re.DOTALL)
    return (inner[0], assignment["value"].strip()) if assignment else None


def _compared(condition: str, name: str, chosen: str, otherwise: str, why: str) -> str:
    """max or min: which of `name` and a value E the choice `condition ? chosen : otherwise` keeps, where the
    condition compares the two and the branches are the two."""
    condition = condition.strip()
    while condition.startswith("(") and closing(condition, 0) == len(condition) - 1:
        condition = condition[1:-1].strip()
    operators = [m for m in _COMPARISON.finditer(condition) if _depth(condition, m.start()) == 0]
    if len(operators) != 1:
        raise NotRecognised(why)
    operator = operators[0]
    left, right = condition[:operator.start()].strip(), condition[operator.end():].strip()
    value = right if left == name else left
    if sorted((left == name, right == name)) != [False, True] or re.search(rf"\b{name}\b", value) or \
            {" ".join(chosen.split()), " ".join(otherwise.split())} != {name, " ".join(value.split())} or \
            " ".join(chosen.split()) == " ".join(otherwise.split()):
        raise NotRecognised(why)
    if " ".join(chosen.split()) == name:  # E kept where the comparison fails, a NaN E among them (review, helper-83)
        raise _OrderDependent(f"its loop keeps {' '.join(value.split())} where `{condition}` fails, so a NaN replaces "
                            f"{name} and the next element replaces the NaN: what the loop leaves depends on where a "
                            f"NaN lies in the row, and lanes splitting it would leave another value (write the "
                            f"comparison keeping it where it holds, or fmaxf/fminf)")
    greater = operator[1] in (">", ">=")
    left_wins = " ".join(chosen.split()) == " ".join(left.split())
    return "max" if greater == left_wins else "min"


def _top_level_terms(text: str) -> list[str]:
    """The terms a binary + or - outside brackets separates (a leading sign kept with its term); one term, the
    text, where an operator binding looser than them (a comparison, `?`, `,`) stands at the top level too."""
    terms, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += (char in "([") - (char in ")]")
        if depth == 0 and char in "+-" and text[:at].strip() and text[:at].rstrip()[-1] not in "+-*/%(<>=!&|^?:," \
                and text[at + 1:at + 2] not in "+-=>" and text[at - 1:at] not in "+-":
            terms.append(text[start:at])
            start = at + 1
    terms.append(text[start:])
    if len(terms) > 1 and re.search(r"[<>=!&|?,]", outside_brackets(text.replace("->", " . "))):
        return [text]
    return terms


def _reads(before: str, text: str, name: str) -> bool:
    """Whether `text` reads `name`, itself or through the locals `before` assigns (`int start = row_ptr[r];`)."""
    names, seen = set(IDENTIFIER.findall(text)), set()
    while names - seen:
        word = (names - seen).pop()
        seen.add(word)
        if word == name:
            return True
        for assigned in re.finditer(rf"(?<![\w.]){word}\s*=(?!=)([^;]*)", before):
            names |= set(IDENTIFIER.findall(split_top_level(assigned[1], ",")[0]))
    return False


def _depth(text: str, at: int) -> int:
    depth = 0
    for char in text[:at]:
        depth += (char in "([{") - (char in ")]}")
    return depth


def _check_rows(kernel: PointKernel, masked: str, passes: tuple[RowPass, ...]) -> None:
    r = kernel.axes[0].name
    apart = False
    for p in passes:
        inside = [a for a in kernel.accesses if p.loop.body.start <= a.start < p.loop.body.end and a.poly is not None]
        row_start = _reads(masked[kernel.body_start:p.loop.start], p.start, r)  # it starts where the row does (CSR)
        apart = apart or any(affine.is_unit(affine.stride(a.poly, p.variable))
                             and (r in affine.names(a.poly) or row_start) for a in inside)
        along_rows = [a for a in inside if affine.is_unit(affine.stride(a.poly, r))]
        if along_rows:
            raise NotRecognised(f"{along_rows[0].array}[{along_rows[0].subscript}] is contiguous along the rows "
                                f"already: a warp per row would scatter it")
    if not apart:
        raise NotRecognised("no loop of it reads an array contiguously along its index at an address that changes "
                            "with the row, so neighbouring threads do not read rows apart")


def _check_effects(kernel: PointKernel, masked: str, passes: tuple[RowPass, ...]) -> None:
    """A loop's stores go to an element that moves with its index alone; outside the loops, the row's effects
    (stores, atomics) come after the last loop in the block around it: lane 0 alone gets there."""
    last = passes[-1].loop
    enclosing = (kernel.body_start, kernel.body_end)
    for statement, _ in walk(masked, list(kernel.statements)):
        if statement.kind == "block" and statement.inner[0] <= last.start and last.end <= statement.inner[1]:
            enclosing = statement.inner
    effects = [a.start for a in kernel.accesses if a.write]
    effects += [kernel.body_start + m.start() for m in re.finditer(r"\batomic\w+\s*\(",
                                                                    masked[kernel.body_start:kernel.body_end])]
    for at in effects:
        if not any(p.loop.start <= at < p.loop.end for p in passes) and not (last.end <= at < enclosing[1]):
            raise NotRecognised("it writes memory before its row loop ends (the last, where there are several) or "
                                "outside the block that holds it")
    for access in kernel.accesses:
        p = next((p for p in passes if p.loop.start <= access.start < p.loop.end), None)
        if not access.write or p is None:
            continue
        if access.array not in kernel.array_types:
            raise NotRecognised(f"its loop writes {access.array}, not an array parameter: each lane would have "
                                f"its own")
        step = affine.stride(access.poly, p.variable) if access.poly is not None else None
        if not step or affine.names(access.poly) & (kernel.loop_variables - {p.variable}):
            raise NotRecognised(f"its loop writes {access.array}[{access.subscript}], an element that does not move "
                                f"with {p.variable} alone, so lanes splitting the loop could write it out of order")


def _check_arrays_read_back(kernel: PointKernel, masked: str, passes: tuple[RowPass, ...]) -> None:
    """An array the kernel writes (other than by atomics alone, which commute) is stored to at one element, in
    one loop or after the loops (by lane 0 alone), and read nowhere; else every access to it is the same
    element, in loops that start at the same place: a lane then reads and writes only elements it owns."""
    written = {a.array for a in kernel.accesses if a.write}
    written |= set(re.findall(r"\batomic\w+\s*\(\s*&?\s*([A-Za-z_]\w*)", masked[kernel.body_start:kernel.body_end]))
    for array in sorted(written):
        accesses = [a for a in kernel.accesses if a.array == array]
        if all(re.search(r"\batomic\w+\s*\(\s*&\s*$", masked[:a.start]) for a in accesses):
            continue
        places = {next((number for number, p in enumerate(passes) if p.loop.start <= a.start < p.loop.end), None)
                  for a in accesses}
        subscripts = {tuple(sorted(a.poly.items())) if a.poly is not None else None for a in accesses}
        if all(a.plain_store for a in accesses) and len(places) == 1 and len(subscripts) == 1:
            continue
        if all(a.start >= passes[-1].loop.end for a in accesses):
            continue  # lane 0 alone touches it, after every loop
        if None in places or len({passes[n].start for n in places}) != 1 or len(subscripts) != 1 or \
                None in subscripts:
            raise NotRecognised(f"it writes {array} and reads it, or writes it in several places, other than at "
                                f"the element of each step of loops that start at the same place, so a lane could "
                                f"meet what another lane wrote")


def _render(model: RowLoop, spec: KernelSpec) -> str:
    kernel = model.kernel
    axis = kernel.axes[0]
    lanes, rows = spec.block_size_names[0], spec.block_size_names[1]
    taken = identifiers(kernel.source)
    offset, group = fresh_name("offset", taken), fresh_name("row_lanes", taken)
    source = kernel.source
    replacements = []
    for number, p in enumerate(model.passes):
        line_start = source.rfind("\n", 0, p.loop.start) + 1
        indent = re.match(r"[ \t]*", source[line_start:]).group()
        first = "threadIdx.x" if p.start == "0" else f"({p.start}) + ({p.type})threadIdx.x"  # not in unsigned
        replacements.append((p.loop.head[0], p.loop.head[1],
                             f"{p.type} {p.variable} = {first}; {p.variable} < {p.end}; {p.variable} += {lanes}"))
        resets = [f"if (threadIdx.x != 0) {a.name} = 0;  // lane 0 alone carries what {a.name} holds into the loop"
                  for a in p.accumulators if a.kind == "sum" and not a.zero_at_entry]
        if resets:  # before an unroll pragma of the loop, which must stay right before it (review, helper-83)
            at, _ = unroll_pragma(source, p.loop.start)
            replacements.append((at, at, "".join(f"{line}\n{indent}" for line in resets)))
        after = []
        if p.accumulators:
            after += [f"// The row's {lanes} lanes combine their {', '.join(a.name for a in p.accumulators)}: each "
                      f"lane then holds the row's.",
                      "#pragma unroll",
                      f"for (int {offset} = {lanes} / 2; {offset} > 0; {offset} /= 2) {{",
                      *(INDENT + line for a in p.accumulators for line in combined(
                          a, f"__shfl_xor_sync({group}, {a.name}, {offset})",
                          fresh_name(f"{a.name}_of_lane", taken) if a.kind != "sum" and a.function is None else None,
                          (f"__shfl_xor_sync({group}, {a.place}, {offset})", fresh_name(f"{a.place}_of_lane", taken))
                          if a.place else None)),
                      "}"]
        if number == len(model.passes) - 1 and re.search(r"[^\s}]", mask(source)[p.loop.end:kernel.body_end]):
            after += ["if (threadIdx.x != 0) return;  // lane 0 goes on with the row alone"]
        rest_of_line = re.match(r"[ \t]*(?:\n|$)", source[p.loop.end:]) is None  # a line comment must not take it
        replacements.append((p.loop.end, p.loop.end, "".join(f"\n{indent}{line}" for line in after) +
                             (f"\n{indent}" if after and rest_of_line else "")))
    body = points.point_body(kernel, replacements)
    lines = [f"// A warp (or {lanes} lanes of one) per row: the lanes split the row's loops, so each load of theirs",
             "// reads consecutive elements; the row's lanes, and only they, combine what they hold with shuffles.",
             f"const {axis.type} {axis.name} = ({axis.type})blockIdx.x * {rows} + threadIdx.y;",
             f"const unsigned {group} = {lanes} == 32 ? {_FULL_MASK}  // the lanes of the warp that share the row",
             f"{INDENT}: ((1u << ({lanes} % 32)) - 1) << ((threadIdx.y * {lanes}) % 32);",
             *body.split("\n")]
    return points.with_body(kernel, lines)


def combined(accumulator: Accumulator, other: str, held: str | None = None,
             place: tuple[str, str] | None = None) -> list[str]:
    """Lines folding the value `other` into the accumulator: a sum adds it, an extreme keeps the larger (or smaller)
    by its function or by comparison. A comparison reads `other` twice: with `held` it is read once, into a local
    of that name (a lane's shuffled value here); without, twice (a thread's part in shared memory, columns.py). An
    argmax also takes (the other's place, a local to hold it), and keeps the smaller place among equal values: the
    first of them in the row, as the loop keeps it."""
    name = accumulator.name
    if accumulator.kind == "sum":
        return [f"{name} += {other};"]
    if accumulator.function is not None:
        return [f"{name} = {accumulator.function}({name}, {other});"]
    keeps = ">" if accumulator.kind == "max" else "<"
    if held is None:
        return [f"if ({other} {keeps} {name}) {name} = {other};"]
    if place is not None and accumulator.place is not None:
        (other_place, there), at = place, accumulator.place
        return [f"const {accumulator.type} {held} = {other};",
                f"const {accumulator.place_type} {there} = {other_place};",
                f"if ({held} {keeps} {name} || ({held} == {name} && {there} < {at})) {{ "
                f"{name} = {held}; {at} = {there}; }}"]
    return [f"const {accumulator.type} {held} = {other};", f"if ({held} {keeps} {name}) {name} = {held};"]


class RowLoopShape:
    name = "row_loop"
    kind = "a row loop of one thread per row"
    rules = ("warp_per_row",)

    def recognise(self, spec: KernelSpec) -> RowLoop:
        return recognise(spec)

    def reason(self, rule_id: str, model: RowLoop, spec: KernelSpec) -> str | None:
        return None

    def render(self, model: RowLoop, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        lanes, rows = spec.block_size_names[0], spec.block_size_names[1]
        layout = Layout(tune_params={lanes: LANES, rows: ROWS_PER_BLOCK},
                        defaults={lanes: 32, rows: default_in(ROWS_PER_BLOCK, spec.params.get(rows), 4)},
                        restrictions=(f"{lanes} * {rows} >= 32",), grid_div={"x": [rows]})
        return _render(model, spec), layout
