// Batch normalisation's statistics over an NCHW tensor: each channel's sum and sum of squares, the channel taken
// from blockIdx.y and the image from blockIdx.z, every element added with two atomics.
#ifndef THREADS
#define THREADS 256
#endif

extern "C" __global__ void channel_stats(const float *x, float *sum, float *sum_sq, int channels, int hw)
{
    const int i = blockIdx.x * THREADS + threadIdx.x;
    const int c = blockIdx.y;
    const int n = blockIdx.z;
    if (i >= hw) return;
    const float v = x[((size_t)n * channels + c) * hw + i];
    atomicAdd(&sum[c], v);
    atomicAdd(&sum_sq[c], v * v);
}
