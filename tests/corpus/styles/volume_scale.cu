// Multiply every voxel of a volume by s, in place, one thread per voxel on a 3D grid.
extern "C" __global__ void volume_scale(float *vol, float s, int nx, int ny, int nz)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < nx && y < ny && z < nz)
        vol[(z * ny + y) * nx + x] *= s;
}
