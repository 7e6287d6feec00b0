// Transpose of an int matrix with 2D grid-stride loops (size_t indices), so a small grid covers it.
extern "C" __global__ void transpose_i32(int *out, const int *in, int rows, int cols)
{
    for (size_t r = blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += blockDim.y * gridDim.y)
        for (size_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += blockDim.x * gridDim.x)
            out[c * rows + r] = in[r * cols + c];
}
