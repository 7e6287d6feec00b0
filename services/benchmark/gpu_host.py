"""The benchmark's side of the process that owns a GPU: prepare a space, measure configurations or time two
in turn, and after a replacement (a fault, hang or crash cost the old process) upload the space again before
the next request runs."""
from collections.abc import Callable

from services.benchmark.measurement import Duel, Measured, Order, Paired, Setup
from shared.device.process import DeviceProcess, Failed

PREPARE_EXTRA_S = 120.0  # uploading inputs and running the reference take longer than one configuration


class GpuHost:
    def __init__(self, device_index: int = 0, session_factory: Callable | None = None):
        """`session_factory(device_index)` builds what the child serves; by default the real DeviceSession
        (tests pass a CPU stand-in that hangs or crashes on cue). Raises NoDevice without a usable GPU."""
        from services.benchmark.gpu import DeviceSession  # CUDA is touched only in the child

        self._process = DeviceProcess(device_index, session_factory or DeviceSession)
        self._setup: Setup | None = None

    @property
    def device(self):
        return self._process.device

    @property
    def replacements(self) -> int:
        return self._process.replacements

    def prepare(self, setup: Setup) -> Failed | None:
        self._setup = setup
        return self._send_prepare()

    def measure(self, order: Order) -> Measured | Failed:
        return self._call("measure", order)

    def compare(self, duel: Duel) -> Paired | Failed:
        return self._call("compare", duel)

    def _call(self, op: str, request) -> Measured | Paired | Failed:
        assert self._setup is not None, "prepare() first"
        replaced_before = self._process.replacements
        outcome = self._process.call(op, request, self._setup.spec.benchmark.timeout_s, "benchmark.timeout_s")
        if self._process.replacements != replaced_before:
            failed = self._send_prepare()
            if failed is not None:
                raise RuntimeError(f"the replacement GPU process could not prepare the space again: {failed.reason}")
        return outcome

    def close(self) -> None:
        self._process.close()

    def _send_prepare(self) -> Failed | None:
        return self._process.call("prepare", self._setup, self._setup.spec.benchmark.timeout_s + PREPARE_EXTRA_S,
                                  "benchmark.timeout_s")
