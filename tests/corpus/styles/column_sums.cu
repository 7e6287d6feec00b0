// Sum of each column of a row-major matrix: one thread per column (neighbouring threads read neighbouring
// addresses), accumulated in double and stored as float.
extern "C" __global__ void column_sums(const float *data, float *colsum, int nrows, int ncols)
{
    unsigned j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < ncols) {
        double acc = 0.0;
        for (unsigned i = 0; i < nrows; ++i)
            acc += data[i * ncols + j];
        colsum[j] = (float)acc;
    }
}
