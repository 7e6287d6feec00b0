// C = A * B for square n x n row-major matrices, shared-memory tiles of block_size_x x block_size_y.
// Each thread computes tile_size_y outputs in y, so one block covers block_size_x x (block_size_y*tile_size_y).
extern "C" __global__ void matmul(float *C, const float *A, const float *B, int n) {
    __shared__ float sA[block_size_y * tile_size_y][block_size_x];
    __shared__ float sB[block_size_x][block_size_x];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * block_size_x + tx;
    int row0 = blockIdx.y * block_size_y * tile_size_y + ty;
    float acc[tile_size_y];
    #pragma unroll
    for (int t = 0; t < tile_size_y; t++) acc[t] = 0.0f;
    for (int k0 = 0; k0 < n; k0 += block_size_x) {
        #pragma unroll
        for (int t = 0; t < tile_size_y; t++) {
            int r = row0 + t * block_size_y;
            sA[ty + t * block_size_y][tx] = (r < n && k0 + tx < n) ? A[r * n + k0 + tx] : 0.0f;
        }
        for (int kk = ty; kk < block_size_x; kk += block_size_y) {
            sB[kk][tx] = (k0 + kk < n && col < n) ? B[(k0 + kk) * n + col] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int t = 0; t < tile_size_y; t++) {
            float sum = 0.0f;
            for (int k = 0; k < block_size_x; k++) sum += sA[ty + t * block_size_y][k] * sB[k][tx];
            acc[t] += sum;
        }
        __syncthreads();
    }
    #pragma unroll
    for (int t = 0; t < tile_size_y; t++) {
        int r = row0 + t * block_size_y;
        if (r < n && col < n) C[r * n + col] = acc[t];
    }
}
