"""Pure comparisons of a candidate's outputs with the reference's, on the host (numpy), with the same
rule as the benchmark's on-device check: |out - ref| <= atol + rtol * |ref|, NaN matches NaN only and an
infinity matches the same infinity only."""
from dataclasses import dataclass

import numpy as np

POISON = 0xFF  # every byte of an output before a run: NaN for floats, -1 or the maximum for integers
SHOWN = 5  # mismatching elements quoted in a reason


@dataclass(frozen=True)
class Difference:
    count: int  # elements that differ
    size: int
    first: list[int]  # the first mismatching flat indices
    max_abs: float
    max_rel: float
    examples: str  # "c[7]: 1.5 instead of 2" for the first few


def beyond_tolerance(name: str, out: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> Difference:
    o, r = out.reshape(-1).astype(np.float64), ref.reshape(-1).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(o - r)
        special = ~np.isfinite(o) | ~np.isfinite(r)
        same_special = (np.isnan(o) & np.isnan(r)) | (np.isinf(o) & (o == r))
        bad = np.where(special, ~same_special, error > atol + rtol * np.abs(r))
        finite_error = np.where(special, 0.0, error)
        relative = np.where(special | (r == 0), 0.0, finite_error / np.where(r == 0, 1.0, np.abs(r)))
    return _difference(name, out, ref, np.flatnonzero(bad), float(finite_error.max(initial=0.0)),
                       float(relative.max(initial=0.0)))


def unwritten(name: str, out: np.ndarray, ref: np.ndarray) -> Difference:
    """Elements still holding the poison the run started with, where the reference wrote something else:
    work skipped (a size special-cased, a tail dropped, an output served from a cache)."""
    itemsize = out.dtype.itemsize
    poisoned = np.all(out.reshape(-1).view(np.uint8).reshape(-1, itemsize) == POISON, axis=1)
    written = ~np.all(ref.reshape(-1).view(np.uint8).reshape(-1, itemsize) == POISON, axis=1)
    return _difference(name, out, ref, np.flatnonzero(poisoned & written), 0.0, 0.0)


def not_finite_where_reference_is(name: str, out: np.ndarray, ref: np.ndarray) -> Difference:
    if out.dtype.kind != "f":
        return _difference(name, out, ref, np.empty(0, np.int64), 0.0, 0.0)
    o, r = out.reshape(-1), ref.reshape(-1)
    return _difference(name, out, ref, np.flatnonzero(~np.isfinite(o) & np.isfinite(r)), 0.0, 0.0)


def _difference(name: str, out: np.ndarray, ref: np.ndarray, where: np.ndarray, max_abs: float,
                max_rel: float) -> Difference:
    first = [int(i) for i in where[:SHOWN]]
    o, r = out.reshape(-1), ref.reshape(-1)
    examples = ", ".join(f"{name}[{_index(i, out.shape)}]: {o[i]!r} instead of {r[i]!r}" for i in first)
    return Difference(count=int(where.size), size=int(out.size), first=first, max_abs=max_abs, max_rel=max_rel,
                      examples=examples)


def _index(flat: int, shape: tuple[int, ...]) -> str:
    return ",".join(str(int(i)) for i in np.unravel_index(flat, shape)) if len(shape) > 1 else str(flat)
