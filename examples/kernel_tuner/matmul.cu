// C = A x B for square n x n matrices, each thread block computing a (block_size_x * tile_size_x) by
// (block_size_y * tile_size_y) tile of C, each thread tile_size_x by tile_size_y elements of it, staging
// tiles of A and B in shared memory. block_size_x, block_size_y, tile_size_x and tile_size_y are defined per
// configuration by the tuner; a restriction in matmul.py keeps the staged tiles within 48 KiB of shared memory.
#define WIDTH (block_size_x * tile_size_x)

__global__ void matmul_kernel(float *C, const float *A, const float *B, int n) {
    __shared__ float sA[block_size_y * tile_size_y][WIDTH];
    __shared__ float sB[WIDTH][WIDTH];

    int tx = threadIdx.x, ty = threadIdx.y;
    int col0 = blockIdx.x * WIDTH + tx;
    int row0 = blockIdx.y * block_size_y * tile_size_y + ty;
    float sum[tile_size_y][tile_size_x] = {{0.0f}};

    for (int k0 = 0; k0 < n; k0 += WIDTH) {
        #pragma unroll
        for (int i = 0; i < tile_size_y; i++) {
            #pragma unroll
            for (int j = 0; j < tile_size_x; j++) {
                int row = row0 + i * block_size_y, k = k0 + tx + j * block_size_x;
                sA[ty + i * block_size_y][tx + j * block_size_x] = (row < n && k < n) ? A[row * n + k] : 0.0f;
            }
        }
        for (int r = ty; r < WIDTH; r += block_size_y) {
            #pragma unroll
            for (int j = 0; j < tile_size_x; j++) {
                int k = k0 + r, col = col0 + j * block_size_x;
                sB[r][tx + j * block_size_x] = (k < n && col < n) ? B[k * n + col] : 0.0f;
            }
        }
        __syncthreads();
        for (int k = 0; k < WIDTH; k++) {
            #pragma unroll
            for (int i = 0; i < tile_size_y; i++) {
                #pragma unroll
                for (int j = 0; j < tile_size_x; j++) {
                    sum[i][j] += sA[ty + i * block_size_y][k] * sB[k][tx + j * block_size_x];
                }
            }
        }
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < tile_size_y; i++) {
        #pragma unroll
        for (int j = 0; j < tile_size_x; j++) {
            int row = row0 + i * block_size_y, col = col0 + j * block_size_x;
            if (row < n && col < n) {
                C[row * n + col] = sum[i][j];
            }
        }
    }
}
