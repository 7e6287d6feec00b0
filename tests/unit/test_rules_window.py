"""register_window: window sums (conv2d, and variants with other names, bounds and types) computed 4 x window_rows
points per thread from input rows held in registers.

Recognition and refusals name what they saw. Each rewrite compiles with NVRTC across its space, keeps the window
in registers (PTX declares no local memory) and runs on the CPU (g++, every thread of a 2D launch in turn,
AddressSanitizer stopping any access past an array's ends) leaving every array bit for bit as the submitted kernel does: with the window's size at the spec's value (the
register path, vectors where rows are aligned, elements where not) and at another (the kernel as written), at
sizes no tile divides. The GPU verifies conv2d and the variants (tests/gpu/test_rules_shapes_verified.py).
"""
import ctypes
import itertools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.cuda_text import IDENTIFIER, mask, normalised
from shared.domain.spec import KernelSpec, kernel_base_name
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import PADDED_WINDOWS, VARIANTS, edited, sample
from tests.unit.test_rules_shapes import assert_compiles_and_keeps_signature, plan_applied
from tests.unit.test_rules_vectorize16 import _in_child, launched_parameters, needs_gxx
from tests.unit.test_rules_vectorize_aligned import ptx

CONV2D = next(kernel for kernel in corpus() if kernel.name == "conv2d").spec()
STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"
# box_blur walks its window in absolute coordinates, `for (int r = row - RADIUS; r <= row + RADIUS; r++)`.
BOX_BLUR = load_spec(STYLES / "box_blur.cu", STYLES / "box_blur.yaml")
# gaussian3x3 weighs its window by a const local array, which the registers' sums declare again.
GAUSSIAN3X3 = load_spec(STYLES / "gaussian3x3.cu", STYLES / "gaussian3x3.yaml")
# mean_filter_valid divides by the count of its taps inside the image, `++n` beside the sum.
MEAN_FILTER_VALID = load_spec(STYLES / "mean_filter_valid.cu", STYLES / "mean_filter_valid.yaml")
# With the zero-padded windows (taps outside the image skipped by guards or `continue`, or read as zero by a
# ternary) and a window clamped to the image's edges.
KERNELS = {"conv2d": CONV2D, "correlate": VARIANTS["correlate"][1], "box3_int": VARIANTS["box3_int"][1],
           "blur": VARIANTS["blur"][1], "box_blur": BOX_BLUR, "gaussian3x3": GAUSSIAN3X3,
           "mean_filter_valid": MEAN_FILTER_VALID, **PADDED_WINDOWS}
CONV_SAME, CONV_RADIUS = KERNELS["conv_same"], KERNELS["conv_radius"]


def window(spec_: KernelSpec):
    return rules.apply("register_window", spec_, spec_.as_candidate())


def with_k_unsigned(spec_: KernelSpec) -> KernelSpec:
    source = spec_.source.replace("int h, int k)", "int h, unsigned k)")
    return spec_.model_validate({**spec_.model_dump(), "source": source,
                                 "args": [{**a.model_dump(), "dtype": "uint32"} if a.name == "k" else a.model_dump()
                                          for a in spec_.args]})


def with_out_shape(spec_: KernelSpec, shape: list[str]) -> KernelSpec:
    return spec_.model_validate({**spec_.model_dump(), "args": [
        {**a.model_dump(), "shape": shape} if a.name == "out" else a.model_dump() for a in spec_.args]})


# --- what it recognises and refuses ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(KERNELS))
def test_a_window_sum_is_recognised_whatever_its_names(name):
    assert rules.found(KERNELS[name]) == ("The recognisers found a window sum (each point adds up a window of an "
                                          "input read along rows, as a 2D convolution does).")
    assert rules.check("register_window", KERNELS[name], KERNELS[name].as_candidate()) is None


def test_the_bounds_named_by_parameters_are_fixed_at_the_specs_values_and_literals_stay():
    conv = normalised(window(CONV2D).source)
    assert "if (k == 5) {\n        const int k = 5;" in conv
    correlate = normalised(window(KERNELS["correlate"]).source)
    assert "if (kh == 3 && kw == 7) {\n        const int kh = 3;\n        const int kw = 7;" in correlate
    assert "bool done = false;\n    {\n        auto reaches" in normalised(window(KERNELS["box3_int"]).source)


def test_a_window_centred_on_the_point_starts_its_rows_and_columns_at_minus_r():
    blur = normalised(window(KERNELS["blur"]).source)
    assert "if (r == 2) {\n        const int r = 2;" in blur
    assert "const float *p = at(x_first, y_first + last, row - last + (-2), -2);" in blur
    assert "const int dy = row - r_ + (-2);" in blur and "for (int dx = -2; dx < 3; dx++)" in blur
    assert "* v[c + dx - (-2)];" in blur
    # The row's first value, 2 before x0, lies 2 lanes into an aligned vector: the loads start there, in the loop
    # taken where the first two rows (and so all, a pitch apart) start aligned; the other loop reads one by one.
    assert "if ((reinterpret_cast<unsigned long long>(at(x_first, y_first, -2, -2) - 2) & 15) == 0 && " \
           "(reinterpret_cast<unsigned long long>(at(x_first, y_first, -1, -2) - 2) & 15) == 0) {\n" in blur
    assert "float v[8];\n                    { const float4 quad = *reinterpret_cast<const float4 *>(p - 2 + 0); " \
           "v[0] = quad.z; v[1] = quad.w; }" in blur
    assert "float v[8];\n                    #pragma unroll\n                    for (int chunk = 0; chunk < 8; chunk++) " \
           "v[chunk] = p[chunk];" in blur


def test_the_accumulator_starts_from_its_initialiser_and_the_rest_of_the_body_follows():
    correlate = normalised(window(KERNELS["correlate"]).source)
    assert "window_sum[r_][c_] = bias;" in correlate
    box = normalised(window(KERNELS["box3_int"]).source)
    assert "{ sum = window_value; reached = true; }\n                sum = (sum + 4) / 9;\n                " \
           "{ stored[slot] = sum; stored_at[slot] = &out[y * ow + x]; }" in box


# A branchless mean over the taps inside the image: the tap chosen by a flag, and the count stepped by it.
COUNT_OF_A_FLAG = edited(KERNELS["mean_of_valid"], """            if (nx >= 0 && nx < width && ny >= 0 && ny < height) {
                sum += in[ny * width + nx];
                count++;
            }""", """            bool inside = nx >= 0 && nx < width && ny >= 0 && ny < height;
            sum += inside ? in[ny * width + nx] : 0.0f;
            count += inside;""")

OUTSIDE = "bool outside = nx < 0 || nx >= width || ny < 0 || ny >= height;"
# ... the flag negated, both in the choice and in the count
INSIDE = "bool inside = nx >= 0 && nx < width && ny >= 0 && ny < height;"
COUNT_OF_A_NEGATED_FLAG = edited(edited(COUNT_OF_A_FLAG, INSIDE, OUTSIDE),
                                 "sum += inside ? in[ny * width + nx] : 0.0f;\n            count += inside;",
                                 "sum += outside ? 0.0f : in[ny * width + nx];\n            count += !outside;")
# ... a count of the taps outside, each weighing the sum down: 0 at every tap of the registers
COUNT_OF_THE_TAPS_OUTSIDE = edited(edited(COUNT_OF_A_NEGATED_FLAG, "count += !outside;", "count += outside;"),
                                   "sum / count", "sum / (25 + count)")
# ... the flag tested by a skip, and counted negated
COUNT_OF_THE_FLAG_A_SKIP_TESTS = edited(edited(COUNT_OF_A_FLAG, INSIDE,
                                               OUTSIDE + "\n            if (outside) continue;"),
                                        "sum += inside ? in[ny * width + nx] : 0.0f;\n            count += inside;",
                                        "sum += in[ny * width + nx];\n            count += !outside;")
# ... the flag built in two steps, the count cast
COUNT_OF_A_FLAG_IN_TWO_STEPS = edited(edited(COUNT_OF_A_FLAG, INSIDE, "bool inside = nx >= 0 && nx < width;\n"
                                             "            inside = inside && ny >= 0 && ny < height;"),
                                      "count += inside;", "count += (int)inside;")


REFUSED = {
    "a window by twos": (edited(CONV2D, "for (int i = 0; i < k; i++)", "for (int i = 0; i < k; i += 2)"),
                         "does not count up by one to a bound"),
    "a bound held in a local the point changes": (
        edited(edited(CONV2D, "float sum = 0.0f;", "float sum = 0.0f;\n        int kk = k;\n        if (x > 4) kk--;"),
               "for (int j = 0; j < k; j++)", "for (int j = 0; j < kk; j++)"),
        "its window loop's kk is not made of literals, integer scalar parameters and locals of those alone"),
    "a window too wide": (CONV2D.with_sizes({"k": 17}), "takes 17 values at the spec's sizes; a window held in "
                                                        "registers is 1 to 16 wide"),
    "the accumulator changed before": (
        edited(CONV2D, "float sum = 0.0f;", "float sum = 0.0f;\n        sum *= 2.0f;"),
        "it changes sum between its declaration and the window loops"),
    "the accumulator starting from a load": (
        edited(CONV2D, "float sum = 0.0f;", "float sum = filt[0];"),
        "its accumulator starts from filt[0], which depends on more than the parameters"),
    "a write before the window": (
        edited(CONV2D, "float sum = 0.0f;", "float sum = 0.0f;\n        out[y * out_w + x] = 0.0f;"),
        "it writes memory before its window loops"),
    "a column read": (edited(CONV2D, "image[(y + i) * width + x + j]", "image[(x + i) * width + y + j]"),
                      "is not read along rows"),
    "two statements in the window": (
        edited(CONV2D, "sum += image[(y + i) * width + x + j] * filt[i * k + j];",
               "sum += image[(y + i) * width + x + j] * filt[i * k + j];\n                sum *= 0.5f;"),
        "its inner window loop holds `sum += image[(y + i) * width + x + j] * filt[i * k + j];` before its last "
        "statement"),
    "a local in the update": (
        edited(edited(CONV2D, "float sum = 0.0f;", "float sum = 0.0f;\n        float g = 2.0f;"),
               "* filt[i * k + j];", "* filt[i * k + j] * g;"),
        "its window update uses g, which the kernel's body uses elsewhere too"),
    "a window inside a loop over channels": (
        edited(CONV2D, "float sum = 0.0f;", "float sum = 0.0f;\n        for (int ch = 0; ch < 1; ch++)"),
        "does not have exactly one pair of nested window loops"),
    # What would make the registers compute another thing than the kernel does.
    "an offset that moves with the point": (
        edited(edited(CONV2D, "float sum = 0.0f;",
                      "float sum = 0.0f;\n        int off = 0;\n        if (x >= 41) off = 1;"),
               "image[(y + i) * width + x + j]", "image[(y + i) * width + x + j + off]"),
        "moves with off, which is not a parameter"),
    "a parameter moved before the window": (
        edited(CONV2D, "float sum = 0.0f;", "float sum = 0.0f;\n        image += height;"),
        "changes its parameter image, which a thread's next point would see changed"),
    "a filter read that moves its pointer": (
        edited(CONV2D, "* filt[i * k + j];", "* *filt++;"),
        "changes its parameter filt"),
    "a store through a pointer before the window": (
        edited(CONV2D, "float sum = 0.0f;", "float sum = 0.0f;\n        *(out + y * out_w + x) = 0.0f;"),
        "it writes memory before its window loops"),
    "an accumulator assigned on both branches": (
        edited(CONV2D, "float sum = 0.0f;", "float sum;\n        if (k > 3) sum = 1.0f; else sum = 0.0f;"),
        "its accumulator sum is not declared once, as a number with a value"),
    "an accumulator of deduced type": (edited(CONV2D, "float sum = 0.0f;", "auto sum = 0.0f;"),
                                       "its accumulator sum is not declared once, as a number with a value"),
    # Unsigned, row - RADIUS wraps above row + RADIUS on the first rows, where the loop runs no row at all.
    "an unsigned window around the point": (
        edited(edited(edited(edited(BOX_BLUR, "int col", "unsigned col"), "int row", "unsigned row"),
                      "int r =", "unsigned r ="), "int c =", "unsigned c ="),
        "counts in an unsigned type"),
    "a uint32_t window around the point": (edited(edited(edited(
        BOX_BLUR, "for (int r = row - RADIUS; r <= row + RADIUS; r++)",
        "for (uint32_t r = -RADIUS; (row + r) <= row + RADIUS; r++)"),
        "for (int c = col - RADIUS; c <= col + RADIUS; c++)",
        "for (uint32_t c = -RADIUS; (col + c) <= col + RADIUS; c++)"),
        "in[r * w + c]", "in[(row + r) * w + (col + c)]"), "counts in an unsigned type"),
    "a window around the point by an unsigned radius": (BOX_BLUR.model_validate({
        **BOX_BLUR.model_dump(),
        "source": BOX_BLUR.source.replace("int w, int h)", "int w, int h, unsigned R)").replace(
            "row - RADIUS; r <= row + RADIUS", "row - R; r <= row + R").replace(
            "col - RADIUS; c <= col + RADIUS", "col - R; c <= col + R"),
        "args": [*BOX_BLUR.model_dump()["args"], {"name": "R", "dtype": "uint32", "value": 2}]}),
        "counts in an unsigned type"),
    # No guard: the submitted grid covers exactly its outputs at every block size tuned, a grid of whole patches
    # would not (review, helper-84: reads and stores past the arrays).
    "a window under no guard": (edited(edited(CONV2D, "if (x < out_w && y < out_h) {", "{"),
                                       "int out_w = width - k + 1, out_h = height - k + 1;",
                                       "int out_w = width - k + 1;"), "is under no guard bounding x from above"),
    # Guards whose truth at a box's corners would not tell it inside: not a chain of linear comparisons of signed
    # integers.
    "a guard leaving out one column": (edited(CONV_SAME, "ix < W)", "ix != W)"),
                                       "`((int)(x + j - R)) != W` is not one comparison"),
    "a guard on the data": (edited(CONV_SAME, "ix < W)", "ix < W && filt[i * K + j] != 0.0f)"),
                            "`filt[i * K + j] != 0.0f` is not one comparison"),
    "a guard of either of two": (edited(CONV_SAME, "if (iy >= 0 && iy < H && ix >= 0 && ix < W)",
                                        "if ((iy >= 0 && iy < H) || ix == 0)"), "is not one comparison"),
    "a skip of both of two": (edited(CONV_SAME, "if (iy >= 0 && iy < H && ix >= 0 && ix < W)",
                                     "if (iy < 0 && ix < 0) continue;\n            if (iy < H && ix < W)"),
                              "`((int)(y + i - R)) < 0 && ((int)(x + j - R)) < 0` is not one comparison"),
    "a guard inside a disc": (edited(CONV_SAME, "ix < W)", "ix < W && (ix - x) * (ix - x) < 4)"),
                              "is not linear in i, j, x, y"),
    "a guard of an unsigned index": (edited(CONV_SAME, "int x = blockIdx", "unsigned x = blockIdx"),
                                     "its window loops test guards of indices of type unsigned"),
    "a guard of an unsigned parameter": (edited(CONV_SAME, "int H, int W, int K)", "int H, unsigned W, int K)"),
                                         "reads W, which is not a signed integer"),
    "a guard of an unsigned number": (edited(CONV_SAME, "ix < W)", "ix < W && ix < 4096u)"),
                                      "compares unsigned or floating numbers"),
    "a guard of a radius changed after": (edited(CONV_SAME, "float sum = 0.0f;",
                                                 "R += (W > 100);\n    float sum = 0.0f;"),
                                          "reads R, which is not a signed local of the parameters alone"),
    "a local changing a variable": (edited(CONV_SAME, "int ix = x + j - R;", "int ix = x + j - R--;"),
                                    "its window loops' local ix changes a variable as it is declared"),
    "a radius of an unsigned type": (edited(CONV_RADIUS, "const int r = k / 2;", "const unsigned r = k / 2;"),
                                     "is not made of literals, integer scalar parameters and locals of those alone"),
    "a radius changed after": (edited(edited(CONV_RADIUS, "const int r", "int r"), "float acc = 0.0f;",
                                      "float acc = 0.0f;\n    if (w < 64) r = 1;"),
                               "is not made of literals, integer scalar parameters and locals of those alone"),
    # review, helper-99: a start below 0 against an unsigned bound runs no step; a band of unsigned differences
    "a window from -K / 2 of an unsigned K": (with_k_unsigned(edited(edited(
        CONV_RADIUS, "for (int dy = -r; dy <= r; dy++)", "for (int dy = -k / 2; dy <= k / 2; dy++)"),
        "for (int dx = -r; dx <= r; dx++)", "for (int dx = -k / 2; dx <= k / 2; dx++)")),
        "counts in an unsigned type, where a start below 0"),
    "a skip of a band of unsigned differences": (edited(
        KERNELS["blur_skipping_edges"], "if (xx < 0 || xx >= w) continue;",
        "if (xx < 0 || xx >= w || (unsigned)(xx - 23) < 2u) continue;"), "compares in an unsigned type"),
    "a guard changing a local": (edited(CONV_SAME, "ix < W)", "++ix < W)"), "it changes a variable"),
    "a local of the outer loop assigned in the inner": (edited(
        KERNELS["blur_skipping_edges"], "const int xx = col + dx;",
        "const int xx = col + dx;\n                yy = 0;"),
        "holds `yy = 0;` before its last statement"),
    # A count of taps is read beside the sum only where both run under the same guards, from a whole number.
    "a count from a parameter": (edited(edited(KERNELS["weights_of_valid"], "float taps = 0.0f;", "float taps = eps;"),
                                        "int W, int H)", "int W, int H, float eps)"),
                                 "its count of taps taps starts from eps, not a whole number"),
    "a count the update reads": (edited(VARIANTS["box_blur"][1], "total += img[yy * width + xx];",
                                        "total += img[yy * width + xx] * count;"),
                                 "count taps in count, which they also use otherwise"),
    "a count by a fraction": (edited(KERNELS["weights_of_valid"], "taps += 1.0f;", "taps += 0.5f;"),
                              "its count of taps taps steps by 0.5f, which is neither a whole number"),
    # review, helper-101: from 2^24 a float count stays where it is, one step at a time
    "a count from 2^24": (edited(KERNELS["weights_of_valid"], "float taps = 0.0f;", "float taps = 16777216.0f;"),
                          "not a whole number below 2^24 less its taps"),
    "a count in octal": (edited(KERNELS["weights_of_valid"], "float taps = 0.0f;", "float taps = 010;"),
                         "its count of taps taps starts from 010"),
    # review, helper-102: the rewrite runs the part before the window again for every probe, row and point, so it
    # may neither write (through a reference, a helper or an indexed expression) nor read what the kernel writes
    "a write through a reference before the window": (
        edited(CONV2D, "float sum = 0.0f;", "float &o = out[y * out_w + x];\n        if (o > 1000.0f) return;\n"
                                            "        o = 2000.0f;\n        float sum = 0.0f;"),
        "before its window loops, declares a pointer, a reference or a static, so a point cannot be probed"),
    "a helper writing before the window": (
        edited(edited(CONV2D, "float sum = 0.0f;", "mark(out, y * out_w + x);\n        float sum = 0.0f;"),
               'extern "C"', '__device__ void mark(float *o, int i) { o[i] = 0.0f; }\n\nextern "C"'),
        "before its window loops, calls mark, a function of the source"),
    "a write through an indexed expression before the window": (
        edited(CONV2D, "float sum = 0.0f;", "(out + y * out_w + x)[0] = 1.0f;\n        float sum = 0.0f;"),
        "before its window loops, writes through an indexed expression"),
    "a read through an indexed expression before the window": (
        edited(CONV2D, "float sum = 0.0f;", "if ((out + y * out_w)[x] > 1.0f) return;\n        float sum = 0.0f;"),
        "it indexes an expression before its window loops, which may read what the kernel writes"),
    "a neighbour's output read before the window": (
        edited(CONV2D, "float sum = 0.0f;", "if (y > 0 && out[(y - 1) * out_w + x] > 1000.0f) return;\n"
                                            "        float sum = 0.0f;"),
        "it reads out before its window loops, and writes it"),
    # a flag steps a count by 1 only where it is the guard the window's ternary tests
    "a count by a flag the window does not test": (
        edited(edited(COUNT_OF_A_FLAG, "count += inside;", "count += centre;"),
               "bool inside = ", "bool centre = dx == 0;\n            bool inside = "),
        "its count of taps count steps by centre, which is neither a whole number nor a flag of a guard its window "
        "tests"),
    "a count under a test the window does not make": (
        edited(COUNT_OF_A_FLAG, "count += inside;", "if (dx == 0) count++;"),
        "its count of taps count runs under `dx == 0`, which is not a guard its window tests nor one's negation"),
    # the choice's value holds only where x < 20, which no corner of the box tests
    "a count under a choice": (
        edited(COUNT_OF_A_FLAG, "count += inside;", "if (x < 20 ? inside : false) count++;"),
        "its count of taps count runs under `x < 20 ? inside : false`, which is not a guard its window tests"),
    "a count under a test of itself": (
        edited(COUNT_OF_A_FLAG, "count += inside;", "if (count < 5) count++;"),
        "its count of taps count runs under `count < 5`, which is not a guard its window tests nor one's negation"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_it_refuses_and_why(case):
    spec_, reason = REFUSED[case]
    assert reason in (rules.check("register_window", spec_, spec_.as_candidate()) or "applies")


def test_a_count_set_to_a_choice_by_its_own_sum_is_not_read_as_a_step():
    """`count = count + inside ? 1 : 0;` is `count = (count + inside) ? 1 : 0;` in C: no count of taps."""
    spec_ = edited(COUNT_OF_A_FLAG, "count += inside;", "count = count + inside ? 1 : 0;")
    assert rules.check("register_window", spec_, spec_.as_candidate()) is not None


def test_a_zero_padded_window_adds_from_registers_where_its_guards_hold_at_the_boxs_corners():
    code = normalised(window(CONV_SAME).source)
    # The guard, its locals spelled out, tested after the point body's start (R = K / 2 is a local of it).
    assert """auto holds = [&](const int x, const int y, const int i, const int j) {
            if (x < W && y < H) {
                int R = K / 2;
                float sum = 0.0f;
                return (((int)(y + i - R)) >= 0 && ((int)(y + i - R)) < H && ((int)(x + j - R)) >= 0 && ((int)(x + j - R)) < W);
            }
            return false;
        };""" in code
    assert """for (int corner = 0; corner < 16; corner++)
            inside = inside && holds(x_first + (corner & 1) * 3, y_first + (corner >> 1 & 1) * (window_rows - 1), (corner & 4) ? 4 : 0, (corner & 8) ? 4 : 0);""" in code
    assert "return &in[((int)(y + i - R)) * W + ((int)(x + j - R))];" in code
    assert "window_sum[r][c] += v[c + j] * filt[i * K + j];" in code
    # a skip is a guard negated; a ternary's value is taken where its condition holds
    skips = normalised(window(KERNELS["blur_skipping_edges"]).source)
    assert "return !(((int)(row + dy)) < 0 || ((int)(row + dy)) >= h) && !(((int)(col + dx)) < 0 || " \
           "((int)(col + dx)) >= w);" in skips
    radius = normalised(window(CONV_RADIUS).source)  # r = k / 2, a local of the parameters, at the specialised k
    assert "if (k == 5) {\n        const int k = 5;\n        const int r = k / 2;\n" in radius
    assert "for (int dx = -2; dx < 3; dx++) window_sum[r_][c] += v[c + dx - (-2)] * filt[(dy + r) * k + (dx + r)];" \
        in radius
    gaussian = normalised(window(GAUSSIAN3X3).source)
    assert "const float w[3] = {0.25f, 0.5f, 0.25f};\n        auto reaches" in gaussian
    # Its indices are unsigned (`const auto`): the edge threads' points run rolled, which NVRTC compiles right.
    assert "#pragma unroll 1\n        for (int base = 0; base < shared_points; base += lanes) {\n" in gaussian
    # A whole term chosen by a ternary was rounded before its add: the registers' add fuses nothing either.
    assert "window_sum[r][c] = __fadd_rn(window_sum[r][c], v[c + kx] * c_gauss[ky * 5 + kx]);" in \
        normalised(window(KERNELS["gauss_ternary"]).source)
    assert "__fadd_rn" not in code and "__dadd_rn" not in normalised(window(KERNELS["sharpen_double"]).source)
    ternary = normalised(window(KERNELS["sharpen_double"]).source)
    assert "window_sum[r_][c_] += ((double)(v_[c_ + b - (-1)])) * taps[(a + 1) * 3 + b + 1];" in ternary


CONSTANT_FILTER = edited(edited(CONV2D, 'extern "C"', '__constant__ float c_taps[25];\n\nextern "C"'),
                         "* filt[i * k + j];", "* c_taps[i * k + j];")
# Ways users write the same convolution, each taken.
TAKEN = {
    "unroll pragmas": edited(edited(CONV2D, "        for (int i = 0; i < k; i++) {",
                                    "        #pragma unroll\n        for (int i = 0; i < k; i++) {"),
                             "            for (int j = 0; j < k; j++) {",
                             "            #pragma unroll 5\n            for (int j = 0; j < k; j++) {"),
    "__ldg": edited(CONV2D, "image[(y + i) * width + x + j]", "__ldg(&image[(y + i) * width + x + j])"),
    "a __constant__ filter": CONSTANT_FILTER,
    "64-bit window indices": edited(edited(CONV2D, "for (int i = 0; i < k; i++)", "for (size_t i = 0; i < k; ++i)"),
                                    "for (int j = 0; j < k; j++)", "for (long j = 0; j < k; j += 1)"),
    "an inclusive bound": edited(CONV2D, "for (int i = 0; i < k; i++)", "for (int i = 0; i <= k - 1; i++)"),
    # In double precision: no 128-bit vector of four, so the row is read element by element into registers.
    "doubles": CONV2D.model_validate({
        **CONV2D.model_dump(), "source": CONV2D.source.replace("float", "double").replace("0.0f", "0.0"),
        "args": [{**a.model_dump(), "dtype": "float64"} if a.is_array else a.model_dump() for a in CONV2D.args]}),
    # After the window: a guarded store reading the point's own output, and stores the rows cannot hold back.
    "a guarded store of its own output": edited(CONV2D, "out[y * out_w + x] = sum;",
                                                "if (sum > 0.0f) out[y * out_w + x] = 0.5f * out[y * out_w + x] + sum;"),
    "two stores after the window": edited(CONV2D, "out[y * out_w + x] = sum;",
                                          "out[y * out_w + x] = sum;\n        out[y * out_w + x] *= 2.0f;"),
    "an accumulating store": edited(CONV2D, "out[y * out_w + x] = sum;", "out[y * out_w + x] += sum;"),
    "a mirrored store": edited(CONV2D, "out[y * out_w + x] = sum;", "out[y * out_w + out_w - 1 - x] = sum;"),
    # What the review found a recorded store got wrong: a write through a reference after it, a value that moves
    # its own subscript (C++17 evaluates the value first), a subscript wrapping through a cast.
    # (The reference is bound after the window: bound before it, the part the rewrite runs again reads out.)
    "a reference written after the store": edited(edited(
        CONV2D, 'extern "C"', 'typedef float &fref;\n\nextern "C"'),
        "out[y * out_w + x] = sum;", "fref o = out[y * out_w + x];\n        out[y * out_w + x] = sum;\n"
                                     "        o = o * 2.0f;"),
    "a value that moves its subscript": with_out_shape(
        edited(CONV2D, "out[y * out_w + x] = sum;", "int o = y * (out_w + 1) + x;\n        out[o] = (o++, sum);"),
        ["height - k + 2", "width - k + 2"]),
    "a subscript wrapping through a cast": with_out_shape(
        edited(CONV2D, "out[y * out_w + x] = sum;", "out[y * width + (unsigned char)(x + 1) + 3] = sum;"),
        ["height - k + 1", "width"]),
    "a subscript wrapping through a local": with_out_shape(
        edited(CONV2D, "out[y * out_w + x] = sum;", "unsigned char c8 = x + 1;\n        out[y * width + c8 + 3] = sum;"),
        ["height - k + 1", "width"]),
    # A local of the parameters alone is the same at every point, whatever its conversions: a pitch.
    "a pitch converted from the parameters": edited(CONV2D, "int out_w = width - k + 1,",
                                                    "int out_w = (unsigned short)(width - k + 1u),"),
    # Sobel-like weights chosen by the offsets alone stay in the sum, whose registers know the offsets.
    "weights by the offsets' sign": edited(KERNELS["clamp_assigned"], "sum += v * filt[(dy + 2) * 5 + dx + 2];",
                                           "sum += v * (dx < 0 ? -1.0f : 1.0f) * (dy == 0 ? 2.0f : 1.0f);"),
    "a flag of the guard": edited(CONV_SAME, "if (iy >= 0 && iy < H && ix >= 0 && ix < W)",
                                  "const bool inside = iy >= 0 && iy < H && ix >= 0 && ix < W;\n"
                                  "            if (inside)"),
    "the window's corner in locals of the point": edited(edited(edited(
        CONV_SAME, "int R = K / 2;", "int R = K / 2;\n    const int y0 = y - R;\n    const int x0 = x - R;"),
        "int iy = y + i - R;", "int iy = y0 + i;"), "int ix = x + j - R;", "int ix = x0 + j;"),
    # Weights in a 2D const array, which the registers' sums declare again.
    "weights in a 2D array": edited(edited(KERNELS["clamp_assigned"], "float sum = 0.0f;",
                                           "const float g[5][5] = {{1, 2, 3, 2, 1}, {2, 4, 6, 4, 2}, {3, 6, 9, 6, 3}, "
                                           "{2, 4, 6, 4, 2}, {1, 2, 3, 2, 1}};\n    float sum = 0.0f;"),
                                    "v * filt[(dy + 2) * 5 + dx + 2];", "v * g[dy + 2][dx + 2];"),
    "a negated skip": edited(edited(KERNELS["blur_skipping_edges"], "if (yy < 0 || yy >= h) continue;",
                                    "if ((yy < 0 || yy >= h)) continue;"),
                             "if (xx < 0 || xx >= w) continue;", "if (!(xx >= 0 && xx < w)) continue;"),
    # A count of taps written out, unsigned, stepping by two from one.
    "a count of the ternary's flag": COUNT_OF_A_FLAG,
    "a count of a negated flag": COUNT_OF_A_NEGATED_FLAG,
    "a count of the taps outside": COUNT_OF_THE_TAPS_OUTSIDE,
    "a count of a flag built in two steps": COUNT_OF_A_FLAG_IN_TWO_STEPS,
    "a count choosing by the flag": edited(COUNT_OF_A_FLAG, "count += inside;", "count += inside ? 1 : 0;"),
    "a count choosing in parentheses": edited(COUNT_OF_A_FLAG, "count += inside;", "count += (inside ? 1 : 0);"),
    "a count by a static_cast": edited(COUNT_OF_A_FLAG, "count += inside;", "count += static_cast<int>(inside);"),
    "a count added to itself": edited(COUNT_OF_A_FLAG, "count += inside;", "count = count + (int)inside;"),
    "a count of the flag a skip tests": COUNT_OF_THE_FLAG_A_SKIP_TESTS,
    "a count of the taps outside under a negation": edited(edited(COUNT_OF_A_FLAG, "count += inside;",
                                                                  "if (!inside) count++;"),
                                                           "sum / count", "sum / (25 - count)"),
    "a count before the update": edited(COUNT_OF_A_FLAG, "sum += inside ? in[ny * width + nx] : 0.0f;\n"
                                                         "            count += inside;",
                                        "float v = inside ? in[ny * width + nx] : 0.0f;\n"
                                        "            count += inside;\n            sum += v;"),
    "a count of a flag set under a guard": edited(COUNT_OF_A_FLAG, INSIDE,
                                                  "bool inside = false;\n            if (ny >= 0 && ny < height) "
                                                  "inside = nx >= 0 && nx < width;"),
    "a count of an int flag": edited(COUNT_OF_A_FLAG, INSIDE,
                                     "int inside = nx >= 0 && nx < width && ny >= 0 && ny < height;"),
    "a count beside an update under the flag": edited(COUNT_OF_A_FLAG, "sum += inside ? in[ny * width + nx] : 0.0f;",
                                                      "if (inside) sum += in[ny * width + nx];"),
    # every tap counted, the update under its guard: 9 taps at every point, in the registers as in the kernel
    "a count of every tap beside a guarded update": edited(edited(VARIANTS["box_blur"][1], "                count++;\n",
                                                                  ""),
                                                           "int yy = y + dy, xx = x + dx;",
                                                           "int yy = y + dy, xx = x + dx;\n            count++;"),
    "a count under the flag": edited(COUNT_OF_A_FLAG, "sum += inside ? in[ny * width + nx] : 0.0f;\n"
                                                      "            count += inside;",
                                     "if (inside) { count++; }\n"
                                     "            sum += inside ? in[ny * width + nx] : 0.0f;"),
    "a count written out": edited(edited(edited(KERNELS["mean_of_valid"], "int count = 0;", "unsigned count = 1u;"),
                                         "count++;", "count = count + 2u;"),
                                  "sum / count", "sum / (count / 2u)"),
}


@pytest.mark.parametrize("case", list(TAKEN))
def test_other_spellings_of_a_convolution_are_taken_and_compile(case):
    spec_ = TAKEN[case]
    assert rules.check("register_window", spec_, spec_.as_candidate()) is None
    candidate = window(spec_)
    assert_compiles_and_keeps_signature(spec_, candidate)
    code = normalised(candidate.source)
    if case == "__ldg":
        assert "window_sum[r][c] += v[c + j] * filt[i * k + j];" in code
    if case == "64-bit window indices":
        assert "const size_t i = row - r + (0);" in code and "for (long j = 0; j < 5; j++)" in code
        assert "[&](const int x, const int y, const size_t i, const long j) -> const float * {" in code
    if case == "doubles":
        assert "double v[8];\n" in code and "reinterpret_cast" not in code
    if case == "unroll pragmas":
        assert "{ sum = window_value; reached = true; }\n                { stored[slot] = sum; stored_at[slot] = " \
               "&out[y * out_w + x]; }" in code
    if case in ("a count of the ternary's flag", "a count of a negated flag", "a count of a flag built in two steps",
                "a count choosing by the flag", "a count under the flag"):  # every tap inside: the flag is 1 at each
        assert "{ sum = window_value; count += 25 * (1); reached = true; }" in code
    if case in ("a count choosing in parentheses", "a count by a static_cast", "a count added to itself",
                "a count of the flag a skip tests", "a count before the update", "a count of a flag set under a guard",
                "a count of an int flag", "a count beside an update under the flag"):
        assert "{ sum = window_value; count += 25 * (1); reached = true; }" in code
    if case == "a count of every tap beside a guarded update":
        assert "{ total = window_value; count += 9 * (1); reached = true; }" in code
    if case in ("a count of the taps outside", "a count of the taps outside under a negation"):
        assert "{ sum = window_value; count += 25 * (0); reached = true; }" in code
    if case == "a guarded store of its own output":
        assert "if (sum > 0.0f) { stored[slot] = 0.5f * out[y * out_w + x] + sum; stored_at[slot] = " \
               "&out[y * out_w + x]; }" in code
    if case == "a reference written after the store":  # the store is not the point's last deed
        assert "stored_at" not in code
    if case == "a value that moves its subscript":
        assert "{ stored[slot] = (o++, sum); stored_at[slot] = &out[o]; }" in code
    if case in ("a mirrored store", "a subscript wrapping through a cast", "a subscript wrapping through a local"):
        assert "if (stored_at[0] != nullptr && stored_at[1] == stored_at[0] + 1 && stored_at[2] == stored_at[0] + 2 && " \
               "stored_at[3] == stored_at[0] + 3 && (reinterpret_cast<unsigned long long>(stored_at[0]) & 15) == 0) {" \
               in code
    if case == "a pitch converted from the parameters":
        assert "if (stored_at[0] != nullptr && stored_at[1] != nullptr && " in code
    if case in ("two stores after the window", "an accumulating store"):
        assert "stored_at" not in code and "finish(x_first + c, y_first + r, window_sum[r][c]);" in code


def test_the_one_store_after_the_window_is_recorded_and_each_row_issues_its_stores_together():
    """A row's four stores interleaved with its points' other code reached the H100's L2 as partial writes of the
    same sectors, 2.7 times the sectors stores issued together wrote (box_blur: 61% of the copy; 88% by hand with
    the stores together, 85-86% with this rendering)."""
    code = normalised(window(CONV2D).source)
    assert "decltype(&out[0]) stored_at[4];\n        float stored[4];\n        auto finish = [&](const int x, const int y, " \
           "const float window_value, const int slot) {" in code
    assert "{ sum = window_value; reached = true; }\n                { stored[slot] = sum; stored_at[slot] = " \
           "&out[y * out_w + x]; }" in code
    # out[y * out_w + x] names the point's indices and out_w, a local of the parameters alone: four points that
    # store, store side by side.
    assert """                for (int c = 0; c < 4; c++) {
                    stored_at[c] = nullptr;
                    finish(x_first + c, y_first + r, window_sum[r][c], c);
                }
                // the row's stores together, which the L2 takes as whole writes: one vector where they lie side by side
                if (stored_at[0] != nullptr && stored_at[1] != nullptr && stored_at[2] != nullptr && stored_at[3] != nullptr && (reinterpret_cast<unsigned long long>(stored_at[0]) & 15) == 0) {
                    *reinterpret_cast<float4 *>(stored_at[0]) = {stored[0], stored[1], stored[2], stored[3]};
                } else {
                    #pragma unroll
                    for (int c = 0; c < 4; c++) if (stored_at[c] != nullptr) *stored_at[c] = stored[c];
                }""" in code
    # box_blur's out[row * w + col], of the point's indices and parameters alone, likewise.
    assert "if (stored_at[0] != nullptr && stored_at[1] != nullptr && stored_at[2] != nullptr && " \
           "stored_at[3] != nullptr && (reinterpret_cast<unsigned long long>(stored_at[0]) & 15) == 0) {" in \
           normalised(window(BOX_BLUR).source)
    # The points' own runs (edges, other window sizes) store as written.
    assert "auto point = [&](const int x, const int y) {" in code and "out[y * out_w + x] = sum;\n" in code


def test_the_registers_tell_nvrtc_that_every_patch_point_reaches_its_window():
    """`at` and `finish` run only for the patch's points, which `reaches` has found reaching the window, so the paths
    that do not reach it are marked unreachable: NVRTC then drops the guard they would test again per input row and
    per point (conv2d on the H200: 14.3 to 14.0 us). The emulation stops a run that takes one."""
    code = normalised(window(CONV2D).source)
    assert """                return &image[(y + i) * width + x + j];
            }
            __builtin_unreachable();
        };""" in code
    assert """            bool reached = false;
            int out_w = width - k + 1, out_h = height - k + 1;
            if (x < out_w && y < out_h) {""" in code and "            if (!reached) __builtin_unreachable();\n        };" in code
    # the probe and the edge threads' points keep their guards
    assert "            return false;\n        };" in code and code.count("__builtin_unreachable") == 2


def test_a_filter_name_the_body_also_declares_is_refused():
    local = edited(CONSTANT_FILTER, "float sum = 0.0f;", "float sum = 0.0f;\n        float c_taps = 1.0f;")
    assert "its window update uses c_taps, which the kernel's body uses elsewhere too" in rules.check(
        "register_window", local, local.as_candidate())


# --- it compiles, keeps the signature, holds the window in registers, and composes -------------------------
@pytest.mark.parametrize("name", list(KERNELS))
def test_each_rewrite_compiles_across_its_space_without_local_memory(name):
    spec_ = KERNELS[name]
    for candidate in (window(spec_), plan_applied(spec_, rules.PLAN_ORDER)):
        assert rules.applied(candidate.source)[0] == "register_window"
        assert_compiles_and_keeps_signature(spec_, candidate)
        # the default, the smallest and largest configurations (window_rows 1 and 8, where local memory would come
        # first) and one more: four, not eight, to keep CI on two cores within its time
        for params in sample(candidate, spec_, 4):
            defines = {**spec_.baseline_params(), **candidate.params, **params}
            if name == "gaussian3x3" and params.get("loop_unroll_factor") == 1:
                continue  # its own weights, indexed by loops unroll keeps rolled at factor 1: local memory
            assert "__local_depot" not in ptx(normalised(candidate.source), spec_.kernel_name, defines,
                                              spec_.compiler_options), params


def test_the_grid_shrinks_by_four_along_x_and_by_window_rows_along_y():
    candidate = window(CONV2D)
    assert candidate.tune_params["window_rows"] == [1, 2, 4, 8] and candidate.params["window_rows"] == 4
    assert (candidate.grid_div_x, candidate.grid_div_y) == (["block_size_x", 4], ["block_size_y", "window_rows"])
    assert "block_size_x * block_size_y <= 256" in candidate.restrictions
    (gx, gy, _), _ = CONV2D.for_candidate(candidate).launch_geometry({**candidate.params, "block_size_x": 32,
                                                                      "block_size_y": 4, "window_rows": 8})
    assert (gx, gy) == (-(-2044 // 128), -(-2044 // 32))


def test_the_plan_puts_the_window_first():
    assert rules.applied(plan_applied(CONV2D, rules.PLAN_ORDER).source) == (
        "register_window", "restrict", "unroll", "launch_bounds")


# --- it runs on the CPU as the submitted kernel did ------------------------------------------------------------
PRELUDE = r"""
#include <cstddef>
#include <cmath>
#include <sanitizer/asan_interface.h>
// AddressSanitizer from a library Python loads, so not first in the process; kforge_poison marks the bytes
// around each array, so that an access past its ends stops the run.
extern "C" const char *__asan_default_options() { return "verify_asan_link_order=0:halt_on_error=1"; }
extern "C" void kforge_poison(void *kforge_at, unsigned long kforge_bytes) {
    __asan_poison_memory_region(kforge_at, kforge_bytes);
}
static float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
// A rewrite marks paths it has proved no thread takes; here one that is taken stops the run instead of being assumed.
#include <cstdio>
#include <cstdlib>
static void kforge_unreachable() { std::fputs("kforge: a path marked unreachable was reached\n", stderr); std::abort(); }
#define __builtin_unreachable kforge_unreachable
struct kforge_dim3 { unsigned int x, y, z; };
static kforge_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __constant__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
template <typename T> static T __ldg(const T *p) { return *p; }
static float __fadd_rn(float a, float b) { return a + b; }
static double __dadd_rn(double a, double b) { return a + b; }
// CUDA's integer min and max overloads: the operands' common type, as the usual conversions make it
template <typename A, typename B> static auto min(A a, B b) { return b < a ? b : a; }
template <typename A, typename B> static auto max(A a, B b) { return a < b ? b : a; }
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
static unsigned kforge_lane() { return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32; }
static int __popc(unsigned kforge_bits) { return __builtin_popcount(kforge_bits); }
static int __ffs(unsigned kforge_bits) { return __builtin_ffs(kforge_bits); }
"""
# One thread at a time: each lane is alone in the group it finds at a warp's collective.
ALONE = r"""
static unsigned __activemask() { return 1u << kforge_lane(); }
static unsigned __ballot_sync(unsigned kforge_group, bool kforge_p) { return kforge_p ? kforge_group : 0u; }
template <typename T> static T __shfl_sync(unsigned, T kforge_value, int kforge_from) {
    if (kforge_from != (int)kforge_lane()) std::abort();  // alone, a lane has only its own value to take
    return kforge_value;
}
"""
# A block's threads at once (THREADED): the lanes of a warp meet at each collective, all of them, as on the GPU
# where no thread has left the kernel before it and the warp runs converged.
WARPS = r"""
#include <algorithm>
#include <memory>
struct kforge_warp {
    explicit kforge_warp(unsigned lanes) : lanes(lanes), meet(lanes) {}
    unsigned lanes;
    std::barrier<> meet;
    unsigned long long slots[32];
};
static std::vector<std::unique_ptr<kforge_warp>> kforge_warps;
static kforge_warp &kforge_my_warp() {
    return *kforge_warps[(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / 32];
}
static unsigned long long kforge_exchange(unsigned long long kforge_value, unsigned kforge_from) {
    kforge_warp &kforge_w = kforge_my_warp();
    kforge_w.slots[kforge_lane()] = kforge_value;
    kforge_w.meet.arrive_and_wait();
    const unsigned long long kforge_taken = kforge_w.slots[kforge_from];
    kforge_w.meet.arrive_and_wait();
    return kforge_taken;
}
static unsigned __activemask() { return kforge_my_warp().lanes == 32 ? ~0u : (1u << kforge_my_warp().lanes) - 1; }
static unsigned __ballot_sync(unsigned kforge_group, bool kforge_p) {
    kforge_warp &kforge_w = kforge_my_warp();
    kforge_w.slots[kforge_lane()] = kforge_p;
    kforge_w.meet.arrive_and_wait();
    unsigned kforge_bits = 0;
    for (unsigned kforge_l = 0; kforge_l < kforge_w.lanes; ++kforge_l) kforge_bits |= (kforge_w.slots[kforge_l] ? 1u : 0u) << kforge_l;
    kforge_w.meet.arrive_and_wait();
    return kforge_bits & kforge_group;
}
template <typename T> static T __shfl_sync(unsigned, T kforge_value, int kforge_from) {
    return (T)kforge_exchange((unsigned long long)kforge_value, kforge_from);
}
"""
GXX = shutil.which("g++")
SCALARS = {"int32": ctypes.c_int, "uint32": ctypes.c_uint, "float32": ctypes.c_float, "float64": ctypes.c_double,
           "int64": ctypes.c_int64, "uint64": ctypes.c_uint64}


# A block's threads at once, for a kernel with a barrier: each a std::thread with its own indices, meeting at
# __syncthreads(); a thread that returns leaves the barrier's count.
THREADED = r"""
#include <barrier>
#include <thread>
#include <vector>
static thread_local kforge_dim3 threadIdx, blockIdx;
static kforge_dim3 blockDim, gridDim;
static std::barrier<> *kforge_block;
static void __syncthreads() { kforge_block->arrive_and_wait(); }
"""
SHARED = "#define __shared__ static\n"  # a block's shared arrays: one for its threads, the blocks run in turn


# A template instance's static locals (a kernel template's __shared__ arrays) are otherwise one object across every
# library the process loads (STB_GNU_UNIQUE binds them whatever RTLD_LOCAL says): a build at a wider block would
# write past the first build's array.
# AddressSanitizer on the arrays alone (heap bytes, which run poisons around each): the stack and globals left
# uninstrumented compile a third faster.
ARRAYS_CHECKED = ["-fsanitize=address", "--param", "asan-stack=0", "--param", "asan-globals=0",
                  "-fno-sanitize-address-use-after-scope"]


_BUILT: dict[tuple, ctypes.CDLL] = {}  # a library serves every size and placement, as a kernel's binary does


def build(source: str, kernel_name: str, directory, defines: dict, threads: bool = False) -> ctypes.CDLL:
    """The kernel as host code with `kforge_launch(gx, gy, gz, bx, by, bz, args...)` running every thread of a 3D
    launch in turn, or with `threads` a block's threads at once (THREADED); the launcher's own names start kforge_,
    which no kernel parameter takes, and the tune parameters are -D defines, as NVRTC gets them. Compiled once per
    session for each source, defines and threads (a run changes nothing in it: it launches in a child)."""
    key = (source, kernel_name, tuple(sorted(defines.items())), threads)
    if key not in _BUILT:
        _BUILT[key] = _compiled(source, kernel_name, directory, defines, threads)
    return _BUILT[key]


def _compiled(source: str, kernel_name: str, directory, defines: dict, threads: bool) -> ctypes.CDLL:
    parameters = launched_parameters(source, kernel_name)
    names = [IDENTIFIER.findall(mask(p))[-1] for p in parameters]
    one_thread = f"""blockIdx = {{kforge_b % kforge_gx, kforge_b / kforge_gx % kforge_gy, kforge_b / (kforge_gx * kforge_gy)}};
                threadIdx = {{kforge_t % kforge_bx, kforge_t / kforge_bx % kforge_by, kforge_t / (kforge_bx * kforge_by)}};
                {kernel_name}({', '.join(names)});"""
    each_thread = f"""
        for (unsigned kforge_t = 0; kforge_t < kforge_bx * kforge_by * kforge_bz; ++kforge_t) {{
                {one_thread}
        }}"""
    if threads:
        each_thread = f"""
        std::barrier<> kforge_barrier(kforge_bx * kforge_by * kforge_bz);
        kforge_block = &kforge_barrier;
        kforge_warps.clear();
        for (unsigned kforge_w = 0; kforge_w * 32 < kforge_bx * kforge_by * kforge_bz; ++kforge_w)
            kforge_warps.push_back(std::make_unique<kforge_warp>(std::min(32u, kforge_bx * kforge_by * kforge_bz - kforge_w * 32)));
        std::vector<std::thread> kforge_running;
        for (unsigned kforge_t = 0; kforge_t < kforge_bx * kforge_by * kforge_bz; ++kforge_t)
            kforge_running.emplace_back([&, kforge_t] {{
                {one_thread}
                kforge_barrier.arrive_and_drop();
            }});
        for (std::thread &kforge_thread : kforge_running) kforge_thread.join();"""
    launcher = f"""
extern "C" void kforge_launch(unsigned kforge_gx, unsigned kforge_gy, unsigned kforge_gz, unsigned kforge_bx, unsigned kforge_by, unsigned kforge_bz{"".join(", " + p for p in parameters)})
{{
    gridDim = {{kforge_gx, kforge_gy, kforge_gz}}; blockDim = {{kforge_bx, kforge_by, kforge_bz}};
    for (unsigned kforge_b = 0; kforge_b < kforge_gx * kforge_gy * kforge_gz; ++kforge_b) {{{each_thread}
    }}
}}
"""
    prelude = PRELUDE.replace("static kforge_dim3 threadIdx, blockIdx, blockDim, gridDim;\n", THREADED) + WARPS \
        if threads else PRELUDE + ALONE
    path = directory / f"{kernel_base_name(kernel_name)}{len(list(directory.iterdir()))}"
    path.with_suffix(".cpp").write_text(prelude + source + launcher)
    flags = [f"-D{name}={value}" for name, value in defines.items()]
    subprocess.run([GXX, "-std=c++20" if threads else "-std=c++17", "-O1", "-ffp-contract=off", "-Wno-unknown-pragmas",
                    "-pthread", "-fno-gnu-unique", *ARRAYS_CHECKED, *flags,
                    "-shared", "-fPIC", "-o", str(path.with_suffix(".so")), str(path.with_suffix(".cpp"))],
                   check=True, capture_output=True)
    return ctypes.CDLL(str(path.with_suffix(".so")))


def run(library: ctypes.CDLL, spec_: KernelSpec, params: dict, shift: int = 0,
        null: str | None = None) -> dict[str, bytes]:
    """The kernel at `spec_`'s launch geometry for `params`, on seeded arrays placed 16-byte aligned (the window's
    input `shift` elements past that; the `null` one passed as a null pointer); every array's bytes after. The
    bytes around each array are poisoned, so a read or write past its ends (but for the few bytes before a shifted
    one) faults (EmulatedFault) even where the vector reaching there would stay within the GPU's allocation."""
    (gx, gy, gz), (bx, by, bz) = spec_.launch_geometry(params)
    rng = np.random.default_rng(3)
    held, arguments, types, around, constants = {}, [], [ctypes.c_uint] * 6, [], {}
    for arg in spec_.args:
        if arg.is_array:
            count, dtype = int(np.prod(spec_.shape_of(arg))), np.dtype(arg.dtype)
            data = (rng.integers(0, 256, count) if dtype.kind in "iu" else rng.normal(0, 1, count)).astype(dtype)
            if not arg.is_parameter:  # a __constant__ array: the library's global of its name
                constants[arg.name] = data
                continue
            raw = np.zeros(data.nbytes + 64, np.uint8)
            start = (-raw.ctypes.data) % 16 + (dtype.itemsize * shift if arg.effective_role != "out" else 0)
            held[arg.name] = raw[start:start + data.nbytes]
            held[arg.name][:] = data.view(np.uint8)
            around.append((raw.ctypes.data, start, data.nbytes, raw.nbytes))
            arguments.append(None if arg.name == null else held[arg.name].ctypes.data)
            types.append(ctypes.c_void_p)
        else:
            kind = SCALARS[arg.dtype]
            arguments.append(kind(spec_.scalar_of(arg, params).item()))
            types.append(kind)
    library.kforge_launch.argtypes = types

    def launch() -> dict[str, bytes]:
        # in the child alone: the parent's allocator reuses these bytes after, unpoisoned
        library.kforge_poison.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
        for base, start, size, total in around:
            library.kforge_poison(base, start)
            library.kforge_poison(base + start + size, total - start - size)
        for name, data in constants.items():
            ctypes.memmove(ctypes.addressof(ctypes.c_char.in_dll(library, name)), data.ctypes.data, data.nbytes)
        library.kforge_launch(gx, gy, gz, bx, by, bz, *arguments)
        return {name: placed.tobytes() for name, placed in held.items()}
    return _in_child(launch)


ODD_SIZES = {"conv2d": [{"height": 37, "width": 45, "k": 5}, {"height": 23, "width": 64, "k": 5},
                        {"height": 21, "width": 30, "k": 3}, {"height": 6, "width": 7, "k": 5}],
             "correlate": [{"rows": 19, "cols": 50, "pitch": 52, "kh": 3, "kw": 7},
                           {"rows": 17, "cols": 41, "pitch": 41, "kh": 3, "kw": 7},
                           {"rows": 11, "cols": 30, "pitch": 33, "kh": 2, "kw": 5}],
             "box3_int": [{"w": 43, "h": 29}, {"w": 40, "h": 9}],
             "blur": [{"w": 45, "h": 37, "r": 2}, {"w": 64, "h": 23, "r": 2}, {"w": 30, "h": 21, "r": 1}],
             "box_blur": [{"w": 45, "h": 37}, {"w": 64, "h": 23}, {"w": 7, "h": 6}],
             # a window of another size (K = 3) runs the kernel as written; 6 x 7 holds no patch inside
             "conv_same": [{"H": 37, "W": 45, "K": 5}, {"H": 9, "W": 70, "K": 3}, {"H": 6, "W": 7, "K": 5}],
             "mean_of_valid": [{"width": 45, "height": 37, "radius": 2}, {"width": 30, "height": 21, "radius": 1},
                               {"width": 7, "height": 6, "radius": 2}],
             "weights_of_valid": [{"W": 45, "H": 37}, {"W": 7, "H": 6}],
             "blur_reflect": [{"w": 45, "h": 37}, {"w": 7, "h": 6}],
             "mean_filter_valid": [{"width": 45, "height": 37}, {"width": 64, "height": 23}, {"width": 7, "height": 6}],
             "blur_skipping_edges": [{"h": 37, "w": 45}, {"h": 6, "w": 7}],
             "gauss_ternary": [{"height": 37, "width": 45}, {"height": 23, "width": 64}],
             "sharpen_double": [{"rows": 19, "cols": 50, "pitch": 52}, {"rows": 17, "cols": 41, "pitch": 41}],
             "emboss_row_guard": [{"h": 37, "w": 45}, {"h": 10, "w": 9}],
             "smooth_clamped": [{"height": 37, "width": 45}, {"height": 6, "width": 7}],
             "conv_radius": [{"h": 37, "w": 45, "k": 5}, {"h": 21, "w": 70, "k": 3}],
             "clamp_assigned": [{"h": 37, "w": 45}, {"h": 6, "w": 7}],
             **dict.fromkeys(("weights by the offsets' sign", "a negated skip", "weights in a 2D array"),
                             [{"h": 37, "w": 45}, {"h": 6, "w": 7}]),
             "a count written out": [{"width": 45, "height": 37, "radius": 2}, {"width": 7, "height": 6, "radius": 2}],
             **dict.fromkeys(("a count of the ternary's flag", "a count of a negated flag",
                              "a count of the taps outside", "a count of a flag built in two steps",
                              "a count choosing by the flag", "a count under the flag",
                              "a count choosing in parentheses", "a count by a static_cast", "a count added to itself",
                              "a count of the flag a skip tests", "a count of the taps outside under a negation",
                              "a count before the update", "a count of a flag set under a guard",
                              "a count of an int flag", "a count beside an update under the flag"),
                             [{"width": 45, "height": 37, "radius": 2}, {"width": 7, "height": 6, "radius": 2}]),
             "a count of every tap beside a guarded update": [{"width": 45, "height": 37}, {"width": 7, "height": 6}],
             **dict.fromkeys(("a flag of the guard", "the window's corner in locals of the point"),
                             [{"H": 37, "W": 45, "K": 5}, {"H": 6, "W": 7, "K": 5}]),
             "gaussian3x3": [{"width": 45, "height": 37}, {"width": 7, "height": 6}],
             # rows of 256 columns rotated by one: the last point of a thread wraps to the row's start
             "a subscript wrapping through a cast": [{"height": 8, "width": 260, "k": 5}],
             "a subscript wrapping through a local": [{"height": 8, "width": 260, "k": 5}]}


EMULATED = [*((name, order) for name in KERNELS for order in ("register_window", "plan")),
            *((case, "register_window") for case in ("__ldg", "unroll pragmas", "64-bit window indices", "doubles",
                                                     "a guarded store of its own output", "two stores after the window",
                                                     "an accumulating store", "a mirrored store",
                                                     "a reference written after the store",
                                                     "a value that moves its subscript",
                                                     "a subscript wrapping through a cast",
                                                     "a subscript wrapping through a local",
                                                     "a pitch converted from the parameters",
                                                     "weights by the offsets' sign", "a negated skip",
                                                     "weights in a 2D array",
                                                     "a flag of the guard", "a count written out", "a count of the ternary's flag",
                                                     "a count of a negated flag", "a count of the taps outside",
                                                     "a count of a flag built in two steps",
                                                     "a count choosing by the flag", "a count under the flag",
                                                     "a count choosing in parentheses", "a count by a static_cast",
                                                     "a count added to itself", "a count of the flag a skip tests",
                                                     "a count of the taps outside under a negation",
                                                     "a count before the update", "a count of a flag set under a guard",
                                                     "a count of an int flag",
                                                     "a count beside an update under the flag",
                                                     "a count of every tap beside a guarded update",
                                                     "the window's corner in locals of the point"))]


@needs_gxx
@pytest.mark.parametrize("name, order", EMULATED)
def test_every_point_is_computed_as_the_submitted_kernel_computes_it(tmp_path, name, order):
    """Bit for bit, at sizes no tile divides, with the window at the spec's size and at another, the input aligned
    and an element past, for every window_rows and two block shapes."""
    spec_ = {**KERNELS, **TAKEN}[name]
    candidate = window(spec_) if order == "register_window" else plan_applied(spec_, rules.PLAN_ORDER)
    for sizes, shift in itertools.product(ODD_SIZES.get(name, ODD_SIZES["conv2d"]), (0, 1)):
        at_size = spec_.with_sizes(sizes)
        base = at_size.baseline_params()
        expected = run(build(spec_.source, spec_.kernel_name, tmp_path, {}), at_size, base, shift)
        for rows, (bx, by) in itertools.product([1, 2, 4, 8], [(32, 4), (16, 8)]):
            params = {**base, **candidate.params, "block_size_x": bx, "block_size_y": by, "window_rows": rows}
            defines = {k: v for k, v in params.items() if k not in ("block_size_x", "block_size_y", "block_size_z")}
            library = build(normalised(candidate.source), spec_.kernel_name, tmp_path, defines)
            assert run(library, at_size.for_candidate(candidate), params, shift) == expected, (sizes, shift, params)


DEALT = ["mean_filter_valid", "box_blur", "conv2d", "gaussian3x3", "a count of the ternary's flag"]


@needs_gxx
@pytest.mark.parametrize("name", DEALT)
def test_the_points_dealt_among_a_warps_lanes_are_computed_as_the_submitted_kernel_computes_them(tmp_path, name):
    """A block's threads at once, a warp's lanes meeting at each collective as on the GPU: the points of the threads
    that do not take the registers (at the edges, and all of them for another window size) are dealt out among
    their warp's lanes, in whole warps and in a block's last, partial one (12 x 5 threads)."""
    spec_ = {**KERNELS, **TAKEN}[name]
    candidate = window(spec_)
    for sizes in ODD_SIZES.get(name, ODD_SIZES["conv2d"]):
        at_size = spec_.with_sizes(sizes)
        base = at_size.baseline_params()
        expected = run(build(spec_.source, spec_.kernel_name, tmp_path, {}), at_size, base)
        for rows, (bx, by) in itertools.product([1, 2, 8], [(32, 4), (12, 5)]):
            params = {**base, **candidate.params, "block_size_x": bx, "block_size_y": by, "window_rows": rows}
            library = build(normalised(candidate.source), spec_.kernel_name, tmp_path, {"window_rows": rows},
                            threads=True)
            assert run(library, at_size.for_candidate(candidate), params) == expected, (sizes, params)


@needs_gxx
def test_the_emulation_tells_a_point_dealt_to_the_wrong_owner(tmp_path):
    """Taking every point's owner to be the warp's first lane with points left is right where a warp has one such
    lane, as a lone lane always has, and wrong where it has several: only the emulation of whole warps tells."""
    candidate = window(MEAN_FILTER_VALID)
    source = normalised(candidate.source)
    broken = source.replace("__ffs(owners)", "__ffs(pending)")
    assert broken != source
    at_size = MEAN_FILTER_VALID.with_sizes({"width": 45, "height": 37})
    params = {**at_size.baseline_params(), **candidate.params, "block_size_x": 32, "block_size_y": 4,
              "window_rows": 2}
    expected = run(build(MEAN_FILTER_VALID.source, "mean_filter_valid", tmp_path, {}), at_size,
                   at_size.baseline_params())
    for threads in (False, True):
        assert run(build(source, "mean_filter_valid", tmp_path, {"window_rows": 2}, threads=threads),
                   at_size.for_candidate(candidate), params) == expected
    assert run(build(broken, "mean_filter_valid", tmp_path, {"window_rows": 2}),
               at_size.for_candidate(candidate), params) == expected
    assert run(build(broken, "mean_filter_valid", tmp_path, {"window_rows": 2}, threads=True),
               at_size.for_candidate(candidate), params) != expected


@needs_gxx
def test_the_emulation_tells_a_window_shifted_by_one_column(tmp_path):
    candidate = window(CONV2D)
    broken = normalised(candidate.source).replace("v[c + j]", "v[c + j + 1]")
    assert broken != normalised(candidate.source)
    at_size = CONV2D.with_sizes({"height": 37, "width": 45, "k": 5})
    params = {**at_size.baseline_params(), **candidate.params}
    defines = {"window_rows": params["window_rows"]}
    expected = run(build(CONV2D.source, "conv2d", tmp_path, {}), at_size, at_size.baseline_params())
    assert run(build(normalised(candidate.source), "conv2d", tmp_path, defines), at_size.for_candidate(candidate),
               params) == expected
    assert run(build(broken, "conv2d", tmp_path, defines), at_size.for_candidate(candidate), params) != expected

