// Row-wise softmax of a rows x cols matrix, one block per row: the row's maximum, then the sum of
// exp(x - max), each reduced in shared memory (blockDim.x a power of two, at most 1024), then the outputs.
#define NEG_FLT_MAX (-3.402823466e+38f)

extern "C" __global__ void softmax_rows(float *out, const float *in, int cols)
{
    __shared__ float red[1024];
    const float *row = in + (size_t)blockIdx.x * cols;
    float *dst = out + (size_t)blockIdx.x * cols;
    const int tid = threadIdx.x;

    float m = NEG_FLT_MAX;
    for (int c = tid; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    red[tid] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) red[tid] = fmaxf(red[tid], red[tid + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();

    float sum = 0.0f;
    for (int c = tid; c < cols; c += blockDim.x) sum += expf(row[c] - m);
    red[tid] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    sum = red[0];

    for (int c = tid; c < cols; c += blockDim.x) dst[c] = expf(row[c] - m) / sum;
}
