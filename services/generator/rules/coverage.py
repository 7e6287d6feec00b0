"""What a launch reaches at the spec's sizes and at sizes around them (each size one less or one more, as
verification trials take them, and all doubled): whether a bound the kernel tests is within the problem size
along an axis, and whether an array holds the elements below such bounds."""
import re

from services.generator.rules.cuda_text import INTEGER_TYPE
from shared.domain.expressions import ExpressionError, evaluate
from shared.domain.spec import KernelSpec

CAST = re.compile(rf"\(\s*(?:const\s+)?{INTEGER_TYPE}\s*\)")
GRID_LIMIT = 65535  # blocks along y and along z
_SUFFIX = re.compile(r"\b(\d+)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b")  # 1LL, 4u: the number alone


def bound_covered(spec: KernelSpec, axis: int, bound: str) -> bool:
    """Whether `bound` (C text) is arithmetic of scalar arguments of given values, at most the problem size along
    the axis at the spec's sizes and around them: a grid launched for the problem size then reaches every index
    below the bound."""
    dims = spec.dimensions
    expression = in_sizes(spec, bound)
    if axis >= len(dims) or axis >= len(spec.block_size_names) or expression is None:
        return False
    return _at_most_around(spec, expression, str(dims[axis]))


def array_covers(spec: KernelSpec, array: str, bounds: list[str]) -> bool:
    """Whether the array argument, as the spec declares its shape, holds at least the product of `bounds` (C text
    of scalar arguments, as bound_covered reads them) elements at the spec's sizes and around them: an element
    below them then exists whether or not the kernel touches it."""
    arg = next((a for a in spec.args if a.name == array and a.is_array), None)
    expressions = [in_sizes(spec, bound) for bound in bounds]
    if arg is None or None in expressions:
        return False
    held = " * ".join(f"({dim})" for dim in arg.shape) or "1"
    return _at_most_around(spec, " * ".join(expressions) or "1", held)


def counts_threads(spec: KernelSpec, axis: int) -> bool:
    """Whether the spec's problem size along the axis counts the threads its grid launches there: divided by the
    axis's block size alone, and read in the spec's sizes (a number alone is a grid the spec fixes, whatever the
    sizes)."""
    dims = spec.dimensions
    divisors = getattr(spec, f"grid_div_{'xyz'[axis]}")
    return axis < len(dims) and axis < len(spec.block_size_names) and \
        divisors in (None, [spec.block_size_names[axis]]) and \
        bool(set(re.findall(r"[A-Za-z_]\w*", str(dims[axis]))) & set(spec.sizes))


def launched_for(spec: KernelSpec, axis: int, bound: str) -> list | None:
    """The problem size a loop over every index below `bound` along the axis is launched over, one thread per
    index: the spec's, where it counts the threads there and reaches the bound (counts_threads, bound_covered);
    else the bound itself (launched_over: a grid the spec fixes); None where neither holds."""
    if counts_threads(spec, axis) and bound_covered(spec, axis, bound):
        return spec.dimensions
    return launched_over(spec, axis, bound)


def launched_over(spec: KernelSpec, axis: int, bound: str) -> list | None:
    """The spec's problem size with the axis's entry the bound (C text of scalar arguments, read in the spec's
    sizes): what a loop over every index below the bound launched on a fixed grid, one thread per index, is
    launched over; None where the bound is not such arithmetic, or may be below 1 at the spec's sizes or around
    them."""
    dims = spec.dimensions
    expression = in_sizes(spec, bound)
    if expression is None or axis >= len(dims) or not _at_most_around(spec, "1", expression):
        return None  # an empty launch is no launch: a loop whose bound may fall below 1 keeps its grid
    dims[axis] = re.sub(r"^\(+\s*(\w+)\s*\)+$", r"\1", expression)  # `((n))` as n
    return dims


def in_sizes(spec: KernelSpec, bound: str) -> str | None:
    """`bound` (C text) as an expression of the size variables, where it is arithmetic of scalar arguments of
    given values; else None."""
    scalars = {arg.name: arg.value for arg in spec.args if not arg.is_array and arg.value is not None}
    plain = _SUFFIX.sub(r"\1", CAST.sub(" ", bound))
    if not re.fullmatch(r"[\w\s+\-*/%()]*", plain) or re.search(r"\w\s*\(", plain) or \
            not set(re.findall(r"[A-Za-z_]\w*", plain)) <= set(scalars):
        return None
    return "(" + re.sub(r"[A-Za-z_]\w*", lambda m: f"({scalars[m[0]]})", plain.replace("/", "//")) + ")"


def _at_most_around(spec: KernelSpec, smaller: str, larger: str) -> bool:
    """Whether `smaller` <= `larger` (expressions of the size variables) at the spec's sizes and around them."""
    lows, highs = values_around(spec, smaller), values_around(spec, larger)
    return lows is not None and highs is not None and all(low <= high for low, high in zip(lows, highs))


def values_around(spec: KernelSpec, expression) -> list | None:
    """The expression (of the size variables) at the spec's sizes and at each of sizes_around's, in that order;
    None where it does not evaluate."""
    variables = spec.variables(spec.baseline_params())
    try:
        return [evaluate(str(expression), {**variables, **sizes}) for sizes in sizes_around(spec.sizes)]
    except ExpressionError:
        return None


def sizes_around(sizes: dict[str, int]) -> list[dict[str, int]]:
    """The spec's sizes, each size one less and one more alone, and all of them doubled and more."""
    found = [sizes, {k: 2 * v + 3 for k, v in sizes.items()}]
    for name, value in sizes.items():
        found += [{**sizes, name: value + 1}] + ([{**sizes, name: value - 1}] if value > 1 else [])
    return found
