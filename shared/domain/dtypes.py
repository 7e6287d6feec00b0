"""How the host holds the values of each dtype kforge knows: as numpy's dtype of that name, except bfloat16,
which numpy lacks. A bfloat16 is the upper half of the float32 of the same value (float32's sign, its 8-bit
exponent and 7 of its 23 stored mantissa bits: 8 bits of precision), so the host holds a bfloat16 array as
those 16-bit patterns in a uint16 array, the bytes `__nv_bfloat16` has on the device.

A float becomes a bfloat16 correctly rounded, to nearest with ties to even, from float32 and float64 alike: a
float64 is first rounded to float32 by rounding to odd (towards zero, the last bit set when that was inexact),
which keeps enough of it for the rounding to bfloat16 to be the one a direct rounding would give (Boldo and
Melquiond, IEEE Trans. Computers, 2008). CUDA's `__double2bfloat16` rounds the same way, and so does kforge's
own generator on the device (shared/adapters/device/own_kernels.py), bit for bit.
"""
from dataclasses import dataclass

import numpy as np

BFLOAT16 = "bfloat16"
CANONICAL_NAN = 0x7FFF  # the NaN CUDA's conversions to bfloat16 give


@dataclass(frozen=True)
class FloatInfo:
    eps: float  # the distance from 1.0 to the next larger value
    largest: float
    smallest_subnormal: float


BFLOAT16_INFO = FloatInfo(eps=2.0 ** -7, largest=float.fromhex("0x1.fep127"), smallest_subnormal=2.0 ** -133)


def host_dtype(dtype: str) -> np.dtype:
    """The numpy dtype that holds `dtype`'s values on the host: uint16 bit patterns for bfloat16."""
    return np.dtype(np.uint16) if dtype == BFLOAT16 else np.dtype(dtype)


def kind(dtype: str) -> str:
    """'f' for a float dtype, 'i' for a signed integer, 'u' for an unsigned one."""
    return "f" if dtype == BFLOAT16 else np.dtype(dtype).kind


def is_float(dtype: str) -> bool:
    return kind(dtype) == "f"


def float_info(dtype: str) -> FloatInfo:
    if dtype == BFLOAT16:
        return BFLOAT16_INFO
    info = np.finfo(dtype)
    return FloatInfo(eps=float(info.eps), largest=float(info.max), smallest_subnormal=float(info.smallest_subnormal))


def as_dtype(values, dtype: str) -> np.ndarray:
    """`values` (numbers) as the host holds `dtype`: rounded, and for bfloat16 as bit patterns."""
    return to_bfloat16(values) if dtype == BFLOAT16 else np.asarray(values).astype(dtype)


def as_numbers(array: np.ndarray, dtype: str) -> np.ndarray:
    """The values of a host array of `dtype` as numpy numbers: bfloat16's bit patterns as float32 (exactly)."""
    return from_bfloat16(array) if dtype == BFLOAT16 else array


def scalar(value: int | float, dtype: str) -> np.generic:
    """A scalar argument's value as the kernel takes it: a numpy scalar of the dtype's width."""
    return to_bfloat16(value)[()] if dtype == BFLOAT16 else np.dtype(dtype).type(value)


def to_bfloat16(values) -> np.ndarray:
    """The bfloat16 nearest each value (ties to even) as uint16 bit patterns; a NaN becomes CUDA's canonical
    NaN, and a value beyond the largest bfloat16 by half its spacing or more an infinity."""
    with np.errstate(invalid="ignore"):  # a signalling float32 NaN widens to a quiet one
        wide = np.asarray(values, np.float64)
    shape, wide = wide.shape, wide.reshape(-1)
    nan = np.isnan(wide)
    with np.errstate(over="ignore"):  # beyond float32: inf, which the rounding to odd takes back to its largest
        narrow = wide.astype(np.float32)
    bits = narrow.view(np.uint32)  # the same memory: a change to either is a change to both
    bits[np.abs(narrow.astype(np.float64)) > np.abs(wide)] -= np.uint32(1)  # rounded away from zero: back one step
    bits[(narrow.astype(np.float64) != wide) & ~nan] |= np.uint32(1)  # inexact: the last bit set, rounded to odd
    nearest = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return np.where(nan, CANONICAL_NAN, nearest).astype(np.uint16).reshape(shape)


def from_bfloat16(bits) -> np.ndarray:
    """The float32 value of each bfloat16 bit pattern: exact, as every bfloat16 is a float32."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def bfloat16_held_range(low: float, high: float) -> tuple[float, float]:
    """The smallest bfloat16 at or above `low` and the largest below `high` (shared.domain.spec.held_float_range)."""
    lowest, top = int(to_bfloat16(low)), int(to_bfloat16(high))
    if float(from_bfloat16(lowest)) < low:
        lowest = _after(lowest, up=True)
    below = top if float(from_bfloat16(top)) < high else _after(top, up=False)
    return float(from_bfloat16(lowest)), float(from_bfloat16(below))


def _after(bits: int, up: bool) -> int:
    """The bfloat16 next to the finite one of bit pattern `bits`, towards +inf when `up`, else towards -inf."""
    order = -(bits & 0x7FFF) if bits & 0x8000 else bits  # the patterns in the order of their values, -0 as +0
    order += 1 if up else -1
    return order if order >= 0 else 0x8000 | -order
