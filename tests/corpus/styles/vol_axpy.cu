// out = w * a + b over two volumes, with an indexing macro and 64-bit offsets.
#define IDX3(i, j, k) (((long long)(k) * ny + (j)) * nx + (i))

extern "C" __global__ void vol_axpy(float *__restrict__ out, const float *__restrict__ a,
                                    const float *__restrict__ b, float w, int nx, int ny, int nz)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= nx || j >= ny || k >= nz) return;
    out[IDX3(i, j, k)] = fmaf(w, a[IDX3(i, j, k)], b[IDX3(i, j, k)]);
}
