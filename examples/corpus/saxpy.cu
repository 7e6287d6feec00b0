// y = a*x + y, the BLAS classic, in place in y. A grid-stride loop: correct for any grid and any n.
extern "C" __global__ void saxpy(int n, float a, const float *x, float *y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
