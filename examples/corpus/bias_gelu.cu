// y = gelu(x + b) with a bias per column, the tanh approximation of GELU (as in GPT-2), on a 2D grid:
// x runs along a row, y over the rows.
__device__ float gelu(float v)
{
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
}

extern "C" __global__ void bias_gelu(float *y, const float *x, const float *b, int rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < rows && c < cols) {
        y[r * cols + c] = gelu(x[r * cols + c] + b[c]);
    }
}
