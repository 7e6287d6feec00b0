// Sum of n floats: each block reduces its slice in shared memory and adds its partial sum atomically.
// The output must start at zero, which kforge's generated inputs guarantee for role: out.
extern "C" __global__ void reduce_sum(float *total, const float *x, int n) {
    __shared__ float partial[block_size_x];
    int tid = threadIdx.x;
    float sum = 0.0f;
    for (int i = blockIdx.x * block_size_x + tid; i < n; i += gridDim.x * block_size_x) {
        sum += x[i];
    }
    partial[tid] = sum;
    __syncthreads();
    for (int stride = block_size_x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(total, partial[0]);
}
