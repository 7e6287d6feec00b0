// Mark the voxels of a density volume at or above an iso level (1) and the rest (0).
extern "C" __global__ void iso_mask(unsigned char *mask, const float *density, float iso,
                                    unsigned nx, unsigned ny, unsigned nz)
{
    unsigned ix = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned iy = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned iz = blockIdx.z * blockDim.z + threadIdx.z;
    if (ix < nx && iy < ny && iz < nz) {
        unsigned id = ix + nx * (iy + ny * iz);
        mask[id] = density[id] >= iso ? 1 : 0;
    }
}
