// y = A x for a row-major rows x cols matrix: one thread per row, a dot product in a loop.
extern "C" __global__ void gemv(float *y, const float *A, const float *x, int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float sum = 0.0f;
        for (int c = 0; c < cols; c++) {
            sum += A[(size_t)r * cols + c] * x[c];
        }
        y[r] = sum;
    }
}
