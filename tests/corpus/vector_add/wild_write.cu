// Fault: writes far outside c for every thread past the first half.
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) c[i < n / 2 ? i : i + 64 * n] = a[i] + b[i];
}
