"""What passes between a benchmark worker and the process that owns its GPU: plain, picklable values."""
from dataclasses import dataclass, field

from services.benchmark.compiler import CompiledKernel
from services.benchmark.roofline import Peaks
from shared.spec import KernelSpec, ParamValue

Dim3 = tuple[int, int, int]


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    arch: str  # NVRTC target, e.g. sm_90
    max_threads: int = 1024  # threads per block; Kernel Tuner's Searchspace drops configs above it
    peaks: Peaks | None = None


@dataclass(frozen=True)
class Setup:
    """Everything a device needs for one space: inputs come from (spec, seed), the reference output from
    running the submitted kernel once on them."""

    spec: KernelSpec
    seed: int
    reference: CompiledKernel
    reference_geometry: tuple[Dim3, Dim3]
    reference_params: dict[str, ParamValue]


@dataclass(frozen=True)
class Order:
    """Check one configuration's output against the reference, then time it."""

    params: dict[str, ParamValue]  # every define the kernel was compiled with
    kernel: CompiledKernel
    grid: Dim3
    block: Dim3
    best_ms: float | None  # best time so far, for abandoning clearly slower configurations


@dataclass(frozen=True)
class Measured:
    samples_ms: list[float]
    check_ms: float  # the checked launch, timed too: a clearly slow configuration needs no more
    max_abs_error: float
    abandoned: bool = False


@dataclass(frozen=True)
class Failed:
    stage: str  # load | launch | output | timeout | crashed
    reason: str
    poisoned: bool = False  # the CUDA context is unusable: the process owning it must be replaced
    details: dict[str, float] = field(default_factory=dict)
