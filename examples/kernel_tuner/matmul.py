#!/usr/bin/env python
"""A two-dimensional Kernel Tuner script on kforge: a tiled matrix multiplication.

    python examples/kernel_tuner/matmul.py

Kernel Tuner's conventions throughout: problem_size (columns, rows), grid_div_x/y as lists of parameters that
multiply, a string restriction (kforge evaluates it itself) and a function one (run here over the space, as
Kernel Tuner runs it), an answer checked within atol, and a metric computed from each result.
"""
from pathlib import Path

import numpy as np

import kforge as kernel_tuner

HERE = Path(__file__).resolve().parent


def tune():
    n = 2048
    rng = np.random.default_rng(11)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros_like(a)

    tune_params = {
        "block_size_x": [16, 32, 64],
        "block_size_y": [1, 2, 4, 8, 16],
        "tile_size_x": [1, 2, 4],
        "tile_size_y": [1, 2, 4, 8],
    }
    restrictions = [
        # the staged tiles of A and B within 48 KiB of shared memory
        "(block_size_y * tile_size_y + block_size_x * tile_size_x) * block_size_x * tile_size_x * 4 <= 48 * 1024",
        lambda p: p["block_size_x"] * p["block_size_y"] >= 64,  # at least two warps per block
    ]
    metrics = {"GFLOP/s": lambda p: 2 * n**3 / 1e9 / (p["time"] / 1e3)}

    results, env = kernel_tuner.tune_kernel(
        "matmul_kernel", str(HERE / "matmul.cu"), (n, n), [c, a, b, np.int32(n)], tune_params,
        grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"],
        restrictions=restrictions, answer=[a @ b, None, None, None], atol=1e-2, metrics=metrics, verbose=True)
    best = env["best_config"]
    print(f"best of {len(results)}: {', '.join(f'{k}={best[k]}' for k in tune_params)} at {best['time']:.3f} ms "
          f"({best['GFLOP/s']:.0f} GFLOP/s) on {env['device_name']}")
    return results, env


if __name__ == "__main__":
    tune()
