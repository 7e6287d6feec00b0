"""A nest of grid-stride loops read as the kernel of one point per thread it stands for
(services/generator/rules/grid_stride.py): respelt exactly, launched one thread per point along its axes, or left
alone where the respelling could differ."""
import itertools

import pytest

from services.generator import rules
from services.generator.rules.canonical import canonical
from services.generator.rules.cuda_text import normalised
from services.generator.rules.grid_stride import point_form
from services.generator.rules.shapes import reading, recognise
from tests.unit.rules_variants import (BATCH_NORMS_GRID_STRIDE, CAUSAL_MASK, ROW_SUMS_GRID_STRIDE, ROWS_STRIDED_ALONG_Y,
                                     ROWS_STRIDED_WITH_A_VALUE_BEFORE, SCALE_3D_GRID_STRIDE, SCALE_ON_A_FIXED_GRID,
                                     TOTAL_ON_A_FIXED_GRID, TRANSPOSE_GRID_STRIDE, array, edited, scalar)
from tests.unit.test_rules_vectorize16 import needs_gxx
from tests.unit.test_rules_window import build, run


def masked(old: str, new: str, **spec):
    """CAUSAL_MASK with `old` replaced by `new` in its source, and `spec`'s fields."""
    changed = edited(CAUSAL_MASK, old, new)
    return changed.model_validate({**changed.model_dump(), **spec})


def prefixed(spec, before_kernel: str = "", before_nest: str = ""):
    """The spec with text before its kernel, and statements before its nest."""
    source = before_kernel + spec.source.replace("    for (int q", before_nest + "    for (int q", 1)
    return spec.model_validate({**spec.model_dump(), "source": source})


def test_a_2d_nest_is_respelt_as_one_point_per_thread_and_launched_so():
    read = point_form(CAUSAL_MASK)
    body = read.source[read.source.index("{") + 1:read.source.rindex("}")].split()
    assert " ".join(body) == ("int q = blockIdx.y * blockDim.y + threadIdx.y; "
                              "int k = blockIdx.x * blockDim.x + threadIdx.x; "
                              "if (q < n && k < n) { "
                              "if (k > q) scores[(size_t)q * n + k] = fill; }")
    assert (read.grid_div_x, read.grid_div_y) == (["block_size_x"], ["block_size_y"])
    assert CAUSAL_MASK.grid_div_y == ["block_size_y", 4]  # the submitted spec is unchanged


def test_the_nesting_order_and_64_bit_bounds_are_kept():
    read = point_form(TRANSPOSE_GRID_STRIDE)
    assert "size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;" in read.source
    assert "if (c < cols && r < rows) {" in read.source


@pytest.mark.parametrize("spec, shape, rule", [(CAUSAL_MASK, "points", "elements_per_thread"),
                                               (TRANSPOSE_GRID_STRIDE, "transposed", "shared_tile"),
                                               (ROW_SUMS_GRID_STRIDE, "row_loop", "warp_per_row"),
                                               (SCALE_3D_GRID_STRIDE, "points", "elements_per_thread")])
def test_the_shapes_read_the_point_form_and_its_rewrites_launch_their_own_grid(spec, shape, rule):
    assert recognise(spec)[0].name == shape
    assert reading(spec).source == point_form(spec).source
    candidate = rules.apply(rule, spec, spec.as_candidate())
    submitted = {axis: getattr(spec, f"grid_div_{axis}") for axis in "xyz"}
    launched = {axis: getattr(candidate, f"grid_div_{axis}") for axis in "xyz"}
    strided = [axis for axis, divisors in submitted.items() if divisors is not None]
    assert all(launched[axis] != submitted[axis] for axis in strided), launched
    assert "gridDim" not in candidate.source


def test_textual_rules_keep_the_submitted_loops_and_grid():
    candidate = rules.apply("restrict", CAUSAL_MASK, CAUSAL_MASK.as_candidate())
    assert "q += blockDim.y * gridDim.y" in candidate.source
    assert candidate.grid_div_y == ["block_size_y", 4]


def test_a_continue_of_the_innermost_loop_ends_the_point():
    inner = "if (k > q) scores[(size_t)q * n + k] = fill;"
    skips = "if (k <= q) continue;\n            switch (k & 3) { case 0: continue; }\n            "
    skipped = masked(inner, skips + inner)
    read = point_form(skipped)
    assert "if (k <= q) return;" in read.source and "case 0: return; }" in read.source
    assert "continue" not in read.source


def test_locals_of_the_launch_geometry_before_the_nest_and_bounds_of_arithmetic_are_read():
    strided = masked("    for (int q = blockIdx.y * blockDim.y + threadIdx.y; q < n; q += blockDim.y * gridDim.y) {",
                     "    const int rows_step = blockDim.y * gridDim.y, first_row = blockIdx.y * blockDim.y;\n"
                     "    for (int q = first_row + threadIdx.y; q < n - 1; q += rows_step) {")
    read = point_form(strided)
    assert "int q = blockIdx.y * blockDim.y + threadIdx.y;" in read.source
    assert "if (q < (n - 1) && k < n) {" in read.source
    assert "rows_step" not in read.source
    head = "int r = blockIdx.x * blockDim.x + threadIdx.x{}; r < rows; r += {}"
    in_head = edited(ROW_SUMS_GRID_STRIDE, head.format("", "blockDim.x * gridDim.x"),
                     head.format(", step = blockDim.x * gridDim.x", "step"))
    assert recognise(in_head)[0].name == "row_loop"
    assert "step" not in point_form(in_head).source


def test_a_break_or_continue_of_a_loop_of_the_body_is_its_own():
    inner = "if (k > q) scores[(size_t)q * n + k] = fill;"
    looped = masked(inner, "for (int t = 0; t < 4; ++t) { if (t == 2) break; if (t == 1) continue; }\n" + inner)
    switched = masked(inner, "switch (k & 1) { case 0: break; default: break; }\n" + inner)
    assert point_form(looped) is not None and point_form(switched) is not None


def test_a_nest_on_a_grid_smaller_than_its_bounds_is_launched_over_its_bounds():
    """A grid-stride nest runs every point below its bounds on any grid: one the spec fixes (fewer rows than the
    bound, a bound of another size than the problem's) is read launched over the bounds themselves."""
    fixed = point_form(masked("", "", problem_size=["n", "n // 2"]))
    assert fixed.problem_size == ["n", "n"] and fixed.grid_div_y == ["block_size_y"]
    other = point_form(masked("", "", args=[
        *CAUSAL_MASK.model_dump()["args"][:1], {"name": "n", "dtype": "int32", "value": "m"},
        CAUSAL_MASK.model_dump()["args"][2]], sizes={"n": 300, "m": 300}))
    assert other.problem_size == ["m", "m"]
    assert point_form(TOTAL_ON_A_FIXED_GRID).problem_size == ["n"]
    candidate = rules.apply("vectorize", SCALE_ON_A_FIXED_GRID, SCALE_ON_A_FIXED_GRID.as_candidate())
    assert candidate.problem_size == ["n"] and candidate.grid_div_x == ["block_size_x", 4]


def test_a_row_index_before_the_nest_is_the_points_y_index():
    read = point_form(BATCH_NORMS_GRID_STRIDE)
    assert "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    int b = blockIdx.y;\n    if (i < n) {" in read.source
    assert read.problem_size == ["n", "batch"]
    deeper = BATCH_NORMS_GRID_STRIDE.model_validate({**BATCH_NORMS_GRID_STRIDE.model_dump(),
                                                     "tune_params": {"block_size_y": [1, 2]}})
    assert point_form(deeper) is None  # blockIdx.y is then no thread's index


def test_rows_strided_along_y_under_a_guard_of_the_column_are_the_points_of_the_box():
    """An early return on the x index before a grid-stride loop along y: the guard is kept, the loop's bound
    joins it, and the box is launched a point per thread."""
    read = point_form(canonical(ROWS_STRIDED_ALONG_Y))
    assert "int r = blockIdx.y;\n    int c = blockIdx.x * blockDim.x + threadIdx.x;\n    if (c < cols && r < rows) {" \
        in read.source
    assert read.problem_size == ["cols", "rows"]
    assert recognise(ROWS_STRIDED_ALONG_Y)[0].name == "points"
    assert rules.check("vectorize", ROWS_STRIDED_ALONG_Y, ROWS_STRIDED_ALONG_Y.as_candidate()) is None


def test_a_value_the_column_loads_before_its_rows_is_loaded_by_each_point():
    read = point_form(canonical(ROWS_STRIDED_WITH_A_VALUE_BEFORE))
    assert "if (c < cols && r < rows) {\n        const float b = bias[c];\n        out[r * cols + c] = in[r * cols + c] + b;" \
        in read.source
    loop = "out[r * cols + c] = in[r * cols + c] + b;"
    for changed in (edited(edited(ROWS_STRIDED_WITH_A_VALUE_BEFORE, "const float b", "float b"), loop,
                           "out[r * cols + c] = in[r * cols + c] + b++;"),  # a running value along the rows
                    edited(ROWS_STRIDED_WITH_A_VALUE_BEFORE, "bias[c];", "out[c];"),  # read before rows write it
                    edited(ROWS_STRIDED_WITH_A_VALUE_BEFORE, "const float b = bias[c];", "float b = bias[c]++;"),
                    edited(ROWS_STRIDED_WITH_A_VALUE_BEFORE, "const float b = bias[c];",
                           "const float b = bias[c];\n    out[c] = b;")):  # a store before the rows
        assert point_form(canonical(changed)) is None


@pytest.mark.parametrize("guard", [
    "if (bias[c] == 0.0f) return;",  # a guard reading an array
    "if (c >= cols || rows > (int)blockDim.x) return;",  # a guard reading the launch geometry
    "if (c >= cols) return;\n    out[c] = 0.0f;",  # more than the loop under the guard
])
def test_a_guard_around_the_rows_that_is_not_the_columns_own_is_not_respelt(guard):
    assert point_form(canonical(edited(ROWS_STRIDED_ALONG_Y, "if (c >= cols) return;", guard))) is None


STORE = "if (k > q) scores[(size_t)q * n + k] = fill;"
COLUMNS = "int k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += blockDim.x * gridDim.x"
REFUSED = {
    "a return ends the thread's whole nest": masked("if (k > q)", "if (k <= q) return;\n            if (k > q)"),
    "a return hidden in a macro of a body with a directive": prefixed(masked(
        "            if (k > q) scores[(size_t)q * n + k] = fill;",
        "            SKIP(k)\n#ifndef NO_FILL\n            if (k > q) scores[(size_t)q * n + k] = fill;\n#endif"),
        before_kernel="#define SKIP(k) if (k == 3) return;\n"),
    "a local of the launch geometry read in the body": prefixed(
        masked("= fill;", "= fill + lanes;"), before_nest="    const int lanes = blockDim.x * gridDim.x;\n"),
    "more rows than a grid reaches along y": masked("", "", sizes={"n": 1 << 20}),
    "a sum into a column, one thread's in order": masked(STORE, "scores[k] += fill;"),
    "a recurrence down the rows": masked(
        STORE, "if (q > 0) scores[(size_t)q * n + k] += scores[(size_t)q * n - n + k];"),
    "a total through a pointer": masked(STORE, "*scores += fill;"),
    "a parameter carried to the next point": masked(STORE, "fill *= 0.5f;\n            " + STORE),
    "an atomic whose result is read": masked(STORE, "scores[(size_t)q * n + k] = atomicAdd(&scores[k], fill);"),
    "an exchange": masked(STORE, "atomicExch(&scores[(size_t)q * n + k], fill);"),
    "the written array read through an alias": masked(
        STORE, "const float *above = scores;\n            scores[(size_t)q * n + k] = above[k] + fill;"),
    "the written array read through a dereference": masked(
        STORE, "scores[(size_t)q * n + k] = fill + *(scores + k);"),
    "a parameter changed in parentheses": masked(STORE, "(fill) *= 0.5f;\n            " + STORE),
    "a static carried between points": masked(
        STORE, "static float seen = 0.0f;\n            seen += fill;\n            scores[(size_t)q * n + k] = seen;"),
    "a write a function of the source makes": prefixed(masked(
        STORE, "scores[(size_t)q * n + k] = bump(scores, k);"),
        before_kernel="__device__ float bump(float *p, int i) { p[i] += 1.0f; return p[i]; }\n"),
    "a stride given as zero": masked(STORE, "scores[(size_t)q * n * 0 + k] = fill;"),
    "a break of the grid-stride loop": masked("if (k > q)", "if (k == 7) break;\n            if (k > q)"),
    "a block-stride step": masked("k += blockDim.x * gridDim.x", "k += blockDim.x"),
    "a thread-stride start": masked("int k = blockIdx.x * blockDim.x + threadIdx.x", "int k = threadIdx.x"),
    "code after the nest": masked("    }\n}", "    }\n    scores[0] = fill;\n}"),
    "a bound the body changes": masked("if (k > q) scores", "if (k > q) n = k, scores"),
    "a bound that calls": masked("k < n;", "k < min(n, 256);"),
    "a bound that reads an array": masked("k < n;", "k < (int)scores[0];"),
    "the same axis twice": masked(COLUMNS, COLUMNS.replace(".x", ".y")),
    "a nest without x": masked(f"for ({COLUMNS})", "for (int k = 0; k < n; ++k)"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_is_not_respelt(case):
    assert point_form(REFUSED[case]) is None


def test_a_fixed_grid_of_more_blocks_than_the_bound_is_still_launched_over_the_bound():
    """`problem_size: [1024]` with `grid_div_x: []` is 1,024 blocks, whatever n: read as 1,024 threads covering
    n = 300, the rewrite skipped every point past 1,024 at larger n (review, helper-91)."""
    few = TOTAL_ON_A_FIXED_GRID.with_sizes({"n": 300})
    assert point_form(few).problem_size == ["n"]
    threads = few.model_validate({**few.model_dump(), "grid_div_x": None})  # 1,024 threads, fixed: the same
    assert point_form(threads).problem_size == ["n"]


ONE_NAME_ROWS = """
extern "C" __global__ void row_scale(float *y, const float *x, const float *s, int n, int rows)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y)
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
            y[(size_t)r * n + i] = s[r] * x[(size_t)r * n + i];
}
"""


@pytest.mark.parametrize("case", ["no block size along y", "too many rows around the sizes", "an empty grid"])
def test_a_fixed_grid_is_not_read_where_the_launch_over_its_bounds_could_fail(case):
    """helper-91: a loop along an axis the spec names no block size for raised IndexError from every rule; a grid
    over the bound along y past 65535 blocks at the sizes around the spec's (2h + 3 rows); a bound below 1."""
    if case == "no block size along y":
        spec = CAUSAL_MASK.model_validate({**CAUSAL_MASK.model_dump(), "source": ONE_NAME_ROWS,
                                           "kernel_name": "row_scale", "block_size_names": ["block_size_x"],
                                           "args": [array("y", ["rows", "n"], role="out"), array("x", ["rows", "n"]),
                                                    array("s", ["rows"]), scalar("n", "n"), scalar("rows", "rows")],
                                           "sizes": {"n": 1003, "rows": 7}, "problem_size": [4, 3],
                                           "grid_div_x": [], "grid_div_y": None, "params": {"block_size_x": 128},
                                           "tune_params": {"block_size_x": [64, 128]}})
        assert all(rules.check(rule, spec, spec.as_candidate()) is not None
                   for rule in ("elements_per_thread", "vectorize", "hierarchical_reduction"))
    elif case == "too many rows around the sizes":
        # 100,000 rows in blocks two deep fit 65,535 blocks; the 200,003 of the doubled trial size do not
        spec = masked("", "", sizes={"n": 100000}, problem_size=[2, 64], grid_div_x=[], grid_div_y=[])
        assert point_form(masked("", "", sizes={"n": 60000}, problem_size=[2, 64], grid_div_x=[],
                                 grid_div_y=[])) is not None
    else:
        spec = TOTAL_ON_A_FIXED_GRID.model_validate({
            **TOTAL_ON_A_FIXED_GRID.model_dump(), "sizes": {"n": 5},
            "source": TOTAL_ON_A_FIXED_GRID.source.replace("i < n;", "i < n - 9;")})
    assert point_form(spec) is None


@needs_gxx
@pytest.mark.parametrize("order", [("vectorize",), ("elements_per_thread",), ("elements_per_thread", "vectorize")],
                         ids="+".join)
@pytest.mark.parametrize("spec_", [ROWS_STRIDED_ALONG_Y, ROWS_STRIDED_WITH_A_VALUE_BEFORE], ids=["bias", "hoisted"])
def test_rows_strided_along_y_are_rewritten_to_what_the_submitted_kernel_computes(tmp_path, order, spec_):
    """On the CPU (g++, AddressSanitizer), at more rows than the fixed grid's 7 and fewer, sizes no vector or block
    divides, aligned and not: every array as the submitted kernel leaves it."""
    candidate = spec_.as_candidate()
    for rule in order:
        candidate = rules.apply(rule, spec_, candidate)
    marched = "elements_per_thread" in candidate.tune_params
    for sizes, shift in itertools.product(({"rows": 9, "cols": 203}, {"rows": 4, "cols": 64}), (0, 1)):
        at_size = spec_.with_sizes(sizes)
        base = at_size.baseline_params()
        expected = run(build(spec_.source, spec_.kernel_name, tmp_path, {}), at_size, base, shift)
        for steps, block in itertools.product([1, 2, 4] if marched else [None], (32, 64)):
            params = {**base, **candidate.params, "block_size_x": block,
                      **({"elements_per_thread": steps} if marched else {})}
            defines = {k: v for k, v in params.items() if k not in spec_.block_size_names}
            library = build(normalised(candidate.source), spec_.kernel_name, tmp_path, defines)
            assert run(library, at_size.for_candidate(candidate), params, shift) == expected, (sizes, shift, params)
