"""A time implying more than the device's peak is rejected; real ones report GB/s, TFLOP/s, % of peak."""
from services.benchmark.roofline import assess
from shared.adapters.device.probe import Peaks

H100 = Peaks(dram_bytes_per_s=3.35e12, fp32_flops_per_s=66.9e12, l2_bytes=50 * 2**20)
VECTOR_ADD_64M = 3 * 4 * 2**26  # bytes: a and b read, c written


def test_a_real_vector_add_time_reports_bandwidth():
    verdict = assess(0.300, VECTOR_ADD_64M, None, H100, l2_flushed=False)
    assert verdict.impossible is None
    assert round(verdict.gbps) == 2684 and round(verdict.pct_of_peak) == 80


def test_a_time_above_dram_peak_is_impossible():
    verdict = assess(0.100, VECTOR_ADD_64M, None, H100, l2_flushed=False)
    assert verdict.impossible and "above the device's" in verdict.impossible
    assert "(DRAM peak with 52.43 MB of it served from L2 at 3x)" in verdict.impossible


def test_the_false_matmul_result_kernel_tuner_ranked_first_is_impossible():
    # GPU-NOTES: 0.045 ms for a 4096^3 FP32 matmul, 3,081 TFLOP/s on a 67 TFLOP/s device.
    verdict = assess(0.045, 3 * 4 * 4096**2, 2 * 4096**3, H100, l2_flushed=False)
    assert verdict.impossible and "FP32 peak" in verdict.impossible and "3,054.2 TFLOP/s" in verdict.impossible


def test_small_working_sets_may_be_served_from_l2_unless_flushed():
    small = 12 * 2**20  # fits in L2
    fast = 0.002  # ms: 6.3 TB/s, above DRAM peak but below the L2-resident bound
    assert assess(fast, small, None, H100, l2_flushed=False).impossible is None
    assert assess(fast, small, None, H100, l2_flushed=True).impossible


def test_without_peaks_nothing_is_rejected_but_rates_are_reported():
    verdict = assess(1.0, 10**9, 2e9, None, l2_flushed=False)
    assert verdict.impossible is None and verdict.gbps == 1000 and verdict.tflops == 2


def test_a_working_set_a_little_larger_than_l2_is_credited_with_its_cached_share():
    moved = 80 * 2**20  # 84 MB: 52 MB may come from L2, 31 MB from DRAM
    fastest_ms = 1e3 * (50 * 2**20 / (3.35e12 * 1.05 * 3) + 30 * 2**20 / (3.35e12 * 1.05))
    assert assess(fastest_ms * 1.01, moved, None, H100, l2_flushed=False).impossible is None
    too_fast = assess(fastest_ms * 0.99, moved, None, H100, l2_flushed=False).impossible
    assert too_fast and "served from L2" in too_fast
    # Flushed before every launch, all of it comes from DRAM.
    assert assess(fastest_ms * 1.01, moved, None, H100, l2_flushed=True).impossible
