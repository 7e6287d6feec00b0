"""Compile many configurations at once on the CPU cores, handing each result over as soon as it exists,
so the GPU can time the first cubin while the rest still compile.

The pool's processes are spawned, never forked: a forked child of a process that holds a CUDA context
inherits a context it cannot use.
"""
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from shared.device.nvrtc import CompiledKernel, CompileError, compile_kernel, warm_up
from services.benchmark.compile_cache import CompileCache
from shared.spec import ParamValue


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
        self._executor = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        # A spawned pool starts a process per submission while none is idle; starting them all now, in the
        # background, keeps a second of process start-up per core out of the first tuning's wall-clock.
        self._warming = [self._executor.submit(warm_up) for _ in range(workers)]

    def wait_ready(self) -> int:
        """Wait until every process has started and loaded NVRTC; returns how many processes did."""
        return len({future.result() for future in self._warming})

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
                pending[self._executor.submit(compile_kernel, source, kernel_name, params, options, arch)] = (index, params)
        return self._outcomes(cached, pending)

    def _outcomes(self, cached: list[CompileOutcome],
                  pending: dict[Future, tuple[int, dict[str, ParamValue]]]) -> Iterator[CompileOutcome]:
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

    def close(self) -> None:
        self._executor.shutdown(cancel_futures=True)

    def __enter__(self) -> "CompilePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
