// One explicit time step of the 3D heat equation (7-point stencil). Boundary voxels of next are not written.
extern "C" __global__ void heat_step_3d(float *__restrict__ next, const float *__restrict__ cur, float alpha,
                                        int nx, int ny, int nz)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x > 0 && y > 0 && z > 0 && x < nx - 1 && y < ny - 1 && z < nz - 1) {
        long long sx = 1, sy = nx, sz = (long long)nx * ny;
        long long c = z * sz + y * sy + x;
        float lap = cur[c - sx] + cur[c + sx] + cur[c - sy] + cur[c + sy] + cur[c - sz] + cur[c + sz] - 6.0f * cur[c];
        next[c] = cur[c] + alpha * lap;
    }
}
