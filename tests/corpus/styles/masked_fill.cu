// x[r][c] = value wherever mask[r][c] is set (attention masking), in place. 2D grid-stride loops, so any
// grid covers the matrix.
extern "C" __global__ void masked_fill(float *x, const int *mask, float value, int rows, int cols)
{
    for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += blockDim.y * gridDim.y) {
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += blockDim.x * gridDim.x) {
            size_t k = (size_t)r * cols + c;
            if (mask[k]) x[k] = value;
        }
    }
}
