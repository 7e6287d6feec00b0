// dst = src^T for a height x width row-major matrix (dst is width x height). Reads through the read-only
// cache; writes are strided.
#define IDX(r, c, ld) ((r) * (ld) + (c))

extern "C" __global__ void transpose_naive(const float *__restrict__ src, float *__restrict__ dst, int height, int width)
{
    int ix = blockIdx.x * blockDim.x + threadIdx.x;   // column of src
    int iy = blockIdx.y * blockDim.y + threadIdx.y;   // row of src
    if (ix >= width || iy >= height) return;
    dst[IDX(ix, iy, height)] = __ldg(&src[IDX(iy, ix, width)]);
}
