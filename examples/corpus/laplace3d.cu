// 7-point Laplacian of a 3D field on a 3D grid of threads; boundary points are not written.
extern "C" __global__ void laplace3d(float *out, const float *in, int nx, int ny, int nz)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < 1 || y < 1 || z < 1 || x >= nx - 1 || y >= ny - 1 || z >= nz - 1) return;
    size_t plane = (size_t)nx * ny;
    size_t i = (size_t)z * plane + (size_t)y * nx + x;
    out[i] = in[i - 1] + in[i + 1] + in[i - nx] + in[i + nx] + in[i - plane] + in[i + plane] - 6.0f * in[i];
}
