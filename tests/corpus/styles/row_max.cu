// Largest value of each row, one thread per row, scanning the row with a while loop.
extern "C" __global__ void row_max(float *out, const float *in, unsigned rows, unsigned cols)
{
    unsigned row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float *p = in + (size_t)row * cols;
    float best = p[0];
    unsigned c = 1;
    while (c < cols) {
        best = fmaxf(best, p[c]);
        c++;
    }
    out[row] = best;
}
