"""Compile many configurations at once, handing each result over as soon as it exists, so the GPU can time
the first cubin while the rest still compile.

Each compile runs in a sandboxed child process (shared/adapters/device/compiler.py); the pool's threads only wait
for them. A compile that is killed or crashes costs its child alone: the pool itself cannot break, and
the next compile gets a fresh child.
"""
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from shared.adapters.device import compiler
from shared.adapters.device.nvrtc import CompiledKernel, CompileError
from services.benchmark.compile_cache import CompileCache
from shared.domain.spec import ParamValue


@dataclass(frozen=True)
class CompileOutcome:
    index: int  # position of the configuration in the request
    params: dict[str, ParamValue]
    kernel: CompiledKernel | None
    error: CompileError | None
    cache_hit: bool


class CompilePool:
    def __init__(self, workers: int, cache: CompileCache | None = None):
        self.cache = cache
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kforge-compile")
        # Starting a compiler child costs about 0.2 s; starting them all now, in the background, keeps that
        # out of the first tuning's wall-clock.
        self._warming = self._executor.submit(compiler.warm, workers)

    def wait_ready(self) -> int:
        """Wait until the pool's compiler children have started and loaded NVRTC; returns how many did."""
        return len(self._warming.result())

    def compile_all(self, source: str, kernel_name: str, configs: list[dict[str, ParamValue]], options: list[str],
                    arch: str) -> Iterator[CompileOutcome]:
        """Submit every configuration now; iterate for one outcome each, cache hits first, the rest in
        order of completion. Submitting before the first result is taken lets the caller do other work
        (upload inputs, run the reference) while the pool compiles."""
        cached, pending = [], {}
        for index, params in enumerate(configs):
            hit = self.cache.lookup(source, kernel_name, params, options, arch) if self.cache else None
            if hit is not None:
                cached.append(CompileOutcome(index, params, hit, None, cache_hit=True))
            else:
                future = self._executor.submit(compiler.compile_kernel, source, kernel_name, params, options, arch)
                pending[future] = (index, params)
        return self._outcomes(cached, pending)

    def _outcomes(self, cached: list[CompileOutcome],
                  pending: dict[Future, tuple[int, dict[str, ParamValue]]]) -> Iterator[CompileOutcome]:
        try:
            yield from cached
            for future in as_completed(pending):
                index, params = pending[future]
                try:
                    kernel = future.result()
                except CompileError as exc:
                    yield CompileOutcome(index, params, None, exc, cache_hit=False)
                    continue
                if self.cache:
                    self.cache.put(kernel)
                yield CompileOutcome(index, params, kernel, None, cache_hit=False)
        finally:  # the caller stopped early (its job was cancelled): the compiles not yet started are dropped
            for future in pending:
                future.cancel()

    def close(self) -> None:
        self._executor.shutdown(cancel_futures=True)

    def __enter__(self) -> "CompilePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
