"""row_in_registers: a row that a kernel passes over several times held in registers (softmax, layernorm, and the
variants row_in_shared takes). Each rewrite compiles with NVRTC for every configuration of its space, keeps the
signature, and keeps the row in registers: NVRTC's PTX declares no local memory, which an index into the registers
left unknown after unrolling would need. (Spills are another matter: under __launch_bounds__ ptxas budgets registers
by its own heuristics, which differ between its versions, and a configuration that spills is for the search to
time.) A kernel whose threads share nothing runs on the CPU
(g++, every thread in turn) and matches the submitted kernel bit for bit at rows shorter and longer than the
registers hold. The GPU verifies the corpus kernels and the variants (tests/gpu/test_rules_shapes_verified.py)."""
import ctypes

import pytest

from services.generator import rules
from services.generator.rules.cuda_text import mask, normalised
from shared.domain.spec import KernelSpec
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import NOT_OF_SHAPE, VARIANTS, array, sample, scalar, spec
from tests.unit.test_rules_shapes import assert_compiles_and_keeps_signature, plan_applied
from tests.unit.test_rules_vectorize16 import HostKernels, inputs, needs_gxx, run
from tests.unit.test_rules_vectorize_aligned import ptx

CORPUS = {kernel.name: kernel.spec() for kernel in corpus()}
# One row of several warps, no barrier between its passes: row_in_shared refuses it, registers need none.
SEVERAL_WARPS = NOT_OF_SHAPE["rows_of_several_warps_without_a_barrier"][1]
# Each thread's own maximum over its elements of the block's row, then those elements less it: two passes and no
# exchange between threads, so the emulation may run the threads one after another.
ROW_SPREAD = spec(r"""
extern "C" __global__ void row_spread(float *out, const float *in, int cols)
{
    const float *row = in + (size_t)blockIdx.x * cols;
    float m = -3.0e38f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] = row[c] - m;
}
""", "row_spread", [array("out", ["rows", "cols"], role="out"), array("in", ["rows", "cols"]), scalar("cols", "cols")],
    {"rows": 3, "cols": 200}, ["rows"], {"block_size_x": 32}, {"block_size_x": [32, 64]}, grid_div_x=[1])
# The same with its first pass on the line of the code before it and the second the body of an if: each becomes
# two loops, which must begin a line of their own and, under the if, be braced.
ROW_SPREAD_TERSE = ROW_SPREAD.model_validate({**ROW_SPREAD.model_dump(), "source": ROW_SPREAD.source.replace(
    "    float m = -3.0e38f;\n    for", "    float m = -3.0e38f; for").replace(
    "    for (int c = threadIdx.x; c < cols; c += blockDim.x) out",
    "    if (cols > 0)\n        for (int c = threadIdx.x; c < cols; c += blockDim.x) out")})
# A warp per row (the spec fixes the x block size at 32) passing over it twice: a row's threads are one warp, so
# the passes take vectors of four where the arrays are aligned, and its results do not depend on which thread takes
# which element, so the emulation runs them as the submitted kernel does, bit for bit. ROW_SPREAD's rows are wider
# than a warp and its threads combine nothing: its passes stay element by element.
ROW_TWICE = spec(r"""
extern "C" __global__ void row_twice(float *out, const float *in, int cols)
{
    const float *row = in + (size_t)blockIdx.x * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] = row[c] * 0.5f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] += row[c] * row[c];
}
""", "row_twice", [array("out", ["rows", "cols"], role="out"), array("in", ["rows", "cols"]), scalar("cols", "cols")],
    {"rows": 3, "cols": 200}, ["rows"], {"block_size_x": 32}, {"block_size_x": [32]}, grid_div_x=[1])
EMULATED = {"row_spread": ROW_SPREAD, "row_spread_terse": ROW_SPREAD_TERSE, "row_twice": ROW_TWICE}
KERNELS = {"softmax": CORPUS["softmax"], "layernorm": CORPUS["layernorm"], "l2_normalise": VARIANTS["l2_normalise"][1],
           "rms_norm": VARIANTS["rms_norm"][1], "several_warps": SEVERAL_WARPS, **EMULATED}
# The plan's order with unroll in place of its alternative batch_loads (which the plan otherwise tries first).
WITH_UNROLL = tuple(rule_id for rule_id in rules.PLAN_ORDER if rule_id != "batch_loads")


def registers(spec_: KernelSpec):
    return rules.apply("row_in_registers", spec_, spec_.as_candidate())


# --- which kernels it takes, and the rewrite's shape -------------------------------------------------------
@pytest.mark.parametrize("name", list(KERNELS))
def test_row_in_registers_takes_the_kernels_that_pass_over_a_row(name):
    spec_ = KERNELS[name]
    assert rules.check("row_in_registers", spec_, spec_.as_candidate()) is None


def test_row_in_shared_refuses_what_registers_take_without_a_barrier():
    assert "no barrier comes between its first pass" in rules.check("row_in_shared", SEVERAL_WARPS,
                                                                    SEVERAL_WARPS.as_candidate())


def test_softmax_reads_its_row_once_into_registers_in_unrolled_loops():
    """The first pass stores each element it reads; the later passes read the registers; each pass then runs the
    loop as written past them. The registers' count is tuned to the fewest block widths covering the row."""
    spec_ = CORPUS["softmax"]
    candidate = registers(spec_)
    code = mask(candidate.source)
    assert "float row_regs[row_chunks];" in code and "row_regs[k] = row[c];" in code
    assert code.count("#pragma unroll\n        for (int k = 0; k < row_chunks; k++) {") == 3
    assert code.count("const int c = tid + k * blockDim.x;") == 3
    assert code.count("for (int c = tid + row_chunks * blockDim.x; c < cols; c += blockDim.x)") == 3
    # The store, the three loops past the registers, and the three aligned passes' last cols % 4 elements.
    assert code.count("row[c]") == 7
    assert "m = fmaxf(m, row_regs[k]);" in code and "dst[c] = expf(row_regs[k] - m) / sum;" in code
    assert "__syncwarp" not in code and code.count("__syncthreads") == mask(spec_.source).count("__syncthreads")
    assert candidate.restrictions == ["row_chunks * block_size_x >= cols",
                                      "row_chunks == 1 or row_chunks * block_size_x < 2 * cols"]
    assert candidate.tune_params == {"block_size_x": [64, 128, 256, 512, 1024], "row_chunks": [1, 2, 4, 8, 16, 32]}
    assert candidate.params == {"block_size_x": 256, "row_chunks": 4} and candidate.smem_args is None
    assert [(c["block_size_x"], c["row_chunks"]) for c in sample(candidate, spec_, 10)] == \
        [(64, 16), (128, 8), (256, 4), (512, 2), (1024, 1)]
    assert candidate.grid_div_x == spec_.grid_div_x


def test_where_the_row_and_output_are_aligned_the_passes_hold_vectors_of_four():
    """One test before the first pass, of every array the passes touch, chooses for the whole row: vectors of
    four, the thread's first (row_chunks + 3) / 4 of them held, else the elements one by one as above."""
    code = mask(registers(CORPUS["softmax"]).source)
    assert "float4 row_regs4[(row_chunks + 3) / 4];" in code
    assert code.count("const bool aligned = (reinterpret_cast<unsigned long long>(&row[0]) & 15) == 0 && "
                      "(reinterpret_cast<unsigned long long>(&dst[0]) & 15) == 0;") == 1
    assert code.index("const bool aligned") < code.index("row_regs4[k] = ") and code.count("if (aligned) {") == 3
    assert code.count("for (int k = 0; k < (row_chunks + 3) / 4; k++) {") == 3
    assert code.count("row_regs4[k] = reinterpret_cast<const float4 *>(&row[0])[v];") == 1
    assert "m = fmaxf(m, row_regs4[k].w);" in code and "sum += expf(row_regs4[k].w - m);" in code
    assert "dst4.w = expf(row_regs4[k].w - m) / sum;" in code
    assert code.count("for (int v = tid + (row_chunks + 3) / 4 * blockDim.x; v < vectors; v += blockDim.x) {") == 3
    assert code.count("reinterpret_cast<float4 *>(&dst[0])[v] = dst4;") == 2
    assert code.count("for (int c = 4 * vectors + tid; c < cols; c += blockDim.x)") == 3


def test_a_warp_per_row_stepping_by_the_literal_warp_width_holds_vectors_too():
    code = mask(registers(VARIANTS["rms_norm"][1]).source)
    assert "float4 xr_regs4[(row_chunks + 3) / 4];" in code and code.count("if (aligned) {") == 2
    assert "xr_regs4[k] = reinterpret_cast<const float4 *>(&xr[0])[v];" in code
    assert code.count("const int v = threadIdx.x + k * 32;") == 2


SMOOTHING = "    for (int c = tid; c < cols; c += blockDim.x) dst[c] = dst[c] * 0.9f + 0.1f / cols;\n}"
CLEARING = ("    for (int c = tid; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] = 0;\n"
            "    float m = NEG_FLT_MAX;")
# Softmax as the corpus writes it, changed so that vectors would be wrong: an output row moved between the passes,
# or an output address that depends on threadIdx.x (a test of alignment before the first pass would not hold for
# the later passes, or not for every thread of the row); another loop over the output after its pass, or before
# it, with no barrier between (its threads would take other elements than the pass's vectors give them).
UNTESTABLE = {
    "moved": CORPUS["softmax"].source.replace("    sum = red[0];\n", "    sum = red[0];\n    dst += cols;\n"),
    "per_thread": CORPUS["softmax"].source.replace("cols;\n    const int tid = threadIdx.x;",
                                                   "cols + threadIdx.x % 2;\n    const int tid = threadIdx.x;"),
    "smoothed_after": CORPUS["softmax"].source.rstrip().removesuffix("}") + SMOOTHING,
    "cleared_before": CORPUS["softmax"].source.replace("    float m = NEG_FLT_MAX;", CLEARING).replace(
        "dst[c] = expf(row[c] - m) / sum;", "dst[c] += expf(row[c] - m) / sum;"),
}


@pytest.mark.parametrize("case", list(UNTESTABLE))
def test_the_passes_stay_element_by_element_where_vectors_would_not_be_the_submitted_kernel(case):
    spec_ = CORPUS["softmax"]
    changed = spec_.model_validate({**spec_.model_dump(), "source": UNTESTABLE[case]})
    code = registers(changed).source
    assert changed.source != spec_.source and "row_regs[k] = row[c];" in code and "row_regs4" not in code


def test_the_registers_take_the_budget_of_the_element_type():
    doubles = registers(VARIANTS["l2_normalise"][1])
    assert "double src_regs[row_chunks];" in doubles.source and doubles.tune_params["row_chunks"] == [1, 2, 4, 8, 16]
    long_row = CORPUS["softmax"].with_sizes({"cols": 1 << 16})
    assert rules.check("row_in_registers", long_row, long_row.as_candidate()) == (
        "the row of row has 65536 elements at the spec's sizes: even a block of 1024 threads would hold more than "
        "128 bytes of it per thread in registers")


def test_a_pass_that_breaks_out_is_refused():
    spec_ = VARIANTS["l2_normalise"][1]
    broken = spec_.model_validate({**spec_.model_dump(), "source": spec_.source.replace(
        "dst[base + i] = src[base + i] * inv;", "{ if (inv > 1e300) break; dst[base + i] = src[base + i] * inv; }")})
    assert "a pass over the row uses break" in rules.check("row_in_registers", broken, broken.as_candidate())


def test_a_pass_sharing_a_line_or_under_an_if_takes_lines_of_its_own_and_braces():
    code = registers(ROW_SPREAD_TERSE).source
    assert "float m = -3.0e38f;\n    #pragma unroll\n    for (int k = 0;" in code
    assert "if (cols > 0)\n        {\n            #pragma unroll\n            for (int k = 0;" in code
    # A warp per row takes vectors too: the test of alignment begins its own line, then an if and its else.
    warp = ROW_SPREAD_TERSE.model_validate({**ROW_SPREAD_TERSE.model_dump(), "tune_params": {"block_size_x": [32]}})
    code = registers(warp).source
    assert "float m = -3.0e38f;\n    const bool aligned = " in code
    assert "} else {\n        #pragma unroll\n        for (int k = 0;" in code
    assert "if (cols > 0)\n        {\n            if (aligned) {" in code
    assert "} else {\n                #pragma unroll\n                for (int k = 0;" in code


def test_rows_wider_than_a_warp_whose_threads_combine_nothing_across_it_stay_element_by_element():
    """Vectors give a thread other elements: only where a row's threads combine what they hold across all of
    them (a barrier between every two passes, or a row of one warp) does that change no more than a sum's order. A
    row of several warps each adding up its own lanes (the GPU's verifier rejected its vectors), with or without
    another kernel of the file waiting at a barrier, and threads that keep their own maxima keep their elements;
    the same threads as one warp per row take vectors."""
    beside = SEVERAL_WARPS.source + CORPUS["softmax"].source.replace("softmax_rows", "softmax_beside")
    with_a_barrier_elsewhere = SEVERAL_WARPS.model_validate({**SEVERAL_WARPS.model_dump(), "source": beside})
    for spec_ in (SEVERAL_WARPS, ROW_SPREAD, with_a_barrier_elsewhere):
        assert max(spec_.tune_params["block_size_x"]) > 32
        assert "_regs4" not in registers(spec_).source
    one_warp = SEVERAL_WARPS.model_validate({**SEVERAL_WARPS.model_dump(),
                                             "tune_params": {**SEVERAL_WARPS.tune_params, "block_size_x": [32]}})
    assert "_regs4" in registers(one_warp).source


def test_the_submitted_unroll_pragma_moves_to_the_loop_past_the_registers():
    spec_ = VARIANTS["l2_normalise"][1]
    pragma = spec_.model_validate({**spec_.model_dump(), "source": spec_.source.replace(
        "    for (int i = t; i < n; i += block_size_x) dst", "    #pragma unroll 2\n    for (int i = t; i < n; i += "
                                                               "block_size_x) dst")})
    candidate = registers(pragma)
    assert "#pragma unroll 2\n    #pragma unroll" not in candidate.source
    assert "#pragma unroll 2\n    for (int i = t + row_chunks * block_size_x; i < n;" in candidate.source
    assert_compiles_and_keeps_signature(pragma, candidate)


# --- alternatives, and the plan --------------------------------------------------------------------------------
def test_it_is_an_alternative_to_row_in_shared_and_vectorize_loops():
    for rule in rules.CATALOG:
        assert all(rule.id in rules.RULES[other].alternatives for other in rule.alternatives), rule.id
    spec_ = CORPUS["layernorm"]
    candidate = registers(spec_)
    assert rules.check("row_in_shared", spec_, candidate) == (
        "the current kernel carries row_in_registers, which does the work of row_in_shared another way")
    shared = rules.apply("row_in_shared", spec_, spec_.as_candidate())
    assert rules.check("row_in_registers", spec_, shared) == (
        "the current kernel carries row_in_shared, which does the work of row_in_registers another way")


def test_an_alternative_replaces_the_one_carried_when_asked_keeping_every_other_rule():
    """From the plan's kernel (row_in_registers and everything after it), row_in_shared and vectorize_loops
    each replace the registers: the kernel the rules would give without row_in_registers, then rewritten."""
    spec_ = CORPUS["layernorm"]
    planned = plan_applied(spec_, WITH_UNROLL)
    others = ("shuffle_reduction", "restrict", "unroll", "launch_bounds")
    for rule_id in ("row_in_shared", "vectorize_loops"):
        assert rules.rivals(rule_id, planned) == ("row_in_registers",)
        assert rules.check(rule_id, spec_, planned, replacing=True) is None
        swapped = rules.apply(rule_id, spec_, planned, replacing=True)
        assert rules.applied(swapped.source) == (*others, rule_id)
        assert "row_chunks" not in swapped.tune_params
        parent = spec_.as_candidate()
        for other in others:
            parent = rules.apply(other, spec_, parent)
        assert normalised(swapped.source) == normalised(rules.apply(rule_id, spec_, parent).source)
        assert_compiles_and_keeps_signature(spec_, swapped)
    assert rules.rivals("restrict", planned) == ()
    # A rewrite by someone else that kept the header (an LLM's) is not rebuilt from the submitted kernel.
    foreign = planned.model_copy(update={"source": planned.source.replace("__syncthreads();", "__syncthreads();\n"
                                                                                          "    __syncthreads();", 1)})
    assert rules.applied(foreign.source) == rules.applied(planned.source)
    assert "neither the submitted one nor an offline-rules rewrite" in rules.check(
        "row_in_shared", spec_, foreign, replacing=True)
    with pytest.raises(rules.RuleNotApplicable, match="neither the submitted one"):
        rules.apply("row_in_shared", spec_, foreign, replacing=True)
    assert rules.check("row_in_registers", spec_, planned, replacing=True) == (
        "the current kernel already carries row_in_registers")


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_the_plan_holds_the_row_in_registers_and_the_unroll_rule_keeps_their_pragma(name):
    assert rules.applied(plan_applied(CORPUS[name], rules.PLAN_ORDER).source) == (
        "row_in_registers", "shuffle_reduction", "restrict", "batch_loads", "launch_bounds")
    planned = plan_applied(CORPUS[name], WITH_UNROLL)
    assert rules.applied(planned.source) == ("row_in_registers", "shuffle_reduction", "restrict", "unroll",
                                             "launch_bounds")
    code = mask(planned.source)
    assert code.count("#pragma unroll\n        for (int k = 0; k < row_chunks; k++)") == 3
    assert code.count("#pragma unroll\n        for (int k = 0; k < (row_chunks + 3) / 4; k++)") == 3
    # The loops past the registers, of elements and of vectors, and the aligned passes' last cols % 4 elements.
    assert code.count("#pragma unroll loop_unroll_factor\n        for (int ") == 9


# --- every rewrite compiles, keeps the signature, and holds the row in registers ---------------------------
@pytest.mark.parametrize("name", list(KERNELS))
def test_each_rewrite_compiles_across_its_space_without_local_memory(name):
    spec_ = KERNELS[name]
    for candidate in (registers(spec_), plan_applied(spec_, rules.PLAN_ORDER)):
        assert "row_in_registers" in rules.applied(candidate.source)
        assert_compiles_and_keeps_signature(spec_, candidate)
        for params in sample(candidate, spec_, 10):
            defines = {**spec_.baseline_params(), **candidate.params, **params}
            assert "__local_depot" not in ptx(normalised(candidate.source), spec_.kernel_name, defines,
                                              spec_.compiler_options), params


def test_the_local_memory_check_sees_an_array_indexed_at_run_time():
    kernel = ('extern "C" __global__ void k(float *o, int n) {\n    float r[4];\n'
              '    for (int i = 0; i < 4; i++) r[i] = o[i * n];\n    o[0] = r[n & 3];\n}\n')
    assert "__local_depot" in ptx(kernel, "k", {}, [])
    assert "__local_depot" not in ptx(kernel.replace("r[n & 3]", "r[2]"), "k", {}, [])


# --- the rewrite runs on the CPU as the submitted kernel did --------------------------------------------------
@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return HostKernels(tmp_path_factory.mktemp("emulated"))


def built(build: HostKernels, source: str, kernel_name: str) -> ctypes.CDLL:
    """The kernel as host code, row_chunks a variable of the library (the emulation's other tune parameters are)."""
    return build('extern "C" { int row_chunks = 1; }\n' + normalised(source), kernel_name)


def runs_as_submitted(build: HostKernels, spec_: KernelSpec, rewritten: ctypes.CDLL, cols: int, params: dict,
                      misaligned: str | None) -> bool:
    """Whether the rewrite at `params` leaves the arrays as the submitted kernel at the same block size does (a
    thread's maximum is over the elements the block size gives it), `misaligned` an element off alignment."""
    at_size = spec_.with_sizes({"cols": cols})
    values = {name: data.ravel() for name, data in inputs(at_size, cols).items()}  # run() places flat arrays
    config = {**at_size.baseline_params(), **params}
    expected = run(build(spec_.source, spec_.kernel_name), at_size, config, values, misaligned)
    ctypes.c_int.in_dll(rewritten, "row_chunks").value = params["row_chunks"]
    return run(rewritten, at_size.for_candidate(registers(spec_)), config, values, misaligned) == expected


@needs_gxx
@pytest.mark.parametrize("name", list(EMULATED))
@pytest.mark.parametrize("cols", [1, 31, 64, 65, 127, 200, 257, 1009])
def test_every_element_is_read_and_written_at_rows_shorter_and_longer_than_the_registers(build, name, cols):
    """At every configuration of the space (tuned for 200 columns: 32 x 8 and 64 x 4 elements in registers), on
    rows the registers cover, do not fill, and leave elements past (then read from global memory by each pass)."""
    spec_ = EMULATED[name]
    candidate = registers(spec_)
    assert ("_regs4" in candidate.source) == (spec_ is ROW_TWICE)
    rewritten = built(build, candidate.source, spec_.kernel_name)
    for misaligned in (None, "in", "out"):  # all aligned (the rows that are, where cols % 4 != 0), or not
        for params in sample(candidate, spec_, 10):
            assert runs_as_submitted(build, spec_, rewritten, cols, {**candidate.params, **params}, misaligned), \
                (params, misaligned)


@needs_gxx
@pytest.mark.parametrize("misaligned, skipped", [
    ("out", ("c = threadIdx.x + row_chunks * blockDim.x", "c = cols")),
    (None, ("v = threadIdx.x + (row_chunks + 3) / 4 * blockDim.x", "v = vectors")),
])
def test_the_emulation_tells_a_rewrite_that_skips_the_elements_past_the_registers(build, misaligned, skipped):
    """Element by element (the output off alignment) and in vectors of four (every array aligned)."""
    candidate = registers(ROW_TWICE)
    broken = candidate.source.replace(*skipped)
    assert broken != candidate.source
    params = {"block_size_x": 32, "row_chunks": 8}
    assert runs_as_submitted(build, ROW_TWICE, built(build, broken, "row_twice"), 200, params, misaligned)
    assert not runs_as_submitted(build, ROW_TWICE, built(build, broken, "row_twice"), 1009, params, misaligned)
