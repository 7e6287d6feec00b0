"""Which device this process may use, what it is, and its peak rates (for the roofline check)."""
from dataclasses import dataclass

# FP32 lanes per SM by compute capability (CUDA programming guide, arithmetic instructions table).
FP32_LANES = {(6, 0): 64, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}
DEFAULT_FP32_LANES = 128  # 6.1, 8.6, 8.7, 8.9, 9.0, 10.x, 12.x


@dataclass(frozen=True)
class Peaks:
    dram_bytes_per_s: float
    fp32_flops_per_s: float
    l2_bytes: int
    sm_count: int | None = None  # recordings made before it was kept have none


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    arch: str  # NVRTC target, e.g. sm_90
    max_threads: int = 1024  # threads per block; Kernel Tuner's Searchspace drops configs above it
    peaks: Peaks | None = None
    memory_bytes: int | None = None  # global memory; a spec whose arrays do not fit is refused (shared/application/limits.py)


class NoCudaDevice(RuntimeError):
    """This machine cannot run kernels; the message says why."""


def probe(index: int = 0) -> DeviceInfo:
    """The device this process will use, or NoCudaDevice saying why there is none."""
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
    return DeviceInfo(index=index, name=device.name, arch=f"sm_{device.arch}",
                      max_threads=device.properties.max_threads_per_block, peaks=_peaks(index),
                      memory_bytes=_total_memory(index))


def _total_memory(index: int) -> int | None:
    from cuda.bindings import driver

    status, total = driver.cuDeviceTotalMem(index)
    return total if status == driver.CUresult.CUDA_SUCCESS else None


def _peaks(index: int) -> Peaks | None:
    from cuda.bindings import driver

    attribute = driver.CUdevice_attribute

    def get(name: str) -> int | None:
        status, value = driver.cuDeviceGetAttribute(getattr(attribute, name), index)
        return value if status == driver.CUresult.CUDA_SUCCESS and value > 0 else None

    memory_khz, bus_bits = get("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"), get("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH")
    sms, core_khz = get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"), get("CU_DEVICE_ATTRIBUTE_CLOCK_RATE")
    major, minor = get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"), get("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR") or 0
    l2 = get("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE") or 0
    if None in (memory_khz, bus_bits, sms, core_khz, major):
        return None  # without the attributes there is no roofline; timings are still checked for errors
    lanes = FP32_LANES.get((major, minor), DEFAULT_FP32_LANES)
    return Peaks(dram_bytes_per_s=2 * memory_khz * 1e3 * bus_bits / 8, fp32_flops_per_s=sms * lanes * 2 * core_khz * 1e3,
                 l2_bytes=l2, sm_count=sms)
