// Layer normalisation over the last dimension, one block per row (blockDim.x a power of two, at most 1024):
// y = (x - mean) * rstd * gamma + beta, with rstd = 1 / sqrt(var + eps). The row's mean and rstd are
// written too, as the backward pass needs them.
__device__ float block_sum(float v, float *red)
{
    const int tid = threadIdx.x;
    red[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (tid < s) red[tid] += red[tid + s];
        __syncthreads();
    }
    const float total = red[0];
    __syncthreads();
    return total;
}

extern "C" __global__ void layernorm(float *y, float *mean, float *rstd, const float *x, const float *gamma,
                                     const float *beta, int cols, float eps)
{
    __shared__ float red[1024];
    const int r = blockIdx.x;
    const float *row = x + (size_t)r * cols;
    float *out = y + (size_t)r * cols;

    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    const float mu = block_sum(s, red) / cols;

    float sq = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float d = row[c] - mu;
        sq += d * d;
    }
    const float rs = rsqrtf(block_sum(sq, red) / cols + eps);

    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = (row[c] - mu) * rs * gamma[c] + beta[c];
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
}
