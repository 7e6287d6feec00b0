// Count the elements greater than a threshold.
extern "C" __global__ void count_above(const float *__restrict__ v, unsigned int *count, float threshold, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && v[i] > threshold)
        atomicAdd(count, 1u);
}
