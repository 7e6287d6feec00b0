"""Is a timing physically possible? Bytes and flops per launch against the device's peaks.

A time implying more bandwidth or FLOP/s than the device has is a measurement error (a launch that did
not run, a kernel that skipped work), never a speedup. Peaks come from the driver's attributes: memory
clock x bus width for DRAM, SMs x FP32 lanes x clock for FP32 (CUDA cores, not tensor cores).
"""
from dataclasses import dataclass

from shared.adapters.device.probe import Peaks

# Slack over the nominal peak: boost clocks and rounding in the attributes, not a loophole for fast kernels.
TOLERANCE = 1.05
# Without a flush between launches, up to an L2's worth of the working set may be served from it at several
# times DRAM bandwidth, the rest from DRAM; the bound is loose on purpose (H100 L2 reads reach about 3x its DRAM
# bandwidth). A working set a little larger than L2 is partly cached too, so the credit is the cached share,
# not all or nothing.
L2_RESIDENT_FACTOR = 3.0


@dataclass(frozen=True)
class Assessment:
    gbps: float
    tflops: float | None
    pct_of_peak: float  # the larger of % of bandwidth and % of FLOP/s: how close to the roofline
    impossible: str | None  # why the time cannot be real, or None


def assess(time_ms: float, bytes_moved: int, flops: float | None, peaks: Peaks | None, l2_flushed: bool) -> Assessment:
    seconds = time_ms / 1e3
    rate = bytes_moved / seconds
    flop_rate = flops / seconds if flops is not None else None
    gbps, tflops = rate / 1e9, (flop_rate / 1e12 if flop_rate is not None else None)
    if peaks is None:
        return Assessment(gbps=gbps, tflops=tflops, pct_of_peak=0.0, impossible=None)
    pct = 100 * max(rate / peaks.dram_bytes_per_s, (flop_rate or 0.0) / peaks.fp32_flops_per_s)
    dram = peaks.dram_bytes_per_s * TOLERANCE
    cached = 0 if l2_flushed else min(bytes_moved, peaks.l2_bytes)
    fastest_s = cached / (dram * L2_RESIDENT_FACTOR) + (bytes_moved - cached) / dram
    ceiling = bytes_moved / fastest_s if fastest_s else dram
    if cached == 0:
        where = "DRAM peak"
    elif cached == bytes_moved:
        where = f"{L2_RESIDENT_FACTOR:g}x DRAM peak: the data fits in L2"
    else:
        where = f"DRAM peak with {cached / 1e6:.4g} MB of it served from L2 at {L2_RESIDENT_FACTOR:g}x"
    reasons = []
    if rate > ceiling:
        reasons.append(f"{time_ms:.4g} ms for {bytes_moved / 1e6:.4g} MB is {gbps:,.0f} GB/s, above the device's "
                       f"{ceiling / 1e9:,.0f} GB/s ({where})")
    if flop_rate is not None and flop_rate > peaks.fp32_flops_per_s * TOLERANCE:
        reasons.append(f"{time_ms:.4g} ms for {flops:.4g} flop is {tflops:,.1f} TFLOP/s, above the device's FP32 "
                       f"peak of {peaks.fp32_flops_per_s * TOLERANCE / 1e12:,.1f} TFLOP/s")
    impossible = "; ".join(reasons) + ": the launch cannot have done its work" if reasons else None
    return Assessment(gbps=gbps, tflops=tflops, pct_of_peak=pct, impossible=impossible)
