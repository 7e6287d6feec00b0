// 16-bin histogram of small integer labels: counts go to a per-block copy in shared memory first, then
// each block adds its 16 counts to the global bins. Needs blockDim.x >= NBINS.
#define NBINS 16

extern "C" __global__ void label_histogram(const int *vals, unsigned int *bins, int n)
{
    __shared__ unsigned int local[NBINS];
    if (threadIdx.x < NBINS) local[threadIdx.x] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[vals[i]], 1u);
    __syncthreads();
    if (threadIdx.x < NBINS) atomicAdd(&bins[threadIdx.x], local[threadIdx.x]);
}
