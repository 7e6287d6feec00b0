"""GpuSession: what every session in a GPU process needs: the device and a stream, every copy and launch
checked, failures in the driver's words. Runs only in the process that owns the GPU (see process.py). The
benchmark's BenchmarkSession and the verifier's VerifierSession derive from it; the sanitizer's runner uses
it as it is."""
import numpy as np

from shared.adapters.device.probe import probe
from shared.adapters.device.process import Failed

# Errors after which the context cannot be used again (CUDA calls them sticky).
STICKY = ("ILLEGAL_ADDRESS", "ILLEGAL_INSTRUCTION", "MISALIGNED_ADDRESS", "INVALID_PC", "LAUNCH_FAILED",
          "HARDWARE_STACK_ERROR", "ASSERT", "LAUNCH_TIMEOUT", "ECC_UNCORRECTABLE", "CONTEXT_IS_DESTROYED")


class DriverError(RuntimeError):
    pass


class GpuSession:
    """Served in the child of a GpuProcess: one device, one stream, the buffers it allocated."""

    def __init__(self, index: int):
        from cuda.core import Device

        self.info = probe(index)
        self.device = Device(index)
        self.device.set_current()
        self.stream = self.device.create_stream()
        self._buffers: list = []
        _no_persisting_l2()

    # --- kernels ---
    def load(self, compiled):
        """The kernel from a cubin, or Failed (stage load) with the driver's words."""
        from cuda.core import ObjectCode

        try:
            return ObjectCode.from_cubin(compiled.cubin).get_kernel(compiled.lowered_name)
        except Exception as exc:
            return self.failure("load", exc)

    def timed_launch(self, kernel, grid, block, args, *, shared_bytes: int, before=None) -> float | Failed:
        """Launch once, with `shared_bytes` of dynamic shared memory per block (the spec's smem_args), between
        two timing events and wait: milliseconds, or Failed with the driver's words (a fault surfaces at the
        wait). `before()` enqueues work that must not be timed into the stream."""
        from cuda.core import EventOptions, LaunchConfig, launch

        timed = EventOptions(timing_enabled=True)
        shown = f"grid {grid}, block {block}"
        if shared_bytes:
            shown += f", {shared_bytes} bytes of dynamic shared memory"
        try:
            refused = self._allow_shared_memory(kernel, shared_bytes)
            if refused is not None:
                return refused
            if before is not None:
                before()
            start = self.stream.record(options=timed)
            launch(self.stream, LaunchConfig(grid=grid, block=block, shmem_size=shared_bytes), kernel, *args)
            end = self.stream.record(options=timed)
            end.sync()  # raises on a fault in the kernel
            return float(end - start)
        except Exception as exc:  # cuda.core raises CUDAError for launch errors and faults
            return self.failure("launch", exc, f"{shown}: ")

    def _allow_shared_memory(self, kernel, shared_bytes: int) -> Failed | None:
        """A block gets 48 KiB of shared memory unless its kernel opts in to more, up to the device's limit:
        opt in for what the launch asks, or say why the configuration cannot run."""
        from cuda.bindings import driver

        properties = self.device.properties
        if shared_bytes <= properties.max_shared_memory_per_block:
            return None
        limit = properties.max_shared_memory_per_block_optin
        if shared_bytes > limit:
            return Failed("launch", f"smem_args asks {shared_bytes} bytes of dynamic shared memory per block, more "
                                    f"than the {limit} this device allows: lower smem_args.size or add a "
                                    "restriction that leaves this configuration out")
        _checked(driver.cuKernelSetAttribute(
            driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes,
            kernel.handle, self.device.device_id))
        return None

    def fill_constant(self, kernel, name: str, source: int, nbytes: int) -> None:
        """Copy `nbytes` from device address `source` into the `__constant__ name` of the kernel's module, on
        the stream (so after what came before, outside any timed region). A kernel without one (a candidate that
        no longer reads it, so the compiler dropped it) is left as it is; one smaller than `nbytes` is an error."""
        from cuda.bindings import driver

        status, library = driver.cuKernelGetLibrary(kernel.handle)
        if status != driver.CUresult.CUDA_SUCCESS:
            raise DriverError(f"cuKernelGetLibrary: {status.name}")
        status, address, size = driver.cuLibraryGetGlobal(library, name.encode())
        if status == driver.CUresult.CUDA_ERROR_NOT_FOUND:
            return
        if status != driver.CUresult.CUDA_SUCCESS:
            raise DriverError(f"cuLibraryGetGlobal({name}): {status.name}")
        if size < nbytes:
            raise ValueError(f"__constant__ {name} holds {size} bytes, and args gives it {nbytes}: make its shape "
                             "in args fit the declaration")
        _checked(driver.cuMemcpyDtoDAsync(int(address), source, nbytes, int(self.stream.handle)))

    @staticmethod
    def failure(stage: str, exc: Exception, prefix: str = "") -> Failed:
        message = f"{exc}".strip() or type(exc).__name__
        return Failed(stage, prefix + message, poisoned=any(code in message for code in STICKY))

    # --- memory, every call checked ---
    def allocate(self, nbytes: int, keep: bool = True):
        buffer = self.device.allocate(max(nbytes, 1), stream=self.stream)
        if keep:
            self._buffers.append(buffer)
        return buffer

    def upload(self, array: np.ndarray, keep: bool = True, into=None, offset: int = 0):
        """Copy `array` to a new buffer (or into `into` at byte `offset`); returns the buffer."""
        from cuda.bindings import driver

        buffer = into if into is not None else self.allocate(array.nbytes, keep)
        self.stream.sync()
        _checked(driver.cuMemcpyHtoD(int(buffer.handle) + offset, np.ascontiguousarray(array).ctypes.data,
                                     array.nbytes))
        return buffer

    def download(self, array: np.ndarray, buffer, offset: int = 0) -> np.ndarray:
        """Fill `array` from `buffer` starting at byte `offset`; returns it."""
        from cuda.bindings import driver

        self.stream.sync()
        _checked(driver.cuMemcpyDtoH(array.ctypes.data, int(buffer.handle) + offset, array.nbytes))
        return array

    def copy(self, dst, src) -> None:
        from cuda.bindings import driver

        _checked(driver.cuMemcpyDtoDAsync(int(dst.handle), int(src.handle), src.size, int(self.stream.handle)))

    def fill(self, buffer, byte: int = 0, offset: int = 0, nbytes: int | None = None) -> None:
        """Set `nbytes` bytes (default: the rest of the buffer) from byte `offset` to `byte`."""
        from cuda.bindings import driver

        count = buffer.size - offset if nbytes is None else nbytes
        _checked(driver.cuMemsetD8Async(int(buffer.handle) + offset, byte, count, int(self.stream.handle)))

    def release(self) -> None:
        for buffer in self._buffers:
            buffer.close(self.stream)
        self._buffers = []


def _no_persisting_l2() -> None:
    """Keep the persisting-L2 carve-out at zero: no kernel may keep its data resident in L2 between launches
    through access-policy hints, which a real call, after other work, would not find there."""
    from cuda.bindings import driver

    status = driver.cuCtxSetLimit(driver.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)[0]
    if status not in (driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_UNSUPPORTED_LIMIT):
        raise DriverError(status.name)


def _checked(returned) -> None:
    from cuda.bindings import driver

    status = returned[0]
    if status != driver.CUresult.CUDA_SUCCESS:
        raise DriverError(status.name)
