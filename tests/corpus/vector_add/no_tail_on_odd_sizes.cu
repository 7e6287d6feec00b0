// Fault: four elements per thread, but the last n % 4 are never written (right when n is a multiple of 4).
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (4 * i + 3 < n)
        for (int k = 0; k < 4; k++) c[4 * i + k] = a[4 * i + k] + b[4 * i + k];
}
