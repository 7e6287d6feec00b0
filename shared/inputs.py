"""Kernel inputs generated from the argument spec and a seed.

Any worker regenerates the same arrays from (spec, seed), so arrays never travel through the bus. Large
arrays are drawn in fixed-size chunks, each from its own generator keyed by (seed, argument, chunk), on
all cores at once: the values depend on the seed alone, never on the number of threads, and 128M floats
take a fraction of a second instead of seconds.
"""
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from shared.spec import ArgSpec, KernelSpec

CHUNK = 1 << 20  # elements drawn by one generator
SPECIAL_STRIDE = 97  # a prime, so specials do not line up with block or warp boundaries
SPECIAL_VALUES = {"nan": lambda t: np.nan, "inf": lambda t: np.inf, "-inf": lambda t: -np.inf, "zero": lambda t: 0.0,
                  "-zero": lambda t: -0.0, "denormal": lambda t: np.finfo(t).smallest_subnormal}


def make_array(spec: KernelSpec, arg: ArgSpec, seed: int) -> np.ndarray:
    """Inputs get values in a dtype-appropriate range; outputs start zeroed."""
    shape, dtype = spec.shape_of(arg), np.dtype(arg.dtype)
    array = np.zeros(shape, dtype)
    if arg.effective_role == "out":
        return array
    flat = array.reshape(-1)
    # Keyed by the argument's position, so adding an argument does not change the others.
    key = (seed, spec.args.index(arg))
    chunks = range(0, flat.size, CHUNK)
    if len(chunks) > 1:
        with ThreadPoolExecutor(min(len(chunks), os.cpu_count() or 1)) as threads:
            list(threads.map(lambda start: _fill(flat[start:start + CHUNK], key, start // CHUNK), chunks))
    elif flat.size:
        _fill(flat, key, 0)
    if arg.specials:
        # Every SPECIAL_STRIDE-th element, cycling through the values asked for: NaN, Inf and friends land
        # at known places, in every block and warp, whatever the size.
        values = np.array([SPECIAL_VALUES[name](dtype) for name in arg.specials], dtype)
        places = flat[::SPECIAL_STRIDE]
        places[:] = np.resize(values, places.size)
    return array


def _fill(view: np.ndarray, key: tuple[int, int], chunk: int) -> None:
    rng = np.random.default_rng([*key, chunk])
    if view.dtype.kind == "f":
        # Drawn in float32 (float64 for doubles) straight into the array: numpy fills without the GIL.
        draw = np.float64 if view.dtype == np.float64 else np.float32
        if view.dtype == draw:
            rng.random(out=view, dtype=draw)
        else:
            view[:] = rng.random(view.size, dtype=draw)
        view *= 2
        view -= 1
        return
    low = 0 if view.dtype.kind == "u" else -100
    view[:] = rng.integers(low, 100, view.size, dtype=view.dtype)


def make_arrays(spec: KernelSpec, seed: int) -> dict[str, np.ndarray]:
    return {a.name: make_array(spec, a, seed) for a in spec.args if a.is_array}
