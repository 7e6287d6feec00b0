"""What the device's comparison of a run with the reference comes back as: counts, first indices and the
largest errors (shared/adapters/device/own_kernels.py computes them where the arrays are), with one quoted example
per finding, so a reason can show what went wrong without any array crossing PCIe."""
from dataclasses import dataclass

import numpy as np

POISON = 0xFF  # every byte of an output before a run: NaN for floats, -1 or the maximum for integers


@dataclass(frozen=True)
class Difference:
    count: int  # elements that differ
    size: int
    first: int | None = None  # flat index of the first one
    max_abs: float = 0.0
    max_rel: float = 0.0
    example: str = ""  # "c[7]: 1.5 instead of 2.0", at the first one


@dataclass(frozen=True)
class OutputCheck:
    """One output of one run against the reference's."""

    unwritten: Difference  # still all poison where the reference wrote something else
    not_finite: Difference  # NaN or Inf where the reference is finite
    mismatch: Difference  # beyond tolerance; max_abs and max_rel over every finite element


def example(name: str, shape: tuple[int, ...], index: int, value: np.generic, instead_of: np.generic) -> str:
    """'c[7]: 1.5 instead of 2.0', the index in the array's own dimensions."""
    where = ",".join(str(int(i)) for i in np.unravel_index(index, shape)) if len(shape) > 1 else str(index)
    return f"{name}[{where}]: {value.item()!r} instead of {instead_of.item()!r}"
