// Fault: every 1000th element comes out NaN.
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) c[i] = i % 1000 == 999 ? __int_as_float(0x7fc00000) : a[i] + b[i];
}
