// Fault: the barrier between loading a tile and reading it is missing, so warps read shared memory that
// other warps have not written yet.
// C = A * B for square n x n row-major matrices, tiled in shared memory and in registers.
// A block of block_size_x x block_size_y threads computes a (block_size_y*tile_size_y) x (block_size_x*tile_size_x)
// tile of C; each thread computes tile_size_y x tile_size_x outputs, strided by the block size so that
// neighbouring threads touch neighbouring addresses. K advances in steps of block_size_k.
#ifndef block_size_k
#define block_size_k block_size_x
#endif
extern "C" __global__ void matmul(float *C, const float *A, const float *B, int n) {
    constexpr int rows = block_size_y * tile_size_y, cols = block_size_x * tile_size_x;
    constexpr int threads = block_size_x * block_size_y;
    __shared__ float sA[rows][block_size_k];
    __shared__ float sB[block_size_k][cols];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * block_size_x + tx;
    const int row0 = blockIdx.y * rows, col0 = blockIdx.x * cols;
    float acc[tile_size_y][tile_size_x];
    #pragma unroll
    for (int y = 0; y < tile_size_y; y++)
        #pragma unroll
        for (int x = 0; x < tile_size_x; x++) acc[y][x] = 0.0f;
    for (int k0 = 0; k0 < n; k0 += block_size_k) {
        for (int i = tid; i < rows * block_size_k; i += threads) {
            int r = i / block_size_k, c = i % block_size_k;
            sA[r][c] = (row0 + r < n && k0 + c < n) ? A[(row0 + r) * n + k0 + c] : 0.0f;
        }
        for (int i = tid; i < block_size_k * cols; i += threads) {
            int r = i / cols, c = i % cols;
            sB[r][c] = (k0 + r < n && col0 + c < n) ? B[(k0 + r) * n + col0 + c] : 0.0f;
        }
        // (no __syncthreads() here: warps read tiles other warps are still loading)
        #pragma unroll
        for (int k = 0; k < block_size_k; k++) {
            float a[tile_size_y], b[tile_size_x];
            #pragma unroll
            for (int y = 0; y < tile_size_y; y++) a[y] = sA[ty + y * block_size_y][k];
            #pragma unroll
            for (int x = 0; x < tile_size_x; x++) b[x] = sB[k][tx + x * block_size_x];
            #pragma unroll
            for (int y = 0; y < tile_size_y; y++)
                #pragma unroll
                for (int x = 0; x < tile_size_x; x++) acc[y][x] += a[y] * b[x];
        }
        __syncthreads();
    }
    #pragma unroll
    for (int y = 0; y < tile_size_y; y++) {
        int r = row0 + ty + y * block_size_y;
        #pragma unroll
        for (int x = 0; x < tile_size_x; x++) {
            int c = col0 + tx + x * block_size_x;
            if (r < n && c < n) C[r * n + c] = acc[y][x];
        }
    }
}
