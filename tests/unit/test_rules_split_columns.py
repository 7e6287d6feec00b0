"""split_columns (issue 21): a thread per column walking its rows has its loop split among block_size_y threads
of the column, whose first combines their results after a barrier. Each column kernel of rules_variants.py runs on
the CPU (g++) as submitted (every thread in turn) and as rewritten (a block's threads at once, meeting at the
barrier), at several splits and block widths, and with batch_loads' passes over the split loop: counts, maxima and minima and every array the loop
stores come out the same bit for bit, sums within float rounding of the submitted order. The GPU runs them
through the verifier (tests/gpu/test_rules_shapes_verified.py)."""
import itertools
import re

import numpy as np
import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.cuda_text import normalised
from shared.domain.spec import KernelSpec
from tests.unit.rules_variants import SPLIT_COLUMNS, edited
from tests.unit.test_rules_shapes import STYLES, assert_compiles_and_keeps_signature, plan_applied
from tests.unit.test_rules_vectorize16 import needs_gxx
from tests.unit.test_rules_window import SHARED, build, run

BLOCKS = [(32, 2), (128, 4), (32, 32), (64, 16)]
SUMMED = {"column_means": ["mean"], "bias_gradient": ["db"], "column_norms": ["norms"],
          "column_sum_and_max": ["sums"], "weighted_columns": ["out"]}


def small(spec: KernelSpec) -> KernelSpec:
    """The spec at about an eighth of each size: every block's threads run as threads of the host."""
    return spec.with_sizes({name: max(3, value // 8) for name, value in spec.sizes.items()})


def split(spec, then_batched: bool):
    candidate = rules.apply("split_columns", spec, spec.as_candidate())
    if then_batched:
        assert rules.check("batch_loads", spec, candidate) is None
        candidate = rules.apply("batch_loads", spec, candidate)
    return candidate


def arrays(spec, raw: dict[str, bytes]) -> dict[str, np.ndarray]:
    return {arg.name: np.frombuffer(raw[arg.name], np.dtype(arg.dtype)) for arg in spec.args if arg.is_array}


@needs_gxx
@pytest.mark.parametrize("case, then_batched", [
    (case, batched) for case, batched in itertools.product(SPLIT_COLUMNS, (False, True))
    if not (batched and "#pragma unroll" in SPLIT_COLUMNS[case].source)])  # a loop unrolled already stays so
def test_every_array_ends_as_the_submitted_kernel_leaves_it(tmp_path, case, then_batched):
    spec = small(SPLIT_COLUMNS[case])
    candidate = split(spec, then_batched)
    base = spec.baseline_params()
    expected = arrays(spec, run(build(spec.source, spec.kernel_name, tmp_path, base), spec, base))
    launched = spec.for_candidate(candidate)
    columns, splits = spec.block_size_names[:2]
    batches = candidate.tune_params.get("batch_iterations", [None])
    for (width, ways), batch in itertools.product(BLOCKS, batches[::2] if then_batched else batches):
        params = {**base, **candidate.params, columns: width, splits: ways,
                  **({"batch_iterations": batch} if batch else {})}
        assert launched.restrictions_hold(params)
        library = build(SHARED + normalised(candidate.source), spec.kernel_name, tmp_path, params, threads=True)
        got = arrays(spec, run(library, launched, params))
        for name, values in expected.items():
            if name in SUMMED.get(case, ()):
                np.testing.assert_allclose(got[name], values, rtol=1e-5, atol=1e-5, err_msg=f"{name} at {params}")
            else:
                assert np.array_equal(got[name], values, equal_nan=True), (name, params)


@needs_gxx
def test_the_emulation_tells_a_part_left_out_of_the_combination(tmp_path):
    spec = small(SPLIT_COLUMNS["positives_per_column"])
    candidate = split(spec, False)
    broken = normalised(candidate.source).replace("for (int k = 1;", "for (int k = 2;")
    assert broken != normalised(candidate.source)
    base = spec.baseline_params()
    params = {**base, **candidate.params, "block_size_y": 4}
    expected = run(build(spec.source, spec.kernel_name, tmp_path, base), spec, base)
    assert run(build(SHARED + broken, spec.kernel_name, tmp_path, params, threads=True),
               spec.for_candidate(candidate), params) != expected


def test_the_rewrite_splits_the_loop_and_combines_in_order():
    spec = SPLIT_COLUMNS["bias_gradient"]
    source = normalised(split(spec, False).source)
    assert "for (int b = threadIdx.y; b < batch; b += block_size_y)" in source
    assert "if (threadIdx.y != 0) acc = 0;" in source  # the bias enters the column's sum once
    assert source.index("acc_parts[threadIdx.y][threadIdx.x] = acc;") < source.index("__syncthreads();") < \
        source.index("if (threadIdx.y != 0) return;") < source.index("acc = acc_parts[0][threadIdx.x];") < \
        source.index("db[f] = acc;")
    assert source.count("db[f] = acc;") == 1 and source.count("dx[b * features + f] = 0.5f * g;") == 1
    minimum = normalised(split(SPLIT_COLUMNS["column_min_from_row_one"], False).source)
    assert "for (int y = (1) + (int)threadIdx.y; y < h; y += block_size_y)" in minimum
    assert "if (best_parts[k][threadIdx.x] < best) best = best_parts[k][threadIdx.x];" in minimum


def test_its_space_keeps_a_block_within_1024_threads():
    spec = SPLIT_COLUMNS["column_means"]
    candidate = split(spec, False)
    assert candidate.tune_params["block_size_y"] == [2, 4, 8, 16, 32]
    assert "block_size_x * block_size_y <= 1024" in candidate.restrictions
    assert candidate.params["block_size_y"] == 8  # 128 columns a block, as submitted


def test_the_plan_of_a_column_sum_splits_its_rows_and_batches_their_loads():
    spec = load_spec(STYLES / "column_sums.cu", STYLES / "column_sums.yaml")
    applied = rules.applied(plan_applied(spec, rules.PLAN_ORDER).source)
    assert applied[0] == "split_columns" and "batch_loads" in applied


def test_a_pragma_stays_on_its_loop_and_a_count_in_64_bits_is_taken():
    source = normalised(split(SPLIT_COLUMNS["column_wide_counts"], False).source)
    assert re.search(r"if \(threadIdx.y != 0\) q = 0;  // [^\n]*\n\s*#pragma unroll 4\n\s*"
                     r"for \(int r = threadIdx.y; r < rows; r \+= block_size_y\)", source)
    assert source.count("#pragma unroll 4") == 1  # not above the combination
    assert "__shared__ unsigned long long q_parts[block_size_y][block_size_x];" in source


def test_the_parts_fit_a_blocks_shared_memory_and_its_launch_bounds():
    """Four double parts a column take 32 bytes a thread: 128 columns fit 12 splits of static shared memory, so 16
    and 32 are left out; a kernel's own __launch_bounds__(256) bounds the block it keeps."""
    doubles = edited(SPLIT_COLUMNS["column_norms"], "double ss = 0.0;", "double ss = 0.0, a = 0.0, b = 0.0, d = 0.0;")
    doubles = edited(doubles, "ss += v * v;", "ss += v * v; a += v; b -= v; d += 2.0 * v;")
    doubles = edited(doubles, "norms[col] = sqrt(ss);", "norms[col] = sqrt(ss) + a + b + d;")
    candidate = split(doubles, False)
    assert "32 * block_size_x * block_size_y <= 49152" in candidate.restrictions
    launched = doubles.for_candidate(candidate)
    assert [y for y in candidate.tune_params["block_size_y"] if launched.restrictions_hold(
        {**doubles.baseline_params(), "block_size_x": 128, "block_size_y": y})] == [2, 4, 8]
    assert_compiles_and_keeps_signature(doubles, candidate)
    bounded = edited(SPLIT_COLUMNS["column_means"], "__global__ void column_means",
                     "__global__ void __launch_bounds__(256) column_means")
    candidate = split(bounded, False)
    assert "block_size_x * block_size_y * block_size_z <= 256" in candidate.restrictions
    assert bounded.for_candidate(candidate).restrictions_hold({**bounded.baseline_params(), **candidate.params})
