"""row_in_registers: a row that a kernel passes over several times held in registers (softmax, layernorm, and the
variants row_in_shared takes), read as 128-bit vectors where a row of 4-byte elements is aligned and its length a
multiple of four, element by element where not. Each rewrite compiles with NVRTC for every configuration of its
space, keeps the signature, and keeps the row in registers (ptxas reports no stack frame and no spills: an index into
the registers left unknown after unrolling would put them in local memory). Kernels whose threads share nothing run
on the CPU (g++, every thread in turn, UBSan stopping a misaligned vector access) and match the submitted kernel
(its sums within float rounding, the vector path adding a thread's elements in another order) at rows the registers
cover, do not fill and leave elements past, aligned and not. The GPU verifies the corpus kernels and the variants
(tests/gpu/test_rules_shapes_verified.py)."""
import ctypes
import re

import numpy as np
import pytest

from services.generator import rules
from services.generator.rules.cuda_text import mask, normalised
from shared.adapters.device.compiler import compile_kernel
from shared.domain.spec import KernelSpec
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import NOT_OF_SHAPE, VARIANTS, array, sample, scalar, spec
from tests.unit.test_rules_shapes import ARCH, assert_compiles_and_keeps_signature, plan_applied
from tests.unit.test_rules_vectorize16 import HostKernels, inputs, needs_gxx, run
from tests.unit.test_rules_vectorize_aligned import ptx

CORPUS = {kernel.name: kernel.spec() for kernel in corpus()}
# One row of several warps, no barrier between its passes: row_in_shared refuses it, registers need none.
SEVERAL_WARPS = NOT_OF_SHAPE["rows_of_several_warps_without_a_barrier"][1]
# Each thread's sum of its elements of the block's row, added to the row's total (an atomic after the passes),
# and each element's square less one: two passes and no exchange between threads before the atomic, so the
# emulation may run the threads one after another; which thread takes an element changes only the total's rounding.
ROW_TOTAL = spec(r"""
extern "C" __global__ void row_total(float *out, float *total, const float *in, int cols)
{
    const float *row = in + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[(size_t)blockIdx.x * cols + c] = row[c] * row[c] - 1.0f;
    atomicAdd(&total[blockIdx.x], s);
}
""", "row_total", [array("out", ["rows", "cols"], role="out"), array("total", ["rows"], role="inout"),
                   array("in", ["rows", "cols"]), scalar("cols", "cols")],
    {"rows": 3, "cols": 200}, ["rows"], {"block_size_x": 32}, {"block_size_x": [32, 64]}, grid_div_x=[1])
# The same with its first pass on the line of the code before it and the second the body of an if: each becomes
# loops that must begin a line of their own and, under the if, be braced.
ROW_TOTAL_TERSE = ROW_TOTAL.model_validate({**ROW_TOTAL.model_dump(), "source": ROW_TOTAL.source.replace(
    "    float s = 0.0f;\n    for", "    float s = 0.0f; for").replace(
    "    for (int c = threadIdx.x; c < cols; c += blockDim.x) out",
    "    if (cols > 0)\n        for (int c = threadIdx.x; c < cols; c += blockDim.x) out")})
EMULATED = {"row_total": ROW_TOTAL, "row_total_terse": ROW_TOTAL_TERSE}
KERNELS = {"softmax": CORPUS["softmax"], "layernorm": CORPUS["layernorm"], "l2_normalise": VARIANTS["l2_normalise"][1],
           "rms_norm": VARIANTS["rms_norm"][1], "several_warps": SEVERAL_WARPS, **EMULATED}


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


def test_softmax_reads_its_row_once_into_registers_as_vectors_where_aligned():
    """Where the row is 16-byte aligned and its length a multiple of four, the first pass loads each of the
    thread's row_chunks vectors into four registers and every pass runs its body for their elements in turn;
    elsewhere the first pass stores each element it reads, 4 * row_chunks of them a block width apart. Every pass
    then runs the loop as written past them. The test is made once: every pass of a thread takes the same path.
    The chunks are tuned to the fewest block widths of vectors covering the row."""
    spec_ = CORPUS["softmax"]
    candidate = registers(spec_)
    code = mask(candidate.source)
    assert "float row_regs[4 * row_chunks];" in code
    assert code.count("const bool row_vectors = cols % 4 == 0 && "
                      "(reinterpret_cast<unsigned long long>(&row[0]) & 15) == 0;") == 1
    assert code.count("if (row_vectors) {") == 3 and code.count("} else {") == 3
    # The vector path: row_chunks vectors a thread, a block width of vectors apart, loaded once.
    assert code.count("for (int k = 0; k < row_chunks; k++) {\n            const int v = tid + k * blockDim.x;\n"
                      "            if (v < cols / 4) {") == 3
    assert code.count("reinterpret_cast<const float4 *>(&row[0])[v]") == 1
    assert "row_regs[4 * k + 0] = row4.x;" in code and "row_regs[4 * k + 3] = row4.w;" in code
    assert code.count("for (int lane = 0; lane < 4; lane++) {") == 6  # the registers' and the loop past them
    assert "m = fmaxf(m, row_regs[4 * k + lane]);" in code and "sum += expf(row_regs[4 * k + lane] - m);" in code
    assert "const int c = 4 * v + lane;\n                    dst[c] = expf(row_regs[4 * k + lane] - m) / sum;" in code
    assert code.count("for (int v = tid + row_chunks * blockDim.x; v < cols / 4; v += blockDim.x) {") == 3
    # The scalar path: the elements a block width apart, as the submitted kernel takes them.
    assert "row_regs[k] = row[c];" in code and code.count("for (int k = 0; k < 4 * row_chunks; k++) {") == 3
    assert code.count("const int c = tid + k * blockDim.x;") == 3
    assert code.count("for (int c = tid + 4 * row_chunks * blockDim.x; c < cols; c += blockDim.x)") == 3
    assert "m = fmaxf(m, row_regs[k]);" in code and "dst[c] = expf(row_regs[k] - m) / sum;" in code
    assert code.count("row[c]") == 7  # the scalar store, and the six loops past the registers
    assert "__syncwarp" not in code and code.count("__syncthreads") == mask(spec_.source).count("__syncthreads")
    assert candidate.restrictions == ["4 * row_chunks * block_size_x >= cols",
                                      "row_chunks == 1 or 4 * row_chunks * block_size_x < 2 * cols"]
    assert candidate.tune_params == {"block_size_x": [64, 128, 256, 512, 1024], "row_chunks": [1, 2, 4, 8]}
    assert candidate.params == {"block_size_x": 256, "row_chunks": 1} and candidate.smem_args is None
    assert [(c["block_size_x"], c["row_chunks"]) for c in sample(candidate, spec_, 10)] == \
        [(64, 4), (128, 2), (256, 1), (512, 1), (1024, 1)]
    assert candidate.grid_div_x == spec_.grid_div_x


def test_the_vector_path_loads_the_row_128_bits_at_a_time():
    """One 128-bit load of the row (the first pass's, into registers); the other loads are of single elements
    (the scalar path and the loops past the registers)."""
    spec_ = CORPUS["softmax"]
    candidate = registers(spec_)
    text = ptx(normalised(candidate.source), spec_.kernel_name, {**spec_.baseline_params(), **candidate.params},
               list(spec_.compiler_options))
    assert len(re.findall(r"\bld\.global(?:\.nc)?\.v4\.f32\b", text)) == 1
    assert not re.search(r"\b(?:ld|st)\.local\b", text)


def test_the_registers_take_the_budget_of_the_element_type():
    """Doubles have no vector here: element by element, as many chunks as fit 128 bytes."""
    doubles = registers(VARIANTS["l2_normalise"][1])
    assert "double src_regs[row_chunks];" in doubles.source and doubles.tune_params["row_chunks"] == [1, 2, 4, 8, 16]
    assert "_vectors" not in doubles.source and "4 *" not in mask(doubles.source).split("row_chunks];")[1]
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
    code = registers(ROW_TOTAL_TERSE).source
    assert "float s = 0.0f;\n    const bool row_vectors = cols % 4 == 0" in code
    assert "if (cols > 0)\n        {\n            if (row_vectors) {\n                #pragma unroll\n" in code


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


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_the_plan_holds_the_row_in_registers_and_the_unroll_rule_keeps_their_pragma(name):
    planned = plan_applied(CORPUS[name], rules.PLAN_ORDER)
    assert rules.applied(planned.source) == ("row_in_registers", "shuffle_reduction", "restrict", "unroll",
                                             "launch_bounds")
    loops = re.findall(r"#pragma unroll( loop_unroll_factor)?\n\s*for \(int (k|lane|c|v_?) ", mask(planned.source))
    # The registers' loops and the lanes' keep a full unroll; the loops past the registers take the tuned one.
    assert sorted(loops) == sorted([("", "k")] * 6 + [("", "lane")] * 6 + [(" loop_unroll_factor", "c")] * 3 +
                                   [(" loop_unroll_factor", "v" if name == "softmax" else "v_")] * 3), loops


# --- every rewrite compiles, keeps the signature, and holds the row in registers ---------------------------
@pytest.mark.parametrize("name", list(KERNELS))
def test_each_rewrite_compiles_across_its_space_without_local_memory(name):
    spec_ = KERNELS[name]
    for candidate in (registers(spec_), plan_applied(spec_, rules.PLAN_ORDER)):
        assert "row_in_registers" in rules.applied(candidate.source)
        assert_compiles_and_keeps_signature(spec_, candidate)
        for params in sample(candidate, spec_, 10):
            defines = {**spec_.baseline_params(), **candidate.params, **params}
            log = compile_kernel(normalised(candidate.source), spec_.kernel_name, defines,
                                 [*spec_.compiler_options, "-Xptxas=-v"], ARCH).log
            usage = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
            assert usage is not None and usage.groups() == ("0", "0", "0"), (params, log)


# --- the rewrite runs on the CPU as the submitted kernel did --------------------------------------------------
@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return HostKernels(tmp_path_factory.mktemp("emulated"))


# What the emulation lacks of CUDA: row_chunks a variable of the library (the emulation's other tune parameters
# are), float4 a struct aligned as the device's (so UBSan stops a misaligned access), atomicAdd on one thread.
DEVICE = """extern "C" { int row_chunks = 1; }
struct __align__(16) float4 { float x, y, z, w; };
static float atomicAdd(float *address, float value) { const float old = *address; *address += value; return old; }
"""


def built(build: HostKernels, source: str) -> ctypes.CDLL:
    return build(DEVICE + normalised(source), ROW_TOTAL.kernel_name)


def runs_as_submitted(build: HostKernels, spec_: KernelSpec, rewritten: ctypes.CDLL, cols: int, params: dict,
                      misaligned: str | None = None) -> bool:
    """Whether the rewrite at `params` leaves `out` bit for bit and the rows' totals within float rounding as the
    submitted kernel does, `in` 16-byte aligned or (`misaligned="in"`) an element past."""
    at_size = spec_.with_sizes({"cols": cols})
    values = {name: data.ravel() for name, data in inputs(at_size, cols).items()}  # run() places flat arrays
    config = {**at_size.baseline_params(), **params}
    expected = run(built(build, spec_.source), at_size, config, values)
    ctypes.c_int.in_dll(rewritten, "row_chunks").value = params["row_chunks"]
    got = run(rewritten, at_size.for_candidate(registers(spec_)), config, values, misaligned)
    totals = [np.frombuffer(result["total"], np.float32) for result in (got, expected)]
    return got["out"] == expected["out"] and np.allclose(*totals, rtol=1e-5, atol=1e-4)


@needs_gxx
@pytest.mark.parametrize("name", list(EMULATED))
@pytest.mark.parametrize("cols", [1, 31, 64, 65, 127, 200, 256, 257, 1009, 1024])
def test_every_element_is_read_once_a_pass_on_either_path_at_rows_shorter_and_longer_than_the_registers(
        build, name, cols):
    """At every configuration of the space (tuned for 200 columns: 32 x 2 and 64 x 1 vectors, 256 elements, in
    registers), on rows the registers cover, do not fill, and leave elements past (then read from global memory
    by each pass): the vector path where the length is a multiple of four and `in` aligned, the scalar path where
    the length is not or `in` is an element past."""
    spec_ = EMULATED[name]
    candidate = registers(spec_)
    rewritten = built(build, candidate.source)
    for params in sample(candidate, spec_, 10):
        for misaligned in (None, "in"):
            assert runs_as_submitted(build, spec_, rewritten, cols, {**candidate.params, **params}, misaligned), \
                (params, misaligned)


@needs_gxx
@pytest.mark.parametrize("broken, found, missed", [
    # The vector path without the vectors past the registers: seen only where the vectors leave some past them.
    (("v = threadIdx.x + row_chunks * blockDim.x", "v = cols"), [(1024, None)], [(256, None), (1024, "in"), (257, None)]),
    # The vector path's later pass reading its lanes in reverse: seen only where the vector path runs.
    (("row_regs[4 * k + lane] * row_regs[4 * k + lane]", "row_regs[4 * k + 3 - lane] * row_regs[4 * k + 3 - lane]"),
     [(200, None), (1024, None)], [(200, "in"), (257, None)]),
    # The scalar path without the elements past the registers: seen only where the scalar path leaves some.
    (("c = threadIdx.x + 4 * row_chunks * blockDim.x", "c = cols"), [(257, None), (1024, "in")],
     [(200, "in"), (1024, None)]),
])
def test_the_emulation_tells_a_rewrite_that_misses_elements_on_either_path(build, broken, found, missed):
    candidate = registers(ROW_TOTAL)
    source = candidate.source.replace(*broken)
    assert source != candidate.source
    library, params = built(build, source), {"block_size_x": 32, "row_chunks": 2}
    assert all(not runs_as_submitted(build, ROW_TOTAL, library, cols, params, misaligned) for cols, misaligned in found)
    assert all(runs_as_submitted(build, ROW_TOTAL, library, cols, params, misaligned) for cols, misaligned in missed)
