// Sum, minimum and maximum of an int32 array in one pass. Each thread accumulates over a grid-stride loop,
// each warp combines its threads with shuffles, and lane 0 of every warp adds its results with integer
// atomics (the sum as a 64-bit two's-complement value). The caller zeroes the outputs.
extern "C" __global__ void int_stats(long long *sum, int *min_out, int *max_out, const int *data, int n)
{
    long long s = 0;
    int lo = 2147483647, hi = -2147483647 - 1;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        const int v = data[i];
        s += v;
        lo = min(lo, v);
        hi = max(hi, v);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        s += __shfl_down_sync(0xffffffff, s, offset);
        lo = min(lo, __shfl_down_sync(0xffffffff, lo, offset));
        hi = max(hi, __shfl_down_sync(0xffffffff, hi, offset));
    }
    if (threadIdx.x % 32 == 0) {
        atomicAdd(reinterpret_cast<unsigned long long *>(sum), static_cast<unsigned long long>(s));
        atomicMin(min_out, lo);
        atomicMax(max_out, hi);
    }
}
