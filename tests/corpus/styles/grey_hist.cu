#include <cstdint>
// 256-bin histogram of an 8-bit grey frame, a thread per pixel on a 2D grid.
extern "C" __global__ void grey_hist(const uint8_t *frame, uint32_t *hist, int w, int h)
{
    int col = threadIdx.x + blockIdx.x * blockDim.x;
    int row = threadIdx.y + blockIdx.y * blockDim.y;
    if (col < w && row < h) {
        const uint8_t v = frame[(size_t)row * w + col];
        atomicAdd(&hist[v], 1u);
    }
}
