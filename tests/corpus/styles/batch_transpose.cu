// Batched transpose (permute [b][m][n] -> [b][n][m]), the batch on the grid's z axis.
extern "C" __global__ void batch_transpose(float *dst, const float *src, unsigned batch, unsigned m, unsigned n)
{
    unsigned col = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned row = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned b = blockIdx.z;
    if (row < m && col < n && b < batch) {
        size_t base = (size_t)b * m * n;
        dst[base + (size_t)col * m + row] = src[base + (size_t)row * n + col];
    }
}
