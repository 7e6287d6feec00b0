"""The submitted kernel, checked at admission: compiled once, with the parameters the baseline uses, for the
virtual target of its arch (no GPU needed), in the compile sandbox like every compile of a submitted source.
A kernel that does not compile, or whose parameters do not fit `args`, is refused before anything is recorded,
whatever the strategy: a tuning would otherwise launch it with the wrong arguments, and a compile error would
surface only once a worker reached it. One compile costs about 50 ms (0.4 s when the sandbox starts)."""
import math
import re
import threading

from shared.adapters.device.compiler import CompileLimits, kernel_signature
from shared.adapters.device.nvrtc import CompileError
from shared.domain.dtypes import host_dtype
from shared.domain.errors import FieldError
from shared.domain.signature import mismatches, smaller_constants
from shared.domain.spec import KernelSpec

# NVRTC names the file whose include failed: the kernel's own (kernel.cu, no directory), or a header by its path
_UNOPENED = re.compile(r'^([^\s/()]+)\(\d+\): catastrophic error: cannot open source file "([^"\n]{1,200})"', re.M)
_ERROR_IN_HEADER = re.compile(r"^(\S*/[^\s(]+)\(\d+\): error:")
_LOCATED = re.compile(r"^\S+\(\d+\): ")
_WHAT = {"kforge_implicit.h": " (what nvcc declares for every kernel: the math functions, std's among them)"}
LOG_LINES = 10  # error lines of NVRTC's log quoted in the refusal; the first usually names the cause
SLOT_WAIT_S = 10.0  # how long a submission waits for one of the process's admission compiles to end


class CompilesBusy(RuntimeError):
    """Every admission compile of this process is taken: the submission was not compiled, nor recorded."""


_slots: dict[int, threading.BoundedSemaphore] = {}
_slots_lock = threading.Lock()


def _compile_slots(count: int) -> threading.BoundedSemaphore:
    """The process's admission compiles, `count` at once, shared by every request thread."""
    with _slots_lock:
        return _slots.setdefault(count, threading.BoundedSemaphore(count))


def kernel_errors(spec: KernelSpec, default_arch: str, limits: CompileLimits | None = None,
                  slots: int | None = None) -> list[FieldError]:
    """Every way the submitted kernel cannot run as `spec` describes it, each naming the field and the fix.
    With `slots`, at most that many of these compiles run at once in this process: each may take a compile's
    CPU and memory limits, and nothing else bounds how many submissions arrive together. CompilesBusy when
    none is free within SLOT_WAIT_S."""
    arch = spec.benchmark.arch or default_arch
    gate = _compile_slots(slots) if slots else None
    if gate is not None and not gate.acquire(timeout=SLOT_WAIT_S):
        raise CompilesBusy(f"{slots} submitted kernels are being compiled for admission, as many as this kforge "
                           "compiles at once (KFORGE_ADMISSION_COMPILES); submit again in a few seconds")
    try:
        types, constants = kernel_signature(spec.source, spec.kernel_name, spec.baseline_params(),
                                            spec.compiler_options, arch, limits)
    except CompileError as exc:
        return [FieldError("source", f"{exc}{_quoted(exc.log)}; {_fix(exc.log, spec.baseline_params())}")]
    finally:
        if gate is not None:
            gate.release()
    nbytes = {a.name: math.prod(spec.shape_of(a)) * host_dtype(a.dtype).itemsize for a in spec.constants}
    return [FieldError(m.field, f"{m.what}: {m.fix}")
            for m in mismatches(spec.args, types, constants) + smaller_constants(spec.args, constants, nbytes)]


def _fix(log: str, defines: dict) -> str:
    if clash := _define_in_header(log, defines):
        name, header = clash
        return (f"the tune parameter {name} is defined as a macro (-D{name}={defines[name]}), as Kernel Tuner defines "
                f"every tune parameter, and {header}{_WHAT.get(header, '')} uses {name} as a name of its own: rename "
                "the parameter (in params, tune_params, restrictions and the kernel)")
    missing = _UNOPENED.search(log)
    if missing is None:
        return "fix the kernel (it is compiled with params as -D defines and with compiler_options)"
    return (f"kforge compiles the kernel's source alone, with the CUDA headers and C headers it ships, so no file "
            f"of yours beside it: paste {missing.group(2)}'s contents into the source in place of its #include")


def _define_in_header(log: str, defines: dict) -> tuple[str, str] | None:
    """A define of `defines` on a line NVRTC quotes under an error in a CUDA header, and that header: the macro
    replaced a name of the header's own (CUB's `items_per_thread`, say)."""
    header = None
    for line in log.splitlines():
        if located := _ERROR_IN_HEADER.match(line):
            header = located.group(1).rsplit("/include/", 1)[-1].removeprefix("cccl/").rsplit("/c_headers/", 1)[-1]
        elif _LOCATED.match(line):
            header = None
        elif header is not None:
            for name in defines:
                if re.search(rf"\b{re.escape(name)}\b", line):
                    return name, header
    return None


def _quoted(log: str) -> str:
    errors = [line.strip() for line in log.splitlines() if "error:" in line]
    if not errors:
        return ""
    more = f" (and {len(errors) - LOG_LINES} more)" if len(errors) > LOG_LINES else ""
    return ": " + " | ".join(errors[:LOG_LINES]) + more
