// 5-point discrete Laplacian of u on a uniform grid; the boundary of lap is not written.
#define IDX(i, j) ((j) * nx + (i))

extern "C" __global__ void laplacian5(const float *u, float *lap, int nx, int ny, float inv_h2)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < 1 || j < 1 || i > nx - 2 || j > ny - 2) return;
    lap[IDX(i, j)] = (u[IDX(i - 1, j)] + u[IDX(i + 1, j)] + u[IDX(i, j - 1)] + u[IDX(i, j + 1)]
                      - 4.0f * u[IDX(i, j)]) * inv_h2;
}
