// Fault: each thread stages its sum in shared memory and stores a neighbour warp's slot without waiting
// for it (no __syncthreads): what it reads depends on which warp ran first.
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    __shared__ float staged[block_size_x];
    int i = blockIdx.x * block_size_x + threadIdx.x;
    staged[threadIdx.x] = i < n ? a[i] + b[i] : 0.0f;
    int j = (threadIdx.x + 32) % block_size_x;
    int k = blockIdx.x * block_size_x + j;
    if (k < n) c[k] = staged[j];
}
