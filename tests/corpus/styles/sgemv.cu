// y = alpha * A x, A an M x N row-major matrix, one thread per row (BLAS-style argument order).
extern "C" __global__ void sgemv_rowmajor(int M, int N, float alpha, const float *__restrict__ A,
                                          const float *__restrict__ x, float *__restrict__ y)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M) return;
    const float *a = A + (size_t)row * N;
    float acc = 0.f;
    for (int j = 0; j < N; j++)
        acc = fmaf(__ldg(a + j), __ldg(x + j), acc);
    y[row] = alpha * acc;
}
