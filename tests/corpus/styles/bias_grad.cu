// The bias's gradient in a linear layer's backward pass: each output column's gradient summed over the batch,
// a thread per element of dy adding it into its column with one atomic.
__global__ void bias_grad(const float *__restrict__ dy, float *db, int batch, int features)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < batch && col < features)
        atomicAdd(&db[col], dy[row * features + col]);
}
