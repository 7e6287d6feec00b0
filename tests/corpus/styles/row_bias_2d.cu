// out = in + bias[row] for a rows x cols row-major matrix, on a 2D grid (col along x, row along y).
#define IDX(r, c) ((r) * (cols) + (c))

extern "C" __global__ void add_row_bias(float *out, const float *in, const float *bias, int rows, int cols)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols)
        out[IDX(row, col)] = in[IDX(row, col)] + bias[row];
}
