"""The benchmark's GPU process: a GpuProcess (shared/adapters/device/process.py) serving a BenchmarkSession
(session.py), which prepares a space, measures configurations or times two in turn, and after a replacement
(a fault, hang or crash cost the old process) uploads the space again before the next request runs. The
verifier calls a plain GpuProcess serving its VerifierSession: it has no space to restore."""
from collections.abc import Callable

from services.benchmark.measurement import Duel, Measured, Order, Paired, Setup
from shared.adapters.device.process import Failed, GpuProcess

PREPARE_EXTRA_S = 120.0  # uploading inputs and running the reference take longer than one configuration


class BenchmarkProcess(GpuProcess):
    """A GpuProcess that keeps the space it was last given, and prepares it again on every replacement."""

    def __init__(self, device_index: int = 0, session_factory: Callable | None = None):
        """`session_factory(device_index)` builds what the child serves; by default the real BenchmarkSession
        (tests pass a CPU stand-in that hangs or crashes on cue). Raises NoDevice without a usable GPU."""
        from services.benchmark.session import BenchmarkSession  # CUDA is touched only in the child

        self._setup: Setup | None = None
        super().__init__(device_index, session_factory or BenchmarkSession)

    def prepare(self, setup: Setup) -> Failed | None:
        self._setup = setup
        return self._send_prepare()

    def measure(self, order: Order) -> Measured | Failed:
        return self._in_space("measure", order)

    def compare(self, duel: Duel) -> Paired | Failed:
        return self._in_space("compare", duel)

    def _in_space(self, op: str, request) -> Measured | Paired | Failed:
        assert self._setup is not None, "prepare() first"
        replaced_before = self.replacements
        outcome = self.call(op, request, self._setup.spec.benchmark.timeout_s, "benchmark.timeout_s")
        if self.replacements != replaced_before:
            failed = self._send_prepare()
            if failed is not None:
                raise RuntimeError(f"the replacement GPU process could not prepare the space again: {failed.reason}")
        return outcome

    def _send_prepare(self) -> Failed | None:
        return self.call("prepare", self._setup, self._setup.spec.benchmark.timeout_s + PREPARE_EXTRA_S,
                         "benchmark.timeout_s")
