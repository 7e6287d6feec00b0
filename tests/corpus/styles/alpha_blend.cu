// Composite a foreground over a background with a per-pixel alpha matte.
extern "C" __global__ void alpha_blend(float *dst, const float *fg, const float *bg, const float *alpha,
                                       unsigned width, unsigned height)
{
    unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) return;
    unsigned p = y * width + x;
    float a = alpha[p];
    dst[p] = a * fg[p] + (1.0f - a) * bg[p];
}
