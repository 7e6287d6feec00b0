// ||x||^2: every thread accumulates its share of the grid-stride loop, then adds it with one atomicAdd.
extern "C" __global__ void sum_of_squares(const float *x, float *result, int n)
{
    float acc = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        acc = fmaf(x[i], x[i], acc);
    atomicAdd(result, acc);
}
