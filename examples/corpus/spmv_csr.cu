// y = A x for a sparse matrix in CSR form (row_ptr, col_idx, vals): one thread per row ("scalar CSR").
extern "C" __global__ void spmv_csr(float *y, const int *row_ptr, const int *col_idx, const float *vals,
                                    const float *x, int rows)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float sum = 0.0f;
        for (int j = row_ptr[r]; j < row_ptr[r + 1]; j++) {
            sum += vals[j] * x[col_idx[j]];
        }
        y[r] = sum;
    }
}
