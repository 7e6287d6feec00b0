"""What a recogniser finds and what its rewrite changes besides the code.

A shape is a kind of kernel the rules know how to restructure (elementwise, an atomic accumulation, a
transpose, a stencil, a row-wise loop, one point per thread). Its recogniser reads the *submitted* kernel into
a model, or says what did not match; its rendering prints the kernel anew from that model with the shape's
features that the current kernel carries, and says what the launch needs: the tune parameters it introduces
or narrows (with a default each), restrictions, the grid divisors of the axes it changes, and the dynamic
shared memory it needs.
"""
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from shared.domain.spec import KernelSpec, ParamValue


class NotRecognised(ValueError):
    """The kernel is not of the shape; the message says what did not match."""


@dataclass(frozen=True)
class Layout:
    tune_params: dict[str, list[ParamValue]] = field(default_factory=dict)
    defaults: dict[str, ParamValue] = field(default_factory=dict)
    restrictions: tuple[str, ...] = ()
    grid_div: dict[str, list[str | int]] = field(default_factory=dict)  # "x" | "y" | "z" -> divisors
    problem_size: list[str] | None = None  # the points it launches, where they are not the spec's
    smem: str | None = None  # the dynamic shared memory per block it needs (smem_args.size), if any


class Shape(Protocol):
    name: str
    kind: str  # what the shape is, in a reason: "a transpose-like kernel (...)"
    rules: tuple[str, ...]  # the rendered rules it offers

    def recognise(self, spec: KernelSpec) -> Any:
        """The model of the submitted kernel; NotRecognised (or any ValueError) saying what did not match."""
        ...

    def reason(self, rule_id: str, model: Any, spec: KernelSpec) -> str | None:
        """None when the rule can render this kernel, else why not."""
        ...

    def render(self, model: Any, features: tuple[str, ...], spec: KernelSpec) -> tuple[str, Layout]:
        """The submitted source restructured with `features` (rules of this shape, in order applied)."""
        ...


def block_values(spec: KernelSpec, axis: int, allowed, fallback: list[int]) -> list[int]:
    """The values the spec tunes the axis's block size over that `allowed(value)` accepts, else `fallback`."""
    name = spec.block_size_names[axis]
    values = [v for v in spec.tune_params.get(name, []) if isinstance(v, int) and allowed(v)]
    return values or fallback


def default_in(values: list[ParamValue], *choices: ParamValue | None) -> ParamValue:
    return next((c for c in choices if c in values), values[0])


def block_widths(spec: KernelSpec, axis: int) -> list[str]:
    """The names that stand for the axis's block size in a kernel: its block-size define, and each tune
    parameter a restriction holds equal to it (`block_size_x == BLOCK_SIZE`, a kernel's own define of its width)."""
    if axis >= len(spec.block_size_names):
        return []
    name = spec.block_size_names[axis]
    aliases = []
    for restriction in spec.restrictions:
        equal = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*==\s*([A-Za-z_]\w*)\s*", restriction)
        if equal and name in equal.groups():
            other = equal[2] if equal[1] == name else equal[1]
            if other in spec.tune_params and other not in spec.block_size_names:
                aliases.append(other)
    return [name, *aliases]


def deeper_block(spec: KernelSpec, dimensions: int) -> str | None:
    """Why the block is not as flat as a grid of `dimensions` axes: a block size past them that is not 1 (its
    threads along that axis would each repeat the block's points)."""
    for name in spec.block_size_names[dimensions:]:
        if any(v != 1 for v in spec.tune_params.get(name, [spec.params.get(name, 1)])):
            return f"its block has more dimensions than its grid of points ({name} is not 1)"
    return None


def one_thread_per_point(spec: KernelSpec, axis: int) -> str | None:
    """None when the spec launches one thread per point along the axis (grid = problem size / block size),
    else why not: a rewrite that changes how many points a thread handles divides that grid."""
    letter = "xyz"[axis]
    divisors = getattr(spec, f"grid_div_{letter}")
    block = spec.block_size_names[axis] if axis < len(spec.block_size_names) else None
    dims = spec.dimensions
    if axis >= len(dims):
        return f"the problem has no {letter} dimension"
    if divisors is not None and divisors != [block]:
        return (f"its grid along {letter} is divided by {divisors}, not by the block size alone, so a thread does "
                f"not handle one point")
    return None
