// Dequantise int8 weights to float: w = q * scale. The block size is a compile-time constant, used in the
// index, and the kernel must be launched with exactly BLOCK_SIZE threads per block.
#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif

extern "C" __global__ void dequant_int8(float *w, const signed char *q, float scale, int n)
{
    int i = blockIdx.x * BLOCK_SIZE + threadIdx.x;
    if (i < n)
        w[i] = (float)q[i] * scale;
}
