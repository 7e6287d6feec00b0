// Softmax of each row, one thread per row: the row's max, the sum of exponentials, then the outputs.
#define IDX(r, c) ((r) * (cols) + (c))

__device__ float max_of_row(const float *x, int r, int cols)
{
    float m = x[IDX(r, 0)];
    for (int c = 1; c < cols; ++c)
        m = x[IDX(r, c)] > m ? x[IDX(r, c)] : m;
    return m;
}

extern "C" __global__ void softmax_naive(float *y, const float *x, int rows, int cols)
{
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < rows) {
        float mx = max_of_row(x, row, cols);
        float denom = 0.0f;
        for (int c = 0; c < cols; ++c)
            denom += expf(x[IDX(row, c)] - mx);
        for (int c = 0; c < cols; ++c)
            y[IDX(row, c)] = expf(x[IDX(row, c)] - mx) / denom;
    }
}
