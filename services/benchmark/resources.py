"""What a benchmark worker keeps warm between tasks: the compile pool, the compile cache and the process
that owns its GPU. Starting them costs about a second each; a warm worker pays it once."""
import os

from services.benchmark.compile_cache import CompileCache
from services.benchmark.compile_pool import CompilePool
from services.benchmark.process import BenchmarkProcess
from services.benchmark.replay import ReplayBook, ReplayProcess
from shared.adapters.device.process import WarmProcess
from shared.domain.spec import KernelSpec


def compile_workers_per_gpu(gpus: int = 1) -> int:
    """Cores for each GPU's compile pool, leaving a core each to every worker process and GPU process,
    which feed the GPUs."""
    return max(1, ((os.cpu_count() or 2) - 2 * gpus) // gpus)


class BenchmarkResources:
    def __init__(self, device_index: int = 0, default_arch: str = "sm_90", cache: CompileCache | None = None,
                 compile_workers: int | None = None, replay_book: ReplayBook | None = None,
                 session_factory=None):
        self.device_index, self.default_arch, self.cache = device_index, default_arch, cache
        self.compile_workers = compile_workers or compile_workers_per_gpu()
        self._replay_book = replay_book
        self._session_factory = session_factory  # what the GPU process serves; tests pass a CPU stand-in
        self._pool: CompilePool | None = None
        self._process: WarmProcess[BenchmarkProcess] = WarmProcess(
            lambda: BenchmarkProcess(self.device_index, self._session_factory))

    def pool(self) -> CompilePool:
        if self._pool is None:
            self._pool = CompilePool(self.compile_workers, self.cache)
        return self._pool

    def process(self, spec: KernelSpec) -> BenchmarkProcess | ReplayProcess:
        """The GPU process (started once), or the replay process when the spec asks for replay.
        Raises NoDevice, remembered so a GPU-less worker does not retry the probe for every task."""
        if spec.benchmark.replay:
            return ReplayProcess(self.replay_book(), spec)
        return self._process.get()

    def replay_book(self) -> ReplayBook:
        if self._replay_book is None:
            self._replay_book = ReplayBook()
        return self._replay_book

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        self._process.close()
        self._pool = None
