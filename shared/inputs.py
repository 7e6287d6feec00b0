"""Kernel inputs generated from the argument spec and a seed, by a counter-based generator.

Element i of the argument at position p under seed s is a function of (s, p, i) alone: splitmix64's
output for counter i+1 of a stream keyed by (s, p). The GPU computes the same function in kforge's own
kernels (shared/device/own_kernels.py), so the verifier draws a trial's inputs where they are used and
the host computes the very same bits whenever it needs them (the benchmark's arrays, a test). Every value
is made exactly, without rounding: floats are a random integer of the dtype's precision times a power of
two, minus 1; integers are a multiply-shift of 32 random bits. Large arrays are drawn in chunks on all
cores at once; the values depend on the seed alone, never on the chunking.
"""
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from shared.spec import ArgSpec, KernelSpec

CHUNK = 1 << 20  # elements drawn by one thread at a time
SPECIAL_STRIDE = 97  # a prime, so specials do not line up with block or warp boundaries
SPECIAL_VALUES = {"nan": lambda t: np.nan, "inf": lambda t: np.inf, "-inf": lambda t: -np.inf, "zero": lambda t: 0.0,
                  "-zero": lambda t: -0.0, "denormal": lambda t: np.finfo(t).smallest_subnormal}
# Significant bits drawn per float dtype: every value k * 2**(1 - bits) - 1 is exact in the dtype.
FLOAT_BITS = {"float16": 11, "float32": 24, "float64": 53}
INT_RANGES = {"i": (-100, 200), "u": (0, 100)}  # (lowest value, how many values) by dtype kind

_MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's counter increment
_MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def stream_key(seed: int, position: int) -> int:
    """The key of argument `position`'s stream under `seed`, a 64-bit integer; the device gets it as is."""
    return _mix((seed & _MASK) ^ _mix(((position + 1) * GOLDEN) & _MASK))


def draw(dtype: np.dtype, key: int, start: int, count: int) -> np.ndarray:
    """Elements start .. start+count-1 of the stream `key`, as `dtype`, with no specials."""
    bits = np.arange(start + 1, start + count + 1, dtype=np.uint64)
    bits *= np.uint64(GOLDEN)
    bits += np.uint64(key)
    _mix_in_place(bits)
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        precision = FLOAT_BITS[dtype.name]
        exact = np.float64 if dtype == np.float64 else np.float32  # holds k and k * 2**(1 - bits) - 1 exactly
        values = (bits >> np.uint64(64 - precision)).astype(exact)
        values *= exact(2.0 ** (1 - precision))
        values -= exact(1)
        return values.astype(dtype, copy=False)
    low, span = INT_RANGES[dtype.kind]
    bits >>= np.uint64(32)
    bits *= np.uint64(span)
    bits >>= np.uint64(32)
    return (bits.astype(np.int64) + low).astype(dtype)


def special_values(arg: ArgSpec) -> np.ndarray:
    """The values that replace every SPECIAL_STRIDE-th element of `arg`, in the order they cycle."""
    dtype = np.dtype(arg.dtype)
    return np.array([SPECIAL_VALUES[name](dtype) for name in arg.specials], dtype)


def make_array(spec: KernelSpec, arg: ArgSpec, seed: int) -> np.ndarray:
    """Inputs get values in a dtype-appropriate range (floats in [-1, 1), signed integers in [-100, 100),
    unsigned ones in [0, 100)); outputs start zeroed."""
    shape, dtype = spec.shape_of(arg), np.dtype(arg.dtype)
    array = np.zeros(shape, dtype)
    if arg.effective_role == "out":
        return array
    flat = array.reshape(-1)
    # Keyed by the argument's position, so adding an argument does not change the others.
    key = stream_key(seed, spec.args.index(arg))

    def fill(start: int) -> None:
        flat[start:start + CHUNK] = draw(dtype, key, start, min(CHUNK, flat.size - start))

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


def _mix_in_place(z: np.ndarray) -> None:
    """The same finaliser on every element of a uint64 array (numpy's uint64 arithmetic wraps like the GPU's)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_MIX[0])
    z ^= z >> np.uint64(27)
    z *= np.uint64(_MIX[1])
    z ^= z >> np.uint64(31)
