// Fault: thread 0 spins forever (volatile, so the compiler keeps the loop).
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    volatile int spinning = 1;
    if (i == 0) while (spinning) {}
    if (i < n) c[i] = a[i] + b[i];
}
