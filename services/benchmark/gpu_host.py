"""The process that owns a GPU, and its replacement when a kernel breaks it.

A benchmark worker never touches CUDA itself: it talks to one spawned child per GPU over a pipe. A kernel
that faults (a sticky error poisons the CUDA context), hangs past its timeout or crashes the process costs
that child; the worker records the failure for that configuration, starts a fresh child, uploads the
inputs again and goes on with the next configuration.
"""
import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection

from services.benchmark.measurement import DeviceInfo, Failed, Measured, Order, Setup

STARTUP_TIMEOUT_S = 120.0
PREPARE_EXTRA_S = 120.0  # uploading inputs and running the reference take longer than one configuration


class NoDevice(RuntimeError):
    """The child found no usable GPU; the message is why."""


class GpuHost:
    def __init__(self, device_index: int = 0, session_factory: Callable | None = None):
        """`session_factory(device_index)` builds what the child serves; by default the real DeviceSession
        (tests pass a CPU stand-in that hangs or crashes on cue). It must be importable by name."""
        self.device_index = device_index
        self.session_factory = session_factory
        self.replacements = 0
        self._setup: Setup | None = None
        self._start()

    @property
    def device(self) -> DeviceInfo:
        return self._device

    def prepare(self, setup: Setup) -> Failed | None:
        self._setup = setup
        outcome = self._send_prepare()
        if isinstance(outcome, Failed) and outcome.poisoned:
            self._replace(prepare=False)
        return outcome

    def measure(self, order: Order) -> Measured | Failed:
        assert self._setup is not None, "prepare() first"
        outcome = self._call("measure", order, self._setup.spec.benchmark.timeout_s)
        if isinstance(outcome, Failed) and outcome.poisoned:
            self._replace(prepare=True)
        return outcome

    def close(self) -> None:
        try:
            self._conn.send(("close", None))
        except (OSError, EOFError):
            pass
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()

    # --- the child's life ---
    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # never fork: CUDA state does not survive it
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, self.device_index, self.session_factory), daemon=True,
                                        name=f"kforge-gpu{self.device_index}")
        self._process.start()
        child.close()
        if not self._conn.poll(STARTUP_TIMEOUT_S):
            self._process.kill()
            raise NoDevice(f"the GPU process for device {self.device_index} did not start in {STARTUP_TIMEOUT_S:.0f} s")
        kind, value = self._conn.recv()
        if kind == "no_device":
            self._process.join(timeout=5)
            raise NoDevice(value)
        self._device = value

    def _replace(self, prepare: bool) -> None:
        self._process.kill()
        self._process.join(timeout=10)
        self._conn.close()
        self.replacements += 1
        self._start()
        if prepare and self._setup is not None:
            failed = self._send_prepare()
            if failed is not None:
                raise RuntimeError(f"the replacement GPU process could not prepare the space again: {failed.reason}")

    def _send_prepare(self) -> Failed | None:
        return self._call("prepare", self._setup, self._setup.spec.benchmark.timeout_s + PREPARE_EXTRA_S)

    def _call(self, op: str, payload, timeout_s: float):
        try:
            self._conn.send((op, payload))
            if not self._conn.poll(timeout_s):
                return Failed("timeout", f"no answer within {timeout_s:g} s (benchmark.timeout_s): the kernel hangs or "
                                         "runs far too long; its process was killed and replaced", poisoned=True)
            return self._conn.recv()
        except (EOFError, OSError, ConnectionError):
            self._process.join(timeout=5)  # reap it, so its exit code is known
            code = self._process.exitcode
            return Failed("crashed", f"the GPU process died (exit code {code}) while running this configuration",
                          poisoned=True)


def _serve(conn: Connection, device_index: int, session_factory: Callable | None) -> None:
    """The child: own the GPU, answer prepare/measure until told to close or the context is poisoned."""
    from services.benchmark.gpu import DeviceSession, NoCudaDevice

    try:
        session = (session_factory or DeviceSession)(device_index)
    except NoCudaDevice as exc:
        conn.send(("no_device", str(exc)))
        return
    conn.send(("ready", session.info))
    while True:
        op, payload = conn.recv()
        if op == "close":
            return
        try:
            result = getattr(session, op)(payload)
        except Exception as exc:  # a driver error outside a launch: this context is not to be trusted again
            result = Failed("crashed", f"{type(exc).__name__}: {exc}", poisoned=True)
        conn.send(result)
        if isinstance(result, Failed) and result.poisoned:
            return
