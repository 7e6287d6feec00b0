// Add a linear ramp along z to a volume, in place: a 2D grid over (x, y), each thread marching through z.
extern "C" __global__ void add_depth_ramp(float *vol, int nx, int ny, int nz, float dz)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= nx || y >= ny) return;
    size_t plane = (size_t)nx * ny;
    size_t idx = (size_t)y * nx + x;
    for (int z = 0; z < nz; ++z, idx += plane)
        vol[idx] += z * dz;
}
