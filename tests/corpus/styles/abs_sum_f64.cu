// L1 norm of a double vector: a grid-stride while loop per thread, a warp shuffle reduction, and one
// double atomicAdd per warp. blockDim.x must be a multiple of 32.
extern "C" __global__ void abs_sum_f64(const double *x, double *out, long long n)
{
    double s = 0.0;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    const long long stride = (long long)blockDim.x * gridDim.x;
    while (i < n) {
        s += fabs(x[i]);
        i += stride;
    }
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_down_sync(0xffffffff, s, off);
    if ((threadIdx.x & 31) == 0)
        atomicAdd(out, s);
}
