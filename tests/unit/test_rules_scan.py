"""shuffle_scan: a shared-memory Hillis-Steele block scan becomes a warp-shuffle scan. The recogniser takes the corpus's
segmented_scan and scans written otherwise (other names, an if for the read or the add, float and double, the
block-size define, other doublings, a __device__ helper on a pointer), and refuses loops that are not an in-place
scan with the reason; the rewrites compile with NVRTC across their space and keep the signature. The scans run on
the CPU too (g++, one thread of the host per CUDA thread, __syncthreads a barrier of the block and __shfl_up_sync an
exchange between two barriers of the warp) and give the sequential prefix sums at block sizes of 1 to 32 warps.
The GPU verifies them against the submitted kernels (tests/gpu/test_rules_shapes_verified.py)."""
import ctypes
import signal
import subprocess

import numpy as np
import pytest

from services.generator import rules
from services.generator.rules.cuda_text import IDENTIFIER, find_kernel, mask, normalised
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import ROW_CUMSUM, array, edited, scalar, spec
from tests.unit.test_rules_shapes import assert_compiles_and_keeps_signature
from tests.unit.test_rules_vectorize16 import GXX, _in_child, needs_gxx

SEGMENTED = next(kernel for kernel in corpus() if kernel.name == "segmented_scan").spec()
READ, ADD = "const int t = threadIdx.x >= offset ? buf[threadIdx.x - offset] : 0;", "buf[threadIdx.x] += t;"

HELPER = spec(r"""
// Each block scans the first blockDim.x values of its row in place, in double, through a __device__ helper on a
// pointer: a local for the thread, the read under an if written the other way round, offsets doubled by +=.
__device__ void inclusive_scan(double *s)
{
    const unsigned int me = threadIdx.x;
    for (int k = 1; k < blockDim.x; k += k) {
        double v = 0.0;
        if (k <= me) v = s[me - k];
        __syncthreads();
        s[me] = v + s[me];
        __syncthreads();
    }
}

extern "C" __global__ void scan_rows(double *data, int len)
{
    __shared__ double row[1024];
    double *r = data + (size_t)blockIdx.x * len;
    row[threadIdx.x] = threadIdx.x < len ? r[threadIdx.x] : 0.0;
    __syncthreads();
    inclusive_scan(row);
    if (threadIdx.x < len) r[threadIdx.x] = row[threadIdx.x];
}
""", "scan_rows", [array("data", ["rows", "len"], "float64", "inout"), scalar("len", "len")],
    {"rows": 100, "len": 700}, ["rows"], grid_div_x=[1], tune_params={"block_size_x": [64, 256, 1024]})

PING_PONG = spec(r"""
// GPU Gems' double-buffered scan: each step reads one half of temp and writes the other, one barrier per step.
extern "C" __global__ void ping_pong(float *out, const float *in, int n)
{
    __shared__ float temp[2 * 1024];
    const int thid = threadIdx.x;
    int pout = 0, pin = 1;
    temp[thid] = thid < n ? in[thid] : 0.0f;
    __syncthreads();
    for (int offset = 1; offset < blockDim.x; offset *= 2) {
        pout = 1 - pout;
        pin = 1 - pout;
        if (thid >= offset) temp[pout * 1024 + thid] = temp[pin * 1024 + thid] + temp[pin * 1024 + thid - offset];
        else temp[pout * 1024 + thid] = temp[pin * 1024 + thid];
        __syncthreads();
    }
    if (thid < n) out[thid] = temp[pout * 1024 + thid];
}
""", "ping_pong", [array("out", ["n"], role="out"), array("in", ["n"]), scalar("n", "n")], {"n": 1000}, ["n"],
    grid_div_x=[1])

RECOGNISED = {
    "segmented_scan": SEGMENTED,
    "shifted": edited(SEGMENTED, "offset *= 2", "offset <<= 1"),
    "doubled_by_assignment": edited(SEGMENTED, "offset *= 2", "offset = offset * 2"),
    "bound_by_the_define": edited(SEGMENTED, "offset < blockDim.x", "offset < block_size_x"),
    "ternary_the_other_way": edited(SEGMENTED, READ,
                                    "int t = threadIdx.x < offset ? 0 : buf[threadIdx.x - offset];"),
    "read_and_add_under_ifs": edited(
        edited(SEGMENTED, READ, "int t;\n if (offset <= threadIdx.x) { t = buf[threadIdx.x - offset]; }"),
        ADD, "if (threadIdx.x >= offset) buf[threadIdx.x] += t;"),
    "float_with_a_local_and_an_if": ROW_CUMSUM,
    "double_in_a_helper": HELPER,
}
REFUSED = {
    "reads_above_the_thread": (edited(SEGMENTED, "buf[threadIdx.x - offset]", "buf[threadIdx.x + offset]"),
                               "does not read X[tid - offset] into a temporary before its first barrier"),
    "no_barrier": (edited(SEGMENTED, f"__syncthreads();\n{' ' * 12}{ADD}\n{' ' * 12}__syncthreads();", ADD),
                   "has no barrier"),
    "ones_below_the_offset": (edited(SEGMENTED, "- offset] : 0;", "- offset] : 1;"),
                              "adds t to buf[threadIdx.x] on every thread, and the threads below offset do not hold 0"),
    "a_float_temporary_of_ints": (edited(SEGMENTED, "const int t", "const float t"),
                                  "reads buf (int) into t of another type (float)"),
    "up_to_the_segment": (edited(SEGMENTED, "offset < blockDim.x", "offset < seg"),
                          "the kernel has no shared-memory block scan"),
    "double_buffered": (PING_PONG, "has one barrier per step, as a double-buffered (ping-pong) scan has"),
    "no_block_of_whole_warps": (SEGMENTED.model_validate({**SEGMENTED.model_dump(), "params": {"block_size_x": 48},
                                                          "tune_params": {"block_size_x": [48, 80]}}),
                                "no value of block_size_x ([48, 80]) is a multiple of 32"),
}


@pytest.mark.parametrize("case", list(RECOGNISED))
def test_scans_written_otherwise_are_recognised_and_compile_across_their_space(case):
    spec_ = RECOGNISED[case]
    assert rules.check("shuffle_scan", spec_, spec_.as_candidate()) is None
    candidate = rules.apply("shuffle_scan", spec_, spec_.as_candidate())
    assert normalised(candidate.source).count("__shfl_up_sync") == 2
    assert "block_size_x % 32 == 0" in candidate.restrictions and "block_size_x <= 1024" in candidate.restrictions
    assert assert_compiles_and_keeps_signature(spec_, candidate) >= 1


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_is_not_an_in_place_block_scan_and_why(case):
    spec_, reason = REFUSED[case]
    assert reason in (rules.check("shuffle_scan", spec_, spec_.as_candidate()) or "applies")


def test_the_scan_takes_three_barriers_and_the_block_size_keeps_1024():
    candidate = rules.apply("shuffle_scan", SEGMENTED, SEGMENTED.as_candidate())
    code = mask(normalised(candidate.source))
    assert "buf[threadIdx.x - offset]" not in code and "__shared__ int warp_sums[32];" in code
    assert code.count("__syncthreads()") == mask(SEGMENTED.source).count("__syncthreads()") - 2 + 3
    assert candidate.tune_params == {"block_size_x": [64, 128, 256, 512, 1024]}


def test_the_plan_for_segmented_scan_starts_with_its_two_scan_rewrites():
    from services.generator.answers import parse
    from services.generator.providers.base import Prompt
    from services.generator.providers.rules import RulesProvider

    prompt = Prompt(kind="plan", system="", text="", spec=SEGMENTED, current=SEGMENTED.as_candidate())
    steps = parse("plan", RulesProvider().complete(prompt).text).steps
    assert [step.id for step in steps] == ["scan_vectors", "shuffle_scan", "restrict", "unroll", "launch_bounds"]


# --- the scans run on the CPU --------------------------------------------------------------------------------
PRELUDE = r"""
#include <pthread.h>
#include <cstddef>
#include <thread>
#include <vector>
struct kforge_dim3 { unsigned int x, y, z; };
static thread_local kforge_dim3 threadIdx, blockIdx;
static kforge_dim3 blockDim, gridDim;
static pthread_barrier_t kforge_block, kforge_warp[32];
#define __global__
#define __device__
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
static void __syncthreads() { pthread_barrier_wait(&kforge_block); }
// The lanes post their values and read a lower lane's between two waits of their warp: the first keeps a lane
// from overwriting a value another lane has not read yet.
template <typename T> static T __shfl_up_sync(unsigned int, T value, int delta) {
    static T posted[1024];
    pthread_barrier_t *warp = &kforge_warp[threadIdx.x / 32];
    pthread_barrier_wait(warp);
    posted[threadIdx.x] = value;
    pthread_barrier_wait(warp);
    return threadIdx.x % 32 >= (unsigned int)delta ? posted[threadIdx.x - delta] : value;
}
"""


def build(source: str, kernel_name: str, directory, defines: dict | None = None) -> ctypes.CDLL:
    """The kernel as host code with `kforge_launch(grid, block, args...)`: the blocks in turn, each block's threads
    at once, one host thread per CUDA thread."""
    kernel = find_kernel(source, kernel_name)
    parameters = [source[a:b].strip() for a, b in kernel.parameters(source)]
    names = [IDENTIFIER.findall(mask(p))[-1] for p in parameters]
    launcher = f"""
extern "C" void kforge_launch(unsigned int grid, unsigned int block{"".join(", " + p for p in parameters)}) {{
    gridDim = {{grid, 1, 1}}; blockDim = {{block, 1, 1}};
    for (unsigned int b = 0; b < grid; ++b) {{
        pthread_barrier_init(&kforge_block, nullptr, block);
        for (unsigned int w = 0; w < block / 32; ++w) pthread_barrier_init(&kforge_warp[w], nullptr, 32);
        std::vector<std::thread> threads;
        for (unsigned int t = 0; t < block; ++t)
            threads.emplace_back([=] {{
                blockIdx = {{b, 0, 0}}; threadIdx = {{t, 0, 0}}; {kernel_name}({", ".join(names)});
            }});
        for (std::thread &thread : threads) thread.join();
        pthread_barrier_destroy(&kforge_block);
        for (unsigned int w = 0; w < block / 32; ++w) pthread_barrier_destroy(&kforge_warp[w]);
    }}
}}
"""
    path = directory / f"{kernel_name}{len(list(directory.iterdir()))}"
    path.with_suffix(".cpp").write_text(PRELUDE + source + launcher)
    flags = [f"-D{name}={value}" for name, value in (defines or {}).items()]
    subprocess.run([GXX, "-std=c++17", "-O1", "-pthread", "-Wno-unknown-pragmas", *flags, "-shared", "-fPIC", "-o",
                    str(path.with_suffix(".so")), str(path.with_suffix(".cpp"))], check=True, capture_output=True)
    return ctypes.CDLL(str(path.with_suffix(".so")))


def launch(library: ctypes.CDLL, grid: int, block: int, *arguments) -> list[np.ndarray]:
    """The kernel run on copies of the arrays (ints pass as int) in a child process stopped after a minute (a scan
    whose threads wait for each other forever fails instead of hanging); the arrays after."""
    def work() -> list[np.ndarray]:
        signal.alarm(60)
        arrays = [np.array(a) for a in arguments if isinstance(a, np.ndarray)]
        held = iter(arrays)
        values = [ctypes.c_void_p(next(held).ctypes.data) if isinstance(a, np.ndarray) else ctypes.c_int(a)
                  for a in arguments]
        library.kforge_launch(ctypes.c_uint(grid), ctypes.c_uint(block), *values)
        return arrays
    return _in_child(work)


BLOCKS = (32, 64, 96, 128, 1024)  # 1, 2, 3, 4 and 32 warps


@needs_gxx
@pytest.mark.parametrize("order", ["submitted", "shuffle_scan", "plan"])
def test_segmented_scan_gives_the_prefix_sums_at_every_block_size(tmp_path, order):
    """The submitted kernel (which shows the emulation's barriers hold), the rewrite, and the plan's composition
    (restrict, unroll and launch_bounds after it) give each segment's prefix sums and total, exactly."""
    candidate = SEGMENTED.as_candidate()
    for rule_id in {"submitted": (), "shuffle_scan": ("shuffle_scan",), "plan": rules.PLAN_ORDER}[order]:
        if rules.check(rule_id, SEGMENTED, candidate) is None:
            candidate = rules.apply(rule_id, SEGMENTED, candidate)
    library = build(normalised(candidate.source), "segmented_scan", tmp_path)
    segments, seg = 3, 1000
    values = np.random.default_rng(7).integers(-1000, 1000, (segments, seg), dtype=np.int32)
    for block in BLOCKS:
        out, totals, _ = launch(library, segments, block, np.zeros_like(values), np.zeros(segments, np.int32),
                                values, seg)
        assert np.array_equal(out, np.cumsum(values, axis=1)), block
        assert np.array_equal(totals, values.sum(axis=1)), block


@needs_gxx
@pytest.mark.parametrize("rule_id", ["shuffle_scan", "scan_vectors"])
def test_the_emulation_tells_a_wrong_scan(tmp_path, rule_id):
    """Adding the warp's own total instead of the warps' before it gives other sums: the emulation runs the
    rewrite's warp totals, not a copy of the submitted scan."""
    candidate = rules.apply(rule_id, SEGMENTED, SEGMENTED.as_candidate())
    broken = normalised(candidate.source).replace("warp_sums[warp - 1]", "warp_sums[warp]")
    assert broken != normalised(candidate.source)
    values = np.arange(1024, dtype=np.int32).reshape(1, 1024)
    out, _, _ = launch(build(broken, "segmented_scan", tmp_path), 1, 128, np.zeros_like(values),
                       np.zeros(1, np.int32), values, 1024)
    assert not np.array_equal(out, np.cumsum(values, axis=1))


@needs_gxx
@pytest.mark.parametrize("rule_id", ["shuffle_scan", "scan_vectors"])
@pytest.mark.parametrize("block", [32, 96, 1024])
def test_a_float_scan_by_the_define_gives_the_prefix_sums_within_rounding(tmp_path, rule_id, block):
    """Rows of 700 floats (16-byte aligned, the vectors' path) and 701 (the elements' path)."""
    candidate = rules.apply(rule_id, ROW_CUMSUM, ROW_CUMSUM.as_candidate())
    library = build(normalised(candidate.source), "row_cumsum", tmp_path, {"block_size_x": block})
    for cols in (700, 701):
        values = np.random.default_rng(block).normal(0, 1, (2, cols)).astype(np.float32)
        out, _ = launch(library, 2, block, np.zeros_like(values), values, cols)
        assert np.allclose(out, np.cumsum(values.astype(np.float64), axis=1), rtol=0, atol=1e-3), cols
