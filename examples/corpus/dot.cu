// result += sum(x[i] * y[i]). A fixed grid strides over the vectors; each warp reduces its partial sums
// with shuffles, warp 0 combines the block's warps and one atomicAdd per block adds it to the result,
// which the caller zeroes first. Any block size that is a multiple of 32 works.
extern "C" __global__ void dot(float *result, const float *x, const float *y, int n)
{
    __shared__ float warp_sums[32];
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        sum += x[i] * y[i];
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        sum += __shfl_down_sync(0xffffffff, sum, offset);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        sum = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2) {
            sum += __shfl_down_sync(0xffffffff, sum, offset);
        }
        if (lane == 0) atomicAdd(result, sum);
    }
}
