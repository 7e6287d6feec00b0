"""What a benchmark worker keeps warm between tasks: the compile pool, the compile cache and the process
that owns its GPU. Starting them costs about a second each; a warm worker pays it once."""
import os

from services.benchmark.compile_cache import CompileCache
from services.benchmark.compile_pool import CompilePool
from services.benchmark.gpu_host import GpuHost
from services.benchmark.replay import ReplayBook, ReplayHost
from shared.device.process import NoDevice
from shared.spec import KernelSpec


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
        self._host: GpuHost | None = None
        self._no_device: NoDevice | None = None

    def pool(self) -> CompilePool:
        if self._pool is None:
            self._pool = CompilePool(self.compile_workers, self.cache)
        return self._pool

    def host(self, spec: KernelSpec) -> GpuHost | ReplayHost:
        """The GPU process (started once), or the replay host when the spec asks for replay.
        Raises NoDevice, remembered so a GPU-less worker does not retry the probe for every task."""
        if spec.benchmark.replay:
            return ReplayHost(self.replay_book(), spec)
        if self._no_device is not None:
            raise self._no_device
        if self._host is None:
            try:
                self._host = GpuHost(self.device_index, self._session_factory)
            except NoDevice as exc:
                self._no_device = exc
                raise
        return self._host

    def replay_book(self) -> ReplayBook:
        if self._replay_book is None:
            self._replay_book = ReplayBook()
        return self._replay_book

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        if self._host is not None:
            self._host.close()
        self._pool = self._host = None
