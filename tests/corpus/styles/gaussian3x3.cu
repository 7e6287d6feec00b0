// 3x3 Gaussian blur (separable 1-2-1 weights, a 9-point stencil); the one-pixel border is left as it is.
extern "C" __global__ void gaussian3x3(float *dst, const float *src, int width, int height)
{
    const auto x = blockIdx.x * blockDim.x + threadIdx.x;
    const auto y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x == 0 || y == 0 || x >= width - 1 || y >= height - 1) return;
    const float w[3] = {0.25f, 0.5f, 0.25f};
    float acc = 0.0f;
    for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx)
            acc += w[dy + 1] * w[dx + 1] * src[(y + dy) * width + (x + dx)];
    dst[y * width + x] = acc;
}
