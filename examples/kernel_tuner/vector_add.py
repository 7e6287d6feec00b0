#!/usr/bin/env python
"""A Kernel Tuner script, run on kforge by its import line alone.

    python examples/kernel_tuner/vector_add.py [cache.json]

Written as for Kernel Tuner: swap `from kforge import tune_kernel` for `from kernel_tuner import tune_kernel`
and it runs there too. The arrays below are the kernel's inputs, `answer` the output checked on the GPU, and
with a cache file named, a second run measures only what the first did not.
"""
import sys

import numpy as np

from kforge import tune_kernel

KERNEL = """
__global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
"""


def tune(cache=None):
    size = 50_000_000
    rng = np.random.default_rng(7)
    a = rng.standard_normal(size, dtype=np.float32)
    b = rng.standard_normal(size, dtype=np.float32)
    c = np.zeros_like(a)
    arguments = [c, a, b, np.int32(size)]

    tune_params = {"block_size_x": [32 * i for i in range(1, 33)]}
    answer = [a + b, None, None, None]

    results, env = tune_kernel("vector_add", KERNEL, size, arguments, tune_params, answer=answer, cache=cache,
                               metrics={"GB/s": lambda p: 3 * 4 * size / 1e9 / (p["time"] / 1e3)})
    print(f"{len(results)} configurations on {env['device_name']}; best block size "
          f"{env['best_config']['block_size_x']} at {env['best_config']['time']:.4f} ms")
    return results, env


if __name__ == "__main__":
    tune(sys.argv[1] if len(sys.argv) > 1 else None)
