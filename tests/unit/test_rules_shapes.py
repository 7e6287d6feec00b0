"""The offline rules that restructure kernels (issue 21): each recogniser takes the corpus kernel of its shape and
variants written with other names and styles, refuses kernels of other shapes with a reason, and every rewrite
compiles with NVRTC for a sample of its tune space (every configuration when small) and keeps the kernel's
signature. Numbers are checked on the GPU (tests/gpu/test_rules_shapes_verified.py, bench/memory_bound_table.py);
here the launch geometry of the rewrites is emulated to show each point is handled once at sizes no tile divides."""
import itertools
import re
from pathlib import Path
from functools import cache

import numpy as np
import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules import affine
from services.generator.rules.cuda_text import IDENTIFIER, find_kernel, mask, normalised, template_types
from services.generator.rules.partition import Partition, partition
from services.generator.rules.shapes import recognise
from shared.adapters.device.compiler import compile_kernel, parameter_types
from shared.domain.spec import CandidateSpec, KernelSpec
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import (ATOMIC_SUM, BIAS_RELU_NCHW, BLOCK_MAX, BLOCK_MAX_BY_WIDTH, NOT_OF_SHAPE,
                                     POSITIVES_PER_ROW, SHADE_2D, VARIANTS, array, edited, sample, scalar)
from tests.unit.rules_variants import spec as kernel_spec

ARCH = "sm_90"
CORPUS = {kernel.name: kernel for kernel in corpus()}
STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"
# The rules beyond the elementwise ones, and the corpus kernels each fires on (as submitted).
NEW_RULES = ("hierarchical_reduction", "shared_tile", "register_window", "register_blocking", "warp_per_row",
             "split_columns", "row_in_registers", "row_in_shared", "shuffle_reduction", "scan_vectors", "shuffle_scan",
             "vectorize_loops", "batch_loads")
FIRES = {
    "bf16_axpy": {"elements_per_thread", "vectorize"}, "bias_gelu": {"elements_per_thread", "vectorize"},
    "conv2d": {"register_window", "batch_loads"}, "dot": {"vectorize_loops", "batch_loads"},
    "gather": {"elements_per_thread", "vectorize"}, "gemv": {"warp_per_row", "batch_loads"}, "haxpy": {"elements_per_thread", "vectorize"},
    "histogram": {"hierarchical_reduction", "vectorize_loops", "batch_loads"}, "horner": {"elements_per_thread"},
    "int_stats": {"hierarchical_reduction", "vectorize_loops"}, "jacobi2d": {"register_blocking", "vectorize"},
    "laplace3d": {"register_blocking", "vectorize"},
    "layernorm": {"row_in_registers", "row_in_shared", "shuffle_reduction", "vectorize_loops", "batch_loads"},
    "relu_inplace": {"elements_per_thread", "vectorize"}, "rgba_to_gray": {"elements_per_thread", "vectorize"},
    "row_sum": {"shuffle_reduction", "vectorize_loops", "batch_loads"},
    "saxpy": {"elements_per_thread", "vectorize", "batch_loads"},
    "scale": {"elements_per_thread", "vectorize", "batch_loads"}, "segmented_scan": {"scan_vectors", "shuffle_scan"},
    "silu_clamp": {"elements_per_thread", "vectorize", "batch_loads"},
    "softmax": {"row_in_registers", "row_in_shared", "shuffle_reduction", "vectorize_loops", "batch_loads"},
    "spmv_csr": {"warp_per_row"},
    "transpose": {"shared_tile"},
}
SHAPE_RULES = (*NEW_RULES, "elements_per_thread", "vectorize")
# Rules that fire on a submitted kernel whose loops a restructuring replaces, so that they do not compose with it:
# register_window's rendering declares the window's size k again, a name conv2d's loops read, which batch_loads
# will not follow; the grid-stride loops of histogram, saxpy, scale and silu_clamp become loops of elements_per_thread
# iterations under an unroll pragma, which batch_loads leaves to the compiler; softmax's loops, where
# row_in_shared renders them, store its row into a shared array, which batch_loads does not follow.
REPLACED = {"conv2d": {"batch_loads"}, "histogram": {"batch_loads"}, "saxpy": {"batch_loads"},
            "scale": {"batch_loads"}, "silu_clamp": {"batch_loads"}, "softmax": {"batch_loads"}}


def fired(spec: KernelSpec) -> set[str]:
    return {rule_id for rule_id in SHAPE_RULES if rules.check(rule_id, spec, spec.as_candidate()) is None}


# --- which kernels each recogniser takes -----------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_rules_that_fire_on_each_corpus_kernel(name):
    if name not in FIRES:
        pytest.skip(f"{name} is new to the corpus: list the rules that fire on it in FIRES")
    assert fired(CORPUS[name].spec()) == FIRES[name]


def test_the_naive_atomic_sum_takes_the_hierarchical_reduction():
    assert fired(ATOMIC_SUM) == {"hierarchical_reduction"}


@pytest.mark.parametrize("case", list(VARIANTS), ids=str)
def test_variants_with_other_names_and_styles_are_recognised(case):
    rule_id, spec = VARIANTS[case]
    assert rules.check(rule_id, spec, spec.as_candidate()) is None, rules.check(rule_id, spec, spec.as_candidate())


def test_a_row_index_declared_in_each_pass_is_read_and_the_copy_stored_after_it():
    spec = VARIANTS["row_l2_index_local_in_each_pass"][1]
    code = mask(rules.apply("row_in_shared", spec, spec.as_candidate()).source)
    assert "const int idx = row * cols + c;\n        x_cache[c] = x[idx];\n        s += x_cache[c] * x_cache[c];" in code
    assert "out[idx] = x_cache[c] * inv;" in code and code.count("x[idx]") == 1


def test_the_lanes_bias_reset_comes_before_the_loops_unroll_pragma():
    """The pragma applies to the statement after it: a reset put between them would take it from the loop."""
    spec = VARIANTS["gemv_bias_unrolled"][1]
    code = rules.apply("warp_per_row", spec, spec.as_candidate()).source
    assert re.search(r"if \(threadIdx.x != 0\) s = 0;[^\n]*\n\s*#pragma unroll 4\n\s*for \(int c = threadIdx.x;", code)


def test_a_grid_of_a_block_per_channel_and_image_is_read_as_one_thread_per_point():
    """grid_div_y and grid_div_z [] with blocks one thread deep launch a thread per channel and image, as dividing
    by the block size does: vectorize reads the rows, and its candidate launches the same channels and images."""
    candidate = rules.apply("vectorize", BIAS_RELU_NCHW, BIAS_RELU_NCHW.as_candidate())
    params = {**BIAS_RELU_NCHW.baseline_params(), **candidate.params}
    (grid_x, grid_y, grid_z), block = BIAS_RELU_NCHW.for_candidate(candidate).launch_geometry(params)
    assert (grid_y, grid_z) == (5, 3) == BIAS_RELU_NCHW.launch_geometry(params)[0][1:] and block == (256, 1, 1)
    assert grid_x == -(-3135 // (256 * 4)) and "block_size_y" not in candidate.tune_params


@pytest.mark.parametrize("case", list(NOT_OF_SHAPE), ids=str)
def test_what_a_recogniser_refuses_and_why(case):
    rule_id, spec, reason = NOT_OF_SHAPE[case]
    assert reason in (rules.check(rule_id, spec, spec.as_candidate()) or "applies")


def test_unrelated_kernels_take_no_restructuring():
    """A rule fires only on its shape: the corpus table above says which, and no kernel takes two shapes."""
    for name, expected in FIRES.items():
        # row_in_registers is the row shape's alternative to row_in_shared, scan_vectors shuffle_scan's
        structural = expected & set(rules.STRUCTURAL) - {"shuffle_reduction", "row_in_registers", "scan_vectors"}
        assert len(structural) <= 1, name
    shapes = {name: recognise(CORPUS[name].spec())[0] for name in FIRES}
    assert shapes["transpose"].name == "transposed" and shapes["jacobi2d"].name == "stencil"
    assert shapes["gemv"].name == "row_loop" and shapes["int_stats"].name == "warp_atomics"
    assert shapes["histogram"].name == "binned_atomics"
    assert shapes["softmax"].name == shapes["layernorm"].name == "row_passes"  # a block passing over its row
    assert shapes["dot"] is None and shapes["row_sum"] is None  # block-level kernels of one pass: textual rules only


# --- every rewrite compiles and keeps the signature -------------------------------------------------------
@cache
def _compile(source: str, kernel_name: str, defines: tuple, options: tuple) -> None:
    compile_kernel(source, kernel_name, dict(defines), list(options), ARCH)


@cache
def _types(source: str, kernel_name: str, defines: tuple, options: tuple) -> tuple[str, ...]:
    return tuple(parameter_types(source, kernel_name, dict(defines), list(options), ARCH))


def signature(source: str, spec: KernelSpec) -> list[str]:
    """The parameters as written, qualifiers that restrict adds aside."""
    kernel = find_kernel(source, spec.kernel_name)
    return [" ".join(w for w in mask(source[a:b]).replace("*", " * ").split() if w not in ("__restrict__", "const"))
            for a, b in kernel.parameters(source)]


def assert_compiles_and_keeps_signature(spec: KernelSpec, candidate: CandidateSpec) -> int:
    source = normalised(candidate.source)
    options = tuple(spec.compiler_options)
    assert signature(source, spec) == signature(spec.source, spec)
    original = _types(spec.source, spec.kernel_name, tuple(sorted(spec.baseline_params().items())), options)
    configurations = sample(candidate, spec)
    for params in configurations:
        defines = tuple(sorted({**spec.baseline_params(), **candidate.params, **params}.items()))
        _compile(source, spec.kernel_name, defines, options)
        assert _types(source, spec.kernel_name, defines, options) == original
    return len(configurations)


def applications() -> dict[str, tuple[KernelSpec, str]]:
    # sorted: pytest-xdist's workers each collect the cases, and must list them in the same order
    cases = {f"{name}-{rule_id}": (CORPUS[name].spec(), rule_id)
             for name, fires in FIRES.items() for rule_id in sorted(fires)
             if rule_id in NEW_RULES or name in ("bias_gelu", "rgba_to_gray", "gather", "silu_clamp")}
    cases["atomic_sum-hierarchical_reduction"] = (ATOMIC_SUM, "hierarchical_reduction")
    cases.update({f"variant-{case}": (spec, rule_id) for case, (rule_id, spec) in VARIANTS.items()})
    return cases


APPLICATIONS = applications()


@pytest.mark.parametrize("case", list(APPLICATIONS))
def test_each_rewrite_compiles_across_its_space_and_keeps_the_signature(case):
    spec, rule_id = APPLICATIONS[case]
    candidate = rules.apply(rule_id, spec, spec.as_candidate())
    assert rules.applied(candidate.source) == (rule_id,)
    assert all(candidate.params[n] in values for n, values in candidate.tune_params.items())
    assert spec.for_candidate(candidate).restrictions_hold(candidate.params)
    assert assert_compiles_and_keeps_signature(spec, candidate) >= 1


def plan_applied(spec: KernelSpec, order: tuple[str, ...]) -> CandidateSpec:
    """Every rule of `order` that applies, applied in that order, again until none does."""
    candidate = spec.as_candidate()
    progress = True
    while progress:
        progress = False
        for rule_id in order:
            if rules.check(rule_id, spec, candidate) is None:
                candidate = rules.apply(rule_id, spec, candidate)
                progress = True
    return candidate


def choices(fires: set[str]) -> list[set[str]]:
    """What to leave out of a plan so that it takes one of each set of alternatives (catalog.py) that fire (on
    the submitted kernel or on the plan's rewrites of it): for each largest choice of firing rules no two of which
    are alternatives, the other rules that have alternatives firing; nothing when none do."""
    rivalled = sorted(r for r in fires if set(rules.RULES[r].alternatives) & fires)
    free = [set(kept) for size in range(len(rivalled) + 1) for kept in itertools.combinations(rivalled, size)
            if not any(b in rules.RULES[a].alternatives for a, b in itertools.combinations(kept, 2))]
    largest = [kept for kept in free if not any(kept < other for other in free)]
    return [set(rivalled) - kept for kept in largest] or [set()]


@pytest.mark.parametrize("name", sorted(n for n, fires in FIRES.items() if fires & set(NEW_RULES)))
def test_the_rules_compose_in_plan_order_and_in_reverse(name):
    """Everything that applies, in the plan's order and in reverse: the same rules give the same kernel, which
    compiles across its space with the signature kept. Of alternatives the first to apply wins, so each choice
    among them is composed apart, the others left out of both orders."""
    spec = CORPUS[name].spec()
    fires = {r for r in rules.RULES if rules.check(r, spec, spec.as_candidate()) is None}
    for left_out in choices(fires | set(rules.applied(plan_applied(spec, rules.PLAN_ORDER).source))):
        order = tuple(rule_id for rule_id in rules.PLAN_ORDER if rule_id not in left_out)
        forward = plan_applied(spec, order)
        backward = plan_applied(spec, tuple(reversed(order)))
        assert set(rules.applied(forward.source)) == set(rules.applied(backward.source)) >= \
            FIRES[name] - left_out - REPLACED.get(name, set())
        assert normalised(forward.source) == normalised(backward.source)
        assert (forward.grid_div_x, forward.grid_div_y, forward.grid_div_z) == \
            (backward.grid_div_x, backward.grid_div_y, backward.grid_div_z)
        assert_compiles_and_keeps_signature(spec, forward)


# --- the rewrites' launch geometry covers every point once ---------------------------------------------
@pytest.mark.parametrize("sizes", [{"nx": 37, "ny": 53}, {"nx": 130, "ny": 7}, {"nx": 2, "ny": 1}])
def test_register_blocking_covers_each_row_once_at_odd_sizes(sizes):
    """The blocked grid's rows, (blockIdx.y * block_size_y + threadIdx.y) * points_per_thread + k, cover every
    row below the grid's reach once, and the grid reaches every row of the problem."""
    spec = CORPUS["jacobi2d"].spec()
    candidate = rules.apply("register_blocking", spec, spec.as_candidate())
    at_size = spec.with_sizes(sizes).for_candidate(candidate)
    for params in sample(candidate, spec, 40):
        config = {**candidate.params, **params}
        (gx, gy, _), (bx, by, _) = at_size.launch_geometry(config)
        ppt = config["points_per_thread"]
        rows = np.array([(b * by + t) * ppt + k for b in range(gy) for t in range(by) for k in range(ppt)])
        assert len(set(rows.tolist())) == rows.size and set(range(sizes["ny"])) <= set(rows.tolist())
        assert gx * bx >= sizes["nx"]


@pytest.mark.parametrize("sizes", [{"rows": 33, "cols": 65}, {"rows": 1, "cols": 100}, {"rows": 129, "cols": 3}])
def test_the_transpose_tile_loads_and_stores_every_element_once(sizes):
    spec = CORPUS["transpose"].spec()
    candidate = rules.apply("shared_tile", spec, spec.as_candidate())
    at_size = spec.with_sizes(sizes).for_candidate(candidate)
    for params in sample(candidate, spec, 40):
        config = {**candidate.params, **params}
        (gx, gy, _), (bx, by, _) = at_size.launch_geometry(config)
        side = config["block_size_x"]
        assert bx == side and by == config["block_size_y"]
        loads, stores = [], []
        for block_x, block_y, tx, ty in itertools.product(range(gx), range(gy), range(bx), range(by)):
            for j in range(ty, side, by):
                loads.append((block_x * side + tx, block_y * side + j))
                stores.append((block_x * side + j, block_y * side + tx))
        inside = {(c, r) for c in range(sizes["cols"]) for r in range(sizes["rows"])}
        for points in (loads, stores):
            assert len(set(points)) == len(points) and inside <= set(points)


@pytest.mark.parametrize("n", [1, 31, 4097, 999_983])
def test_the_hierarchical_reduction_adds_every_element_once(n):
    candidate = rules.apply("hierarchical_reduction", ATOMIC_SUM, ATOMIC_SUM.as_candidate())
    at_size = ATOMIC_SUM.with_sizes({"n": n}).for_candidate(candidate)
    for params in sample(candidate, ATOMIC_SUM, 40):
        config = {**candidate.params, **params}
        (grid, _, _), (block, _, _) = at_size.launch_geometry(config)
        ept = config["elements_per_thread"]
        first = np.arange(grid)[:, None] * block * ept + np.arange(block)[None, :]
        points = (first[..., None] + np.arange(ept) * block).ravel()
        points = points[points < n]
        assert points.size == n and np.unique(points).size == n


# --- kernels that write one result per block keep each result's elements -----------------------------------
def test_per_block_outputs_and_whether_the_block_size_decides_their_elements():
    """One block per row covers its row at any block size; a grid-stride share per block does not."""
    found = {name: partition(CORPUS[name].spec().source, CORPUS[name].spec())
             for name in ("row_sum", "softmax", "layernorm", "segmented_scan", "dot", "int_stats", "saxpy")}
    assert (found["row_sum"].outputs, found["row_sum"].widths) == (("sums[blockIdx.x]",), ())
    assert (found["layernorm"].outputs, found["layernorm"].widths) == (("mean[r]", "rstd[r]"), ())
    assert (found["segmented_scan"].outputs, found["segmented_scan"].widths) == (("totals[blockIdx.x]",), ())
    assert not any(found[name].outputs for name in ("softmax", "dot", "int_stats", "saxpy"))
    partial_sums = VARIANTS["partial_sums"][1]
    assert partition(partial_sums.source, partial_sums).widths == ()
    for spec in (BLOCK_MAX, BLOCK_MAX_BY_WIDTH):  # by the define, and by blockDim.x through locals
        assert partition(spec.source, spec) == Partition(("out[blockIdx.x]",), ("block_size_x",))


def per_block_cases() -> dict[str, tuple[KernelSpec, str]]:
    kernels = {**{name: kernel.spec() for name, kernel in CORPUS.items()},
               **{case: spec for case, (_, spec) in VARIANTS.items()}, "block_max_by_width": BLOCK_MAX_BY_WIDTH}
    return {f"{name}-{rule_id}": (spec, rule_id) for name, spec in kernels.items()
            if partition(spec.source, spec).outputs for rule_id in rules.PLAN_ORDER
            if rules.check(rule_id, spec, spec.as_candidate()) is None}


PER_BLOCK = per_block_cases()


@pytest.mark.parametrize("case", list(PER_BLOCK))
def test_a_rewrite_of_a_kernel_with_per_block_results_keeps_each_blocks_elements(case):
    """Every configuration the verifier tries of a rewrite of such a kernel launches the submitted grid, and, where
    the block size decides a block's share, the submitted block: the GPU test verifies each against the
    submitted kernel at its own configuration, and a max or a count over other elements is another answer."""
    spec, rule_id = PER_BLOCK[case]
    candidate = rules.apply(rule_id, spec, spec.as_candidate())
    submitted_grid, submitted_block = spec.launch_geometry(spec.baseline_params())
    dependent = partition(spec.source, spec).widths
    for params in sample(candidate, spec, 40):
        grid, block = spec.for_candidate(candidate).launch_geometry({**spec.baseline_params(), **candidate.params,
                                                                     **params})
        assert grid == submitted_grid, params
        if dependent:
            assert block == submitted_block, params


def test_shuffle_reduction_keeps_the_block_size_of_a_grid_stride_share_per_block():
    candidate = rules.apply("shuffle_reduction", BLOCK_MAX, BLOCK_MAX.as_candidate())
    assert candidate.tune_params == {"block_size_x": [256]} and candidate.params == {"block_size_x": 256}
    assert "__shfl_down_sync" in candidate.source
    assert "block_size_x stays 256" in rules.check("block_size", BLOCK_MAX, candidate)
    assert rules.check("vectorize_loops", BLOCK_MAX, candidate).startswith("no strided loop can be vectorised")
    planned = plan_applied(BLOCK_MAX, rules.PLAN_ORDER)
    assert set(rules.applied(planned.source)) == {"shuffle_reduction", "restrict", "batch_loads", "launch_bounds"}
    assert planned.tune_params["block_size_x"] == [256]
    assert_compiles_and_keeps_signature(BLOCK_MAX, planned)
    # One block per row takes its row at any block size: those keep the space.
    partial_sums = VARIANTS["partial_sums"][1]
    assert rules.apply("shuffle_reduction", partial_sums, partial_sums.as_candidate()).tune_params == \
        {"block_size_x": [64, 128, 256]}


# --- what the rewrites look like --------------------------------------------------------------------------
def test_the_transpose_tile_is_padded_and_tunable():
    spec = CORPUS["transpose"].spec()
    candidate = rules.apply("shared_tile", spec, spec.as_candidate())
    assert "__shared__ float tile[block_size_x][block_size_x + 1];" in candidate.source
    assert (candidate.grid_div_x, candidate.grid_div_y) == (["block_size_x"], ["block_size_x"])
    assert candidate.tune_params == {"block_size_x": [16, 32, 64], "block_size_y": [2, 4, 8, 16]}
    assert "block_size_y <= block_size_x" in candidate.restrictions


def test_the_hierarchical_reduction_has_one_atomic_per_block():
    candidate = rules.apply("hierarchical_reduction", ATOMIC_SUM, ATOMIC_SUM.as_candidate())
    code = mask(candidate.source)
    assert code.count("atomicAdd(") == 1 and "__shfl_down_sync" in code
    assert candidate.grid_div_x == ["block_size_x", "elements_per_thread"]
    assert all(v % 32 == 0 for v in candidate.tune_params["block_size_x"])


def test_a_thread_whose_points_all_pass_the_guards_bound_runs_them_without_it():
    """count_above's guard `i < n && v[i] > threshold` keeps each load behind a branch, one in flight per thread
    (about half of the copy on the H200); where the thread's last point is below n, so is each, and the body with
    that conjunct made true loads all of the thread's points at once."""
    spec = load_spec(STYLES / "count_above.cu", STYLES / "count_above.yaml")
    code = mask(rules.apply("hierarchical_reduction", spec, spec.as_candidate()).source)
    assert "if ((int)(first + (int)(elements_per_thread - 1) * blockDim.x) < (n)) {" in code
    assert "if (true && v[i] > threshold)" in code and "if (i < n && v[i] > threshold)" in code
    binned = load_spec(STYLES / "bucket8.cu", STYLES / "bucket8.yaml")
    assert "if ((int)(first + (int)(elements_per_thread - 1) * blockDim.x) < (num)) {" in mask(
        rules.apply("hierarchical_reduction", binned, binned.as_candidate()).source)


@pytest.mark.parametrize("guard", ["i < limit[0] && v[i] > threshold", "i < n || v[i] > threshold"])
def test_a_guard_whose_bound_may_change_or_need_not_hold_is_not_marched(guard):
    """A bound read from memory may exceed the points the submitted grid covers, and `||` bounds nothing: a grid
    shrunk by a march, covering whole marches, would count (and read) past them."""
    spec = load_spec(STYLES / "count_above.cu", STYLES / "count_above.yaml")
    source = spec.source.replace("i < n && v[i] > threshold", guard).replace("int n)", "int n, const int *limit)")
    guarded = spec.model_validate({**spec.model_dump(), "source": source, "args": [
        *spec.model_dump()["args"], {"name": "limit", "dtype": "int32", "shape": [1]}]})
    assert "its point body is not one guard bounding i from above" in rules.check(
        "hierarchical_reduction", guarded, guarded.as_candidate())


def test_vectors_on_rows_read_each_arrays_dtype_in_its_place_in_the_signature_as_the_harness_passes_it():
    """The spec may name an argument otherwise than the source (`dst` for out): the harness passes args by place."""
    renamed = SHADE_2D.model_validate({**SHADE_2D.model_dump(), "args": [
        {**a.model_dump(), "name": "dst"} if a.name == "out" else a.model_dump() for a in SHADE_2D.args]})
    assert rules.check("vectorize", renamed, renamed.as_candidate()) is None
    assert "struct __align__(16) float_x4 { float lane[4]; };" in rules.apply("vectorize", renamed,
                                                                              renamed.as_candidate()).source


def test_the_histogram_keeps_per_block_bins_in_dynamic_shared_memory():
    spec = CORPUS["histogram"].spec()
    candidate = rules.apply("hierarchical_reduction", spec, spec.as_candidate())
    assert candidate.smem_args.size == "(bins) * 4"
    assert spec.for_candidate(candidate).shared_memory_bytes(candidate.params) == 1024
    code = mask(candidate.source)
    assert "atomicAdd(&block_bins[data[i]], 1u);" in code and "atomicAdd(&hist[b], block_bins[b]);" in code
    assert candidate.grid_div_x == ["block_size_x", "elements_per_thread"]


def test_warp_per_row_then_vectorize_loops_gives_128_bit_row_loads():
    spec = CORPUS["gemv"].spec()
    candidate = rules.apply("warp_per_row", spec, spec.as_candidate())
    assert candidate.grid_div_x == ["block_size_y"] and candidate.tune_params["block_size_x"] == [4, 8, 16, 32]
    assert rules.check("vectorize_loops", spec, candidate) is None
    widened = rules.apply("vectorize_loops", spec, candidate)
    assert "reinterpret_cast<const float4 *>(&A[(size_t)r * cols + 0])[at]" in widened.source
    assert "(reinterpret_cast<unsigned long long>(&A[(size_t)r * cols + 0]) & 15) == 0" in widened.source
    assert rules.applied(widened.source) == ("warp_per_row", "vectorize_loops")


def test_a_warps_loop_stepping_by_the_literal_warp_width_takes_vectors_where_the_spec_fixes_the_block_at_it():
    """rms_norm's lanes step by 32 in blocks 32 wide (the spec's only x block size): the loop covers the row once,
    as one stepping by blockDim.x does. With the x block size tuned, 32 is not the block width, and it does not."""
    spec = VARIANTS["rms_norm"][1]
    assert spec.tune_params["block_size_x"] == [32] and "j += 32" in spec.source
    widened = mask(rules.apply("vectorize_loops", spec, spec.as_candidate()).source)
    assert widened.count("reinterpret_cast<const float4 *>(&xr[0])[at") == 2
    assert "for (int v = threadIdx.x; v < vectors; v += vectors_in_flight * 32) {" in widened
    assert "vectors_; v_ += vectors_in_flight * 32) {" in widened
    tuned = spec.model_validate({**spec.model_dump(), "tune_params": {**spec.tune_params, "block_size_x": [32, 64]}})
    assert rules.check("vectorize_loops", tuned, tuned.as_candidate()) is not None


def test_warp_per_row_keeps_a_fused_accumulation_as_written():
    """`acc = fmaf(A[..], x[c], acc)` stays one rounding per element in each lane's loop, widened or not, and only
    the lanes' partial sums are added (by the shuffles)."""
    spec = VARIANTS["gemv_fmaf"][1]
    candidate = rules.apply("warp_per_row", spec, spec.as_candidate())
    code = mask(candidate.source)
    assert "for (int c = threadIdx.x; c < cols; c += block_size_x)\n            acc = fmaf(A[(size_t)r * cols + c], " \
        "x[c], acc);" in code
    assert code.count("acc +=") == 1 and "acc += __shfl_xor_sync(row_lanes, acc, offset);" in code
    widened = mask(rules.apply("vectorize_loops", spec, candidate).source)
    assert "acc = fmaf(A4.w, x4.w, acc);" in widened and widened.count("acc +=") == 1


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_row_in_shared_reads_the_row_from_global_memory_once(name):
    """The first pass stores each element it reads; every other read of the row reads shared memory. The grid,
    the block size's space and the signature are the submitted ones; the smem is the row's bytes."""
    spec = CORPUS[name].spec()
    candidate = rules.apply("row_in_shared", spec, spec.as_candidate())
    code = mask(candidate.source)
    assert code.count("row[c]") == 1 and "row_cache[c] = row[c];" in code
    assert code.count("row_cache[c]") == 4
    assert "extern __shared__ __align__(16) unsigned char row_shared[];" in code
    assert "__syncwarp" not in code and code.count("__syncthreads") == mask(spec.source).count("__syncthreads")
    assert candidate.smem_args.size == "cols * 4" and candidate.restrictions == spec.restrictions
    assert spec.for_candidate(candidate).shared_memory_bytes(candidate.params) == 1024 * 4
    assert candidate.tune_params == spec.tune_params and candidate.grid_div_x == spec.grid_div_x
    assert rules.found(spec) == ("The recognisers found a kernel that passes over each row several times (a block, "
                                 "or a warp, per row).")


def test_row_in_shared_composes_with_the_shuffles_and_the_vectors():
    spec = CORPUS["layernorm"].spec()
    planned = plan_applied(spec, tuple(rule_id for rule_id in rules.PLAN_ORDER if rule_id != "row_in_registers"))
    assert rules.applied(planned.source)[:2] == ("row_in_shared", "shuffle_reduction")
    assert "vectorize_loops" in rules.applied(planned.source) and planned.smem_args.size == "cols * 4"
    code = mask(planned.source)
    assert "reinterpret_cast<float4 *>(&row_cache[0])[at__] = row_cache4__;" in code  # the first pass stores vectors
    assert "row_cache4_ahead_[k_] = reinterpret_cast<const float4 *>(&row_cache[0])[at_];" in code
    assert "__shfl_down_sync" in code


def test_row_in_shared_refuses_a_row_longer_than_shared_memory_holds():
    spec = CORPUS["softmax"].spec().with_sizes({"cols": 16384})
    assert rules.check("row_in_shared", spec, spec.as_candidate()) == (
        "the row of row takes 65536 bytes of shared memory at the spec's sizes (cols x 4), more than the 45056 left "
        "of the 49152 a block gets by default beside its 4096 bytes of static shared memory")
    fits = CORPUS["softmax"].spec().with_sizes({"cols": 11264})
    assert rules.check("row_in_shared", fits, fits.as_candidate()) is None


def test_row_in_shared_keeps_a_row_per_warp_and_restricts_the_rows_per_block():
    """A warp per row (32 x block_size_y): a row per threadIdx.y, block_size_y rows of dynamic shared memory,
    the values of block_size_y whose rows do not fit restricted away, and a __syncwarp after the first pass
    (nothing else orders the lanes' stores before the reads vectorize_loops may move to other lanes)."""
    spec = VARIANTS["rms_norm"][1]
    candidate = rules.apply("row_in_shared", spec, spec.as_candidate())
    code = mask(candidate.source)
    assert "float *xr_cache = reinterpret_cast<float *>(row_shared) + (size_t)threadIdx.y * dim;" in code
    assert candidate.smem_args.size == "block_size_y * dim * 4"
    assert candidate.restrictions == ["block_size_y * dim * 4 <= 49152"]
    assert [c["block_size_y"] for c in sample(candidate, spec, 10)] == [1, 2, 4, 8]
    assert code.index("__syncwarp();") > code.index("ss += xr_cache[j] * xr_cache[j];")
    assert code.index("__syncwarp();") < code.index("__shfl_xor_sync")


def test_a_64_bit_index_keeps_its_width_and_a_tree_its_leading_barrier():
    """A size_t index starts and strides in 64 bits (a cast on blockIdx.x would else wrap past 2^32 elements);
    a tree whose steps start with their barrier is replaced by shuffles that start with one too."""
    daxpy = VARIANTS["daxpy"][1]
    code = mask(rules.apply("elements_per_thread", daxpy, daxpy.as_candidate()).source)
    assert "size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x" \
        in code
    add = VARIANTS["grid_stride_add_elements"][1]
    assert "stride" not in mask(rules.apply("elements_per_thread", add, add.as_candidate()).source)
    row_max = VARIANTS["row_max"][1]
    code = mask(rules.apply("shuffle_reduction", row_max, row_max.as_candidate()).source)
    assert code.index("__syncthreads();") < code.index("float value = cache[tid];")


def test_shuffle_reduction_keeps_the_combination():
    spec = CORPUS["softmax"].spec()
    candidate = rules.apply("shuffle_reduction", spec, spec.as_candidate())
    code = mask(candidate.source)
    assert "value = fmaxf(value, __shfl_down_sync(0xffffffffu, value, offset));" in code
    assert "value_ += __shfl_down_sync(0xffffffffu, value_, offset_);" in code
    assert "red[tid + s]" not in code and candidate.restrictions == ["block_size_x % 32 == 0"]


def test_a_stride_is_read_whatever_the_spelling():
    poly = affine.parse("(size_t)c * rows + r")
    assert affine.is_unit(affine.stride(poly, "r")) and affine.stride(poly, "c") == {("rows",): 1}
    local = {"i": affine.parse("y * nx + x")}
    assert affine.minus(affine.parse("i + nx", local), affine.parse("i", local)) == {("nx",): 1}
    assert affine.stride(affine.parse("hist_index[i] + 1"), "i") is None  # inside a load: unknown, not 0


# --- the provider plans from what the recognisers find -----------------------------------------------------
def test_the_plan_puts_the_shape_rule_first_and_names_the_shape():
    from services.generator.answers import parse
    from services.generator.providers.base import Prompt
    from services.generator.providers.rules import RulesProvider

    spec = CORPUS["transpose"].spec()
    prompt = Prompt(kind="plan", system="", text="", spec=spec, current=spec.as_candidate())
    answer = RulesProvider().complete(prompt).text
    assert "The recognisers found a transpose-like kernel" in answer
    assert [step.id for step in parse("plan", answer).steps] == ["shared_tile", "restrict", "launch_bounds"]


def test_autonomous_asks_no_breakdown_of_an_offline_rule(vector_add_spec):
    from uuid import uuid4

    from services.planner.strategies import Ask, strategy_for
    from shared.domain.events import (BaselineMeasured, GenerationRequested, JobSubmitted, PlanProposed, StepValidated)
    from shared.domain.spec import TuningStep
    from shared.domain.steps import project_optimisation

    def decide(provider: str):
        spec = vector_add_spec.model_validate({**vector_add_spec.model_dump(), "strategy": {"name": "autonomous"},
                                               "generator": {"provider": provider}})
        stream, step = "job-auto", TuningStep(id="vectorize")
        plan = GenerationRequested(stream_id=stream, queue="generator", kind="plan")
        validate = GenerationRequested(stream_id=stream, queue="generator", kind="validate", step=step)
        events = [JobSubmitted(stream_id=stream, spec=spec),
                  BaselineMeasured(stream_id=stream, request_id=uuid4(), device="GPU", params={}, grid=(1, 1, 1),
                                   block=(256, 1, 1), samples_ms=[1.0], median_ms=1.0),
                  plan, PlanProposed(stream_id=stream, request_id=plan.event_id, kind="plan", steps=[step]),
                  validate, StepValidated(stream_id=stream, request_id=validate.event_id, step_id="vectorize",
                                          valid=True, reason="applies")]
        optimisation = project_optimisation(events)
        return strategy_for("autonomous").decide(optimisation, spec.strategy)

    assert decide("rules") == Ask("rewrite", TuningStep(id="vectorize"))
    assert decide("anthropic") == Ask("breakdown", TuningStep(id="vectorize"))


def test_every_tune_parameter_is_read_by_the_code_or_the_launch():
    """The generator drops tune parameters neither the code nor the launch reads: a rewrite's must all be read."""
    for case, (spec, rule_id) in APPLICATIONS.items():
        candidate = rules.apply(rule_id, spec, spec.as_candidate())
        read = set(IDENTIFIER.findall(mask(candidate.source))) | set(spec.block_size_names)
        read |= {str(d) for axis in "xyz" for d in getattr(candidate, f"grid_div_{axis}") or []}
        assert set(candidate.tune_params) <= read, case


@pytest.mark.parametrize("case", [c for c in APPLICATIONS if not c.startswith("variant-")])
def test_the_rewrite_survives_the_generators_reading_of_an_answer(case):
    """Through the answer format and the generator's reconciliation of names (which drops parameters nothing
    reads and renames look-alikes), the rewrite arrives as the candidate the engine made."""
    from uuid import uuid4

    from services.generator.answers import parse, rewrite_text
    from services.generator.handlers import _candidate
    from shared.domain.events import BaselineMeasured, JobSubmitted
    from shared.domain.spec import TuningStep
    from shared.domain.steps import project_optimisation

    spec, rule_id = APPLICATIONS[case]
    candidate = rules.apply(rule_id, spec, spec.as_candidate())
    opt = project_optimisation([JobSubmitted(stream_id="job-x", spec=spec),
                                BaselineMeasured(stream_id="job-x", request_id=uuid4(), device="GPU",
                                                 params=spec.baseline_params(), grid=(1, 1, 1), block=(256, 1, 1),
                                                 samples_ms=[1.0], median_ms=1.0)])
    arrived, renames = _candidate(parse("rewrite", rewrite_text(candidate)), TuningStep(id=rule_id), spec, opt)
    assert renames == {}
    assert normalised(arrived.source) == normalised(candidate.source)
    assert (arrived.tune_params, arrived.params) == (candidate.tune_params, candidate.params)
    assert (arrived.grid_div_x, arrived.grid_div_y, arrived.grid_div_z, arrived.smem_args) == \
        (candidate.grid_div_x, candidate.grid_div_y, candidate.grid_div_z, candidate.smem_args)


@pytest.mark.parametrize("term, taken", [
    ("(*(m + (size_t)r * cols + c) > 0.0f)", True),  # a comparison is an int
    ("(int)(m[(size_t)r * cols + c] * 2.5f)", True),  # so is a cast of the whole term
    ("m[(size_t)r * cols + c] > 0.0f ? 1 : 0", True),  # and a choice of integer literals
    ("!m[(size_t)r * cols + c]", True),  # and a negation
    ("(m[(size_t)r * cols + c] > 0.5f) - (m[(size_t)r * cols + c] < -0.5f)", True),  # and a sum of them
    ("(m[(size_t)r * cols + c] > 0.5f) - m[(size_t)r * cols + c]", False),
    ("(int)m[(size_t)r * cols + c] * 2.5f", False),  # the product is a float, truncated at each step
    ("m[(size_t)r * cols + c] > 0.0f ? 1.0f : 0", False),
    ("static_cast<float>(m[(size_t)r * cols + c] > 0.0f)", False),
])
def test_an_integer_count_takes_int_terms_however_spelled(term, taken):
    spec = edited(POSITIVES_PER_ROW, "(*(m + (size_t)r * cols + c) > 0.0f)", term)
    reason = rules.check("warp_per_row", spec, spec.as_candidate())
    assert (reason is None) == taken, reason
    assert taken or "a floating-point term, into the integer count" in reason


@pytest.mark.parametrize("instance, types", [
    ("row_sum<int>", {"T": "int", "U": "int"}),  # defaults, one naming an earlier parameter
    ("row_sum< double , 4 >", {"T": "double", "U": "double"}),
    ("row_sum<float, 2, unsigned  int>", {"T": "float", "U": "unsigned int"}),
    ("row_sum<float, 2, int, int>", {}),  # more arguments than parameters
])
def test_a_template_instance_names_the_type_of_each_type_parameter(instance, types):
    source = "template <typename T = float, int K = 1, class U = T>\n__global__ void row_sum(T *y, const U *x) { }"
    assert template_types(find_kernel(source, instance), instance) == types



@pytest.mark.parametrize("instance, reason", [
    ("int", None),
    ("float", "its loop adds `v * (T)2`, a floating-point term, into the integer acc, truncating at each step"),
])
def test_a_template_type_in_a_local_or_a_cast_is_read_as_its_instance(instance, reason):
    """`(T)2` and a local of type T are integers where the instance's T is one (review, helper-95), and floating
    where it is float: an integer accumulator would then truncate at each step."""
    source = """template <typename T>
__global__ void row_total(int *y, const T *a, int rows, int cols)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        int acc = 0;
        for (int c = 0; c < cols; ++c) { const T v = a[(size_t)r * cols + c]; acc += v * (T)2; }
        y[r] = acc;
    }
}"""
    dtype = {"int": "int32", "float": "float32"}[instance]
    kernel = kernel_spec(source, f"row_total<{instance}>", [array("y", ["rows"], "int32", role="out"),
                                                            array("a", ["rows", "cols"], dtype), scalar("rows", "rows"),
                                                            scalar("cols", "cols")], {"rows": 300, "cols": 40}, ["rows"])
    found = rules.check("warp_per_row", kernel, kernel.as_candidate())
    assert found is None if reason is None else reason in (found or "")
