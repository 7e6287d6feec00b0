// Transpose written from the output's side, double precision: each thread computes one element of the
// transposed matrix, reading it across the input (so neighbouring threads read a row of the input apart).
extern "C" __global__ void transpose_gather(double *at, const double *a, unsigned rows, unsigned cols)
{
    unsigned r = blockIdx.x * blockDim.x + threadIdx.x;   // row of at, i.e. column of a
    unsigned c = blockIdx.y * blockDim.y + threadIdx.y;   // column of at, i.e. row of a
    if (r >= cols || c >= rows)
        return;
    at[(size_t)c * cols + r] = a[(size_t)r * rows + c];
}
