// Sum of each row of a row-major matrix, one thread per row.
extern "C" __global__ void row_sums(const float *m, float *sums, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float s = 0.0f;
        for (int c = 0, k = r * cols; c < cols; ++c, ++k)
            s += m[k];
        sums[r] = s;
    }
}
