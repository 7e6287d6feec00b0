// out = in^T for a rows x cols row-major matrix: one thread per element on a 2D grid. Reads are coalesced,
// writes are strided by rows.
extern "C" __global__ void transpose(float *out, const float *in, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        out[(size_t)c * rows + r] = in[(size_t)r * cols + c];
    }
}
