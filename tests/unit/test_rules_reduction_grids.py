"""hierarchical_reduction on 2D and 3D grids of one point per thread (tests/unit/rules_variants.py: an image's sum,
a masked count and maximum, a field's energy, a grey image's histogram, sums by row and by column;
tests/corpus/styles: image_mean, grey_hist). The GPU verifies each against the submitted kernel
(tests/gpu/test_rules_shapes_verified.py); here, the rewrite's structure: a thread's consecutive rows (planes),
the block reduced over its flattened threads in blocks of whole warps, and the rest of the guard tested once for a
thread's points below the bound."""
import re
from pathlib import Path

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules import reduction
from services.generator.rules.partition import partition
from tests.unit.rules_variants import (BATCH_SUMS, BIAS_GRADIENT, ENERGY_3D, IMAGE_HISTOGRAM_2D, IMAGE_SUM_2D,
                                       MASKED_STATS_2D, ROW_SUMS_2D_BLOCKS, STACK_SUM, edited)

STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"


def _applied(spec):
    return rules.apply("hierarchical_reduction", spec, spec.as_candidate())


def test_a_2d_sum_marches_down_rows_and_reduces_its_block_over_flattened_threads():
    candidate = _applied(IMAGE_SUM_2D)
    code = candidate.source
    assert candidate.grid_div_y == ["block_size_y", "elements_per_thread"] and candidate.grid_div_x is None
    assert candidate.restrictions == ["(block_size_x * block_size_y) % 32 == 0", "block_size_x * block_size_y <= 1024"]
    assert all(IMAGE_SUM_2D.for_candidate(candidate).restrictions_hold({**candidate.params, **p})
               is ((p["block_size_x"] * p["block_size_y"]) % 32 == 0)
               for p in ({"block_size_x": 16, "block_size_y": 4}, {"block_size_x": 16, "block_size_y": 2}))
    assert "const int first = (blockIdx.y * blockDim.y + threadIdx.y) * elements_per_thread;" in code
    assert "const int lane = (int)(threadIdx.x + blockDim.x * threadIdx.y) % 32" in code
    assert "lane < (blockDim.x * blockDim.y + 31) / 32 ? warp_sum0[lane] : (float)0;" in code
    assert code.count("atomicAdd(") == 1 and "atomicAdd(total, sum0);" in code


def test_the_rest_of_the_guard_is_tested_once_for_a_threads_points_below_the_bound():
    """`x < width` reads neither y, the marched index, nor memory: it holds at all of a thread's points or at none,
    so the points below the bound run the guard's body alone (one branch per point kept the loads one at a time)."""
    code = _applied(IMAGE_SUM_2D).source
    assert "if ((int)(first + (elements_per_thread - 1)) < (height) && x < width) {" in code
    interior = re.search(r"auto interior = \[&\]\(const int y\) \{\n(.*?)\n    \};", code, re.S)[1]
    assert interior.strip() == "sum0 += (float)(img[y * width + x]);"
    # a conjunct that reads memory stays in each point's guard
    masked = edited(IMAGE_SUM_2D, "if (x < width && y < height)", "if (x < width && y < height && img[x] > 0.0f)")
    code = _applied(masked).source
    assert "if ((int)(first + (elements_per_thread - 1)) < (height)) {" in code
    assert "if (x < width && true && img[x] > 0.0f) sum0 += (float)(img[y * width + x]);" in code


def test_an_early_return_guard_with_two_integer_atomics_keeps_each_target():
    code = _applied(MASKED_STATS_2D).source
    assert "atomicAdd(passing, sum0);" in code and "atomicMax(brightest, high1);" in code
    assert "unsigned int sum0 = (unsigned int)0;" in code and "int high1 = (-2147483647 - 1);" in code


def test_a_3d_field_marches_through_planes_and_flattens_three_thread_indices():
    candidate = _applied(ENERGY_3D)
    assert candidate.grid_div_z == ["block_size_z", "elements_per_thread"]
    assert "(int)(threadIdx.x + blockDim.x * threadIdx.y + blockDim.x * blockDim.y * threadIdx.z) % 32" in \
        candidate.source
    assert "(block_size_x * block_size_y * block_size_z) % 32 == 0" in candidate.restrictions


def test_a_2d_histogram_zeroes_and_flushes_its_bins_with_every_thread_of_the_block():
    candidate = _applied(IMAGE_HISTOGRAM_2D)
    code = candidate.source
    assert code.count("for (int b = (int)(threadIdx.x + blockDim.x * threadIdx.y); b < 256; "
                      "b += (int)(blockDim.x * blockDim.y))") == 2
    assert candidate.smem_args.size == "(256) * 4" and candidate.grid_div_y == ["block_size_y", "elements_per_thread"]


def test_a_conjunct_of_the_guard_that_the_march_may_change_or_that_joins_by_or_stays_in_each_point():
    """Only comparisons of the other indices and the parameters are tested once: `y` (the marched index) through a
    local, or a conjunct holding `||`, stays in each point's guard."""
    through_or = edited(IMAGE_SUM_2D, "if (x < width && y < height)", "if (y < height && (x < width || width < 0))")
    code = _applied(through_or).source
    assert "if ((int)(first + (elements_per_thread - 1)) < (height)) {" in code
    assert "if (true && (x < width || width < 0)) sum0 += (float)(img[y * width + x]);" in code


def test_a_sum_by_row_runs_along_x_with_one_atomic_per_block_where_a_point_reached_it():
    """`atomicAdd(&sums[b], ...)` with b = blockIdx.y: each thread marches along x, a block's threads all add into
    the same row's sum, and the block's atomic waits on a flag its points set where they reached the atomic."""
    candidate = _applied(BATCH_SUMS)
    code = candidate.source
    assert candidate.grid_div_x == ["block_size_x", "elements_per_thread"] and candidate.grid_div_y is None
    assert "const int first = (int)blockIdx.x * (blockDim.x * elements_per_thread) + threadIdx.x;" in code
    assert "if (i < n) { sum0 += (float)(x[b * n + i]); reached0 = 1; }" in code
    assert "reached0 = max(reached0, __shfl_down_sync(0xffffffffu, reached0, offset));" in code
    assert code.count("atomicAdd(") == 1 and "if (reached0) atomicAdd(&sums[b], sum0);" in code
    assert "const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;" in code


def test_a_sum_by_row_of_2d_blocks_makes_them_one_row_deep_and_offers_wider_rows():
    candidate = _applied(ROW_SUMS_2D_BLOCKS)
    assert candidate.tune_params["block_size_y"] == [1] and candidate.params["block_size_y"] == 1
    assert candidate.tune_params["block_size_x"] == [32, 64, 128, 256, 512, 1024]
    params = {**candidate.params, "block_size_x": 128, "elements_per_thread": 4}
    grid, block = ROW_SUMS_2D_BLOCKS.for_candidate(candidate).launch_geometry(params)
    assert grid == (-(-5003 // 512), 301, 1) and block == (128, 1, 1)
    # the row's bound is tested once for all of a thread's points, beside the last point's column
    assert "< (cols) && row < rows) {" in _applied(ROW_SUMS_2D_BLOCKS).source


def test_short_rows_are_offered_counts_of_points_that_fill_one_to_four_blocks():
    """A ResNet channel of 56 x 56 floats: the powers of two leave two blocks of 128 threads and 16 points 77%
    full; the counts added fill one to four blocks of each width at least 90%, and the powers of two stay."""
    spec = load_spec(STYLES / "channel_stats.cu", STYLES / "channel_stats.yaml")
    counts = _applied(spec).tune_params["elements_per_thread"]
    assert set(reduction.EPT_VALUES) <= set(counts) and 25 in counts  # 128 x 25 = 3,200 points, 98% of them in a row
    for added in set(counts) - set(reduction.EPT_VALUES):
        assert any(0.9 <= 3136 / (blocks * width * added) <= 1 and 3136 > (blocks * width * (added - 1))
                   for width in (128, 256, 512) for blocks in range(1, 5))
    assert _applied(BATCH_SUMS).tune_params["elements_per_thread"] == reduction.EPT_VALUES  # rows of a million


def test_a_sum_by_column_marches_each_thread_down_its_column_with_one_atomic_per_thread_and_no_shuffles():
    """`atomicAdd(&db[c], dy[r * cols + c])`: a thread's neighbours along x add into other columns, so each thread
    adds its rows into a register and makes one atomic for them, in the spec's block."""
    candidate = _applied(BIAS_GRADIENT)
    code = candidate.source
    assert candidate.grid_div_y == ["block_size_y", "elements_per_thread"] and candidate.grid_div_x is None
    assert candidate.tune_params == {"block_size_x": [32, 64], "block_size_y": [4, 8],
                                     "elements_per_thread": [1, 2, 4, 8, 16, 32, 64]}
    assert "const int first = (blockIdx.y * blockDim.y + threadIdx.y) * elements_per_thread;" in code
    assert "__shfl" not in code and "__shared__" not in code and "__syncthreads" not in code
    assert code.count("atomicAdd(") == 1 and code.rstrip().endswith("if (reached0) atomicAdd(&db[c], sum0);\n}")
    # over planes: the slowest axis the address does not name
    assert _applied(STACK_SUM).grid_div_z == ["block_size_z", "elements_per_thread"]
    model = reduction.recognise(edited(BATCH_SUMS, "&sums[b]", "&sums[i]"))
    assert model.by_thread and model.marched == 1


def test_blockidx_along_an_axis_one_thread_deep_is_a_row_of_points_not_a_block():
    assert partition(BATCH_SUMS.source, BATCH_SUMS).outputs == ()
    deeper = BATCH_SUMS.model_validate({**BATCH_SUMS.model_dump(), "tune_params": {"block_size_y": [1, 2]}})
    assert partition(deeper.source, deeper).outputs == ("&sums[b]",)


def test_blocks_of_a_spec_naming_only_the_x_block_size_are_one_thread_deep_along_y_and_z():
    """block_size_names [THREADS] launches blocks THREADS x 1 x 1 (Kernel Tuner's convention): the channel of
    blockIdx.y and the image of blockIdx.z are the point's y and z indices, and the sums by channel run along x."""
    spec = load_spec(STYLES / "channel_stats.cu", STYLES / "channel_stats.yaml")
    candidate = _applied(spec)
    assert candidate.grid_div_x == ["THREADS", "elements_per_thread"] and candidate.grid_div_y is None
    assert "if (reached1) atomicAdd(&sum_sq[c], sum1);" in candidate.source
    grid, block = spec.for_candidate(candidate).launch_geometry({**candidate.params, "elements_per_thread": 4})
    assert grid == (-(-3136 // 1024), 256, 32) and block == (256, 1, 1)
