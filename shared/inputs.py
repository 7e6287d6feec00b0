"""Kernel inputs generated from the argument spec and a seed.

Any worker regenerates the same arrays from (spec, seed), so arrays never travel through the bus."""
import numpy as np

from shared.spec import ArgSpec, KernelSpec


def make_array(spec: KernelSpec, arg: ArgSpec, seed: int) -> np.ndarray:
    """Inputs get values in a dtype-appropriate range; outputs start zeroed."""
    shape, dtype = spec.shape_of(arg), np.dtype(arg.dtype)
    if arg.effective_role == "out":
        return np.zeros(shape, dtype)
    # One generator per argument, keyed by its position, so adding an argument does not change the others.
    rng = np.random.default_rng([seed, spec.args.index(arg)])
    if dtype.kind == "f":
        # Drawn in float32 (float64 for doubles): drawing doubles and converting costs seconds for 64M values.
        draw = np.float64 if dtype == np.float64 else np.float32
        return (rng.random(shape, dtype=draw) * 2 - 1).astype(dtype, copy=False)
    low = 0 if dtype.kind == "u" else -100
    return rng.integers(low, 100, shape, dtype=dtype)


def make_arrays(spec: KernelSpec, seed: int) -> dict[str, np.ndarray]:
    return {a.name: make_array(spec, a, seed) for a in spec.args if a.is_array}
