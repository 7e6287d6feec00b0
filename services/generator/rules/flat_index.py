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

The coordinates are the locals the body declares as `(i / D) % R`, `i % R` or `i / D` (divisions chained, through
another such local of i never changed, `(i % M) / D` where D divides M), D and R products of scalar parameters:
their divisors and moduli cut i's range into digits, one coordinate each (one the body does not name gets a fresh
one). Each local that is exactly one digit is initialised from its coordinate; the others keep their initialisers,
reading i, which the guard's body declares as the coordinates' number, in its own type. Every point is thus run
once, by the body as written, with the values it had.

Made only where:
- the kernel is 1D, one point per thread (points.py), its point body after integer locals (of scalar arithmetic,
  or such coordinates) one guard `if (i < T)` with no else, T a product of scalar parameters that the digits'
  divisors divide, in the size variables the parameters' values give (`n`, given as N * C * HW, is divided by HW
  * C): the top digit's bound T / (HW * C) is then exact at every size;
- the digits are at most 3, or adjacent digits fuse: where every subscript that reads them moves along the lower
  one R times less than along the upper (`((n * H + h) * W + w) * C + c` and `in[i]` for w and h), the two are one
  coordinate f, the locals h and w are initialised as `f / W` and `f % W`, and those subscripts are respelt from
  their polynomials in f (unchanged values);
- the coordinate along x has at least a warp's points and those along y and z fit CUDA's 65535 blocks.
"""
import math
import re
from dataclasses import dataclass, field

from services.generator.rules import affine, points
from services.generator.rules.cuda_text import INTEGER_TYPE, WIDE_INTEGER_TYPE, fresh_name, identifiers, mask, split_top_level
from services.generator.rules.grid_stride import GRID_LIMIT, sizes_around
from services.generator.rules.shape import one_thread_per_point
from services.generator.rules.statements import Statement, statements
from shared.domain.expressions import ExpressionError, evaluate
from shared.domain.spec import KernelSpec

_DECLARATION = re.compile(rf"\s*(?:const\s+)?{INTEGER_TYPE}\s+(?P<rest>[^;]*);\s*", re.DOTALL)
_CAST = re.compile(rf"\(\s*(?:const\s+)?{INTEGER_TYPE}\s*\)")
_WARP = 32


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
    dims = spec.problem_size if spec.problem_size is not None else list(spec.sizes)
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
    top = affine.quotient(_in_sizes(total, scalars), _in_sizes(digits[-1].low, scalars))
    bases = _bases(kernel, found, index.name)
    groups = None if top is None else _fused(kernel, digits, index.name, bases, scalars)
    if groups is None:
        return None
    return _respelt(spec, kernel, masked, guard, bound, digits, groups, top, bases, scalars)


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
        not re.search(rf"\[|\+\+|--|[-+*/%&|^]=|\b(?!{INTEGER_TYPE}\b)[A-Za-z_]\w*\s*\(", _CAST.sub(" ", text))


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
    span."""
    found: dict[str, tuple[_Form, tuple[int, int]]] = {}
    for statement in candidates:
        if statement.kind != "simple" or (declared := _DECLARATION.fullmatch(masked, statement.start,
                                                                             statement.end)) is None:
            continue
        at = declared.start("rest")
        for part in split_top_level(declared["rest"], ","):
            named = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*=(?!=)(.*)", part, re.DOTALL)
            if named is not None:
                bases = _bases(kernel, found, index)
                form = _form(kernel, named[2], bases, scalars)
                if form is not None:
                    found[named[1]] = form, (at + named.start(2), at + named.end(2))
            at += len(part) + 1
    return found


def _bases(kernel: points.PointKernel, found: dict[str, tuple[_Form, tuple[int, int]]],
           index: str) -> dict[str, _Form]:
    """What forms may divide: the flat index, and its quotients held by locals never changed."""
    text = mask(kernel.source)[kernel.body_start:kernel.body_end]
    return {index: _Form({(): 1}, None), **{name: form for name, (form, _) in found.items() if form.modulus is None
                                            and len(re.findall(points.changing(name), text)) == 1}}


def _form(kernel: points.PointKernel, text: str, bases: dict[str, _Form],
          scalars: dict[str, affine.Poly]) -> _Form | None:
    """The expression as (base / D) % R of a base's form, divisions and a modulus chained at its top level."""
    text = _unwrapped(text)
    pieces = re.split(r"([/%])", _top_level(text))
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
    text = _CAST.sub(" ", text).strip()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += (char == "(") - (char == ")")
        if depth < 0:
            return False
    return depth == 0


def _top_level(text: str) -> str:
    """The text with what parentheses enclose blanked (same length)."""
    out, depth = [], 0
    for char in text:
        if char == ")":
            depth -= 1
        out.append(char if depth == 0 else " ")
        if char == "(":
            depth += 1
    return "".join(out)


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


def _fused(kernel: points.PointKernel, digits: list[_Digit], index: str, bases: dict[str, _Form],
           scalars: dict[str, affine.Poly]) -> list[list[int]] | None:
    """The digits grouped into at most 3 coordinates, two adjacent ones fused where every subscript reading them
    moves along each as the flat index of the pair would; None where more than 3 remain."""
    groups = [[n] for n in range(len(digits))]
    while len(groups) > 3:
        pair = next((n for n in range(len(groups) - 1) if _fusable(kernel, digits, groups[n] + groups[n + 1],
                                                                    index, bases, scalars)), None)
        if pair is None:
            return None
        groups[pair:pair + 2] = [groups[pair] + groups[pair + 1]]
    return groups


def _placed(kernel: points.PointKernel, digits: list[_Digit], group: list[int], index: str,
            bases: dict[str, _Form], scalars: dict[str, affine.Poly]) -> list[
        tuple[points.Access, affine.Poly, affine.Poly | None]]:
    """Each access whose subscript reads the group's digits -> its polynomial in placeholder digits `#n` (the flat
    index and its forms, as the locals' polynomials hold them, replaced), and its stride along the group's lowest
    digit where the others move in step with it (else None)."""
    number: affine.Poly = {}
    for n, digit in enumerate(digits):
        number = affine.add(number, affine.product({(f"#{n}",): 1}, digit.low))
    found = []
    for access in kernel.accesses:
        poly = access.poly
        for atom in {a for term in poly or {} for a in term if a.startswith("?")}:
            form = _form(kernel, atom[1:], bases, scalars)
            value = None if form is None else _as_digits(form, digits)
            if value is not None:
                poly = affine.substitute(poly, atom, value)
        poly = poly and affine.substitute(poly, index, number)
        if poly is None or any(a.startswith("?") for term in poly for a in term):
            if re.search(rf"\b{index}\b|\b(?:{'|'.join(n for d in digits for n in d.names) or index})\b",
                         access.subscript):
                found.append((access, {}, None))
            continue
        if not {f"#{n}" for n in group} & affine.names(poly):
            continue
        lowest = affine.stride(poly, f"#{group[0]}")
        place: affine.Poly = {(): 1}
        step = lowest
        for n in group:
            if step is not None and affine.stride(poly, f"#{n}") != affine.product(lowest or {}, place):
                step = None
            place = affine.product(place, digits[n].radix or {})
        found.append((access, poly, step))
    return found


def _as_digits(form: _Form, digits: list[_Digit]) -> affine.Poly | None:
    """The form as the sum of the digits it spans, each at its place within it; None where it cuts one."""
    lows = [d.low for d in digits]
    if form.divisor not in lows:
        return None
    first = lows.index(form.divisor)
    if form.modulus is None:
        span = range(first, len(digits))
    else:
        high = affine.product(form.divisor, form.modulus)
        end = next((n for n in range(first + 1, len(digits)) if lows[n] == high), None)
        if end is None:
            return None
        span = range(first, end)
    value: affine.Poly = {}
    for n in span:
        value = affine.add(value, affine.product({(f"#{n}",): 1}, affine.quotient(digits[n].low, form.divisor)))
    return value


def _fusable(kernel: points.PointKernel, digits: list[_Digit], group: list[int], index: str, bases: dict[str, _Form],
             scalars: dict[str, affine.Poly]) -> bool:
    return all(step for _, _, step in _placed(kernel, digits, group, index, bases, scalars))


def _respelt(spec: KernelSpec, kernel: points.PointKernel, masked: str, guard: Statement, bound: str,
             digits: list[_Digit], groups: list[list[int]], top: affine.Poly, bases: dict[str, _Form],
             scalars: dict[str, affine.Poly]) -> KernelSpec | None:
    """The source with one coordinate per group along x, y and z, launched over the box they span."""
    index = kernel.axes[0]
    taken = identifiers(spec.source)
    axes = [fresh_name(f"{index.name}_{'xyz'[n]}", taken) for n in range(len(groups))]
    extents = [_in_sizes(_radix(digits, group), scalars) if n < len(groups) - 1 else top
               for n, group in enumerate(groups)]
    sized = [affine.value(extent, spec.sizes) for extent in extents]
    variables = spec.variables(spec.baseline_params())
    blocks = [variables.get(name, 1) for name in spec.block_size_names] + [1, 1]
    if any(v is None for v in sized) or sized[0] < _WARP or \
            any(math.ceil(v / blocks[n]) > GRID_LIMIT for n, v in enumerate(sized) if n) or \
            not _covered(spec, _in_sizes(_parameter_poly(kernel, bound, scalars), scalars)):
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
        if len(group) > 1:
            for access, poly, step in _placed(kernel, digits, group, index.name, bases, scalars):
                respelt = _renamed(_with_coordinate(poly, step, group, axes[n]), groups, axes) if step else ""
                if respelt and "#" not in respelt:
                    opening = access.start + masked[access.start:access.end].index("[")
                    edits.append((opening + 1, access.end - 1, respelt))
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
    problem = [_expression(extents[n]) if n < len(groups) - 1 else _expression(top) for n in range(len(groups))]
    respelt = spec.model_copy(update={"source": source, "problem_size": problem})
    try:
        read = points.recognise(respelt)
    except points.NotPointKernel:
        return None
    return respelt if len(read.axes) == len(groups) else None


def _covered(spec: KernelSpec, total: affine.Poly) -> bool:
    """Whether the submitted launch reaches every flat index below the total, at the spec's sizes and around them:
    the box launched instead runs them all."""
    dims = spec.problem_size if spec.problem_size is not None else list(spec.sizes)
    variables = spec.variables(spec.baseline_params())
    try:
        return all(affine.value(total, sizes) <= evaluate(dims[0], {**variables, **sizes})
                   for sizes in sizes_around(spec.sizes))
    except ExpressionError:
        return False


def _radix(digits: list[_Digit], group: list[int]) -> affine.Poly:
    found: affine.Poly = {(): 1}
    for n in group:
        found = affine.product(found, digits[n].radix or {})
    return found


def _with_coordinate(poly: affine.Poly, step: affine.Poly, group: list[int], axis: str) -> str:
    """The subscript's polynomial with the group's digits, which move in step, replaced by its coordinate."""
    rest = {term: c for term, c in poly.items() if not {f"#{n}" for n in group} & set(term)}
    return affine.spelled(affine.add(rest, affine.product(step, {(axis,): 1})))


def _renamed(text: str, groups: list[list[int]], axes: list[str]) -> str:
    """The placeholders of the unfused digits replaced by their coordinates."""
    for n, group in enumerate(groups):
        if len(group) == 1:
            text = text.replace(f"#{group[0]}", axes[n])
    return text


def _c(poly: affine.Poly) -> str:
    """A product of scalar parameters as C."""
    (term, coefficient), = poly.items()
    factors = [*([] if coefficient == 1 and term else [str(coefficient)]), *term]
    return factors[0] if len(factors) == 1 else f"({' * '.join(factors)})"


def _expression(poly: affine.Poly) -> str:
    """A polynomial of the size variables as an expression of the spec."""
    return " + ".join(" * ".join([*([] if c == 1 and term else [str(c)]), *term]) for term, c in poly.items())
