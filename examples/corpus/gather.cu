// out[i] = src[idx[i]]: an embedding-style lookup. Every index is valid (0 <= idx[i] < m).
extern "C" __global__ void gather(float *out, const float *src, const int *idx, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = src[idx[i]];
    }
}
