"""The process that owns a GPU, and its replacement when a kernel breaks it.

A worker never touches CUDA itself: it talks to one spawned child per GPU over a pipe. Two names, the same
in both GPU services:
- GpuProcess: the worker's handle on that child (start, call, replace, close). The benchmark's is a
  subclass, BenchmarkProcess (services/benchmark/process.py); the verifier calls a GpuProcess directly.
- GpuSession (session.py): what the child serves, built by an importable factory, with methods that take one
  picklable request each: BenchmarkSession (services/benchmark/session.py) or VerifierSession
  (services/verifier/session.py).
A kernel that faults (a sticky error poisons the CUDA context), hangs past its timeout or crashes the
process costs that child; the caller gets a Failed saying which, and the next call runs on a fresh child.
WarmProcess keeps a worker's GPU process between tasks, and remembers NoDevice so that a GPU-less worker
probes once.
"""
import multiprocessing
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Generic, TypeVar

from shared.adapters.device.probe import DeviceInfo, NoCudaDevice

STARTUP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Failed:
    """Something a kernel or the device did wrong, in the driver's words where it spoke."""

    stage: str  # e.g. load | launch | output | timeout | crashed
    reason: str
    poisoned: bool = False  # the CUDA context is unusable: the process owning it must be replaced
    details: dict[str, float] = field(default_factory=dict)


class NoDevice(RuntimeError):
    """The child found no usable GPU; the message is why."""


def device_index(gpu: str) -> int:
    """The device a worker uses for queue <service>.<gpu>: 0 in a worker pinned to that GPU (it sees only
    that one, `kforge worker` sets KFORGE_PINNED_GPU), else the GPU id itself (embedded mode)."""
    return 0 if os.environ.get("KFORGE_PINNED_GPU") else int(gpu)


class GpuProcess:
    """The worker's handle on the spawned child that owns one GPU and serves a GpuSession."""

    def __init__(self, device_index: int, session_factory: Callable[[int], object]):
        """`session_factory(device_index)` builds what the child serves (it has an `info: DeviceInfo`);
        it must be importable by name, since the child is spawned."""
        self.device_index = device_index
        self.session_factory = session_factory
        self.replacements = 0
        self._start()

    @property
    def device(self) -> DeviceInfo:
        return self._device

    def call(self, op: str, request, timeout_s: float, limit_name: str = "timeout_s"):
        """The session's answer to `op(request)`, or Failed when the child hangs, dies or reports a
        poisoned context; in each of those cases the child has been replaced before this returns."""
        outcome = self._call(op, request, timeout_s, limit_name)
        if isinstance(outcome, Failed) and outcome.poisoned:
            self.replace()
        return outcome

    def replace(self) -> None:
        self._process.kill()
        self._process.join(timeout=10)
        self._conn.close()
        self.replacements += 1
        self._start()

    def close(self) -> None:
        try:
            self._conn.send(("close", None))
        except (OSError, EOFError):
            pass
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # never fork: CUDA state does not survive it
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, self.device_index, self.session_factory),
                                        daemon=True, name=f"kforge-gpu{self.device_index}")
        # Started with SIGINT blocked, a mask the child inherits until it has set SIGINT aside: a Ctrl-C while
        # it imports would otherwise print a KeyboardInterrupt traceback from the child.
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
        child.close()
        if not self._conn.poll(STARTUP_TIMEOUT_S):
            self._process.kill()
            raise NoDevice(f"the GPU process for device {self.device_index} did not start in {STARTUP_TIMEOUT_S:.0f} s")
        kind, value = self._conn.recv()
        if kind == "no_device":
            self._process.join(timeout=5)
            raise NoDevice(value)
        self._device = value

    def _call(self, op: str, request, timeout_s: float, limit_name: str):
        try:
            self._conn.send((op, request))
            if not self._conn.poll(timeout_s):
                return Failed("timeout", f"no answer within {timeout_s:g} s ({limit_name}): the kernel hangs or "
                                         "runs far too long; its process was killed and replaced", poisoned=True)
            return self._conn.recv()
        except (EOFError, OSError, ConnectionError):
            self._process.join(timeout=5)  # reap it, so its exit code is known
            return Failed("crashed", f"the GPU process died (exit code {self._process.exitcode}) while running "
                                     "this kernel", poisoned=True)


Process = TypeVar("Process", bound=GpuProcess)


class WarmProcess(Generic[Process]):
    """A worker's GPU process, started on first use and kept for the next task. NoDevice, once raised, is
    remembered and raised again, so a worker without a usable GPU probes once, not for every task."""

    def __init__(self, start: Callable[[], Process]):
        self._start = start
        self._process: Process | None = None
        self._no_device: NoDevice | None = None

    def get(self) -> Process:
        """The process, started now if it is not running; raises NoDevice without a usable GPU."""
        if self._no_device is not None:
            raise self._no_device
        if self._process is None:
            try:
                self._process = self._start()
            except NoDevice as exc:
                self._no_device = exc
                raise
        return self._process

    def close(self) -> None:
        """Close the process if one runs; a later get() starts another (a remembered NoDevice stays)."""
        if self._process is not None:
            self._process.close()
        self._process = None


def _serve(conn: Connection, device_index: int, session_factory: Callable) -> None:
    """The child: own the GPU, answer requests until told to close, the context is poisoned, or the worker
    that owns it has gone (an interrupted `kforge tune` exits while its GPU process may still be starting).
    Ctrl-C reaches every process of the terminal's foreground group: the child ignores it, as the worker
    decides when the child ends (an interrupted `kforge tune` kills it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by the parent while it started this
    try:
        _answer_requests(conn, device_index, session_factory)
    except (EOFError, BrokenPipeError, ConnectionError):
        return


def _answer_requests(conn: Connection, device_index: int, session_factory: Callable) -> None:
    try:
        session = session_factory(device_index)
    except NoCudaDevice as exc:
        conn.send(("no_device", str(exc)))
        return
    conn.send(("ready", session.info))
    while True:
        op, request = conn.recv()
        if op == "close":
            return
        try:
            result = getattr(session, op)(request)
        except Exception as exc:  # a driver error outside a launch: this context is not to be trusted again
            result = Failed("crashed", f"{type(exc).__name__}: {exc}", poisoned=True)
        conn.send(result)
        if isinstance(result, Failed) and result.poisoned:
            return
