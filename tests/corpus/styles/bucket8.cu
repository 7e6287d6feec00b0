// Bucket values of [-1, 1) into 8 equal-width bins with global int atomics; out-of-range values land in
// the end bins.
__device__ int bucket_of(float v)
{
    int b = (int)((v + 1.0f) * 4.0f);
    return b < 0 ? 0 : (b > 7 ? 7 : b);
}

extern "C" __global__ void bucket_counts(int *counts, const float *values, int num)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < num) {
        atomicAdd(&counts[bucket_of(values[idx])], 1);
    }
}
