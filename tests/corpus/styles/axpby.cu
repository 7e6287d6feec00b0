// y = alpha * x + beta * y over a long vector, in place in y. Grid-stride loop with 64-bit indices.
extern "C" __global__ void axpby(const float * __restrict__ x, float * __restrict__ y,
                                 float alpha, float beta, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x) {
        y[i] = fmaf(alpha, x[i], beta * y[i]);
    }
}
