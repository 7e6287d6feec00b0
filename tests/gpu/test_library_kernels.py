"""Kernels as users write them with CUDA's libraries and vector types, tuned on a real GPU as whole jobs run
embedded (SQLite, the in-process bus): CUB's BlockLoad and BlockReduce (BlockLoad reaches thrust's macro-built
includes), WMMA's tensor cores (<mma.h>), and pointers to float4 and __half2 with their specs inferred from the
signature. Each job must complete with every configuration measured, its outputs checked against the
submitted kernel's at every timed result, and its outputs right against numpy where the test reads them back."""
import numpy as np
import pytest

from kforge.api import build_spec
from shared.domain.events import ConfigFailed, ConfigMeasured, JobCompleted, TuningCompleted
from tests.gpu.embedded import embedded_runtime, run_job

pytestmark = pytest.mark.gpu
JOB_TIMEOUT_S = 300

BLOCK_LOAD_ROW_SUM = """#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>

// One block per row: BlockLoad stages the row through shared memory (warp-transposed), BlockReduce sums it.
extern "C" __global__ void row_sum_cub(float *sums, const float *matrix, int cols)
{
    typedef cub::BlockLoad<float, block_size_x, elements_per_thread, cub::BLOCK_LOAD_WARP_TRANSPOSE> Load;
    typedef cub::BlockReduce<float, block_size_x> Reduce;
    __shared__ union { typename Load::TempStorage load; typename Reduce::TempStorage reduce; } temp;
    float items[elements_per_thread];
    Load(temp.load).Load(matrix + (size_t)blockIdx.x * cols, items);
    __syncthreads();
    float sum = Reduce(temp.reduce).Sum(items);
    if (threadIdx.x == 0) sums[blockIdx.x] = sum;
}
"""
WMMA_GEMM = """#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

// C = A B for row-major A (m x k) and column-major B (k x n) in half, C in float: a warp per 16 x 16 tile of C.
extern "C" __global__ void gemm_wmma(float *c, const half *a, const half *b, int m, int n, int k)
{
    int tile_n = blockIdx.x, tile_m = blockIdx.y * blockDim.y + threadIdx.y;
    if (tile_m * 16 >= m) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int kk = 0; kk < k; kk += 16) {
        wmma::load_matrix_sync(fa, a + (size_t)tile_m * 16 * k + kk, k);
        wmma::load_matrix_sync(fb, b + (size_t)tile_n * 16 * k + kk, k);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + (size_t)tile_m * 16 * n + tile_n * 16, acc, n, wmma::mem_row_major);
}
"""
FLOAT4_SCALE = """extern "C" __global__ void scale4(float4 *out, const float4 *__restrict__ in, int n4)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = in[i];
        out[i] = make_float4(2.0f * v.x, 2.0f * v.y, 2.0f * v.z, 2.0f * v.w);
    }
}
"""
HALF2_AXPY = """#include <cuda_fp16.h>
extern "C" __global__ void axpy_h2(__half2 *y, const __half2 *x, int n2)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n2) y[i] = __hfma2(__float2half2_rn(0.5f), x[i], y[i]);
}
"""
SPECS = {
    "row_sum_cub": lambda: build_spec(BLOCK_LOAD_ROW_SUM, {
        "kernel_name": "row_sum_cub", "sizes": {"rows": 8192, "cols": 1024}, "problem_size": ["rows"],
        "grid_div_x": [1], "args": [{"name": "sums", "dtype": "float32", "shape": ["rows"], "role": "out"},
                                    {"name": "matrix", "dtype": "float32", "shape": ["rows", "cols"]},
                                    {"name": "cols", "dtype": "int32", "value": "cols"}],
        "params": {"block_size_x": 128, "elements_per_thread": 8},
        "tune_params": {"block_size_x": [64, 128, 256, 512], "elements_per_thread": [2, 4, 8, 16]},
        "restrictions": ["block_size_x * elements_per_thread == 1024"], "strategy": {"name": "tune"}}),
    "gemm_wmma": lambda: build_spec(WMMA_GEMM, {
        "kernel_name": "gemm_wmma", "sizes": {"m": 1024, "n": 1024, "k": 1024}, "problem_size": ["n / 16", "m / 16"],
        "grid_div_x": [1], "args": [{"name": "c", "dtype": "float32", "shape": ["m", "n"], "role": "out"},
                                    {"name": "a", "dtype": "float16", "shape": ["m", "k"], "range": [-1, 1]},
                                    {"name": "b", "dtype": "float16", "shape": ["n", "k"], "range": [-1, 1]},
                                    {"name": "m", "dtype": "int32", "value": "m"},
                                    {"name": "n", "dtype": "int32", "value": "n"},
                                    {"name": "k", "dtype": "int32", "value": "k"}],
        "params": {"block_size_x": 32, "block_size_y": 1},
        "tune_params": {"block_size_x": [32], "block_size_y": [1, 2, 4, 8]}, "strategy": {"name": "tune"}}),
    "scale4": lambda: build_spec(FLOAT4_SCALE, sizes={"n4": 1 << 22}, strategy="tune"),
    "axpy_h2": lambda: read_and_written(build_spec(HALF2_AXPY, sizes={"n2": 1 << 22}, strategy="tune"), "y"),
}


def read_and_written(spec, name: str):
    """The inferred spec with `name` made inout, as its note asks of a pointer the kernel reads first."""
    args = [{**a.model_dump(exclude_none=True), "role": "inout"} if a.name == name else a.model_dump(exclude_none=True)
            for a in spec.args]
    return spec.model_validate({**spec.model_dump(), "args": args})


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    with embedded_runtime(tmp_path_factory.mktemp("kforge-library")) as rt:
        yield rt


@pytest.mark.parametrize("name", SPECS)
def test_a_library_or_vector_kernel_is_tuned_with_every_configuration_measured(name, embedded):
    events = run_job(embedded, SPECS[name](), "library-kernels", JOB_TIMEOUT_S)
    failed = [f"{e.params}: {e.stage}: {e.reason[:200]}" for e in events if isinstance(e, ConfigFailed)]
    measured = [e for e in events if isinstance(e, ConfigMeasured)]
    tuned = [e for e in events if isinstance(e, TuningCompleted)]
    print(name, [(e.params, round(e.median_ms, 4)) for e in measured], failed, tuned and tuned[-1].best_params)
    assert any(isinstance(e, JobCompleted) for e in events), [e.type for e in events][-5:]
    assert measured and not failed and tuned and tuned[-1].best_time_ms > 0


def test_block_load_and_block_reduce_sum_the_rows_numpy_sums():
    """The cub kernel's sums themselves, read back: BlockLoad's warp-transposed staging loses no element."""
    import cupy as cp

    from shared.adapters.device.compiler import compile_kernel

    rows, cols, block, items = 64, 1024, 128, 8
    kernel = compile_kernel(BLOCK_LOAD_ROW_SUM, "row_sum_cub", {"block_size_x": block, "elements_per_thread": items},
                            [], "sm_90")
    matrix = cp.asarray(np.random.default_rng(3).uniform(-1, 1, (rows, cols)).astype(np.float32))
    sums = cp.zeros(rows, dtype=cp.float32)
    module = cp.cuda.function.Module()
    module.load(kernel.cubin)
    module.get_function(kernel.lowered_name)((rows,), (block,), (sums, matrix, np.int32(cols)))
    np.testing.assert_allclose(sums.get(), matrix.get().astype(np.float64).sum(axis=1), rtol=1e-4, atol=1e-4)
