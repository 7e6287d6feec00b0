// Correct: a grid-stride loop, so any grid covers any n.
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}
