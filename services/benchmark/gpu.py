"""The GPU edge: find the device, load a cubin, launch with every error checked, time with CUDA events.

Nothing here runs at import time, and CUDA is initialised only in the worker that uses it (a forked
process must never inherit a CUDA context).
"""
from dataclasses import dataclass

import numpy as np


class NoCudaDevice(RuntimeError):
    """This machine cannot run kernels; the message says why."""


class LaunchFailed(RuntimeError):
    """A launch or the work it started failed; the message is the driver's."""


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    arch: str  # NVRTC target, e.g. sm_90


@dataclass(frozen=True)
class Timing:
    samples_ms: list[float]
    outputs: dict[str, np.ndarray]


def probe(index: int = 0) -> DeviceInfo:
    """The device this worker will use, or NoCudaDevice saying why there is none."""
    try:
        from cuda.bindings import driver

        (status,) = driver.cuInit(0)
    except Exception:  # the bindings raise when libcuda itself cannot be loaded
        raise NoCudaDevice("no CUDA device: the NVIDIA driver (libcuda.so) is not installed on this machine") from None
    if status != driver.CUresult.CUDA_SUCCESS:
        raise NoCudaDevice(f"no CUDA device: the driver reports {status.name}")
    status, count = driver.cuDeviceGetCount()
    if status != driver.CUresult.CUDA_SUCCESS or count <= index:
        raise NoCudaDevice(f"no CUDA device: device {index} asked for, {count} visible (check CUDA_VISIBLE_DEVICES)")
    from cuda.core import Device

    device = Device(index)
    return DeviceInfo(index=index, name=device.name, arch=f"sm_{device.arch}")


def time_kernel(device_index: int, cubin: bytes, lowered_name: str, grid: tuple[int, int, int],
                block: tuple[int, int, int], args: list[np.ndarray | np.generic], outputs: list[int],
                warmup: int, iterations: int) -> Timing:
    """Launch `warmup` untimed and `iterations` timed runs; return per-launch times and the outputs
    (args at the indices in `outputs`) as they are after the last launch."""
    from cuda.bindings import driver
    from cuda.core import Device, EventOptions, LaunchConfig, ObjectCode, launch

    device = Device(device_index)
    device.set_current()
    stream = device.create_stream()
    buffers = []
    try:
        kernel = ObjectCode.from_cubin(cubin).get_kernel(lowered_name)
        launch_args = []
        for value in args:
            if isinstance(value, np.ndarray):
                buffer = device.allocate(value.nbytes, stream=stream)
                stream.sync()
                _driver_checked(driver.cuMemcpyHtoD(int(buffer.handle), value.ctypes.data, value.nbytes))
                buffers.append(buffer)
                launch_args.append(buffer)
            else:
                launch_args.append(value)
        config = LaunchConfig(grid=grid, block=block)
        for _ in range(warmup):
            launch(stream, config, kernel, *launch_args)
        stream.sync()
        timed = EventOptions(timing_enabled=True)
        samples = []
        for _ in range(iterations):
            start = stream.record(options=timed)
            launch(stream, config, kernel, *launch_args)
            end = stream.record(options=timed)
            end.sync()  # raises if the kernel faulted
            samples.append(float(end - start))
        results = {}
        for index in outputs:
            host = np.empty_like(args[index])
            _driver_checked(driver.cuMemcpyDtoH(host.ctypes.data, int(launch_args[index].handle), host.nbytes))
            results[str(index)] = host
        return Timing(samples_ms=samples, outputs=results)
    except LaunchFailed:
        raise
    except Exception as exc:  # cuda.core raises CUDAError for launch errors and faults
        raise LaunchFailed(f"{type(exc).__name__}: {exc}") from None
    finally:
        for buffer in buffers:
            try:
                buffer.close(stream)
            except Exception:  # after a sticky fault every call fails; the fault was already reported
                pass


def _driver_checked(returned) -> None:
    from cuda.bindings import driver

    status = returned[0]
    if status != driver.CUresult.CUDA_SUCCESS:
        raise LaunchFailed(f"{status.name}")
