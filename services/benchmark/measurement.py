"""What passes between a benchmark worker and the process that owns its GPU: plain, picklable values
(with DeviceInfo and Failed from shared.adapters.device, and the Tolerance an output was checked with)."""
from dataclasses import dataclass

from shared.adapters.device.nvrtc import CompiledKernel
from shared.domain.events import Tolerance
from shared.domain.spec import KernelSpec, ParamValue

Dim3 = tuple[int, int, int]
# Timed launches alternate between input sets drawn from consecutive seeds, so that no kernel can key a cached
# result on inputs that never change (but an input with fixed `data` is the same in both sets).
INPUT_SETS = 2


@dataclass(frozen=True)
class Setup:
    """Everything a device needs for one space: inputs come from (spec, seed), the reference output from
    running the submitted kernel once on them."""

    spec: KernelSpec
    seed: int
    reference: CompiledKernel
    reference_geometry: tuple[Dim3, Dim3]
    reference_params: dict[str, ParamValue]
    reference_shared_bytes: int = 0  # its dynamic shared memory per block (the spec's smem_args)


@dataclass(frozen=True)
class Order:
    """Check one configuration's output against the reference, then time it."""

    params: dict[str, ParamValue]  # every define the kernel was compiled with
    kernel: CompiledKernel
    grid: Dim3
    block: Dim3
    best_ms: float | None  # best time so far, for abandoning clearly slower configurations
    shared_bytes: int = 0  # dynamic shared memory per block (the spec's smem_args)


@dataclass(frozen=True)
class Measured:
    samples_ms: list[float]
    check_ms: float  # the checked launch, timed too: a clearly slow configuration needs no more
    max_abs_error: float
    abandoned: bool = False
    tolerances: tuple[Tolerance, ...] = ()  # what each output was checked against the reference with, and why


@dataclass(frozen=True)
class Duel:
    """Time two configurations (each already checked and timed alone) in turn, `pairs` times each, then more,
    up to `max_pairs`, while the speedup's interval (at `confidence`) still straddles `bar` at each of
    sampling.looks and what is timed fits in `budget_s`."""

    incumbent: Order
    candidate: Order
    pairs: int
    max_pairs: int = 0  # below `pairs`: exactly `pairs`
    bar: float = 1.0
    confidence: float = 0.95
    budget_s: float = float("inf")  # more pairs are timed only while they fit in this many seconds


@dataclass(frozen=True)
class Paired:
    """Sample i of each was taken one right after the other, on the same inputs."""

    incumbent_ms: list[float]
    candidate_ms: list[float]
