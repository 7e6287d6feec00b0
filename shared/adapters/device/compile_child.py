"""The compile sandbox's child: a process started with an empty environment in an empty working directory,
serving NVRTC compiles one at a time over its stdin and stdout (shared/adapters/device/compiler.py starts it).

It limits itself before NVRTC sees any source: address space and open files, no file writes and no core
dumps; then, where the kernel has Landlock, it confines itself so that it can open only files under the CUDA
header directories kforge passes to NVRTC (and its own empty working directory), and create, write or
remove none anywhere: a second wall behind the compile policy's include checks. Each compile then runs in
a fork of it with a hard CPU-time limit of its own: NVRTC resets the soft limit while it compiles, so only
a hard one holds, and a hard one cannot be raised again for the next compile. The fork also keeps a
compile's memory from outliving it. Whatever NVRTC does with a hostile source, the worst it can do is die
or be killed, and the parent says which.

Run as a script (`python -I compile_child.py CONFIG`), so it finds kforge through the paths in CONFIG.
"""
import json
import os
import resource
import sys


def main() -> None:
    config = json.loads(sys.argv[1])
    sys.path[:0] = config["paths"]
    from shared.adapters.device.frames import read_frame, write_frame

    _limit_self(config["memory_bytes"])
    _load_nvrtc(config["nvrtc"])
    from shared.adapters.device import nvrtc

    include_dirs = tuple(config["include_dirs"])
    nvrtc.build_cubin('extern "C" __global__ void warm_up() {}', "warm_up", ["--gpu-architecture=compute_75"],
                      "compute_75", 1024)  # every fork then starts with NVRTC's builtins loaded
    confined = _confine([*include_dirs, os.getcwd()])
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    write_frame(stdout, {"ready": True, "nvrtc": nvrtc.nvrtc_version(), "confined": confined})
    while (request := read_frame(stdin)) is not None:
        write_frame(stdout, _in_fork(lambda: _answer(nvrtc, request, include_dirs), request["cpu_s"]))


def _in_fork(answer, cpu_s: int) -> dict:
    """`answer()` computed by a fork under a hard limit of `cpu_s` CPU seconds, or how the fork died."""
    from shared.adapters.device.frames import read_frame, write_frame

    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(readable)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
            with os.fdopen(writable, "wb") as pipe:
                write_frame(pipe, answer())
        finally:
            os._exit(0)
    os.close(writable)
    with os.fdopen(readable, "rb") as pipe:
        answered = read_frame(pipe)  # before waiting: a large answer fills the pipe until it is read
    _, status = os.waitpid(pid, 0)
    return answered if answered is not None else {"ok": False, "died": os.waitstatus_to_exitcode(status)}


def _answer(nvrtc, request: dict, include_dirs: tuple[str, ...]) -> dict:
    """The request compiled; the header directories are the child's own (from the parent's config), never the
    request's."""
    args = (request["source"], request["kernel_name"], request["flags"], request["arch"], request["log_chars"],
            include_dirs)
    try:
        if request["op"] == "parameters":
            types, constants = nvrtc.ptx_parameter_types(*args)
            return {"ok": True, "types": types, "constants": constants}
        kernel = nvrtc.build_cubin(*args)
    except nvrtc.CompileError as exc:
        return {"ok": False, "message": str(exc), "log": exc.log}
    return {"ok": True, "cubin": kernel.cubin.hex(), "lowered_name": kernel.lowered_name, "log": kernel.log,
            "compile_ms": kernel.compile_ms, "cache_key": kernel.cache_key}


def _limit_self(memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # NVRTC compiles in memory: any file it writes is an attack
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


# Landlock (linux/landlock.h): the system calls' numbers are the same on every architecture.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_READ = (1 << 2) | (1 << 3)  # LANDLOCK_ACCESS_FS_READ_FILE | _READ_DIR
_HANDLED_BY_ABI = {1: 13, 2: 14, 3: 15, 4: 15}  # how many of the file-system rights each version knows (16 from 5)


def _confine(readable: list[str]) -> bool:
    """From now on this process and its forks may open files only under `readable`, for reading, and may
    create, write, truncate, rename or remove no file anywhere. False (unconfined) where the kernel has no
    Landlock: the compile policy is then the only wall."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # 1: the ABI's version
    if abi < 1:
        return False
    handled = ctypes.c_uint64((1 << _HANDLED_BY_ABI.get(abi, 16)) - 1)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    try:
        for path in readable:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = ctypes.create_string_buffer(struct.pack("=Qi", _READ, fd), 12)  # path_beneath_attr, packed
                if libc.syscall(_ADD_RULE, ruleset, ctypes.c_int(1), rule, ctypes.c_uint32(0)) != 0:
                    return False
            finally:
                os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS, which restricting oneself needs
            return False
        return libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) == 0
    finally:
        os.close(ruleset)


def _load_nvrtc(path: str) -> None:
    """Load NVRTC from the path the parent found it at (the environment that told the parent where to look
    is not passed on); its builtins library sits beside it and must be loaded first."""
    import ctypes
    from pathlib import Path

    library = Path(path)
    builtins = next(iter(sorted(library.parent.glob("libnvrtc-builtins*.so*"))), None)
    if builtins is not None:
        ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)


if __name__ == "__main__":
    main()
