"""Kernel inputs generated from the argument spec and a seed, by a counter-based generator.

Element i of the argument at position p under seed s is a function of (s, p, i) alone: splitmix64's
output for counter i+1 of a stream keyed by (s, p), made a value of the argument's range [low, high) (its
`range`, else its dtype's default) by a few IEEE-rounded steps. The GPU repeats those steps exactly in
kforge's own kernels (shared/adapters/device/own_kernels.py), so the verifier draws a trial's inputs where they are
used and the host computes the very same bits whenever it needs them (the benchmark's arrays, a test). A
sorted input's element i is low + (i + u) * (high - low) / count, with u in [0, 1) from its bits: every
step is monotone, so the values never decrease, and still each element is computed alone. An input with
`data` is that file's array instead. Large arrays are drawn in chunks on all cores at once; the values
depend on the seed alone, never on the chunking.
"""
import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from shared.adapters.array_files import read_array
from shared.domain.dtypes import BFLOAT16, as_dtype, as_numbers, float_info, host_dtype, is_float
from shared.domain.spec import ArgSpec, KernelSpec, held_float_range

CHUNK = 1 << 20  # elements drawn by one thread at a time
SPECIAL_STRIDE = 97  # a prime, so specials do not line up with block or warp boundaries
SPECIAL_VALUES = {"nan": lambda t: np.nan, "inf": lambda t: np.inf, "-inf": lambda t: -np.inf, "zero": lambda t: 0.0,
                  "-zero": lambda t: -0.0, "denormal": lambda t: float_info(t).smallest_subnormal}
# Random bits per float of an unsorted input, the dtype's precision: with the default range [-1, 1) every
# value k * 2**(1 - bits) - 1 is exact, and any range gets as many distinct values as its dtype resolves.
FLOAT_BITS = {"float16": 11, BFLOAT16: 8, "float32": 24, "float64": 53}

_MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's counter increment
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


@dataclass(frozen=True)
class Distribution:
    """How an input's random bits become values in [low, high) of its dtype: the constants the device's
    generator takes as they are, computed once here so that both sides round the very same numbers."""

    dtype: str  # kforge's name for it (shared/domain/dtypes.py: the host holds a bfloat16 as its bits)
    low: int = 0  # integers: the lowest value, as 64-bit two's complement
    span: int = 0  # integers: how many values [low, high) holds
    origin: float = 0.0  # floats: the lowest value, as the dtype holds it
    scale: float = 0.0  # floats: high - low; sorted, that width (integers: span) over the array's elements
    limit: float = 0.0  # floats: high, the first value left out; sorted integers: span, the first offset left out
    below: float = 0.0  # floats: the dtype's largest value below high, for one that rounding took up to high
    sorted: bool = False


def distribution(dtype, low: int | float, high: int | float, sorted_count: int = 0) -> Distribution:
    """[low, high) of `dtype` (a name or a numpy dtype), as KernelSpec.value_range checked it; sorted over
    `sorted_count` elements if any."""
    dtype = dtype if dtype == BFLOAT16 else np.dtype(dtype).name
    if is_float(dtype):
        lowest, below = held_float_range(dtype, low, high)
        width = float(high) - lowest
        return Distribution(dtype, origin=lowest, scale=width / sorted_count if sorted_count else width,
                            limit=float(high), below=below, sorted=bool(sorted_count))
    span = int(high) - int(low)
    return Distribution(dtype, low=int(low) & _MASK, span=span, scale=span / sorted_count if sorted_count else 0.0,
                        limit=float(span) if sorted_count else 0.0, sorted=bool(sorted_count))


def distribution_of(spec: KernelSpec, arg: ArgSpec) -> Distribution:
    """The distribution of input `arg` at `spec`'s sizes."""
    low, high = spec.value_range(arg)
    return distribution(arg.dtype, low, high, math.prod(spec.shape_of(arg)) if arg.sorted else 0)


def stream_key(seed: int, position: int) -> int:
    """The key of argument `position`'s stream under `seed`, a 64-bit integer; the device gets it as is."""
    return _mix((seed & _MASK) ^ _mix(((position + 1) * GOLDEN) & _MASK))


def draw(how: Distribution, key: int, start: int, count: int) -> np.ndarray:
    """Elements start .. start+count-1 of the stream `key`, drawn as `how` says, with no specials."""
    index = np.arange(start, start + count, dtype=np.uint64)
    bits = index + np.uint64(1)
    bits *= np.uint64(GOLDEN)
    bits += np.uint64(key)
    _mix_in_place(bits)
    if how.sorted:
        # i + u, u in [0, 1): below i + 1, so below the next element's whatever the rounding of either.
        scaled = (index.astype(np.float64) + (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53) * how.scale
    if is_float(how.dtype):
        if not how.sorted:
            precision = FLOAT_BITS[how.dtype]
            scaled = (bits >> np.uint64(64 - precision)).astype(np.float64) * 2.0 ** -precision * how.scale
        values = as_dtype(how.origin + scaled, how.dtype)
        # Rounding may reach high, which is left out.
        values[as_numbers(values, how.dtype).astype(np.float64) >= how.limit] = as_dtype(how.below, how.dtype)
        return values
    if how.sorted:
        whole = np.floor(scaled)
        offsets = np.full(count, how.span - 1, np.uint64)  # where rounding reached the span itself
        fits = whole < how.limit
        offsets[fits] = whole[fits].astype(np.uint64)
    elif how.span <= 1 << 32:  # multiply-shift of the top 32 bits: exact in 64-bit arithmetic
        offsets = ((bits >> np.uint64(32)) * np.uint64(how.span)) >> np.uint64(32)
    else:
        offsets = _high_product(bits, how.span)
    return (offsets + np.uint64(how.low)).astype(how.dtype)  # wraps as two's complement, as the device's cast


def special_values(arg: ArgSpec) -> np.ndarray:
    """The values that replace every SPECIAL_STRIDE-th element of `arg`, in the order they cycle."""
    return as_dtype(np.array([SPECIAL_VALUES[name](arg.dtype) for name in arg.specials], np.float64), arg.dtype)


def make_array(spec: KernelSpec, arg: ArgSpec, seed: int) -> np.ndarray:
    """An input's `data`, or values drawn in its range (default: floats in [-1, 1), signed integers in
    [-100, 100), unsigned ones in [0, 100)); outputs start zeroed."""
    shape, dtype = spec.shape_of(arg), host_dtype(arg.dtype)
    if arg.data is not None:
        return read_array(arg.data, arg.dtype, shape)
    array = np.zeros(shape, dtype)
    if arg.effective_role == "out":
        return array
    flat = array.reshape(-1)
    # Keyed by the argument's position, so adding an argument does not change the others.
    key = stream_key(seed, spec.args.index(arg))
    how = distribution_of(spec, arg)

    def fill(start: int) -> None:
        flat[start:start + CHUNK] = draw(how, key, start, min(CHUNK, flat.size - start))

    chunks = range(0, flat.size, CHUNK)
    if len(chunks) > 1:
        with ThreadPoolExecutor(min(len(chunks), os.cpu_count() or 1)) as threads:
            list(threads.map(fill, chunks))
    elif flat.size:
        fill(0)
    if arg.specials:
        # Every SPECIAL_STRIDE-th element, cycling through the values asked for: NaN, Inf and friends land
        # at known places, in every block and warp, whatever the size.
        places = flat[::SPECIAL_STRIDE]
        places[:] = np.resize(special_values(arg), places.size)
    return array


def make_arrays(spec: KernelSpec, seed: int) -> dict[str, np.ndarray]:
    return {a.name: make_array(spec, a, seed) for a in spec.args if a.is_array}


def _mix(z: int) -> int:
    """splitmix64's finaliser on a Python integer."""
    z = ((z ^ (z >> 30)) * _MIX[0]) & _MASK
    z = ((z ^ (z >> 27)) * _MIX[1]) & _MASK
    return z ^ (z >> 31)


def _high_product(bits: np.ndarray, factor: int) -> np.ndarray:
    """The high 64 bits of each 128-bit product `bits * factor` (the device's __umul64hi), from 32-bit halves."""
    half = np.uint64(32)
    low32 = np.uint64(0xFFFFFFFF)
    bits_high, bits_low = bits >> half, bits & low32
    factor_high, factor_low = np.uint64(factor >> 32), np.uint64(factor & 0xFFFFFFFF)
    low_low, high_low, low_high = bits_low * factor_low, bits_high * factor_low, bits_low * factor_high
    carry = ((low_low >> half) + (high_low & low32) + (low_high & low32)) >> half
    return bits_high * factor_high + (high_low >> half) + (low_high >> half) + carry


def _mix_in_place(z: np.ndarray) -> None:
    """The same finaliser on every element of a uint64 array (numpy's uint64 arithmetic wraps like the GPU's)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_MIX[0])
    z ^= z >> np.uint64(27)
    z *= np.uint64(_MIX[1])
    z ^= z >> np.uint64(31)
