"""NVRTC compilation through cuda-python's bindings: works with no GPU present and returns the log.

(cuda.core's Program reports compile errors by loading the driver library, which fails on GPU-less
machines, so the bindings are used directly.)
"""
import functools
import hashlib
import json
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cuda.bindings import nvrtc

from shared.domain.compile_policy import C_HEADERS, IMPLICIT_HEADER
from shared.domain.spec import ParamValue


class CompileError(RuntimeError):
    def __init__(self, message: str, log: str):
        super().__init__(message, log)  # both in args, so the error pickles back from a pool process
        self.log = log

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True)
class CompiledKernel:
    cubin: bytes
    lowered_name: str
    arch: str
    log: str
    compile_ms: float
    cache_key: str


def nvrtc_version() -> str:
    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def compile_options(defines: dict[str, ParamValue], options: list[str], arch: str) -> list[str]:
    """Tune parameters become -D defines, as Kernel Tuner injects them."""
    return [f"--gpu-architecture={arch}", *(f"-D{k}={v}" for k, v in sorted(defines.items())),
            *(options if any(o.startswith("--std") or o.startswith("-std") for o in options) else [*options, "--std=c++17"])]


@functools.cache
def headers_version() -> str:
    """The versions of the CUDA header packages kforge compiles with ('' for each not installed by pip), and a
    digest of kforge's own C headers."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return ""
    digest = hashlib.sha256()
    for header in sorted(Path(C_HEADERS).iterdir()):
        if header.is_file():
            digest.update(header.name.encode() + b"\0" + header.read_bytes())
    return " ".join([*(installed(p) for p in ("nvidia-cuda-runtime", "nvidia-cuda-cccl")), digest.hexdigest()[:16]])


def cache_key(source: str, kernel_name: str, flags: list[str]) -> str:
    """Content address of a compilation: same source, name, flags, NVRTC and header versions give the same
    cubin. (The compile child reads the header versions before it confines itself.)"""
    blob = json.dumps([source, kernel_name, flags, nvrtc_version(), headers_version()])
    return hashlib.sha256(blob.encode()).hexdigest()


def build_cubin(source: str, kernel_name: str, flags: list[str], arch: str, log_limit: int,
                include_dirs: tuple[str, ...] = ()) -> CompiledKernel:
    """Compile in this process. Only the compile sandbox's child calls this (shared/adapters/device/compiler.py): a
    submitted source must never reach NVRTC in a process that holds secrets or serves requests. NVRTC
    searches `include_dirs` (kforge's CUDA and C headers, and includes its implicit header first) for includes;
    the cache key covers `flags` and the headers' versions, not the directories, which are always kforge's."""
    started = time.perf_counter()
    with _compiled(source, kernel_name, flags, arch, log_limit, include_dirs) as (program, log):
        size = _checked(nvrtc.nvrtcGetCUBINSize(program))
        cubin = bytearray(size)
        _checked(nvrtc.nvrtcGetCUBIN(program, cubin))
        lowered = _checked(nvrtc.nvrtcGetLoweredName(program, kernel_name.encode())).decode()
    elapsed_ms = (time.perf_counter() - started) * 1000
    return CompiledKernel(cubin=bytes(cubin), lowered_name=lowered, arch=arch, log=log, compile_ms=elapsed_ms,
                          cache_key=cache_key(source, kernel_name, flags))


def ptx_parameter_types(source: str, kernel_name: str, flags: list[str], arch: str, log_limit: int,
                        include_dirs: tuple[str, ...] = ()) -> tuple[list[str], dict[str, int]]:
    """The kernel's parameters as PTX declares them, and the module's __constant__ variables with their sizes in
    bytes. Parameters: `u64` for a pointer, `u32`/`s32`/`f32`/... for scalars,
    `b8[16]` for a 16-byte struct. A 2-byte struct aligned to 2, as `__half` and `__nv_bfloat16` are, reads as
    `b16`: it is passed exactly as a 16-bit scalar (a float16 arg). `flags` target a virtual arch
    (compute_NN), so this needs no GPU: the verifier checks a candidate's signature on any machine.
    In-process, like build_cubin."""
    with _compiled(source, kernel_name, flags, arch, log_limit, include_dirs) as (program, _):
        size = _checked(nvrtc.nvrtcGetPTXSize(program))
        ptx = bytearray(size)
        _checked(nvrtc.nvrtcGetPTX(program, ptx))
        lowered = _checked(nvrtc.nvrtcGetLoweredName(program, kernel_name.encode())).decode()
    text = ptx.decode(errors="replace")
    entry = re.search(rf"\.entry\s+{re.escape(lowered)}\s*\((.*?)\)", text, re.S)
    if entry is None:
        raise CompileError(f"NVRTC's PTX has no entry {lowered} for {kernel_name}", "")
    constants = {name: int(bits) // 8 * int(count or 1) for bits, name, count in _PTX_CONSTANT.findall(text)}
    return [_param_type(align, kind, count) for align, kind, count in _PTX_PARAM.findall(entry.group(1))], constants


_PTX_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)"  # alignment, type
                        r"(?:\s+\.ptr(?:\s+\.\w+)*(?:\s+\.align\s+\d+)?)?\s+\w+(?:\[(\d+)\])?")  # name, [bytes]


# `.const .align 4 .b8 coeffs[20];`, `.visible .const .align 8 .f64 scale;`: a __constant__ variable
_PTX_CONSTANT = re.compile(r"^\s*(?:\.(?:visible|extern|weak)\s+)?\.const\s+(?:\.align\s+\d+\s+)?\.[a-z]+(\d+)\s+"
                           r"([\w$]+)(?:\[(\d+)\])?", re.M)


def _param_type(align: str, kind: str, count: str) -> str:
    if kind == "b8" and count == "2" and align == "2":  # __half, __nv_bfloat16
        return "b16"
    return kind + (f"[{count}]" if count else "")


def header_flags(include_dirs: tuple[str, ...]) -> list[str]:
    """NVRTC's options for searching `include_dirs`, and for including IMPLICIT_HEADER first where they hold
    kforge's C headers."""
    implicit = [f"--pre-include={IMPLICIT_HEADER}"] if C_HEADERS in include_dirs else []
    return [*(f"--include-path={d}" for d in include_dirs), *implicit]


@contextmanager
def _compiled(source: str, kernel_name: str, flags: list[str], arch: str, log_limit: int,
              include_dirs: tuple[str, ...]):
    """An NVRTC program compiled with `flags` and `include_dirs`, and its log; CompileError (with the log)
    when it does not."""
    program = _checked(nvrtc.nvrtcCreateProgram(source.encode(), f"{kernel_name}.cu".encode(), 0, [], []))
    try:
        # The name expression lets C++ (mangled, templated) kernels be found, not only extern "C" ones.
        _checked(nvrtc.nvrtcAddNameExpression(program, kernel_name.encode()))
        every = [*flags, *header_flags(include_dirs)]
        (result,) = nvrtc.nvrtcCompileProgram(program, len(every), [f.encode() for f in every])
        log = capped_log(_log(program), log_limit)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC could not compile {kernel_name} for {arch}: {_error_name(result)}", log)
        yield program, log
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _log(program) -> str:
    size = _checked(nvrtc.nvrtcGetProgramLogSize(program))
    # NVRTC writes into the buffer it is given: a mutable one. `b" " * 1` would be CPython's shared
    # one-byte b" ", and an empty log (one NUL) written into it corrupts every b" " in the process.
    buffer = bytearray(size)
    _checked(nvrtc.nvrtcGetProgramLog(program, buffer))
    return bytes(buffer).rstrip(b"\x00 ").decode(errors="replace")


def capped_log(log: str, limit: int) -> str:
    """At most `limit` characters of a log, saying how much was cut: a long source can make NVRTC write a log
    a hundred times its size, and every log is stored in an event."""
    if len(log) <= limit:
        return log
    return log[:limit] + f"\n[log cut: {limit} of {len(log)} characters kept (KFORGE_COMPILE_LOG_CHARS)]"


def _error_name(result) -> str:
    return nvrtc.nvrtcGetErrorString(result)[1].decode()


def _checked(returned):
    """cuda-python returns (status, *values): raise on a bad status, else unwrap the value."""
    status, *values = returned
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC call failed: {_error_name(status)}", "")
    return values[0] if len(values) == 1 else None
