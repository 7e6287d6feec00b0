// Fault: uses a as scratch space, leaving the caller's input changed.
extern "C" __global__ void vector_add(float *c, float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) { a[i] += b[i]; c[i] = a[i]; }
}
