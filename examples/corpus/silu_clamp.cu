// SiLU (x times its sigmoid) of an activation buffer, clamped to [-bound, bound], written as code built with
// nvcc often is: C++ library headers, std:: math, a size_t count and a grid-stride loop.
#include <algorithm>
#include <cmath>
#include <cstddef>

extern "C" __global__ void silu_clamp(float *y, const float *x, float bound, std::size_t n)
{
    const std::size_t stride = static_cast<std::size_t>(blockDim.x) * gridDim.x;
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        const float silu = v / (1.0f + std::exp(-v));
        y[i] = std::min(std::max(silu, -bound), bound);
    }
}
