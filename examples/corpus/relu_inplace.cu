// ReLU applied in place to an activation buffer.
extern "C" __global__ void relu_inplace(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = x[i] > 0.0f ? x[i] : 0.0f;
    }
}
