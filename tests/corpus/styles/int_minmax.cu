// Smallest and largest value of an int array, one atomicMin and one atomicMax per element. The caller
// initialises *lo above and *hi below any possible value.
extern "C" __global__ void int_minmax(const int *data, int *lo, int *hi, int n)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) return;
    int v = data[idx];
    atomicMin(lo, v);
    atomicMax(hi, v);
}
