// Sum of a float array: each block reduces its 256 (or fewer) elements in shared memory, then thread 0
// adds the block's sum to *total with one atomicAdd. blockDim.x must be a power of two, at most BLOCK.
#define BLOCK 256

extern "C" __global__ void block_sum(const float *in, float *total, int n)
{
    __shared__ float cache[BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    cache[tid] = (i < n) ? in[i] : 0.0f;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) cache[tid] += cache[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(total, cache[0]);
}
