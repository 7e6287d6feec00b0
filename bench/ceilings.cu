// Hand-written kernels for bench/ceilings.py: the usual fast structure of each memory-bound shape of the corpus,
// written by hand, to learn what share of a device copy the shape can reach at a given size. Row lengths are
// multiples of 4 floats here (the bench picks the sizes), so the float4 paths need no scalar remainder.

// y = A x, a warp per row (blockDim = 32 x rows per block), float4 loads.
extern "C" __global__ void gemv_warp(float *y, const float *A, const float *x, int rows, int cols)
{
    const int r = blockIdx.x * blockDim.y + threadIdx.y;
    if (r >= rows) return;
    const float4 *a = reinterpret_cast<const float4 *>(A + (size_t)r * cols);
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float s = 0.0f;
#pragma unroll 4
    for (int c = threadIdx.x; c < cols / 4; c += 32) {
        const float4 v = __ldg(a + c), w = __ldg(x4 + c);
        s += v.x * w.x + v.y * w.y + v.z * w.z + v.w * w.w;
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) y[r] = s;
}

// The block's sum of `s`, in thread 0 (blockDim.x a multiple of 32).
__device__ float block_sum(float s)
{
    __shared__ float warps[32];
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = s;
    __syncthreads();
    s = threadIdx.x < blockDim.x / 32 ? warps[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32)
        for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// y = A x, a block per row, float4 loads.
extern "C" __global__ void gemv_block(float *y, const float *A, const float *x, int rows, int cols)
{
    const float4 *a = reinterpret_cast<const float4 *>(A + (size_t)blockIdx.x * cols);
    const float4 *x4 = reinterpret_cast<const float4 *>(x);
    float s = 0.0f;
#pragma unroll 4
    for (int c = threadIdx.x; c < cols / 4; c += blockDim.x) {
        const float4 v = __ldg(a + c), w = __ldg(x4 + c);
        s += v.x * w.x + v.y * w.y + v.z * w.z + v.w * w.w;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) y[blockIdx.x] = s;
}

// Row sums, a block per row, float4 loads.
extern "C" __global__ void row_sum_block(float *sums, const float *matrix, int cols)
{
    const float4 *row = reinterpret_cast<const float4 *>(matrix + (size_t)blockIdx.x * cols);
    float s = 0.0f;
#pragma unroll 4
    for (int c = threadIdx.x; c < cols / 4; c += blockDim.x) {
        const float4 v = __ldg(row + c);
        s += (v.x + v.y) + (v.z + v.w);
    }
    s = block_sum(s);
    if (threadIdx.x == 0) sums[blockIdx.x] = s;
}

// Row softmax, a block per row holding its row in registers as V float4 per thread (cols == 4 V blockDim.x).
template <int V> __device__ void softmax_in_registers(float *out, const float *in, int cols)
{
    __shared__ float partial[32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const float4 *row = reinterpret_cast<const float4 *>(in + (size_t)blockIdx.x * cols);
    float4 *dst = reinterpret_cast<float4 *>(out + (size_t)blockIdx.x * cols);
    float4 v[V];
    float m = -3.402823466e+38f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        v[k] = __ldg(row + threadIdx.x + k * blockDim.x);
        m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
    }
    for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) partial[warp] = m;
    __syncthreads();
    m = partial[0];
    for (int w = 1; w < warps; w++) m = fmaxf(m, partial[w]);
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < V; k++) {
        v[k] = make_float4(expf(v[k].x - m), expf(v[k].y - m), expf(v[k].z - m), expf(v[k].w - m));
        s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) partial[warp] = s;
    __syncthreads();
    s = 0.0f;
    for (int w = 0; w < warps; w++) s += partial[w];
    const float inv = 1.0f / s;
#pragma unroll
    for (int k = 0; k < V; k++)
        dst[threadIdx.x + k * blockDim.x] = make_float4(v[k].x * inv, v[k].y * inv, v[k].z * inv, v[k].w * inv);
}
extern "C" __global__ void softmax_v1(float *out, const float *in, int cols) { softmax_in_registers<1>(out, in, cols); }
extern "C" __global__ void softmax_v2(float *out, const float *in, int cols) { softmax_in_registers<2>(out, in, cols); }

// The 7-point Laplacian marching along z: a thread per (x, y) walks `zc` planes, keeping the planes below and at
// its point in registers.
extern "C" __global__ void laplace3d_march(float *__restrict__ out, const float *__restrict__ in, int nx, int ny,
                                           int nz, int zc)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < 1 || y < 1 || x >= nx - 1 || y >= ny - 1) return;
    const size_t plane = (size_t)nx * ny;
    const int z0 = max(1, (int)blockIdx.z * zc), z1 = min(nz - 1, (int)blockIdx.z * zc + zc);
    if (z0 >= z1) return;
    size_t i = (size_t)z0 * plane + (size_t)y * nx + x;
    float below = __ldg(in + i - plane), here = __ldg(in + i);
    for (int z = z0; z < z1; z++, i += plane) {
        const float above = __ldg(in + i + plane);
        out[i] = __ldg(in + i - 1) + __ldg(in + i + 1) + __ldg(in + i - nx) + __ldg(in + i + nx) + below + above
                 - 6.0f * here;
        below = here;
        here = above;
    }
}

// One Jacobi sweep marching along y: a thread per column walks `yc` rows, keeping the rows above and at its point.
extern "C" __global__ void jacobi2d_march(float *__restrict__ out, const float *__restrict__ in, int nx, int ny,
                                          int yc)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x < 1 || x >= nx - 1) return;
    const int first = (int)(blockIdx.y * blockDim.y + threadIdx.y) * yc;
    const int y0 = max(1, first), y1 = min(ny - 1, first + yc);
    if (y0 >= y1) return;
    int i = y0 * nx + x;
    float up = __ldg(in + i - nx), mid = __ldg(in + i);
    for (int y = y0; y < y1; y++, i += nx) {
        const float down = __ldg(in + i + nx);
        out[i] = 0.25f * (__ldg(in + i - 1) + __ldg(in + i + 1) + up + down);
        up = mid;
        mid = down;
    }
}

// out[i] = src[idx[i]], four per thread: 128-bit index loads and stores, the lookups 4 bytes each.
extern "C" __global__ void gather4(float4 *__restrict__ out, const float *__restrict__ src,
                                   const int4 *__restrict__ idx, int n4)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        const int4 j = __ldg(idx + i);
        out[i] = make_float4(__ldg(src + j.x), __ldg(src + j.y), __ldg(src + j.z), __ldg(src + j.w));
    }
}
