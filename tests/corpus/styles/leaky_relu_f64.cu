// Leaky ReLU on a double-precision buffer, in place: a do-while over the grid's stride.
extern "C" __global__ void leaky_relu_f64(double *x, int n, double slope)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int step = blockDim.x * gridDim.x;
    do {
        if (x[i] < 0.0) x[i] *= slope;
        i += step;
    } while (i < n);
}
