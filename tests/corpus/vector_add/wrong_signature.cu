// Fault: n became a 64-bit integer, so the launch would pass 4 bytes where 8 are read.
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, long long n) {
    long long i = blockIdx.x * (long long)block_size_x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
