"""Reconciling a rewrite's parameters with its code: what is renamed, kept and dropped."""
from services.generator.names import reconcile

BLOCKDIM_2D = """extern "C" __global__ void scale(float *out, const float *in, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = 2.0f * in[y * w + x];
}"""
LAUNCH = ["block_size_x", "block_size_y"]


def test_block_sizes_stay_although_the_code_reads_blockdim():
    fixed = reconcile(BLOCKDIM_2D, {"block_size_x": [16, 32], "block_size_y": [4, 8]}, LAUNCH)
    assert fixed.tune_params == {"block_size_x": [16, 32], "block_size_y": [4, 8]} and fixed.dropped == ()


def test_a_name_the_grid_divisors_read_stays_and_one_nothing_reads_is_dropped():
    fixed = reconcile(BLOCKDIM_2D, {"block_size_x": [32], "elements_per_thread": [1, 2], "unused": [1, 2]}, LAUNCH,
                      launch_reads={"elements_per_thread"})
    assert set(fixed.tune_params) == {"block_size_x", "elements_per_thread"} and fixed.dropped == ("unused",)


def test_a_launch_name_spelt_otherwise_in_the_code_is_renamed_to_the_launch_name():
    fixed = reconcile(BLOCKDIM_2D.replace("blockDim.x", "BLOCK_SIZE_X"), {"block_size_x": [32]}, LAUNCH)
    assert "BLOCK_SIZE_X" not in fixed.source and fixed.renames == {"BLOCK_SIZE_X": "block_size_x"}
