"""A content-addressed store of compiled kernels: the key covers source, kernel name, flags (defines,
options, arch) and the NVRTC version, so a hit is always the cubin NVRTC would produce again."""
import json
import os
from pathlib import Path

from shared.adapters.device.compiler import compile_kernel
from shared.adapters.device.nvrtc import CompiledKernel, cache_key, compile_options
from shared.domain.spec import ParamValue


class CompileCache:
    def __init__(self, root: Path):
        self.root = root
        self.hits = 0
        self.misses = 0

    def lookup(self, source: str, kernel_name: str, defines: dict[str, ParamValue], options: list[str],
               arch: str) -> CompiledKernel | None:
        """The cached compilation of exactly this request, if there is one."""
        return self.get(cache_key(source, kernel_name, compile_options(defines, options, arch)))

    def get(self, key: str) -> CompiledKernel | None:
        cubin, meta = self._paths(key)
        try:
            info = json.loads(meta.read_text())
            kernel = CompiledKernel(cubin=cubin.read_bytes(), cache_key=key, **info)
        except (OSError, ValueError, TypeError):  # absent, or half-written by a crashed writer
            self.misses += 1
            return None
        self.hits += 1
        return kernel

    def put(self, kernel: CompiledKernel) -> None:
        cubin, meta = self._paths(kernel.cache_key)
        cubin.parent.mkdir(parents=True, exist_ok=True)
        info = {"lowered_name": kernel.lowered_name, "arch": kernel.arch, "log": kernel.log,
                "compile_ms": kernel.compile_ms}
        # Write-then-rename: a reader in another worker sees a whole entry or none. The metadata goes
        # last because get() reads it first.
        for path, data in ((cubin, kernel.cubin), (meta, json.dumps(info).encode())):
            partial = path.with_suffix(f"{path.suffix}.{os.getpid()}.tmp")
            partial.write_bytes(data)
            partial.replace(path)

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / f"{key}.cubin", folder / f"{key}.json"


def compile_through(cache: CompileCache | None, source: str, kernel_name: str, defines: dict[str, ParamValue],
                    options: list[str], arch: str) -> tuple[CompiledKernel, bool]:
    """The kernel from the cache when it is there, else compiled now (and stored); and whether it was a hit.
    Raises CompileError as compile_kernel does."""
    cached = cache.lookup(source, kernel_name, defines, options, arch) if cache else None
    if cached is not None:
        return cached, True
    kernel = compile_kernel(source, kernel_name, defines, options, arch)
    if cache:
        cache.put(kernel)
    return kernel, False
