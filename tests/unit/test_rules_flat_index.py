"""A flat thread index split by / and % read as its coordinates (services/generator/rules/flat_index.py): the box
it stands for, the locals that are exactly one coordinate initialised from it, the rest as written, and every
spelling where the box could differ from the flat range refused."""
from pathlib import Path

import pytest

from kforge.specfile import load_spec

from services.generator import answers, rules
from services.generator.rules.canonical import canonical
from services.generator.rules.flat_index import point_form
from services.generator.rules.shapes import reading, recognise
from shared.adapters.device.compiler import compile_kernel
from tests.unit.rules_variants import (FLAT_DIFFUSION, PERMUTE_GRID_STRIDE, SWAP_ROWS_COLUMNS, TO_CHANNELS_FIRST, TO_CHANNELS_LAST, array,
                                      edited, scalar, spec)

CHANNEL_BIAS = spec(r"""
extern "C" __global__ void channel_bias(float *y, const float *x, const float *bias, int n, int channels, int plane)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int c = (i / plane) % channels;
        y[i] = x[i] + bias[c];
    }
}
""", "channel_bias", [array("y", ["b", "c", "p"], role="out"), array("x", ["b", "c", "p"]), array("bias", ["c"]),
                      scalar("n", "b * c * p"), scalar("channels", "c"), scalar("plane", "p")],
    {"b": 4, "c": 16, "p": 1500}, ["b * c * p"])

STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"
NCHW = load_spec(STYLES / "nchw_to_nhwc.cu", STYLES / "nchw_to_nhwc.yaml").model_copy(
    update={"sizes": {"N": 2, "C": 40, "H": 9, "W": 11}})


def test_a_flat_index_is_read_as_the_box_of_its_coordinates():
    pointed = point_form(canonical(CHANNEL_BIAS))
    assert pointed.problem_size == ["p", "c", "b"]
    source = pointed.source
    assert "int i_x = blockIdx.x * blockDim.x + threadIdx.x;" in source
    assert "int i_z = blockIdx.z * blockDim.z + threadIdx.z;" in source
    assert "if (i_x < plane && i_y < channels && i_z < (n) / (channels * plane)) {" in source
    assert "const int i = i_x + i_y * plane + i_z * (channels * plane);" in source
    assert "int c = i_y;" in source and "y[i] = x[i] + bias[c];" in source


def test_it_is_taken_where_a_shape_reads_more_of_the_kernel_so():
    # the coordinates let vectors take the rows of y and x, the lanes each reading the channel's bias as written
    assert recognise(CHANNEL_BIAS)[0].name == "points" and reading(CHANNEL_BIAS).problem_size == ["p", "c", "b"]
    assert rules.check("vectorize", CHANNEL_BIAS, CHANNEL_BIAS.as_candidate()) is None
    looping = edited(CHANNEL_BIAS, "y[i] = x[i] + bias[c];", "for (int t = 0; t < 2; t++) y[i] = x[i] + t * bias[c];")
    assert point_form(canonical(looping)) is not None  # exact, but no shape reads more of it so: kept flat
    assert reading(looping).problem_size == CHANNEL_BIAS.problem_size
    # rows of 49 points (7 x 7 maps) would leave most of each 256-thread block idle: kept flat too
    small = CHANNEL_BIAS.model_copy(update={"sizes": {"b": 32, "c": 512, "p": 49}})
    assert point_form(canonical(small)) is not None and reading(small).problem_size == CHANNEL_BIAS.problem_size


def test_four_coordinates_fuse_the_two_every_subscript_moves_along_as_one():
    read = reading(NCHW)
    assert recognise(NCHW)[0].name == "transposed" and read.problem_size == ["H * W", "C", "N"]
    assert "int w = idx_x % W;" in read.source and "int h = (idx_x / W);" in read.source
    assert "out[(long long)C * (long long)H * (long long)W * (long long)idx_z + (long long)C * (long long)idx_x + " \
           "(long long)idx_y]" in read.source
    candidate = rules.apply("shared_tile", NCHW, NCHW.as_candidate())
    assert candidate.problem_size == ["H * W", "C", "N"]
    launched = NCHW.for_candidate(candidate)
    grid, block = launched.launch_geometry({**NCHW.baseline_params(), **candidate.params})
    assert grid == (-(-99 // candidate.params["block_size_x"]), 40 // candidate.params["block_size_x"] + 1, 2)
    assert rules.apply("restrict", NCHW, candidate).problem_size == candidate.problem_size
    # the rules answer in the providers' text, which carries the box to the job's candidate
    assert answers.parse("rewrite", answers.rewrite_text(candidate)).settings["problem_size"] == ["H * W", "C", "N"]


def test_the_top_two_fused_are_launched_over_both():
    read = reading(SWAP_ROWS_COLUMNS)
    assert recognise(SWAP_ROWS_COLUMNS)[0].name == "transposed" and read.problem_size == ["W", "H", "C * N"]
    assert "idx_z < (C * N)" in read.source and "int c = idx_z % C;" in read.source


def test_a_running_quotient_splits_the_index_as_it_goes():
    read = reading(TO_CHANNELS_FIRST)
    assert recognise(TO_CHANNELS_FIRST)[0].name == "transposed" and read.problem_size == ["c", "h * w", "n"]
    assert "const int c = i_x; t /= C;" in read.source and "const int n = i_z;" in read.source
    assert "if (i_x < C && i_y < (H * W) && i_z < (total) / (C * H * W)) {" in read.source


def test_a_grid_stride_loop_over_the_flat_index_is_read_through_its_point_form():
    read = reading(PERMUTE_GRID_STRIDE)
    assert recognise(PERMUTE_GRID_STRIDE)[0].name == "transposed" and read.problem_size == ["HW", "C", "N"]
    assert read.grid_div_x == ["block_size_x"]  # one thread a point, no longer a quarter of them
    candidate = rules.apply("shared_tile", PERMUTE_GRID_STRIDE, PERMUTE_GRID_STRIDE.as_candidate())
    assert candidate.problem_size == ["HW", "C", "N"] and candidate.grid_div_x == ["block_size_x"]


@pytest.mark.parametrize("variant", [TO_CHANNELS_LAST, FLAT_DIFFUSION, TO_CHANNELS_FIRST, SWAP_ROWS_COLUMNS], ids=["quotient_local", "stencil", "running_quotient", "top_fused"])
def test_quotient_locals_and_neighbours_read_through_it(variant):
    shape, _, _ = recognise(variant)
    assert shape.name in ("transposed", "stencil")
    for rule in shape.rules:
        candidate = rules.apply(rule, variant, variant.as_candidate())
        assert candidate.problem_size == reading(variant).problem_size
        compile_kernel(candidate.source, variant.kernel_name, {**variant.baseline_params(), **candidate.params},
                       variant.compiler_options, "sm_90")


REFUSED = {
    # the count is a size of its own: the last row may be partial, which no box holds
    "total_not_a_product": edited(FLAT_DIFFUSION, "if (i < nx * ny)", "if (i < count)").model_validate({
        **edited(FLAT_DIFFUSION, "if (i < nx * ny)", "if (i < count)").model_dump(),
        "source": FLAT_DIFFUSION.source.replace("if (i < nx * ny)", "if (i < count)").replace(
            "float k)", "float k, int count)"),
        "args": [*FLAT_DIFFUSION.model_dump()["args"], scalar("count", "nx * ny - 7")]}),
    # the divisors do not divide one another: not a mixed-radix number
    "divisors_apart": edited(FLAT_DIFFUSION, "int x = i % nx, y = i / nx;", "int x = i % nx, y = i / ny;"),
    # a load before the guard would run for threads the box does not launch
    "load_before_the_guard": edited(CHANNEL_BIAS, "    if (i < n) {", "    float b0 = x[0];\n    if (i < n) {"),
    # fewer points along x than a warp: the box would leave most threads idle
    "few_points_along_x": TO_CHANNELS_LAST.model_validate({**TO_CHANNELS_LAST.model_dump(),
                                                           "sizes": {"b": 3, "c": 67, "h": 3, "w": 5}}),
    # the launch stops short of the total: the box would run points the kernel never ran
    "launch_short_of_the_total": FLAT_DIFFUSION.model_validate({**FLAT_DIFFUSION.model_dump(),
                                                                "problem_size": ["nx * ny - 1"]}),
    # a guard with more than the flat bound
    "guard_with_more": edited(CHANNEL_BIAS, "if (i < n) {", "if (i < n && plane > 1) {"),
    # a cast that wraps the index, which a fused subscript respelt in 64 bits would not
    "narrowing_cast": edited(NCHW, "= in[idx];", "= in[(unsigned short)(idx)];"),
    # a local whose initialiser reads a name that changes before the subscript reads the local
    "changed_since_initialised": edited(NCHW, "    out[((n * H + h) * W + w) * C + c] = in[idx];",
                                        "    int k = 0;\n    int o = ((n * H + h) * W + w) * C + c + k;\n    k = 1;\n"
                                        "    out[o] = in[idx];"),
    # as many rows as CUDA's grid holds along y: one more, as a trial takes, would not fit
    "grid_full_along_y": FLAT_DIFFUSION.model_validate({**FLAT_DIFFUSION.model_dump(),
                                                        "sizes": {"nx": 64, "ny": 65535}}),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_flat_index_is_not_read_where_the_box_could_differ(name):
    assert point_form(canonical(REFUSED[name])) is None


def test_a_quotient_that_changes_divides_nothing():
    changing = edited(TO_CHANNELS_LAST, "const int rest = t / plane;\n    const int c = rest % channels;",
                      "int rest = t / plane;\n    rest += 0;\n    const int c = rest % channels;")
    pointed = point_form(canonical(changing))
    assert pointed.problem_size == ["h * w", "b * c"]  # p, then the rest of t: c and b not read as coordinates
    assert "const int c = rest % channels;" in pointed.source and "const int p = t_x;" in pointed.source


def test_a_quotient_a_call_may_change_divides_nothing_after():
    popped = spec(r"""
__device__ __forceinline__ int pop_digit(int &t, int radix) { int d = t % radix; t /= radix; return d; }
extern "C" __global__ void batch_affine(float *y, const float *x, const float *scale, const float *bias, int n,
                                        int channels, int plane)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int t = i / plane;
        int c = pop_digit(t, channels);
        int b = t;
        y[i] = x[i] * scale[b] + bias[c];
    }
}
""", "batch_affine", [array("y", ["b", "c", "p"], role="out"), array("x", ["b", "c", "p"]), array("scale", ["b"]),
                      array("bias", ["c"]), scalar("n", "b * c * p"), scalar("channels", "c"), scalar("plane", "p")],
        {"b": 4, "c": 16, "p": 1000}, ["b * c * p"])
    pointed = point_form(canonical(popped))
    assert pointed.problem_size == ["p", "b * c"] and "int b = t;" in pointed.source


def test_a_quotient_divided_then_multiplied_divides_nothing_after():
    scaled = edited(CHANNEL_BIAS, "        int c = (i / plane) % channels;",
                    "        int t = i; t = t / plane * channels;\n        int q = t;\n        int c = (i / plane) % channels;")
    pointed = point_form(canonical(scaled))
    assert "int q = t;" in pointed.source and "int c = i_y;" in pointed.source


def test_five_coordinates_are_not_read():
    five = edited(NCHW, "int n = idx / (W * H * C);", "int n = (idx / (W * H * C)) % N;\n    int g = idx / (W * H * C * N);")
    five = five.model_validate({**five.model_dump(), "source": five.source.replace(
        "if (idx >= total) return;", "if (idx >= total * G) return;").replace("int W)", "int W, int G)"),
        "args": [*five.model_dump()["args"], scalar("G", 2)], "problem_size": ["N * C * H * W * 2"]})
    assert point_form(canonical(five)) is None
