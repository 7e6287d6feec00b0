// Inclusive prefix sums of independent segments (one row of `in` each), one block per segment, plus each
// segment's total. The block walks its segment in chunks of blockDim.x elements: a Hillis-Steele scan of the
// chunk in shared memory, offset by the running total of the chunks before it.
extern "C" __global__ void segmented_scan(int *out, int *totals, const int *in, int seg)
{
    __shared__ int buf[1024];
    const int *src = in + (size_t)blockIdx.x * seg;
    int *dst = out + (size_t)blockIdx.x * seg;
    int carry = 0;
    for (int base = 0; base < seg; base += blockDim.x) {
        const int i = base + threadIdx.x;
        buf[threadIdx.x] = i < seg ? src[i] : 0;
        __syncthreads();
        for (int offset = 1; offset < blockDim.x; offset *= 2) {
            const int t = threadIdx.x >= offset ? buf[threadIdx.x - offset] : 0;
            __syncthreads();
            buf[threadIdx.x] += t;
            __syncthreads();
        }
        if (i < seg) dst[i] = carry + buf[threadIdx.x];
        carry += buf[blockDim.x - 1];
        __syncthreads();
    }
    if (threadIdx.x == 0) totals[blockIdx.x] = carry;
}
