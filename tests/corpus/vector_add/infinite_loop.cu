// Fault: thread 0 waits for a clock that never runs backwards, so the kernel never ends.
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i == 0) {
        long long start = clock64();
        while (clock64() >= start) {}
    }
    if (i < n) c[i] = a[i] + b[i];
}
