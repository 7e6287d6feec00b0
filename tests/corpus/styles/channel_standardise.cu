// Standardise an NCHW batch with per-channel statistics: a thread per pixel of an image (blockIdx.y picks the
// image) walks the channels through pointers to its image.
extern "C" __global__ void standardise_channels(const float *in, float *out, const float *mean,
                                                const float *inv_std, int channels, int hw)
{
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    const int n = blockIdx.y;
    if (p >= hw) return;
    const float *src = in + (size_t)n * channels * hw;
    float *dst = out + (size_t)n * channels * hw;
    for (int c = 0; c < channels; ++c)
        dst[(size_t)c * hw + p] = (src[(size_t)c * hw + p] - mean[c]) * inv_std[c];
}
