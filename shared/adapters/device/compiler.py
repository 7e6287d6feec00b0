"""Every compile of a submitted or generated kernel goes through here: checked against the compile policy,
then run by NVRTC in a sandboxed child process (shared/adapters/device/compile_child.py), never in the calling
process. A gateway or CLI that runs workers in its own threads thus never has NVRTC parse a stranger's
source inside it, and a compile bomb costs one child, not the service.

The child starts with an empty environment (no secret reaches it) in an empty working directory of its
own, under address-space, CPU-time and file-size limits; the parent adds a wall-clock deadline. NVRTC
searches only the headers kforge ships (`vetted_headers()`: nvidia-cuda-runtime's and nvidia-cuda-cccl's
include directories, then kforge's own C headers), passed by kforge, never by a request; where the kernel has
Landlock the child can open no other file. A child
that is killed or dies is reported as a CompileError that says which limit it hit, and the next compile
starts a fresh child. Children are kept warm between compiles (starting one costs about 0.2 s).

The children's working directories lie under one folder per process, kforge-compile-<pid>-<random> in the
temporary directory, removed when the process exits: at exit (atexit, after a return, an exception or a
signal turned into one) and by kforge's quick exits (`remove_workdirs`, before os._exit). A process that died
without either (SIGKILL, a crash) leaves its folder, which the next process to start a child removes, its pid
having no process.
"""
import atexit
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from shared.adapters.device.frames import write_frame
from shared.adapters.device.nvrtc import CompiledKernel, CompileError, compile_options
from shared.adapters.settings import Settings
from shared.domain.compile_policy import (PolicyViolation, check_define_value, check_macro_names, check_options,
                                          check_source, option_macros, option_values, vetted_headers)
from shared.domain.spec import ParamValue

CHILD = Path(__file__).with_name("compile_child.py")
STARTUP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class CompileLimits:
    timeout_s: float  # wall-clock, per compile
    cpu_s: int  # CPU time, per compile
    memory_bytes: int  # the child's address space
    log_chars: int  # the most of NVRTC's log kept

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> "CompileLimits":
        s = settings or Settings()
        return cls(timeout_s=s.compile_timeout_s, cpu_s=s.compile_cpu_s, memory_bytes=s.compile_memory_mb << 20,
                   log_chars=s.compile_log_chars)


def compile_kernel(source: str, kernel_name: str, defines: dict[str, ParamValue], options: list[str], arch: str,
                   limits: CompileLimits | None = None) -> CompiledKernel:
    """The kernel compiled to a cubin for `arch`; CompileError (with NVRTC's log, or the limit a killed
    compile hit) when it cannot be."""
    flags = _checked_flags(source, defines, options, arch)
    answer = _run({"op": "compile", "source": source, "kernel_name": kernel_name, "flags": flags, "arch": arch},
                  kernel_name, limits)
    return CompiledKernel(cubin=bytes.fromhex(answer["cubin"]), lowered_name=answer["lowered_name"], arch=arch,
                          log=answer["log"], compile_ms=answer["compile_ms"], cache_key=answer["cache_key"])


def parameter_types(source: str, kernel_name: str, defines: dict[str, ParamValue], options: list[str], arch: str,
                    limits: CompileLimits | None = None) -> list[str]:
    """The kernel's parameters as PTX declares them (`u64` for a pointer, `f32`, `b8[16]`, ...). Compiled for
    the arch's virtual target, so it needs no GPU: the verifier checks a signature on any machine."""
    return kernel_signature(source, kernel_name, defines, options, arch, limits)[0]


def kernel_signature(source: str, kernel_name: str, defines: dict[str, ParamValue], options: list[str], arch: str,
                     limits: CompileLimits | None = None) -> tuple[list[str], dict[str, int]]:
    """The kernel's parameter types (as parameter_types) and its module's __constant__ variables, by name, with
    their sizes in bytes."""
    virtual = arch.replace("sm_", "compute_")
    flags = _checked_flags(source, defines, options, virtual)
    answer = _run({"op": "parameters", "source": source, "kernel_name": kernel_name, "flags": flags, "arch": virtual},
                  kernel_name, limits)
    return answer["types"], answer["constants"]


def warm(count: int, limits: CompileLimits | None = None) -> set[int]:
    """Start `count` children now (in parallel) and keep them for the next compiles; their process ids."""
    limits = limits or CompileLimits.from_settings()
    started: list[Sandbox] = []
    threads = [threading.Thread(target=lambda: started.append(Sandbox(limits))) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for sandbox in started:
        _SANDBOXES.give_back(sandbox)
    return {sandbox.pid for sandbox in started}


def import_path() -> list[str]:
    """This process's import path, for a child of it that runs kforge's code without its environment."""
    return [p for p in sys.path if p and os.path.isdir(p)]


def _checked_flags(source: str, defines: dict[str, ParamValue], options: list[str], arch: str) -> list[str]:
    try:
        check_options(options)
        check_source(source, options=options)
        for name, value in defines.items():
            check_define_value(name, value)
        check_macro_names(source, {**{name: f"tune parameter {name}" for name in defines}, **option_macros(options)},
                          options=options, values={**{name: str(value) for name, value in defines.items()},
                                                   **option_values(options)})
    except PolicyViolation as exc:
        raise CompileError(str(exc), "") from None
    return compile_options(defines, options, arch)


def _run(request: dict, kernel_name: str, limits: CompileLimits | None) -> dict:
    limits = limits or CompileLimits.from_settings()
    with _SANDBOXES.lease(limits) as sandbox:
        answer = sandbox.run({**request, "cpu_s": limits.cpu_s, "log_chars": limits.log_chars}, kernel_name)
    if "died" in answer:
        raise CompileError(_death_reason(answer["died"], kernel_name, limits), "")
    if not answer["ok"]:
        raise CompileError(answer["message"], answer["log"])
    return answer


def _death_reason(code: int, what: str, limits: CompileLimits, stderr: str = "") -> str:
    """Why a compiler process ended without answering (`code` as Popen.returncode gives it), naming the limit
    it hit and the setting that changes it."""
    if code == -signal.SIGXCPU or code == -signal.SIGKILL:
        return (f"the compile of {what} used more than its {limits.cpu_s} s of CPU time and was killed "
                "(KFORGE_COMPILE_CPU_S)")
    if code == -signal.SIGXFSZ:
        return f"the compile of {what} tried to write a file, which compiles may not, and was killed"
    died = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    memory = "MemoryError" in stderr or "bad_alloc" in stderr or code in (-signal.SIGABRT, -signal.SIGSEGV)
    hint = (f"; it may have run out of its {limits.memory_bytes >> 20} MiB of memory (KFORGE_COMPILE_MEMORY_MB)"
            if memory else "")
    return f"NVRTC died compiling {what} ({died}){hint}"


class Sandbox:
    """One child process, in a process group of its own (with the fork running the current compile), and its
    working directory."""

    def __init__(self, limits: CompileLimits):
        from cuda.pathfinder import load_nvidia_dynamic_lib  # where this process finds NVRTC, the child does too

        self.limits = limits
        self.workdir = _WORKDIRS.new()
        config = {"paths": import_path(), "memory_bytes": limits.memory_bytes,
                  "nvrtc": load_nvidia_dynamic_lib("nvrtc").abs_path, "include_dirs": list(vetted_headers().dirs)}
        self.process = subprocess.Popen([sys.executable, "-I", str(CHILD), json.dumps(config)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env={}, cwd=self.workdir, start_new_session=True)
        self.pid = self.process.pid
        self.timed_out = False  # set when the deadline passed and the child was killed
        ready = self._receive(time.monotonic() + STARTUP_TIMEOUT_S)
        if ready is None or not ready.get("ready"):
            reason = self._death("the sandbox's start")
            self.close()
            raise CompileError(f"the compile sandbox did not start: {reason}", "")
        self.confined = bool(ready.get("confined"))  # Landlock holds it to the header directories

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, request: dict, kernel_name: str) -> dict:
        """The child's answer; CompileError when the child had to be killed or died (it is then closed)."""
        try:
            write_frame(self.process.stdin, request)
        except OSError:
            pass  # it died: reading says how
        answer = self._receive(time.monotonic() + self.limits.timeout_s)
        if answer is None:
            reason = self._death(kernel_name)
            self.close()
            raise CompileError(reason, "")
        return answer

    def _receive(self, deadline: float) -> dict | None:
        """The next frame, or None when the child closed its end or the deadline passed (it is then killed)."""
        header = self._read(4, deadline)
        if header is None:
            return None
        body = self._read(int.from_bytes(header, "big"), deadline)
        return None if body is None else json.loads(body)

    def _read(self, size: int, deadline: float) -> bytes | None:
        fd, chunks, received = self.process.stdout.fileno(), [], 0
        while received < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                self.timed_out = True
                self._kill()
                return None
            chunk = os.read(fd, min(size - received, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            received += len(chunk)
        return b"".join(chunks)

    def _death(self, what: str) -> str:
        code = self.process.wait()
        if self.timed_out:
            return (f"the compile of {what} ran past its wall-clock limit of {self.limits.timeout_s:g} s and was "
                    "killed (KFORGE_COMPILE_TIMEOUT_S)")
        return _death_reason(code, what, self.limits, self.process.stderr.read(2000).decode(errors="replace"))

    def _kill(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the child and the fork compiling for it
        except ProcessLookupError:
            pass

    def close(self) -> None:
        self._kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            pipe.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


class _Sandboxes:
    """Idle children by their limits, shared by the threads of this process: a compile leases one (or starts
    one when none is idle) and gives it back when it is still alive."""

    MAX_IDLE = (os.cpu_count() or 2) + 2

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: dict[CompileLimits, list[Sandbox]] = {}

    @contextmanager
    def lease(self, limits: CompileLimits) -> Iterator[Sandbox]:
        with self._lock:
            idle = self._idle.get(limits, [])
            sandbox = idle.pop() if idle else None
        sandbox = sandbox if sandbox is not None and sandbox.alive else Sandbox(limits)
        try:
            yield sandbox
        finally:
            self.give_back(sandbox)

    def give_back(self, sandbox: Sandbox) -> None:
        with self._lock:
            idle = self._idle.setdefault(sandbox.limits, [])
            if sandbox.alive and len(idle) < self.MAX_IDLE:
                idle.append(sandbox)
                return
        sandbox.close()

    def close_all(self) -> None:
        with self._lock:
            every = [s for idle in self._idle.values() for s in idle]
            self._idle.clear()
        for sandbox in every:
            sandbox.close()


class _Workdirs:
    """This process's folder of working directories, made at its first child's start (when the stale folders of
    dead processes are removed), and removed at its exit. A fork makes its own (the pid is checked): it never
    removes its parent's."""

    PREFIX = "kforge-compile-"
    NAME = re.compile(r"kforge-compile-(\d+)-[a-z0-9_]+")  # mkdtemp's random part holds neither - nor upper case

    def __init__(self):
        self._lock = threading.Lock()
        self._folder: tuple[int, str] | None = None  # (pid of the process that made it, its path)

    def new(self) -> str:
        """A fresh, empty working directory for one child."""
        with self._lock:
            if self._folder is None or self._folder[0] != os.getpid():
                remove_stale_workdirs()
                self._folder = (os.getpid(), tempfile.mkdtemp(prefix=f"{self.PREFIX}{os.getpid()}-"))
            return tempfile.mkdtemp(prefix="sandbox-", dir=self._folder[1])

    def remove(self) -> None:
        """Without the lock: a signal handler may call it while its thread holds it (a child started meanwhile
        then fails, at exit)."""
        folder, self._folder = self._folder, None
        if folder is not None and folder[0] == os.getpid():
            shutil.rmtree(folder[1], ignore_errors=True)


def remove_stale_workdirs(directory: str | None = None) -> list[Path]:
    """Remove the folders of working directories (in `directory`, by default the temporary one) whose process is
    gone, the ones a killed process left; those removed. A pid reused since stays alive to this check, and its
    folder is left until that process is gone too."""
    removed = []
    for path in Path(directory or tempfile.gettempdir()).glob(_Workdirs.PREFIX + "*"):
        found = _Workdirs.NAME.fullmatch(path.name)
        if found and not _alive(int(found[1])) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's; no pid at all: left alone either way
        return True
    return True


def remove_workdirs() -> None:
    """Remove this process's working directories, the children's or not: before os._exit, which skips atexit (a
    child outlives its directory; it ends when its pipe closes, with this process)."""
    _WORKDIRS.remove()


def shutdown() -> None:
    """At exit: close the idle children and remove this process's working directories."""
    _SANDBOXES.close_all()
    _WORKDIRS.remove()


_SANDBOXES = _Sandboxes()
_WORKDIRS = _Workdirs()
atexit.register(shutdown)
