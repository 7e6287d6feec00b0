"""warp_per_row with a part of a warp per row: block_size_x lanes of 4 to 32 share a row, and only they combine
what they hold, under the mask of their lanes. The row kernels that take warp_per_row (the corpus's gemv and
spmv_csr, the variants and the user styles) run on the CPU (g++, one host thread per CUDA thread of a 2D block,
__shfl_xor_sync an exchange between two barriers of the row's lanes, which also checks that its mask names exactly
those lanes) at every lane count, with rows past the grid's last whole block, and give what the submitted kernel
gives: integers and extremes exactly, float sums within their reassociation. The GPU verifies them as well
(tests/gpu/test_rules_shapes_verified.py)."""
import ctypes
import math
import signal
from pathlib import Path

import numpy as np
import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.cuda_text import IDENTIFIER, mask, normalised
from shared.adapters.inputs import distribution_of, draw, stream_key
from shared.domain.spec import KernelSpec
from tests.corpus_kernels import corpus
from tests.unit.rules_variants import VARIANTS
from tests.unit.test_rules_vectorize16 import (EmulatedFault, _in_child, launched_parameters, needs_gxx,
                                               threaded_library)

STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"
KERNELS = {
    **{k.name: k.spec() for k in corpus() if k.name in ("gemv", "spmv_csr")},
    **{name: spec for name, (rule_id, spec) in VARIANTS.items() if rule_id == "warp_per_row"},
    **{f"style-{name}": load_spec(STYLES / f"{name}.cu", STYLES / f"{name}.yaml")
       for name in ("row_sums", "row_max", "softmax_thread", "layernorm_thread")},
}
PRELUDE = r"""
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>
using std::max; using std::min;
struct kforge_dim3 { unsigned int x, y, z; };
static thread_local kforge_dim3 threadIdx, blockIdx;
static kforge_dim3 blockDim, gridDim;
static pthread_barrier_t kforge_row[1024];
#define __global__
#define __device__
#define __forceinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
static float __ldg(const float *p) { return *p; }
static float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
static double rsqrt(double v) { return 1.0 / std::sqrt(v); }
// An atomic add among the host threads (a loss summed over rows into one scalar).
static std::mutex kforge_atomic;
template <typename T> static T atomicAdd(T *address, T value) {
    std::lock_guard<std::mutex> held(kforge_atomic);
    const T old = *address;
    *address = old + value;
    return old;
}
// The row's lanes (threadIdx.y's) post their values and read their partner's between two waits of the row: the
// first keeps a lane from overwriting a value another lane has not read yet. A mask other than exactly the row's
// lanes of the warp ends the run.
template <typename T> static T __shfl_xor_sync(unsigned int mask, T value, int offset) {
    static T posted[1024];
    const unsigned int lanes = blockDim.x, me = threadIdx.y * lanes + threadIdx.x;
    const unsigned int expected = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1) << ((threadIdx.y * lanes) % 32);
    if (mask != expected || (unsigned int)offset >= lanes) std::abort();
    pthread_barrier_wait(&kforge_row[threadIdx.y]);
    posted[me] = value;
    pthread_barrier_wait(&kforge_row[threadIdx.y]);
    return posted[me ^ (unsigned int)offset];
}
"""


def build(source: str, kernel_name: str, directory: Path, defines: dict) -> ctypes.CDLL:
    """The kernel as host code with `kforge_launch(grid, block_x, block_y, args...)`: the blocks in turn, each
    block's threads at once, one host thread per CUDA thread; a template's instance launched with its parameters'
    types spelled as the instance names them."""
    parameters = launched_parameters(source, kernel_name)
    names = [IDENTIFIER.findall(mask(p))[-1] for p in parameters]
    declared = "".join(", " + p for p in parameters)
    launcher = f"""
extern "C" void kforge_launch(unsigned int grid, unsigned int bx, unsigned int by{declared}) {{
    gridDim = {{grid, 1, 1}}; blockDim = {{bx, by, 1}};
    for (unsigned int kforge_b = 0; kforge_b < grid; ++kforge_b) {{
        for (unsigned int kforge_y = 0; kforge_y < by; ++kforge_y)
            pthread_barrier_init(&kforge_row[kforge_y], nullptr, bx);
        std::vector<std::thread> threads;
        for (unsigned int kforge_y = 0; kforge_y < by; ++kforge_y)
            for (unsigned int kforge_x = 0; kforge_x < bx; ++kforge_x)
                threads.emplace_back([=] {{
                    blockIdx = {{kforge_b, 0, 0}}; threadIdx = {{kforge_x, kforge_y, 0}};
                    {kernel_name}({", ".join(names)});
                }});
        for (std::thread &thread : threads) thread.join();
        for (unsigned int kforge_y = 0; kforge_y < by; ++kforge_y) pthread_barrier_destroy(&kforge_row[kforge_y]);
    }}
}}
"""
    return threaded_library(PRELUDE + source + launcher, directory, kernel_name, defines)


SCALARS = {"int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "float32": ctypes.c_float, "float64": ctypes.c_double}


def launch(library: ctypes.CDLL, spec: KernelSpec, params: dict, seed: int) -> dict[str, np.ndarray]:
    """The kernel at `spec`'s sizes and launch geometry for `params`, on inputs drawn as the verifier draws them,
    in a child process stopped after a minute (lanes that wait for a partner forever fail instead of hanging)."""
    (grid, _, _), (bx, by, _) = spec.launch_geometry(params)

    def work() -> dict[str, np.ndarray]:
        signal.alarm(60)
        arrays, arguments = {}, []
        for position, arg in enumerate(spec.args):
            if arg.is_array:
                count = math.prod(spec.shape_of(arg))
                arrays[arg.name] = (draw(distribution_of(spec, arg), stream_key(seed, position), 0, count)
                                    if arg.effective_role != "out" else np.zeros(count, arg.dtype))
                arguments.append(ctypes.c_void_p(arrays[arg.name].ctypes.data))
            else:
                arguments.append(SCALARS[arg.dtype](spec.scalar_of(arg, params).item()))
        library.kforge_launch(ctypes.c_uint(grid), ctypes.c_uint(bx), ctypes.c_uint(by), *arguments)
        return arrays
    return _in_child(work)


def small(spec: KernelSpec) -> KernelSpec:
    """The spec at a few hundred rows (not a multiple of any block's rows) and its own row length, or 37
    elements where the row is longer, so that every lane count meets rows it does not divide."""
    sizes = {}
    for name, value in spec.sizes.items():
        sizes[name] = {"rows": 203, "cols": 37, "nnz": 203 * 9}.get(name, min(value, 37))
    return spec.with_sizes(sizes)


@needs_gxx
@pytest.mark.parametrize("name", list(KERNELS))
def test_every_lane_count_gives_what_the_submitted_kernel_gives(tmp_path, name):
    spec = KERNELS[name]
    candidate = rules.apply("warp_per_row", spec, spec.as_candidate())
    assert candidate.tune_params[spec.block_size_names[0]] == [4, 8, 16, 32]
    at_size = small(spec)
    baseline = at_size.baseline_params()
    expected = launch(build(normalised(spec.source), spec.kernel_name, tmp_path, baseline), at_size, baseline, 5)
    launched = at_size.for_candidate(candidate)
    lanes, rows = spec.block_size_names[0], spec.block_size_names[1]
    for params in ({lanes: 4, rows: 8}, {lanes: 8, rows: 4}, {lanes: 16, rows: 2}, {lanes: 32, rows: 1},
                   {lanes: 32, rows: 4}):
        config = {**baseline, **candidate.params, **params}
        assert launched.restrictions_hold(config), config
        library = build(normalised(candidate.source), spec.kernel_name, tmp_path, config)
        got = launch(library, launched, config, 5)
        for arg in spec.args:
            if arg.is_array and arg.effective_role != "in":
                if got[arg.name].dtype.kind == "f":
                    np.testing.assert_allclose(got[arg.name], expected[arg.name], rtol=1e-5, atol=1e-5,
                                               err_msg=f"{arg.name} at {params}")
                else:
                    np.testing.assert_array_equal(got[arg.name], expected[arg.name], err_msg=f"{arg.name} at {params}")


def test_the_row_lanes_shuffle_under_their_own_mask():
    code = mask(rules.apply("warp_per_row", KERNELS["spmv_csr"], KERNELS["spmv_csr"].as_candidate()).source)
    assert "const unsigned row_lanes = block_size_x == 32 ? 0xffffffffu" in code
    assert ": ((1u << (block_size_x % 32)) - 1) << ((threadIdx.y * block_size_x) % 32);" in code
    assert "for (int offset = block_size_x / 2; offset > 0; offset /= 2)" in code
    assert "sum += __shfl_xor_sync(row_lanes, sum, offset);" in code


@needs_gxx
@pytest.mark.parametrize("broken", [("block_size_x == 32 ? 0xffffffffu", "true ? 0xffffffffu"),
                                    ("offset = block_size_x / 2", "offset = 16")])
def test_the_emulation_stops_a_shuffle_reaching_past_the_rows_lanes(tmp_path, broken):
    """A warp's full mask, or offsets of a whole warp, with 8 lanes a row: the lanes would combine other rows'."""
    spec = small(KERNELS["spmv_csr"])
    candidate = rules.apply("warp_per_row", spec, spec.as_candidate())
    source = normalised(candidate.source)
    assert broken[0] in source
    config = {**spec.baseline_params(), **candidate.params, "block_size_x": 8, "block_size_y": 4}
    library = build(source.replace(*broken), spec.kernel_name, tmp_path, config)
    with pytest.raises(EmulatedFault):
        launch(library, spec.for_candidate(candidate), config, 5)
