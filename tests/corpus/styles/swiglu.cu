// SwiGLU activation of an MLP: out = silu(gate) * up, with silu(g) = g * sigmoid(g).
__device__ float sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

extern "C" __global__ void swiglu(float *__restrict__ out, const float *__restrict__ gate,
                                  const float *__restrict__ up, int n)
{
    int gid = blockIdx.x * blockDim.x + threadIdx.x;
    if (gid < n) {
        float g = __ldg(&gate[gid]);
        out[gid] = g * sigmoid(g) * __ldg(up + gid);
    }
}
