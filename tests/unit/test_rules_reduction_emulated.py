"""hierarchical_reduction's sums by row and by column (and its fixed addresses on 2D and 3D grids), run on the CPU:
g++, one host thread per CUDA thread of a block, the blocks in turn; __syncthreads a barrier of the block,
__shfl_down_sync an exchange between two barriers of the warp, __shared__ arrays one per block (the blocks run
one after another), atomics under a lock. Each array is allocated at its exact size with a canary after it, and an
atomic outside every array ends the run, so a write past an array (a row the submitted kernel's guard left out,
whose address is not allocated) fails the test, even one of a sum's identity. The
rewrite, at several configurations, gives what the submitted kernel gives: integers and extremes exactly, float sums
within their reassociation. The GPU verifies them as well (tests/gpu/test_rules_shapes_verified.py)."""
import ctypes
import math
import re
import signal
from pathlib import Path

import numpy as np
import pytest

from kforge.specfile import load_spec
from services.generator import rules
from services.generator.rules.cuda_text import IDENTIFIER, find_kernel, mask, normalised
from shared.adapters.inputs import distribution_of, draw, stream_key
from shared.domain.spec import KernelSpec
from tests.unit.rules_variants import (BATCH_NORMS_GRID_STRIDE, BATCH_SUMS, BIAS_GRADIENT, BIAS_GRADIENT_OVER_A_BATCH,
                                       BLOCK_TREE_COUNT, BLOCK_TREE_DYNAMIC, BLOCK_TREE_MSE, BLOCK_TREE_SQUARES,
                                       CHANNEL_SQUARES_GRID_STRIDE, CHANNEL_STATS, COLUMN_LOWS, REDUCE_INTERLEAVED,
                                       HARRIS_STRIDED_ATOMIC, ENERGY_3D, IMAGE_CHANNEL_MEANS, IMAGE_SUM_2D,
                                       MASKED_STATS_2D, POSITIVES_PER_BATCH, ROW_PEAKS_BELOW, ROW_SUMS_2D_BLOCKS,
                                       ROW_SUMS_BY_BLOCK_INDEX, STACK_SUM, TOTAL_ON_A_FIXED_GRID, DOT_BY_EXAMPLE,
                                       WEIGHTED_SUM)
from tests.unit.test_rules_vectorize16 import EmulatedFault, _in_child, needs_gxx, threaded_library

STYLES = Path(__file__).resolve().parent.parent / "corpus" / "styles"
CANARY = 64  # elements after each array, filled with a value no kernel writes
PRELUDE = r"""
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>
using std::max; using std::min;
struct kforge_dim3 { unsigned int x, y, z; };
static thread_local kforge_dim3 threadIdx, blockIdx;
static kforge_dim3 blockDim, gridDim;
static pthread_barrier_t kforge_block, kforge_warp[32];
#define __global__
#define __device__
#define __forceinline__
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)
static void __syncthreads() { pthread_barrier_wait(&kforge_block); }
static unsigned int kforge_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
// A warp's lanes post their values and read their partner's between two waits of the warp; a lane past the warp's
// last reads its own value, as on the GPU. A mask other than the whole warp's ends the run.
template <typename T> static T __shfl_down_sync(unsigned int mask, T value, int offset) {
    static T posted[1024];
    const unsigned int me = kforge_thread(), lane = me % 32;
    if (mask != 0xffffffffu) std::abort();
    pthread_barrier_wait(&kforge_warp[me / 32]);
    posted[me] = value;
    pthread_barrier_wait(&kforge_warp[me / 32]);
    const T got = lane + offset < 32 ? posted[me + offset] : value;
    pthread_barrier_wait(&kforge_warp[me / 32]);
    return got;
}
static std::mutex kforge_atomic;
// The arrays the launch passes, at their exact extents: an atomic anywhere else ends the run, even one that would
// leave the memory as it was (the identity of a sum, a minimum or a maximum).
static std::vector<std::pair<const char *, size_t>> kforge_arrays;
extern "C" void kforge_hold(const void *start, size_t bytes) { kforge_arrays.emplace_back((const char *)start, bytes); }
template <typename T> static void kforge_held(const T *address) {
    const char *at = (const char *)address;
    for (const auto &array : kforge_arrays)
        if (at >= array.first && at + sizeof(T) <= array.first + array.second) return;
    std::abort();
}
template <typename T, typename V> static T atomicAdd(T *address, V value) {
    std::lock_guard<std::mutex> held(kforge_atomic);
    kforge_held(address);
    const T old = *address;
    *address = old + (T)value;
    return old;
}
template <typename T> static T atomicMin(T *address, T value) {
    std::lock_guard<std::mutex> held(kforge_atomic);
    kforge_held(address);
    const T old = *address;
    *address = std::min(old, value);
    return old;
}
template <typename T> static T atomicMax(T *address, T value) {
    std::lock_guard<std::mutex> held(kforge_atomic);
    kforge_held(address);
    const T old = *address;
    *address = std::max(old, value);
    return old;
}
"""
SCALARS = {"int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "float32": ctypes.c_float, "float64": ctypes.c_double,
           "int64": ctypes.c_int64, "uint64": ctypes.c_uint64}
SMALL = {  # sizes not a multiple of any block, rows past the grid's last whole block
    "batch_sums": {"n": 1001, "batch": 3},
    "row_sums_2d": {"rows": 11, "cols": 301},
    "channel_stats": {"N": 2, "C": 3, "HW": 301},
    "positives_per_batch": {"batch": 3, "n": 1001},
    "row_peaks": {"height": 5, "width": 301, "valid": 3},
    "bias_grad": {"rows": 67, "cols": 45},
    "column_lows": {"rows": 67, "cols": 45},
    "stack_sum": {"w": 37, "h": 5, "count": 19},
    "bias_grad3": {"N": 3, "T": 11, "C": 45},
    "channel_squares": {"images": 2, "channels": 3, "hw": 301},
    "channel_means": {"N": 2, "C": 3, "HW": 301},
    "batch_norms": {"n": 1001, "batch": 3},
    "total_gs": {"n": 3001},
    "image_sum": {"width": 45, "height": 37},
    "masked_stats": {"cols": 45, "rows": 37, "pitch": 48},
    "field_energy": {"nx": 13, "ny": 5, "nz": 19},
    "style-channel_stats": {"images": 2, "channels": 3, "hw": 301},
    "style-bias_grad": {"batch": 67, "features": 45},
    "row_atomic": {"rows": 3, "cols": 1001},
    "count_odd": {"n": 3001},
    "sum_squares_tree": {"n": 3001},
    "dot": {"N": 3001},
    "reduce_atomic": {"n": 3001},
    "mse": {"n": 3001},
    "reduce1": {"n": 3001},
    "weighted_sum": {"count": 3001, "blocks": 5},
    "style-block_sum": {"n": 3001},
}
KERNELS = {
    **{spec.kernel_name: spec for spec in (BATCH_SUMS, ROW_SUMS_2D_BLOCKS, CHANNEL_STATS, POSITIVES_PER_BATCH,
                                           ROW_PEAKS_BELOW, BIAS_GRADIENT, COLUMN_LOWS, STACK_SUM, IMAGE_SUM_2D,
                                           MASKED_STATS_2D, ENERGY_3D, BIAS_GRADIENT_OVER_A_BATCH,
                                           CHANNEL_SQUARES_GRID_STRIDE, IMAGE_CHANNEL_MEANS, ROW_SUMS_BY_BLOCK_INDEX,
                                           BLOCK_TREE_COUNT, BLOCK_TREE_SQUARES, BLOCK_TREE_DYNAMIC, BLOCK_TREE_MSE,
                                           HARRIS_STRIDED_ATOMIC, DOT_BY_EXAMPLE,
                                           WEIGHTED_SUM)},
    # grid-stride loops on the grids their specs fix, a few blocks here so that the host runs them quickly
    "batch_norms": BATCH_NORMS_GRID_STRIDE.model_copy(update={"problem_size": [2, "batch"]}),
    "total_gs": TOTAL_ON_A_FIXED_GRID.model_copy(update={"problem_size": [3]}),
    **{f"style-{name}": load_spec(STYLES / f"{name}.cu", STYLES / f"{name}.yaml")
       for name in ("channel_stats", "bias_grad", "block_sum")},  # block_sum: a shared-memory tree per block
}


def build(source: str, kernel_name: str, directory: Path, defines: dict) -> ctypes.CDLL:
    """The kernel as host code with `kforge_launch(grid, block, args...)`: the blocks in turn, each block's threads
    at once, one host thread per CUDA thread."""
    kernel = find_kernel(source, kernel_name)
    parameters = [source[a:b].strip() for a, b in kernel.parameters(source)]
    names = [IDENTIFIER.findall(mask(p))[-1] for p in parameters]
    declared = "".join(", " + p for p in parameters)
    launcher = f"""
extern "C" void kforge_launch(const unsigned int *grid, const unsigned int *block{declared}) {{
    gridDim = {{grid[0], grid[1], grid[2]}}; blockDim = {{block[0], block[1], block[2]}};
    const unsigned int threads = block[0] * block[1] * block[2];
    for (unsigned int kforge_b = 0; kforge_b < grid[0] * grid[1] * grid[2]; ++kforge_b) {{
        pthread_barrier_init(&kforge_block, nullptr, threads);
        for (unsigned int w = 0; w < (threads + 31) / 32; ++w)
            pthread_barrier_init(&kforge_warp[w], nullptr, std::min(32u, threads - 32 * w));
        std::vector<std::thread> running;
        for (unsigned int t = 0; t < threads; ++t)
            running.emplace_back([=] {{
                blockIdx = {{kforge_b % grid[0], kforge_b / grid[0] % grid[1], kforge_b / (grid[0] * grid[1])}};
                threadIdx = {{t % block[0], t / block[0] % block[1], t / (block[0] * block[1])}};
                {kernel_name}({", ".join(names)});
            }});
        for (std::thread &thread : running) thread.join();
        pthread_barrier_destroy(&kforge_block);
        for (unsigned int w = 0; w < (threads + 31) / 32; ++w) pthread_barrier_destroy(&kforge_warp[w]);
    }}
}}
"""
    # a dynamic shared array (`extern __shared__ float s[];`) as a static one of the most a block may take, 48 KB
    source = re.sub(r"\bextern\s+__shared__\s+([A-Za-z_][\w ]*?)\s+([A-Za-z_]\w*)\s*\[\s*\]\s*;",
                    r"__shared__ \1 \2[49152 / sizeof(\1)];", source)
    return threaded_library(PRELUDE + source + launcher, directory, kernel_name, defines)


def launch(library: ctypes.CDLL, spec: KernelSpec, params: dict, seed: int) -> dict[str, np.ndarray]:
    """The kernel at `spec`'s sizes and launch geometry for `params`, on inputs drawn as the verifier draws them
    (outputs and in-place arrays from the same draw, so that both runs start alike), each array followed by its
    canary, in a child process stopped after two minutes."""
    grid, block = spec.launch_geometry(params)

    def work() -> dict[str, np.ndarray]:
        signal.alarm(120)
        arrays, arguments = {}, []
        for position, arg in enumerate(spec.args):
            if arg.is_array:
                count = math.prod(spec.shape_of(arg))
                values = draw(distribution_of(spec, arg), stream_key(seed, position), 0, count)
                if arg.effective_role == "out":
                    values = np.zeros(count, arg.dtype)
                held = np.concatenate([values, np.full(CANARY, 77, arg.dtype)])
                arrays[arg.name] = held
                arguments.append(ctypes.c_void_p(held.ctypes.data))
                library.kforge_hold(arguments[-1], ctypes.c_size_t(count * held.itemsize))
            else:
                arguments.append(SCALARS[arg.dtype](spec.scalar_of(arg, params).item()))
        library.kforge_launch((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), *arguments)
        return arrays
    return _in_child(work)


def _compared(spec: KernelSpec, got: dict, expected: dict, where: str) -> None:
    for arg in spec.args:
        if not arg.is_array:
            continue
        assert (got[arg.name][-CANARY:] == 77).all(), f"{arg.name} written past its end {where}"
        if arg.effective_role == "in":
            continue
        if got[arg.name].dtype.kind == "f":
            np.testing.assert_allclose(got[arg.name], expected[arg.name], rtol=1e-4, atol=1e-3,
                                       err_msg=f"{arg.name} {where}")
        else:
            np.testing.assert_array_equal(got[arg.name], expected[arg.name], err_msg=f"{arg.name} {where}")


def _configurations(candidate, launched: KernelSpec, baseline: dict) -> list[dict]:
    """The default, the smallest blocks the rewrite tunes with a point a thread, and the largest (of at most 256
    threads, which the host runs at once) with 4, where they meet the restrictions."""
    names = [name for name in launched.block_size_names if name in candidate.tune_params]
    found = [{**baseline, **candidate.params}]
    for ept, pick in ((1, min), (4, max)):
        found.append({**baseline, **candidate.params, "elements_per_thread": ept,
                      **{name: pick(v for v in candidate.tune_params[name] if v <= 256) for name in names}})
    return [config for config in found if launched.restrictions_hold(config) and
            math.prod(launched.launch_geometry(config)[1]) <= 256]


@needs_gxx
@pytest.mark.parametrize("name", list(KERNELS))
def test_the_reduction_gives_what_the_submitted_kernel_gives(tmp_path, name):
    spec = KERNELS[name]
    candidate = rules.apply("hierarchical_reduction", spec, spec.as_candidate())
    at_size = spec.with_sizes({**spec.sizes, **SMALL[name]})
    baseline = at_size.baseline_params()
    expected = launch(build(normalised(spec.source), spec.kernel_name, tmp_path, baseline), at_size, baseline, 3)
    _compared(at_size, expected, expected, "by the submitted kernel")
    launched = at_size.for_candidate(candidate)
    configurations = _configurations(candidate, launched, baseline)
    assert configurations
    for config in configurations:
        library = build(normalised(candidate.source), spec.kernel_name, tmp_path, config)
        _compared(at_size, launch(library, launched, config, 3), expected, f"at {config}")


@needs_gxx
def test_warp_shuffles_give_each_block_the_sum_harriss_interleaved_tree_gives(tmp_path):
    """One partial sum per block, the block size kept: the shuffles' order adds integers exactly as the tree."""
    spec = REDUCE_INTERLEAVED.with_sizes({"n": 3001})
    candidate = rules.apply("shuffle_reduction", spec, spec.as_candidate())
    baseline = {**spec.baseline_params(), **candidate.params}
    expected = launch(build(normalised(spec.source), spec.kernel_name, tmp_path, {}), spec, baseline, 3)
    library = build(normalised(candidate.source), spec.kernel_name, tmp_path, {})
    _compared(spec, launch(library, spec.for_candidate(candidate), baseline, 3), expected, "with shuffles")


@needs_gxx
def test_the_emulation_catches_a_block_adding_into_a_row_none_of_its_points_reached(tmp_path):
    """Without the flag, the band's rows past `valid` take an atomic of the identity at an address not allocated."""
    spec = ROW_PEAKS_BELOW
    candidate = rules.apply("hierarchical_reduction", spec, spec.as_candidate())
    source = normalised(candidate.source)
    assert "if (reached0) atomicMax(&peak[y], high0);" in source
    at_size = spec.with_sizes({**spec.sizes, **SMALL["row_peaks"]})
    config = {**at_size.baseline_params(), **candidate.params, "elements_per_thread": 1}
    launched = at_size.for_candidate(candidate)
    kept = build(source, spec.kernel_name, tmp_path, config)
    assert launch(kept, launched, config, 3)["peak"][3:].tolist() == [77] * CANARY
    library = build(source.replace("if (reached0) atomicMax", "atomicMax"), spec.kernel_name, tmp_path, config)
    with pytest.raises(EmulatedFault):
        launch(library, launched, config, 3)
