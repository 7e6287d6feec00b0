// One Jacobi sweep of the 2D Laplace equation: each interior point becomes the mean of its four neighbours.
// The boundary rows and columns are fixed (Dirichlet): the kernel never writes them.
extern "C" __global__ void jacobi2d(float *out, const float *in, int nx, int ny)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x > 0 && x < nx - 1 && y > 0 && y < ny - 1) {
        int i = y * nx + x;
        out[i] = 0.25f * (in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx]);
    }
}
