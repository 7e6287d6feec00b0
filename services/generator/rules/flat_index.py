"""A flat thread index split into coordinates by / and %, read as the kernel of one point per thread over them.

    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N * C * HW) {
        int c = (i / HW) % C;
        ...
    }

walks a box of HW x C x N points, i their mixed-radix number. Read as a 3D kernel, one thread per point along
the box's axes,

    int i_x = blockIdx.x * blockDim.x + threadIdx.x;    // i % HW
    int i_y = blockIdx.y * blockDim.y + threadIdx.y;    // (i / HW) % C
    int i_z = blockIdx.z * blockDim.z + threadIdx.z;    // i / (HW * C)
    if (i_x < HW && i_y < C && i_z < (N * C * HW) / (HW * C)) {
        int i = (i_z * C + i_y) * HW + i_x;
        int c = i_y;
        ...
    }

the shapes see how each subscript moves along each coordinate (a transpose's tile, a stencil's neighbours), where
the flat spelling hides it behind the division. The rewrite then launches the box's grid (engine.py gives the
candidate the reading's problem size).

The coordinates are the integer locals the body declares as `(i / D) % R`, `i % R` or `i / D`, divisions chained
(`i / W % H`), `(i % M) / D` where D divides M, or through a local quotient of i (`q = i / W; h = q % H`), which
may divide again as it goes (`t /= W;`, a running quotient; a local changed any other way divides nothing after),
D and R products of scalar parameters (locals of them substituted). Their divisors and moduli cut i's range into
digits, one coordinate each (one the body does not name gets a fresh one). Each local that is exactly one digit
is initialised from its coordinate; the others keep their initialisers, reading i, which the guard's body
declares as the coordinates' number, in its own type. Every point is thus run once, by the body as written,
with the values it had.

Made only where:
- the kernel is 1D, one point per thread (points.py), launched over at least T threads at the spec's sizes and
  around them, its point body after integer locals of arithmetic one guard `if (i < T)` with no else, T a
  product of scalar parameters that the digits' divisors divide in the size variables the parameters' values give
  (`n`, given as N * C * HW, is divided by HW * C): the top digit's bound T / (HW * C) is then exact at every size;
- the digits are at most 3, or two adjacent ones fuse into one coordinate f: their locals are initialised as `f
  / W` and `f % W`, and every subscript that reads f is respelt as its polynomial in the coordinates and
  parameters, where it moves along the lower digit W times less than along the upper (`((n * H + h) * W + w) * C
  + c` and `in[i]` for w and h). Not where a subscript reads them otherwise or through a local whose value may
  have changed since its initialiser, nor where the body casts to an integer narrower than 64 bits (the
  polynomial, in 64 bits, would not wrap where the cast does);
- the coordinate along x has at least a warp's points, and those along y and z fit CUDA's 65535 blocks, at the
  spec's sizes and around them.
"""
import math
import re
from dataclasses import dataclass, field

from services.generator.rules import affine, points
from services.generator.rules.cuda_text import (INTEGER_TYPE, WIDE_INTEGER_TYPE, blanked_inside, fresh_name,
                                                identifiers, mask, split_top_level, unparenthesised)
from services.generator.rules.coverage import CAST, GRID_LIMIT, sizes_around
from services.generator.rules.shape import one_thread_per_point
from services.generator.rules.statements import Statement, statements
from shared.domain.expressions import ExpressionError, evaluate
from shared.domain.spec import KernelSpec

_DECLARATION = re.compile(rf"\s*(?:const\s+)?{INTEGER_TYPE}\s+(?P<rest>[^;]*);\s*", re.DOTALL)
_WARP = 32
_CASTS = re.compile(r"\(\s*(?:const\s+)?([A-Za-z_][\w\s:]*?)\s*\)\s*[\w(]")
_INTEGER_WORDS = re.compile(r"\b(?:short|char|int|long|unsigned|signed|bool|size_t|u?int\d+_t|ptrdiff_t)\b")


@dataclass(frozen=True)
class _Form:
    """A local of the flat index: (i / divisor) % modulus, or i / divisor without a modulus."""
    divisor: affine.Poly
    modulus: affine.Poly | None


@dataclass
class _Digit:
    low: affine.Poly  # the digit is (i / low) % radix
    radix: affine.Poly | None  # None for the top digit
    names: list[str] = field(default_factory=list)  # the locals that are exactly this digit
    spans: list[tuple[int, int]] = field(default_factory=list)  # their initialisers, in the source


def point_form(spec: KernelSpec) -> KernelSpec | None:
    """The spec with its flat index read as its coordinates, launched so; None where the kernel is not so written
    or the respelling could differ."""
    try:
        kernel = points.recognise(spec)
    except points.NotPointKernel:
        return None
    dims = spec.dimensions
    if len(kernel.axes) != 1 or len(dims) != 1 or one_thread_per_point(spec, 0) is not None or \
            spec.grid_div_y or spec.grid_div_z or points.changed_parameter(kernel) is not None:
        return None
    masked = mask(spec.source)
    index = kernel.axes[0]
    *leading, guard = kernel.statements
    bound = _guard_bound(masked, guard, index.name)
    if bound is None or not all(_plain_declaration(s, masked) for s in leading):
        return None
    body = guard.body.inner if guard.body.kind == "block" else (guard.body.start, guard.body.end)
    scalars = _scalar_polys(spec, kernel)
    found = _forms(kernel, masked, [*leading, *statements(masked, *body)], index.name, scalars)
    total = _parameter_poly(kernel, bound, scalars)
    digits = None if total is None else _digits(found, scalars, spec.sizes)
    if digits is None or not 2 <= len(digits) <= 4:
        return None
    if affine.quotient(_in_sizes(total, scalars), _in_sizes(digits[-1].low, scalars)) is None:
        return None
    for groups in _groupings(len(digits)):
        spelt = _respelt(spec, kernel, masked, guard, bound, digits, groups, scalars)
        if spelt is not None and (fused := _fused_subscripts(spelt, digits, groups)) is not None:
            return fused
    return None


def _groupings(count: int) -> list[list[list[int]]]:
    """The ways to take `count` digits as at most 3 coordinates, lowest first: each alone, or two adjacent ones
    fused."""
    if count <= 3:
        return [[[n] for n in range(count)]]
    return [[*([m] for m in range(n)), [n, n + 1], *([m] for m in range(n + 2, count))] for n in range(count - 1)]


def _guard_bound(masked: str, guard: Statement, index: str) -> str | None:
    """T of the guard `if (index < T)` with no else, as written; None for any other statement."""
    if guard.kind != "if" or guard.orelse is not None:
        return None
    found = re.fullmatch(rf"\s*{index}\s*<(?P<t>[^<>=!&|?,]+)", masked[guard.head[0]:guard.head[1]])
    return None if found is None else found["t"]


def _plain_declaration(statement: Statement, masked: str) -> bool:
    """Whether the statement declares locals from arithmetic alone: no load, call or change of anything else."""
    text = masked[statement.start:statement.end]
    return statement.kind == "simple" and _DECLARATION.fullmatch(text) is not None and \
        not re.search(rf"\[|\+\+|--|[-+*/%&|^]=|\b(?!{INTEGER_TYPE}\b)[A-Za-z_]\w*\s*\(", CAST.sub(" ", text))


def _scalar_polys(spec: KernelSpec, kernel: points.PointKernel) -> dict[str, affine.Poly]:
    """Each integer scalar parameter of a given value -> that value as a polynomial of the size variables."""
    found = {}
    for arg in spec.args:
        if arg.is_array or arg.value is None or arg.name not in kernel.parameters or \
                not re.fullmatch(r"u?int(?:8|16|32|64)", arg.dtype):
            continue
        try:
            poly = affine.parse(str(arg.value))
        except affine.NotAffine:
            continue
        if affine.names(poly) <= set(spec.sizes) and not any(a.startswith("?") for t in poly for a in t):
            found[arg.name] = poly
    return found


def _parameter_poly(kernel: points.PointKernel, text: str, scalars: dict[str, affine.Poly]) -> affine.Poly | None:
    """The text as a product of scalar parameters (locals of them substituted), positive at the spec's sizes; else
    None."""
    poly = kernel.poly(text)
    if poly is None or len(poly) != 1 or not affine.names(poly) <= set(scalars) or \
            any(a.startswith("?") for t in poly for a in t) or next(iter(poly.values())) <= 0:
        return None
    return poly


def _in_sizes(poly: affine.Poly, scalars: dict[str, affine.Poly]) -> affine.Poly:
    for name in affine.names(poly):
        poly = affine.substitute(poly, name, scalars[name])
    return poly


def _forms(kernel: points.PointKernel, masked: str, candidates: list[Statement], index: str,
           scalars: dict[str, affine.Poly]) -> dict[str, tuple[_Form, tuple[int, int]]]:
    """Each integer local the statements declare as a form of the flat index -> its form and its initialiser's
    span, the statements read in order: a quotient held by a local may divide again (`t /= W;`, `t = t / W;`, as a
    running quotient splits the index), and a local that may change any other way (assigned, passed on to a call,
    its address taken) divides nothing after. Nothing is read after a statement that may change the index."""
    found: dict[str, tuple[_Form, tuple[int, int]]] = {}
    bases = {index: _Form({(): 1}, None)}
    for statement in candidates:
        text = masked[statement.start:statement.end]
        simple = statement.kind == "simple"
        divided = simple and re.fullmatch(r"\s*([A-Za-z_]\w*)\s*(?:/=(?P<all>.*)|=\s*\1\s*/(?P<one>.*));\s*", text)
        if divided and divided[1] in bases and divided[1] != index:
            divisor = divided["all"] or divided["one"]
            value = _parameter_poly(kernel, _unwrapped(divisor), scalars)
            quotient = bases.pop(divided[1])
            single = divided["all"] or not re.search(r"[-+*/%<>=&|^?:,]", blanked_inside(_unwrapped(divisor), "("))
            if value is not None and single and not _touches(divided[1], divisor):
                bases[divided[1]] = _Form(affine.product(quotient.divisor, value), None)
            continue
        declared = _DECLARATION.fullmatch(masked, statement.start, statement.end) if simple else None
        if _touches(index, text):
            return found
        if declared is None:
            bases = {name: form for name, form in bases.items() if not _touches(name, text)}
            continue
        at = declared.start("rest")
        for part in split_top_level(declared["rest"], ","):
            named = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(?!=)(.*)", part, re.DOTALL)
            if named is not None:
                if any(_touches(name, named[2]) for name in bases):
                    return found  # a change inside an initialiser: what follows is not read
                form = _form(kernel, named[2], bases, scalars)
                if form is not None:
                    found[named[1]] = form, (at + named.start(2), at + named.end(2))
                    if form.modulus is None:
                        bases[named[1]] = form
            at += len(part) + 1
    return found


def _touches(name: str, text: str) -> bool:
    """Whether the text may change the name: assigns, increments or decrements it, takes its address, or passes
    it bare to a call (a reference parameter)."""
    return bool(re.search(points.changing(name), text) or points.address_taken(text, name) or
                re.search(rf"\w\s*\(\s*{name}\s*[,)]|,\s*{name}\s*[,)]", text))


def _form(kernel: points.PointKernel, text: str, bases: dict[str, _Form],
          scalars: dict[str, affine.Poly]) -> _Form | None:
    """The expression as (base / D) % R of a base's form, divisions and a modulus chained at its top level."""
    text = _unwrapped(text)
    pieces = re.split(r"([/%])", blanked_inside(text, "("))
    if len(pieces) == 1:
        return bases.get(text.strip()) if re.fullmatch(r"\s*[A-Za-z_]\w*\s*", text) else None
    if re.search(r"[-+*<>=&|^?:,!~]", "".join(pieces[::2])):
        return None
    at, operands = 0, []
    for piece in pieces:
        operands.append(text[at:at + len(piece)])
        at += len(piece)
    form = _form(kernel, operands[0], bases, scalars)
    for operator, operand in zip(operands[1::2], operands[2::2]):
        value = _parameter_poly(kernel, _unwrapped(operand), scalars)
        if form is None or value is None:
            return None
        if operator == "%":
            form = None if form.modulus is not None else _Form(form.divisor, value)
        elif form.modulus is None:
            form = _Form(affine.product(form.divisor, value), None)
        else:  # (i % M) / D is (i / D) % (M / D) where D divides M
            rest = affine.quotient(form.modulus, value)
            form = None if rest is None else _Form(affine.product(form.divisor, value), rest)
    return form


def _unwrapped(text: str) -> str:
    """The text without integer casts and parentheses around all of it."""
    return unparenthesised(CAST.sub(" ", text))


def _digits(found: dict[str, tuple[_Form, tuple[int, int]]], scalars: dict[str, affine.Poly],
            sizes: dict[str, int]) -> list[_Digit] | None:
    """The digits the forms' divisors and moduli cut the flat index into, lowest first, each with the locals that
    are exactly it; None where the cuts do not divide one another."""
    cuts: list[affine.Poly] = [{(): 1}]
    for form, _ in found.values():
        for cut in (form.divisor, *([affine.product(form.divisor, form.modulus)] if form.modulus else [])):
            if cut not in cuts:
                cuts.append(cut)
    values = [affine.value(_in_sizes(cut, scalars), sizes) for cut in cuts]
    if any(v is None or v <= 0 for v in values) or len(set(values)) != len(values):
        return None
    cuts = [cuts[n] for n in sorted(range(len(cuts)), key=values.__getitem__)]
    digits = []
    for low, high in zip(cuts, [*cuts[1:], None]):
        radix = None if high is None else affine.quotient(high, low)
        if high is not None and radix is None:
            return None
        digits.append(_Digit(low, radix))
    for name, (form, span) in found.items():
        at = cuts.index(form.divisor)
        if (form.modulus is None and at == len(cuts) - 1) or (form.modulus is not None and form.modulus ==
                                                              digits[at].radix):
            digits[at].names.append(name)
            digits[at].spans.append(span)
    return digits


def _respelt(spec: KernelSpec, kernel: points.PointKernel, masked: str, guard: Statement, bound: str,
             digits: list[_Digit], groups: list[list[int]], scalars: dict[str, affine.Poly]) -> KernelSpec | None:
    """The source with one coordinate per group along x, y and z, launched over the box they span."""
    index = kernel.axes[0]
    taken = identifiers(spec.source)
    axes = [fresh_name(f"{index.name}_{'xyz'[n]}", taken) for n in range(len(groups))]
    total = _in_sizes(_parameter_poly(kernel, bound, scalars), scalars)
    extents = [_in_sizes(_radix(digits, group), scalars) for group in groups[:-1]]
    extents.append(affine.quotient(total, _in_sizes(digits[groups[-1][0]].low, scalars)))
    variables = spec.variables(spec.baseline_params())
    blocks = [variables.get(name, 1) for name in spec.block_size_names] + [1, 1]
    if affine.value(extents[0], spec.sizes) < _WARP or not _covered(spec, total) or any(
            math.ceil(affine.value(extent, sizes) / blocks[n]) > GRID_LIMIT
            for sizes in sizes_around(spec.sizes) for n, extent in enumerate(extents) if n):
        return None
    wide = f"({index.type})" if re.fullmatch(WIDE_INTEGER_TYPE, index.type) else ""
    definitions = [f"{index.type} {axes[0]} = {index.expression};",
                   *(f"{index.type} {axes[n]} = {wide}blockIdx.{'xyz'[n]} * blockDim.{'xyz'[n]} + "
                     f"threadIdx.{'xyz'[n]};" for n in range(1, len(groups)))]
    edits = []
    number = []
    for n, group in enumerate(groups):
        place: affine.Poly = {(): 1}
        for digit in group:
            value = axes[n] if len(group) == 1 else (f"({axes[n]} / {_c(place)})" if place != {(): 1} else axes[n]) + \
                (f" % {_c(digits[digit].radix)}" if digit != group[-1] else "")
            edits += [(*span, f" {value}") for span in digits[digit].spans]
            place = affine.product(place, digits[digit].radix or {})
        number.append(f"{axes[n]} * {_c(digits[group[0]].low)}" if n else axes[n])
    conditions = [f"{axes[n]} < {_c(_radix(digits, group))}" for n, group in enumerate(groups[:-1])]
    low = digits[groups[-1][0]].low
    within = affine.quotient(_parameter_poly(kernel, bound, scalars), low)  # N of N * C * H * W, where it divides
    conditions.append(f"{axes[-1]} < {_c(within) if within else f'({bound.strip()}) / {_c(low)}'}")
    flat = f"const {index.type} {index.name} = {' + '.join(number)};"
    edits.append((*guard.head, " && ".join(conditions)))
    leading_reads = re.search(rf"\b{index.name}\b", masked[kernel.body_start:guard.start])
    if guard.body.kind == "block" and not leading_reads:
        edits.append((guard.body.inner[0], guard.body.inner[0], f"\n{points.INDENT * 2}{flat}"))
    elif not leading_reads:
        edits += [(guard.body.start, guard.body.start, f"{{ {flat} "), (guard.body.end, guard.body.end, " }")]
    else:
        definitions.append(flat)
    edits.append((kernel.kernel.body_open + 1, kernel.body_start,
                  "".join(f"\n{points.INDENT}{line}" for line in definitions)))
    source = points.replace_spans(spec.source, edits)
    respelt = spec.model_copy(update={"source": source, "problem_size": [_expression(e) for e in extents]})
    try:
        read = points.recognise(respelt)
    except points.NotPointKernel:
        return None
    return respelt if len(read.axes) == len(groups) else None


def _fused_subscripts(spelt: KernelSpec, digits: list[_Digit], groups: list[list[int]]) -> KernelSpec | None:
    """The respelt spec with each subscript that reads the fused coordinate respelt as a polynomial of the
    coordinates and parameters, where it moves along each fused digit as the coordinate would (the digit's
    place in it times the lowest's stride); None where a subscript reads them otherwise, or through a local whose
    value may have changed since its initialiser (a name not a coordinate or parameter), or a cast may wrap an
    index, which the polynomial (in 64 bits) would not. As respelt where no digits fuse."""
    fused = next((n for n, group in enumerate(groups) if len(group) > 1), None)
    if fused is None:
        return spelt
    read = points.recognise(spelt)
    masked = mask(spelt.source)
    if _narrowing(masked[read.body_start:read.body_end]):
        return None
    axis, group = read.axes[fused].name, groups[fused]
    held: dict[str, set[int]] = {}  # the opaque atom each fused digit's local holds (`?i_y % W`) -> the digit
    for n in group:
        for name in digits[n].names:
            if len(poly := read.locals.get(name) or {}) == 1 and (atom := next(iter(poly)))[0].startswith("?") \
                    and len(atom) == 1 and poly[atom] == 1:
                held.setdefault(atom[0], set()).add(n)
    allowed = {a.name for a in read.axes} | set(read.parameters) | {f"#{n}" for n in group}
    edits = []
    for access in read.accesses:
        poly = access.poly
        for atom, (n, *more) in held.items():
            if poly is not None and not more:  # an atom two digits' locals hold alike tells neither
                poly = affine.substitute(poly, atom, {(f"#{n}",): 1})
        names = set() if poly is None else affine.names(poly)
        if poly is None or not names & {axis, *(f"#{n}" for n in group)}:
            if poly is None and re.search(rf"\b(?:{axis}|{'|'.join(d for n in group for d in digits[n].names) or axis})\b",
                                          access.subscript):
                return None
            continue
        steps = [affine.stride(poly, f"#{n}") for n in group]
        direct = affine.stride(poly, axis)
        if names - allowed or direct is None or None in steps:
            return None
        place: affine.Poly = {(): 1}
        for n, step in zip(group, steps):
            if step != affine.product(steps[0], place):
                return None
            place = affine.product(place, digits[n].radix or {})
        rest = {term: c for term, c in poly.items() if not set(term) & {axis, *(f"#{n}" for n in group)}}
        opening = access.start + masked[access.start:access.end].index("[")
        edits.append((opening + 1, access.end - 1,
                      affine.spelled(affine.add(rest, affine.product(affine.add(direct, steps[0]), {(axis,): 1})))))
    return spelt.model_copy(update={"source": points.replace_spans(spelt.source, edits)})


def _covered(spec: KernelSpec, total: affine.Poly) -> bool:
    """Whether the submitted launch reaches every flat index below the total, at the spec's sizes and around them:
    the box launched instead runs them all."""
    dims = spec.dimensions
    variables = spec.variables(spec.baseline_params())
    try:
        return all(affine.value(total, sizes) <= evaluate(dims[0], {**variables, **sizes})
                   for sizes in sizes_around(spec.sizes))
    except ExpressionError:
        return False


def _narrowing(text: str) -> bool:
    """Whether the text casts to an integer type narrower than 64 bits, which may wrap an index that a subscript
    respelt from its polynomial (in 64 bits) would not."""
    return any(_INTEGER_WORDS.search(cast[1]) and not re.fullmatch(WIDE_INTEGER_TYPE, " ".join(cast[1].split()))
               for cast in _CASTS.finditer(text))


def _radix(digits: list[_Digit], group: list[int]) -> affine.Poly:
    found: affine.Poly = {(): 1}
    for n in group:
        found = affine.product(found, digits[n].radix or {})
    return found


def _c(poly: affine.Poly) -> str:
    """A product of scalar parameters as C."""
    (term, coefficient), = poly.items()
    factors = [*([] if coefficient == 1 and term else [str(coefficient)]), *term]
    return factors[0] if len(factors) == 1 else f"({' * '.join(factors)})"


def _expression(poly: affine.Poly) -> str:
    """A polynomial of the size variables as an expression of the spec."""
    return " + ".join(" * ".join([*([] if c == 1 and term else [str(c)]), *term]) for term, c in poly.items())
