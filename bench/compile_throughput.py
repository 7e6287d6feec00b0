"""Compile a tuning space serially and with the spawned compile pool; print the wall-clock of each.

    python bench/compile_throughput.py [examples/matmul] [--workers N]
"""
import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kforge.specfile import load_spec  # noqa: E402
from services.benchmark.compile_cache import CompileCache  # noqa: E402
from services.benchmark.compile_pool import CompilePool  # noqa: E402
from shared.adapters.device.compiler import compile_kernel  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("example", nargs="?", default="examples/matmul")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args()
    spec = load_spec(Path(f"{args.example}.cu"), Path(f"{args.example}.yaml"))
    configs = [{**spec.params, **dict(zip(spec.tune_params, v))} for v in itertools.product(*spec.tune_params.values())]

    started = time.perf_counter()
    for params in configs:
        compile_kernel(spec.source, spec.kernel_name, params, spec.compiler_options, args.arch)
    serial = time.perf_counter() - started

    with tempfile.TemporaryDirectory() as root, CompilePool(args.workers, CompileCache(Path(root))) as pool:
        started = time.perf_counter()
        first = None
        for _ in pool.compile_all(spec.source, spec.kernel_name, configs, spec.compiler_options, args.arch):
            first = first or time.perf_counter() - started
        parallel = time.perf_counter() - started
        started = time.perf_counter()
        list(pool.compile_all(spec.source, spec.kernel_name, configs, spec.compiler_options, args.arch))
        cached = time.perf_counter() - started
    print(f"{spec.kernel_name}: {len(configs)} configs | serial {serial:.2f} s | pool of {args.workers} "
          f"{parallel:.2f} s (first result after {first:.2f} s, includes process start) | "
          f"from the cache {cached * 1000:.0f} ms | speedup {serial / parallel:.1f}x")


if __name__ == "__main__":
    main()
