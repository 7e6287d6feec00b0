"""batch_loads (services/generator/rules/batching.py): a loop a thread walks one step at a time runs in passes
whose loads are issued first.

What it takes ahead and what it leaves in place, the run-time test for a written array's step, the rendering,
its composition with the other rules, and, on the CPU (g++, every thread of the launch in turn), every array left
bit for bit as the submitted kernel leaves it, at every batch_iterations and at sizes no batch divides. The GPU
verifies the same kernels (tests/gpu/test_rules_shapes_verified.py: the variants and the styles' plans).
"""
from pathlib import Path

import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.cuda_text import normalised
from shared.domain.spec import KernelSpec
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import NOT_OF_SHAPE, VARIANTS, array, edited, scalar, spec
from tests.unit.test_rules_shapes import plan_applied
from tests.unit.test_rules_vectorize16 import needs_gxx
from tests.unit.test_rules_vectorize_aligned import ptx
from tests.unit.test_rules_window import SHARED, build, run

STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"
CORPUS = {kernel.name: kernel for kernel in corpus()}
BATCHED = {case: spec for case, (rule_id, spec) in VARIANTS.items() if rule_id == "batch_loads"}
DEPTH_RAMP = load_spec(STYLES / "depth_ramp.cu", STYLES / "depth_ramp.yaml")
CHANNELS = load_spec(STYLES / "channel_standardise.cu", STYLES / "channel_standardise.yaml")
LAYERNORM_THREAD = load_spec(STYLES / "layernorm_thread.cu", STYLES / "layernorm_thread.yaml")
SGEMV = load_spec(STYLES / "sgemv.cu", STYLES / "sgemv.yaml")


def batched(spec):
    return rules.apply("batch_loads", spec, spec.as_candidate())


def test_an_in_place_march_reads_each_step_ahead_and_stores_as_written():
    source = normalised(batched(DEPTH_RAMP).source)
    assert "float vol_ahead[batch_iterations];" in source
    assert "auto z_ahead = z;" in source and "auto idx_ahead = idx;" in source
    # the loads walk copies of the loop's variables with its own condition and increment
    assert "for (int b = 0; b < batch_iterations && z_ahead < nz && (b == 0 || moves); b++, ++z_ahead, " \
           "idx_ahead += plane) {" in source
    assert "vol_ahead[b] = vol[idx_ahead];" in source
    # the compound assignment reads its register and stores as written, in the loop's own order
    assert "for (int b = 0; b < batch_iterations && z < nz && (b == 0 || moves); b++, ++z, idx += plane) " \
           "vol[idx] = vol_ahead[b] + (z * dz);" in source
    # plane could be 0: then each step would store what the next reads, and a pass is one step
    assert "const bool moves = ((long long)plane) != 0;" in source
    assert batched(DEPTH_RAMP).tune_params["batch_iterations"] == [2, 4, 8, 16]


def test_arrays_the_loop_does_not_write_need_no_test():
    source = normalised(batched(CHANNELS).source)
    assert "moves" not in source
    assert "src_ahead[b] = src[(size_t)c_ahead * hw + p];" in source  # through the pointer into in
    assert "dst[(size_t)c * hw + p] = (src_ahead[b] - mean_ahead[b]) * inv_std_ahead[b];" in source


def test_a_local_index_is_spelled_from_its_definition():
    source = normalised(batched(BATCHED["batched_channels_through_a_local_index"]).source)
    assert "in_ahead[b] = in[(long long)c_ahead * (long long)hw + (long long)p];" in source
    assert "out[at] = in_ahead[b] * gain_ahead[b] + 1.0f;" in source


def test_a_read_of_the_step_before_stays_where_it_is():
    """a[r] += a[r - 1] + bias[r]: a is stored at one subscript and read at another, so no load of a is taken
    ahead (the step before stores what this one reads); bias is."""
    source = normalised(batched(BATCHED["batched_running_sums_reading_the_step_before"]).source)
    assert "a_ahead" not in source and "bias_ahead[b] = bias[r_ahead];" in source
    assert "a[r * cols + c] += a[(r - 1) * cols + c] + bias_ahead[b];" in source


def test_a_read_inside_another_read_goes_with_it():
    spec = edited(BATCHED["batched_running_sums_reading_the_step_before"], "+ bias[r];", "+ bias[(int)bias[r] & 1];")
    source = normalised(batched(spec).source)
    assert "bias_ahead[b] = bias[(int)bias[r_ahead] & 1];" in source
    assert "+ bias_ahead[b];" in source and "bias_ahead_" not in source


def test_only_loads_made_at_every_step_are_taken_ahead():
    spec = edited(BATCHED["batched_channels_through_a_local_index"], "out[at] = in[at] * gain[c] + 1.0f;",
                  "out[at] = gain[c] > 0.0f ? in[at] : 0.0f;")
    source = normalised(batched(spec).source)
    assert "gain_ahead[b] = gain[c_ahead];" in source and " in_ahead[" not in source
    assert "out[at] = gain_ahead[b] > 0.0f ? in[at] : 0.0f;" in source


@pytest.mark.parametrize("case", [case for case, (rule_id, _, _) in NOT_OF_SHAPE.items() if rule_id == "batch_loads"])
def test_what_batch_loads_refuses_and_why(case):
    _, spec, reason = NOT_OF_SHAPE[case]
    assert reason in rules.check("batch_loads", spec, spec.as_candidate())


def test_unroll_is_its_alternative():
    carried = batched(DEPTH_RAMP)
    assert rules.check("unroll", DEPTH_RAMP, carried) == (
        "the current kernel carries batch_loads, which does the work of unroll another way")
    unrolled = rules.apply("unroll", DEPTH_RAMP, carried, replacing=True)
    assert rules.applied(unrolled.source) == ("unroll",) and "batch_iterations" not in unrolled.tune_params


def test_a_rendering_that_replaces_the_loop_drops_it_from_the_header():
    """conv2d's window loops, batched as submitted, are rendered anew by register_window, which declares the
    window's size again: batch_loads no longer takes them, and the header names only what took."""
    conv2d = CORPUS["conv2d"].spec()
    candidate = rules.apply("register_window", conv2d, batched(conv2d))
    assert rules.applied(candidate.source) == ("register_window",)
    assert "batch_iterations" not in normalised(candidate.source)


def test_a_row_loop_split_among_a_warps_lanes_stays_batched():
    """gemv's row loop, batched as submitted, is strided by warp_per_row: each lane's share is batched again."""
    gemv = CORPUS["gemv"].spec()
    candidate = rules.apply("warp_per_row", gemv, batched(gemv))
    assert rules.applied(candidate.source) == ("batch_loads", "warp_per_row")
    assert "c_ahead += block_size_x" in normalised(candidate.source)


@pytest.mark.parametrize("spec", [DEPTH_RAMP, CHANNELS, *BATCHED.values()], ids=lambda s: s.kernel_name)
def test_the_registers_stay_registers(spec):
    candidate = batched(spec)
    for size in (2, 16):
        params = {**spec.baseline_params(), **candidate.params, "batch_iterations": size}
        assert ".local" not in ptx(normalised(candidate.source), spec.kernel_name, params, spec.compiler_options)


# --- it runs on the CPU as the submitted kernel did ---------------------------------------------------------
EMULATED = {**{case: (spec, None) for case, spec in BATCHED.items() if case != "batched_labels_beside_atomics"},
            "depth_ramp": (DEPTH_RAMP, {"nx": 37, "ny": 11, "nz": 29}),
            "channel_standardise": (CHANNELS, {"batch": 3, "channels": 13, "hw": 300}),
            "layernorm_thread": (LAYERNORM_THREAD, {"rows": 70, "cols": 45}),
            "sgemv": (SGEMV, {"M": 70, "N": 45})}


@needs_gxx
@pytest.mark.parametrize("case", list(EMULATED))
def test_every_array_ends_as_the_submitted_kernel_leaves_it(tmp_path, case):
    """Bit for bit, for every batch_iterations, at the spec's sizes less one (no batch divides a prime trip count)."""
    spec, sizes = EMULATED[case]
    spec = spec.with_sizes(sizes or {name: value - 1 if value > 2 else value for name, value in spec.sizes.items()})
    candidate = batched(spec)
    base = spec.baseline_params()
    threads = "__syncthreads" in spec.source  # a block's threads then run at once
    prefix = SHARED if threads else ""
    expected = run(build(prefix + spec.source, spec.kernel_name, tmp_path, {}, threads), spec, base)
    for size in candidate.tune_params["batch_iterations"]:
        params = {**base, **candidate.params, "batch_iterations": size}
        library = build(prefix + normalised(candidate.source), spec.kernel_name, tmp_path,
                        {"batch_iterations": size}, threads)
        assert run(library, spec.for_candidate(candidate), params) == expected, (case, size)


@needs_gxx
def test_the_emulation_tells_a_load_taken_from_the_wrong_step(tmp_path):
    spec = DEPTH_RAMP.with_sizes({"nx": 37, "ny": 11, "nz": 29})
    candidate = batched(spec)
    broken = normalised(candidate.source).replace("vol_ahead[b] = vol[idx_ahead];",
                                                  "vol_ahead[b] = vol[idx_ahead + (b == 1 ? plane : 0)];")
    assert broken != normalised(candidate.source)
    params = {**spec.baseline_params(), **candidate.params, "batch_iterations": 4}
    expected = run(build(spec.source, spec.kernel_name, tmp_path, {}), spec, spec.baseline_params())
    assert run(build(broken, spec.kernel_name, tmp_path, {"batch_iterations": 4}), spec.for_candidate(candidate),
               params) != expected


def test_the_plans_of_the_kernels_it_speeds_up_carry_it():
    assert rules.applied(plan_applied(DEPTH_RAMP, rules.PLAN_ORDER).source) == (
        "restrict", "elements_per_thread", "batch_loads", "launch_bounds")
    assert rules.applied(plan_applied(CHANNELS, rules.PLAN_ORDER).source) == (
        "restrict", "batch_loads", "launch_bounds")


# --- what a reviewer tried: loops whose changes the text does not show are left alone ------------------------
SIGNATURE = ('extern "C" __global__ void k(float *dst, const float *src, float *sums, int n, int m)\n{\n'
             '    int t = blockIdx.x * blockDim.x + threadIdx.x;\n    if (t >= n) return;\n')


def small(body: str, before: str = ""):
    return spec(before + SIGNATURE + body + "\n}\n", "k",
                [array("dst", ["m + 1", "n"], role="inout"), array("src", ["m + 1", "n"]),
                 array("sums", ["n"], role="out"),
                 scalar("n", "n"), scalar("m", "m")], {"n": 300, "m": 23}, ["n"], {"block_size_x": 128},
                {"block_size_x": [128]})


LEFT_ALONE = {
    "an element bound to a reference": (
        "for (int j = 0; j < m; ++j) { float &r = dst[j * n + t]; r += src[j * n + t]; }", "declares a reference"),
    "the loop's variable changed through a reference": (
        "float s = 0; for (int j = 0; j < m; ++j) { int &jj = j; s += src[j * n + t]; if (s > 9.f) jj++; } "
        "sums[t] = s;",
        "declares a reference"),
    "indices swapped by std::swap": (
        "int lo = t, hi = n - 1 - t; float s = 0; for (int j = 0; j < m; ++j) { s += src[lo]; std::swap(lo, hi); } "
        "sums[t] = s;", "calls std::swap"),
    "a local changed through its address": (
        "int e = 0; float s = 0; for (int j = 0; j < m; ++j) { s += src[(e & 1) * n + t]; frexpf(s, &e); } "
        "sums[t] = s;",
        "takes the address of e"),
    "an offset stepped by the loop's variable": (
        "int off = t; float s = 0; for (int j = 0; j < m; ++j, off += j) s += src[off % n]; sums[t] = s;",
        "steps off by j"),
    "an offset stepped by another stepped one": (
        "int p = t, q = 0; for (int j = 0; j < m; ++j, p += q, q += n) dst[p % n] += src[j * n + t];", "steps p by q"),
    "a bound read from memory": (
        "const float *lim = src; float s = 0; for (int j = 0; j < *lim; ++j) s += src[j * n + t]; sums[t] = s;",
        "reads memory or changes something in its condition"),
    "a lambda defined in the loop": (
        "float s = 0; for (int j = 0; j < m; ++j) { auto f = [&] { s += src[j * n + t]; }; if (j < m / 2) f(); } "
        "sums[t] = s;", "defines a lambda"),
    "a lambda defined before the loop, storing": (
        "auto const bump = [&](int q) { dst[q] = 1.f; }; float s = 0; "
        "for (int j = 0; j < m; ++j) { s += dst[j * n + t]; "
        "bump((j + 1) * n + t); } sums[t] = s;", "calls bump"),
    "a pointer parameter assigned before the loop": (
        "if (m == 0) src = dst; for (int j = 0; j < m; ++j) dst[j * n + t] += src[j * n + t];",
        "lets the pointer dst out of sight (if (m == 0) src = dst)"),
    "a pointer parameter assigned a product": (
        "if (m == 0) src = src + 0 * n; for (int j = 0; j < m; ++j) dst[j * n + t] += src[j * n + t];",
        "assigns the pointer src"),
    "an array's name declared again": (
        "{ const float *src = dst; for (int j = 0; j < m; ++j) dst[(j + 1) * n + t] = src[j * n + t]; }",
        "declares src more than once"),
    "a pointer passed to a function": (
        "cuda::std::swap(dst, sums); for (int j = 0; j < m; ++j) dst[j * n + t] += src[j * n + t];",
        "lets the pointer dst out of sight (cuda::std::swap(dst, sums))"),
    "a pointer in an object's initialiser, stored through by its method": (
        "struct W { float *p; __device__ void add(int i, float v) { p[i] += v; } }; W wr{dst}; float s = 0; "
        "for (int j = 0; j < m; ++j) { s += dst[j * n + t]; wr.add((j + 1) * n + t, 1.f); } sums[t] = s;",
        "lets the pointer dst out of sight"),
    "a method changing its object": (
        "struct Cur { int o; __device__ void next(int k) { o = (o + 1) % k; } }; Cur cu{t}; float s = 0; "
        "for (int j = 0; j < m; ++j) { s += src[j * n + cu.o]; cu.next(n); } sums[t] = s;",
        "calls the method next"),
    "an unqualified swap": (
        "int lo = t, hi = n - 1 - t; float s = 0; for (int j = 0; j < m; ++j) { s += src[lo]; swap(lo, hi); } "
        "sums[t] = s;", "calls swap"),
    "a bound that counts down": (
        "int lim = m; float s = 0; for (int j = 0; j < lim--; ++j) s += src[j * n + t]; sums[t] = s;",
        "changes something in its condition"),
    "a step with a side effect": (
        "int k = 0, idx = t; float s = 0; for (int j = 0; j < m; ++j, idx += k++) s += src[idx % n]; sums[t] = s;",
        "which is not `name += step` of what the loop does not change"),
    "an unroll pragma spelled _Pragma": (
        "float s = 0;\n    _Pragma(\"unroll\")\n    for (int j = 0; j < m; ++j) s += src[j * n + t];\n    sums[t] = s;",
        "carries an unroll pragma already"),
    "an unevaluated read": (
        "float s = 0; for (int j = 0; j < m; ++j) s += sizeof(src[j + 100000]) * src[j * n + t]; sums[t] = s;",
        "uses sizeof"),
}


@pytest.mark.parametrize("case", list(LEFT_ALONE))
def test_loops_whose_changes_the_text_does_not_show_are_left_alone(case):
    body, reason = LEFT_ALONE[case]
    assert reason in rules.check("batch_loads", small(body), small(body).as_candidate())


NOT_AHEAD = {  # the register that must not be made, and the loop
    # a later read of the statement would see the value from before the store
    "a store then a read, in one statement": (
        "dst_ahead", "for (int j = 0; j < m; ++j) dst[j * n + t] = 2.f * src[j * n + t], sums[t] += dst[j * n + t];"),
    # the outer i, not the local declared after it
    "a local shadowing a name read before it": (
        "src_ahead", "int i = t; for (int j = 0; j < m; ++j) { sums[t] += src[i]; int i = j * n + t; "
                     "dst[i] = sums[t]; }"),
    # an address taken through a cast reads two elements
    "a vector read through a cast address": (
        "src_ahead", "for (int j = 0; j < m; ++j) { float2 v = *(const float2 *)&src[2 * j]; sums[t] += v.x + v.y; }"),
    "an address past the element": (
        "src_ahead", "for (int j = 0; j < m; ++j) sums[t] += __ldg(&src[j * n + t] + 1);"),
    # a float scale truncates where the 64-bit polynomial would multiply
    "a local index scaled by a float": (
        "src_ahead", "float r = 0.5f; for (int j = 0; j < m; ++j) { int q = j * r; sums[t] += src[q * n + t]; }"),
    # a narrowing cast wraps: the 64-bit polynomial would not
    "a subscript through a narrowing cast": (
        "src_ahead", "for (int j = 0; j < m; ++j) { int q = (unsigned char)(j * 40); sums[t] += src[q]; }"),
}


@pytest.mark.parametrize("case", list(NOT_AHEAD))
def test_reads_whose_element_may_differ_ahead_stay_where_they_are(case):
    """Each loop keeps its other loads ahead, or none: the read named stays in place."""
    register, body = NOT_AHEAD[case]
    spec_ = small(body)
    reason = rules.check("batch_loads", spec_, spec_.as_candidate())
    assert "makes no load" in reason if reason is not None else register not in normalised(batched(spec_).source)


def test_a_loop_in_a_macro_is_left_alone():
    body = ("float s = 0;\n#define ACCUMULATE for (int j = 0; j < m; ++j) s += src[j * n + t];\n    ACCUMULATE\n"
            "    sums[t] = s;")
    assert "no loop a thread walks" in rules.check("batch_loads", small(body), small(body).as_candidate())



def test_a_macro_of_numbers_is_a_constant_and_one_reading_memory_is_not():
    """`#define SCALE (2 * HALF)` with `#define HALF 2` reads and stores nothing (review, helper-88: any macro
    refused the loop using it); a macro naming an array may, and still does."""
    body = "for (int j = 0; j < m; ++j) dst[j * n + t] += SCALE * src[j * n + t];"
    constant = small(body, "#define HALF 2\n#define SCALE (2 * HALF)\n")
    assert "src_ahead[b] = src[j_ahead * n + t];" in batched(constant).source
    reading = small(body, "#define HALF src[0]\n#define SCALE (2 * HALF)\n")
    assert "uses the macro SCALE" in rules.check("batch_loads", reading, reading.as_candidate())

TAKEN = {
    "bitwise ands and products in parentheses elsewhere": "float s = 0; if ((t & m) == 0) s = 1.f; "
                                                          "for (int j = 0; j < m; ++j) dst[(j * n) + t] += "
                                                          "fmaxf(n * src[j * n + t], 0.f); sums[t] = (s * sums[t]);",
    "a pointer moved to its thread's row first": "src += t; for (int j = 0; j < m; ++j) dst[j * n + t] += src[j * n];",
    "two loops declaring the same index local": (
        "for (int j = 0; j < m; ++j) { int at = j * n + t; sums[t] += src[at]; } "
        "for (int j = 0; j < m; ++j) { int at = j * n + t; dst[at] += src[at]; }"),
    "threadIdx.x inline, beside a local named x": "for (int j = 0; j < m; ++j) { float x = src[j * n + blockIdx.x * "
                                                  "blockDim.x + threadIdx.x]; sums[t] += x * x; }",
    "a member of a local struct stored": "for (int j = 0; j < m; ++j) { float4 v; v.x = src[j * n + t]; "
                                         "v.y = 2.f * v.x; sums[t] += v.x + v.y; }",
    "an inclusive bound and a second index stepped by ++": "int i = t; for (int j = 0; j < m; ++j, ++i) "
                                                           "dst[i % n + j * n] += src[j * n + t];",
    "a const auto pointer": "const auto *row = src + t; for (int j = 0; j < m; ++j) sums[t] += row[j * n];",
    "a bound cast with static_cast": "for (int j = 0; j <= static_cast<int>(m) - 1; ++j) sums[t] += src[j * n + t];",
}


@needs_gxx
@pytest.mark.parametrize("case", list(TAKEN))
def test_what_users_write_is_taken_and_runs_as_written(tmp_path, case):
    spec_ = small(TAKEN[case])
    candidate = batched(spec_)
    expected = run(build(spec_.source, "k", tmp_path, {}), spec_, spec_.baseline_params())
    for size in (2, 16):
        library = build(normalised(candidate.source), "k", tmp_path, {"batch_iterations": size})
        assert run(library, spec_.for_candidate(candidate), {**candidate.params, "batch_iterations": size}) == \
            expected, size


def _in_place(loop: str, *more: dict) -> KernelSpec:
    return spec(r"""
extern "C" __global__ void k(float *y, const float *x, int n, int s, int dj, long long wide)
{
    int j = 0;
    LOOP
}
""".replace("LOOP", loop), "k", [array("y", ["n"], role="inout"), array("x", ["n"]), scalar("n", "n"),
                                scalar("s", 257), scalar("dj", -1), scalar("wide", 1, "int64"), *more],
        {"n": 1000}, ["n"])


@pytest.mark.parametrize("loop", [
    "for (int i = threadIdx.x; i < n; i += (unsigned char)s, j += dj) y[i + j] += x[i];",  # steps 1 and -1
    "for (int i = threadIdx.x; i < n; i += static_cast<short>(s), j += dj) y[i + j] += x[i];",
    "for (int i = threadIdx.x; i < n; i += wide, j += dj) y[i + j] += x[i];",  # 2^32 + 1 truncated to 1
])
def test_a_step_the_polynomial_cannot_follow_keeps_the_written_array_in_place(loop):
    """A conversion in a step, or a 64-bit step of a 32-bit index, takes a value the 64-bit polynomial does not:
    the run-time test would call a subscript that stays put moving, so the written array is read in place."""
    source = normalised(batched(_in_place(loop)).source)
    assert "x_ahead[b] = x[i_ahead];" in source and "y_ahead" not in source and "moves" not in source


def test_a_bound_and_a_step_may_take_a_minimum_or_maximum_but_not_a_choice():
    taken = normalised(batched(_in_place("for (int i = threadIdx.x; i < min(n, 900); i += max(s, 1)) "
                                         "y[i] += x[i];")).source)
    assert "i_ahead < min(n, 900); b++, i_ahead += max(s, 1)" in taken
    choice = _in_place("for (int i = threadIdx.x; i < n; i += s ? s : 1) y[i] += x[i];")
    assert "steps 'i += s ? s : 1', which is not `name += step`" in rules.check("batch_loads", choice,
                                                                                choice.as_candidate())


def test_a_rule_its_rebuild_drops_takes_its_tune_parameter_with_it():
    """saxpy's grid-stride loop, batched, becomes elements_per_thread's unrolled loop, which batch_loads leaves to
    the compiler: batch_iterations goes with it, instead of tuning nothing."""
    saxpy = CORPUS["saxpy"].spec()
    candidate = rules.apply("elements_per_thread", saxpy, batched(saxpy))
    assert rules.applied(candidate.source) == ("elements_per_thread",)
    assert "batch_iterations" not in candidate.tune_params and "batch_iterations" not in candidate.params
