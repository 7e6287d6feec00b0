// Sum of every row of a rows x cols matrix, one block per row. The block's partial sums live in dynamic
// shared memory, one float per thread (the launch passes blockDim.x * sizeof(float) bytes), and are
// reduced by halving (blockDim.x a power of two).
extern "C" __global__ void row_sum(float *sums, const float *matrix, int cols)
{
    extern __shared__ float partial[];
    const float *row = matrix + (size_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) sums[blockIdx.x] = partial[0];
}
