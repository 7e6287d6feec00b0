"""vectorize on stencils: a thread takes V consecutive points of a row, and the input its points read around them
(at subscripts apart by numbers, a row pitch, a plane) comes into registers once, as aligned vectors where every
element of one is read and one by one otherwise; with register_blocking, that for several rows (planes) a thread.

On the H100, laplace3d so written by hand (4 points of a row, 2 planes a thread) reached 86-87% of a copy where
the z-march of scalar points stops at 78-81%, and reading the neighbours one by one per lane at 64-67%.

Each rewrite compiles with NVRTC and runs on the CPU (g++, every thread of the launch in turn, AddressSanitizer
stopping any access past an array's ends) leaving every array bit for bit as the submitted kernel does: at sizes no
vector or block divides, with the input aligned and an element past (the points one by one), for several block
shapes and points per thread. The GPU verifies them too (tests/gpu/test_rules_shapes_verified.py).
"""
import itertools
from pathlib import Path

import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.cuda_text import normalised
from shared.domain.spec import KernelSpec
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import INTERIOR_OFFSET, ONE_D, VARIANTS, array, edited, scalar, spec
from tests.unit.test_rules_shapes import assert_compiles_and_keeps_signature
from tests.unit.test_rules_vectorize16 import EmulatedFault, needs_gxx
from tests.unit.test_rules_window import build, run

STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"
CORPUS = {kernel.name: kernel.spec() for kernel in corpus()}


def style(name: str) -> KernelSpec:
    return load_spec(STYLES / f"{name}.cu", STYLES / f"{name}.yaml")


SKEWED = spec(r"""
// A one-sided difference along rows: reads two to the right and one to the left, integers, a pitch of its own.
extern "C" __global__ void skewed(int *d, const int *a, int w, int h, int pitch)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= 1 && y < h && x < w - 2) {
        d[y * pitch + x] = 3 * a[y * pitch + x + 2] - a[y * pitch + x - 1] + (a[(y + 1) * pitch + x] >> 1);
    }
}
""", "skewed", [array("d", ["h + 1", "pitch"], dtype="int32", role="out"), array("a", ["h + 1", "pitch"], dtype="int32"),
                scalar("w", "w"), scalar("h", "h"), scalar("pitch", "pitch")],
    {"w": 300, "h": 40, "pitch": 304}, ["w", "h"], {"block_size_x": 32, "block_size_y": 4},
    {"block_size_x": [16, 32, 64], "block_size_y": [1, 2, 4, 8]})
ROW_TAPS = spec(r"""
// Three taps along rows, weighted per column, added into what out holds: its last row's last vector reaches past
// the arrays where a row's width is no whole number of vectors.
extern "C" __global__ void row_taps(float *out, const float *in, const float *weight, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x > 0 && x < w - 1 && y < h) {
        out[y * w + x] += weight[x] * (in[y * w + x - 1] + in[y * w + x] + in[y * w + x + 1]);
    }
}
""", "row_taps", [array("out", ["h", "w"], role="inout"), array("in", ["h", "w"]), array("weight", ["w"]),
                  scalar("w", "w"), scalar("h", "h")],
    {"w": 300, "h": 40}, ["w", "h"], {"block_size_x": 32, "block_size_y": 4},
    {"block_size_x": [16, 32, 64], "block_size_y": [1, 2, 4, 8]})
KERNELS = {"laplace3d": CORPUS["laplace3d"], "jacobi2d": CORPUS["jacobi2d"], "heat3d": style("heat3d"),
           "sobel": style("sobel"), "laplacian5": style("laplacian5"), "smooth": VARIANTS["smooth"][1],
           "diffusion_flat": VARIANTS["diffusion_flat"][1], "skewed": SKEWED, "row_taps": ROW_TAPS,
           # its index computed before the guard, as many write it
           "index_first": edited(edited(CORPUS["jacobi2d"], "        int i = y * nx + x;\n", ""),
                                 "    if (x > 0", "    const int i = y * nx + x;\n    if (x > 0"),
           "heat_step": VARIANTS["heat_step_index_first_vectors"][1],
           "heat3_plane": VARIANTS["heat3_plane_before_the_guard_vectors"][1],
           "jacobi_unsigned": VARIANTS["jacobi_unsigned_leaving_on_zero_vectors"][1],
           "nested_guards": VARIANTS["nested_guards_vectors"][1],
           "row_pointer": VARIANTS["row_pointer_before_the_guard_vectors"][1],
           "bound_local": VARIANTS["bound_in_a_local_vectors"][1],
           "gradient_unsigned": VARIANTS["gradient_bounded_by_x_plus_one_vectors"][1],
           "laplace3d_doubles": VARIANTS["laplace_3d_double"][1],  # two lanes of 8 bytes
           "box_rows": VARIANTS["box_rows_unrolled_vectors"][1]}  # its window loop read unrolled
ORDERS = {"vectorize": ("vectorize",), "marched": ("register_blocking", "vectorize"),
          "plan": ("register_blocking", "vectorize", "restrict", "launch_bounds")}
# The first size's rows are whole vectors, so aligned rows take the vectors; the second's are not, so rows
# alternate or none does.
ODD_SIZES = {"laplace3d": [{"nx": 20, "ny": 7, "nz": 6}, {"nx": 22, "ny": 5, "nz": 9}],
             "heat3d": [{"nx": 20, "ny": 7, "nz": 6}, {"nx": 22, "ny": 5, "nz": 9}],
             "jacobi2d": [{"nx": 36, "ny": 9}, {"nx": 37, "ny": 6}],
             "index_first": [{"nx": 36, "ny": 9}, {"nx": 37, "ny": 6}],
             "heat_step": [{"width": 36, "height": 9}, {"width": 37, "height": 6}],
             "heat3_plane": [{"nx": 21, "ny": 6, "nz": 5}, {"nx": 20, "ny": 5, "nz": 6}],
             "jacobi_unsigned": [{"nx": 37, "ny": 9}, {"nx": 36, "ny": 7}],
             "nested_guards": [{"w": 36, "h": 9}, {"w": 37, "h": 6}],
             "row_pointer": [{"w": 36, "h": 9}, {"w": 37, "h": 6}],
             "bound_local": [{"w": 36, "h": 9}, {"w": 37, "h": 6}],
             "gradient_unsigned": [{"w": 36, "h": 9}, {"w": 37, "h": 6}],
             "sobel": [{"w": 36, "h": 9}, {"w": 37, "h": 6}],
             "laplacian5": [{"nx": 36, "ny": 9}, {"nx": 37, "ny": 6}],
             "laplace3d_doubles": [{"nx": 20, "ny": 7, "nz": 6}, {"nx": 21, "ny": 5, "nz": 9}],
             "box_rows": [{"w": 36, "h": 9}, {"w": 37, "h": 6}],
             "smooth": [{"w": 36, "h": 9}, {"w": 37, "h": 6}],
             "diffusion_flat": [{"nx": 36, "ny": 9}, {"nx": 37, "ny": 6}],
             "skewed": [{"w": 37, "h": 9, "pitch": 40}, {"w": 38, "h": 9, "pitch": 41}],
             # the last row starts aligned (8 x 38 floats), and its last thread's lane 0 alone is in the guard
             "row_taps": [{"w": 38, "h": 9}, {"w": 37, "h": 5}]}


def applied(spec_: KernelSpec, order: tuple[str, ...]):
    current = spec_.as_candidate()
    for rule in order:
        if rules.check(rule, spec_, current) is None:
            current = rules.apply(rule, spec_, current)
    return current


@pytest.mark.parametrize("name", list(KERNELS))
def test_a_stencil_takes_vectors_and_its_neighbours_come_into_registers(name):
    spec_ = KERNELS[name]
    assert rules.check("vectorize", spec_, spec_.as_candidate()) is None
    candidate = applied(spec_, ORDERS["marched"])
    assert rules.applied(candidate.source) == ("register_blocking", "vectorize")
    # diffusion_flat reads its neighbours only under a condition: each lane reads them as written
    assert ("_row0[" in candidate.source) is (name != "diffusion_flat")
    assert_compiles_and_keeps_signature(spec_, candidate)


def test_laplace3d_reads_five_vectors_and_two_elements_a_row_of_four():
    code = normalised(applied(KERNELS["laplace3d"], ORDERS["marched"]).source)
    assert code.count("= *reinterpret_cast<const float_x4 *>(&in_at[") == 5
    # the rows addressed from the point's own place, the offsets between them of parameters alone
    assert "const long long in_place = (long long)nx * (long long)ny * (long long)z + (long long)nx * " \
           "(long long)y + (long long)x;\n" in code and "const float *in_at = some ? &in[in_place] : nullptr;" in code
    assert "*reinterpret_cast<const float_x4 *>(&in_at[-1LL * (long long)nx * (long long)ny]);" in code
    # the row's own vector, and its two outer neighbours one by one where the lane reading each is active
    assert "if (active[0]) in_row0[0] = in_at[-1LL];" in code and "if (active[3]) in_row0[5] = in_at[4LL];" in code
    assert "out_x4.lane[k] = in_row0[k + 0] + in_row0[k + 2] + in_row1[k + 0] + in_row2[k + 0] + in_row3[k + 0] + " \
           "in_row4[k + 0] - 6.0f * in_row0[k + 1];" in code
    # A row's edge takes the vectors too, each lane where its own point is in the guard: on the H100 a row of 256
    # points gave every warp an edge, and the points one by one there cost laplace3d 10 points of the copy
    # (75% against 85% with two planes a thread).
    assert "for (int k = 0; k < 4; k++) { const int x = x0 + k; active[k] = x >= 1 && y >= 1 && z >= 1 && " \
           "x < nx - 1 && y < ny - 1 && z < nz - 1; }" in code
    assert "const bool some = active[0] || active[1] || active[2] || active[3];" in code
    assert "const bool every = active[0] && active[1] && active[2] && active[3];" in code
    assert "if (every) {\n                *reinterpret_cast<float_x4 *>(&out[" in code
    assert "for (int k = 0; k < 4; k++) if (active[k]) out[(long long)nx * (long long)ny * (long long)z + " \
           "(long long)nx * (long long)y + (long long)x + k] = out_x4.lane[k];" in code


def test_an_element_no_point_reads_is_not_loaded():
    """skewed reads x - 1 and x + 2: the lanes' elements run from x0 - 1 to x0 + 5; the vector at x0 is read whole,
    x0 - 1, x0 + 4 and x0 + 5 one by one, and nothing at x0 + 6 or x0 + 7 (the vector at x0 + 4 is not whole)."""
    code = normalised(applied(SKEWED, ORDERS["vectorize"]).source)
    assert "int a_row0[7];" in code
    assert code.count("*reinterpret_cast<const int_x4 *>(&a_at[") == 2  # the row's, and the next row's
    assert "if (active[0]) a_row0[0] = a_at[-1LL];" in code and "if (active[2]) a_row0[5] = a_at[4LL];" in code \
        and "if (active[3]) a_row0[6] = a_at[5LL];" in code
    assert "a_at[6LL]" not in code and "a_at[7LL]" not in code


def test_where_some_lane_is_not_active_the_vectors_serve_a_row_only_within_its_arrays():
    """Beside an array's last row, a vector's elements that only inactive lanes read may lie past the array: where
    some lane is not active, the vectors serve the row only where each lies in its array (active lanes read all
    its elements, or the array's shape in args holds them), else the points run one by one."""
    code = " ".join(applied(ROW_TAPS, ORDERS["vectorize"]).source.split())
    assert "const bool every = active[0] && active[1] && active[2] && active[3];" in code
    # the output it adds into and the weight per column by their shapes; the taps' vector x0..x0 + 3 also where
    # lanes 0 or 1 (reading x0 and x0 + 1) and 2 or 3 (x0 + 2 and x0 + 3) are active
    assert "const long long in_place = (long long)w * (long long)y + (long long)x; " \
           "const float *in_at = some ? &in[in_place] : nullptr; " \
           "const bool safe = every || ((long long)w * (long long)y + (long long)x >= 0 && (long long)w * " \
           "(long long)y + (long long)x + 3 < (long long)h * (long long)w) && ((long long)x >= 0 && (long long)x + 3 " \
           "< (long long)w) && (((active[0] || active[1]) && (active[2] || active[3])) || (in_place >= 0 && " \
           "in_place + 3 < (long long)h * (long long)w)); if (some && (" in code
    assert ") == 0 && safe) { float_x4 out_x4 = *reinterpret_cast<const float_x4 *>(&out[" in code
    # where no shape in args gives the arrays' elements in the kernel's parameters, only a row all of whose lanes
    # are active takes the vectors
    unshaped = ROW_TAPS.model_validate({**ROW_TAPS.model_dump(), "sizes": {**ROW_TAPS.sizes, "rows": 40}, "args": [
        {**a.model_dump(), "shape": ["rows", "w"]} if a.name in ("out", "in") else a.model_dump()
        for a in ROW_TAPS.args]})
    code = " ".join(applied(unshaped, ORDERS["vectorize"]).source.split())
    assert ") == 0 && every) {" in code and "in_place" not in code and "safe" not in code
    # laplace3d's rows by the shape of its input, the row's own vector also by the lanes reading it
    laplace = " ".join(applied(KERNELS["laplace3d"], ORDERS["vectorize"]).source.split())
    assert "const bool safe = every || (((active[0] || active[1]) && (active[2] || active[3])) || (in_place >= 0 " \
           "&& in_place + 3 < (long long)nx * (long long)ny * (long long)nz)) && (in_place - 1LL * (long long)nx >= " \
           "0 && in_place - 1LL * (long long)nx + 3 < (long long)nx * (long long)ny * (long long)nz) && " in laplace


# A spec counting interior points: the kernel's nx holds the size nx + 2, so a shape's nx is not the parameter nx.
HALO = spec(r"""
extern "C" __global__ void halo_rows(float *out, const float *in, int nx, int ny)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= 1 && x < nx - 1 && y < ny) {
        out[y * nx + x] = 0.5f * (in[y * nx + x - 1] + in[y * nx + x + 1]);
    }
}
""", "halo_rows", [array("out", ["ny", "nx + 2"], role="out"), array("in", ["ny", "nx + 2"]),
                   scalar("nx", "nx + 2"), scalar("ny", "ny")],
    {"nx": 254, "ny": 254}, ["nx + 2", "ny"], {"block_size_x": 32, "block_size_y": 4})
# A shape naming a size spelled like a pointer parameter, k.
POINTER_NAMED = spec(r"""
extern "C" __global__ void taps(float *out, const float *in, const float *k, int w, int h, int p)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= 1 && x < w - 1 && y < h) {
        out[y * p + x] = k[0] * in[y * p + x - 1] + k[1] * in[y * p + x] + k[2] * in[y * p + x + 1];
    }
}
""", "taps", [array("out", ["h", "w + k"], role="out"), array("in", ["h", "w + k"]), array("k", [3]),
              scalar("w", "w"), scalar("h", "h"), scalar("p", "w + k")],
    {"w": 254, "h": 254, "k": 2}, ["w", "h"], {"block_size_x": 32, "block_size_y": 4})


def test_a_shape_counts_elements_only_through_sizes_that_integer_scalars_hold():
    """A size a shape names is written in the kernel's parameters only where an integer scalar argument holds it:
    a parameter spelled like the size may hold another value (nx holding nx + 2) or be a pointer (k)."""
    for spec_ in (HALO, POINTER_NAMED):
        code = " ".join(applied(spec_, ORDERS["vectorize"]).source.split())
        assert "const bool safe = every || " in code and "in_place" not in code


@needs_gxx
def test_a_kernel_counting_interior_points_reads_nothing_past_its_rows(tmp_path):
    candidate = applied(HALO, ORDERS["vectorize"])
    at_size = HALO.with_sizes({"nx": 36, "ny": 9})  # the last row starts aligned: 9 rows of 38 floats
    params = {**at_size.baseline_params(), **candidate.params}
    expected = run(build(HALO.source, HALO.kernel_name, tmp_path, {}), at_size, at_size.baseline_params())
    assert run(build(normalised(candidate.source), HALO.kernel_name, tmp_path, {}), at_size.for_candidate(candidate),
               params) == expected


def test_a_neighbour_read_under_a_condition_is_read_by_each_lane_as_written():
    conditional = edited(KERNELS["jacobi2d"], "in[i - 1]", "(x > 1 ? in[i - 1] : 0.0f)")
    code = applied(conditional, ORDERS["vectorize"]).source
    assert "out_x4" in code and "in_row" not in code and "(x > 1 ? in[i - 1] : 0.0f)" in code


def test_a_guard_bounding_x_otherwise_refuses_vectors():
    shifted = edited(KERNELS["jacobi2d"], "x < nx - 1", "x - 1 < nx - 2")
    assert "does not bound x as `x < width` alone (and `x >= start`)" in rules.check(
        "vectorize", shifted, shifted.as_candidate())


EMULATED = [(name, order) for name in KERNELS for order in ORDERS]


@needs_gxx
@pytest.mark.parametrize("name, order", EMULATED)
def test_every_point_is_computed_as_the_submitted_kernel_computes_it(tmp_path, name, order):
    spec_ = KERNELS[name]
    candidate = applied(spec_, ORDERS[order])
    marched = "points_per_thread" in (candidate.tune_params or {})
    blocks = [(16, 2, 1), (32, 1, 2)] if len(spec_.problem_size) == 3 else [(16, 2, 1), (32, 4, 1)]
    for sizes, shift in itertools.product(ODD_SIZES[name], (0, 1)):
        at_size = spec_.with_sizes(sizes)
        base = at_size.baseline_params()
        expected = run(build(spec_.source, spec_.kernel_name, tmp_path, {}), at_size, base, shift)
        for ppt, (bx, by, bz) in itertools.product([1, 2, 4] if marched else [None], blocks):
            params = {**base, **candidate.params, **({"points_per_thread": ppt} if marched else {})}
            sizes_of = dict(zip(spec_.block_size_names, (bx, by, bz)))
            params.update({k: v for k, v in sizes_of.items() if k in params})
            defines = {k: v for k, v in params.items() if k not in spec_.block_size_names}
            library = build(normalised(candidate.source), spec_.kernel_name, tmp_path, defines)
            assert run(library, at_size.for_candidate(candidate), params, shift) == expected, (sizes, shift, params)


@needs_gxx
def test_the_emulation_tells_a_vector_read_past_the_array(tmp_path):
    """AddressSanitizer stops the emulated kernel at a read past the array's end, which on the GPU would read
    another allocation's bytes or fault, and which no comparison of results sees."""
    candidate = applied(ROW_TAPS, ORDERS["vectorize"])
    loose = normalised(candidate.source).replace("== 0 && safe) {", "== 0) {")
    assert loose != normalised(candidate.source)
    at_size = ROW_TAPS.with_sizes(ODD_SIZES["row_taps"][0])
    params = {**at_size.baseline_params(), **candidate.params}
    run(build(normalised(candidate.source), ROW_TAPS.kernel_name, tmp_path, {}), at_size.for_candidate(candidate),
        params)
    with pytest.raises(EmulatedFault):
        run(build(loose, ROW_TAPS.kernel_name, tmp_path, {}), at_size.for_candidate(candidate), params)


@needs_gxx
def test_the_emulation_tells_a_neighbour_taken_from_the_wrong_lane(tmp_path):
    spec_ = KERNELS["laplace3d"]
    candidate = applied(spec_, ORDERS["vectorize"])
    broken = normalised(candidate.source).replace("in_row0[k + 2]", "in_row0[k + 1]")
    assert broken != normalised(candidate.source)
    at_size = spec_.with_sizes(ODD_SIZES["laplace3d"][0])
    params = {**at_size.baseline_params(), **candidate.params}
    expected = run(build(spec_.source, spec_.kernel_name, tmp_path, {}), at_size, at_size.baseline_params())
    assert run(build(normalised(candidate.source), spec_.kernel_name, tmp_path, {}),
               at_size.for_candidate(candidate), params) == expected
    assert run(build(broken, spec_.kernel_name, tmp_path, {}), at_size.for_candidate(candidate), params) != expected


def _optional_outputs(want: int) -> KernelSpec:
    """A 2D scaling that also keeps its inputs weighted, and their gradient, when the caller asks (want): w8 and
    grad are touched only then, and may be null otherwise."""
    return spec(r"""
extern "C" __global__ void scale2d(float *out, float *grad, const float *in, const float *w8, int want, int width,
                                   int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        float v = in[y * width + x];
        if (want) v *= w8[y * width + x];
        out[y * width + x] = 2.0f * v;
        if (want) grad[y * width + x] = v;
    }
}
""", "scale2d", [array("out", ["height", "width"], role="out"), array("grad", ["height", "width"], role="out"),
                 array("in", ["height", "width"]), array("w8", ["height", "width"]), scalar("want", want),
                 scalar("width", "width"), scalar("height", "height")],
        {"width": 64, "height": 8}, ["width", "height"], {"block_size_x": 16, "block_size_y": 2},
        {"block_size_x": [16], "block_size_y": [2]})


@needs_gxx
def test_an_output_written_only_under_a_condition_may_be_null_and_is_then_not_taken_as_vectors(tmp_path):
    """A null pointer passes the alignment test: grad, stored only when want is set, would be loaded and stored
    back whole as a vector where the kernel as written never touches it (a review found the rewrite faulting)."""
    for want, null in ((0, "grad"), (1, None)):
        submitted = _optional_outputs(want)
        candidate = rules.apply("vectorize", submitted, submitted.as_candidate())
        assert "grad != nullptr && " in candidate.source
        base = submitted.baseline_params()
        expected = run(build(submitted.source, "scale2d", tmp_path, {}), submitted, base, null=null)
        library = build(normalised(candidate.source), "scale2d", tmp_path, {})
        assert run(library, submitted.for_candidate(candidate), {**base, **candidate.params}, null=null) == expected


ONE_D_ORDERS = {"vectorize": ("vectorize",), "marched": ("elements_per_thread", "vectorize"),
                "plan": ("vectorize", "elements_per_thread", "restrict", "launch_bounds")}


@needs_gxx
@pytest.mark.parametrize("name, order", [(name, order) for name in ONE_D for order in ONE_D_ORDERS])
def test_a_1d_kernel_of_points_is_one_row_of_vectors_marched_a_block_apart(tmp_path, name, order):
    spec_ = ONE_D[name]
    candidate = applied(spec_, ONE_D_ORDERS[order])
    assert rules.applied(candidate.source) == tuple(r for r in ONE_D_ORDERS[order] if r != "restrict" or
                                                    "__restrict__" not in spec_.source)
    assert candidate.grid_div_x[:2] == ["block_size_x", 4]
    size = next(iter(spec_.sizes))
    marched = "elements_per_thread" in candidate.tune_params
    for count, shift in itertools.product((37, 64, 203), (0, 1)):  # whole vectors, and not; aligned, and not
        at_size = spec_.with_sizes({size: count})
        base = at_size.baseline_params()
        expected = run(build(spec_.source, spec_.kernel_name, tmp_path, {}), at_size, base, shift)
        for ept, block in itertools.product([1, 2, 4] if marched else [None], (32, 64)):
            params = {**base, **candidate.params, "block_size_x": block,
                      **({"elements_per_thread": ept} if marched else {})}
            defines = {k: v for k, v in params.items() if k != "block_size_x"}
            library = build(normalised(candidate.source), spec_.kernel_name, tmp_path, defines)
            assert run(library, at_size.for_candidate(candidate), params, shift) == expected, (count, shift, params)


INTERIOR_SIZES = {"jacobi_2d": [{"nx": 37, "ny": 9}, {"nx": 36, "ny": 6}],
                  "heat_3d_unsigned": [{"nx": 21, "ny": 6, "nz": 5}, {"nx": 20, "ny": 5, "nz": 6}],
                  "smooth_1d": [{"n": 203}, {"n": 64}]}


@needs_gxx
@pytest.mark.parametrize("name", list(INTERIOR_OFFSET))
def test_an_index_offset_into_an_interior_is_marched_as_the_submitted_kernel_computes_it(tmp_path, name):
    """canonical.py reads the thread's point without the offset; vectors are refused (its stores lie an element
    past a row's first point), the march and the textual rules taken, each point computed as submitted."""
    spec_ = INTERIOR_OFFSET[name]
    assert "an index offset into an interior" in rules.check("vectorize", spec_, spec_.as_candidate())
    candidate = applied(spec_, ("register_blocking", "elements_per_thread", "restrict", "launch_bounds"))
    factor = next(p for p in ("points_per_thread", "elements_per_thread") if p in candidate.tune_params)
    assert rules.applied(candidate.source)[0] in ("register_blocking", "elements_per_thread")
    for sizes, shift in itertools.product(INTERIOR_SIZES[name], (0, 1)):
        at_size = spec_.with_sizes(sizes)
        base = at_size.baseline_params()
        expected = run(build(spec_.source, spec_.kernel_name, tmp_path, {}), at_size, base, shift)
        for steps, block in itertools.product([1, 2, 4], (16, 32)):
            params = {**base, **candidate.params, "block_size_x": block, factor: steps}
            defines = {k: v for k, v in params.items() if k not in spec_.block_size_names}
            library = build(normalised(candidate.source), spec_.kernel_name, tmp_path, defines)
            assert run(library, at_size.for_candidate(candidate), params, shift) == expected, (sizes, shift, params)
