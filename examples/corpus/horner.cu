// Evaluate one polynomial of degree `degree` at many points in double precision by Horner's rule:
// y[i] = c[0] + x[i] * (c[1] + x[i] * (... + x[i] * c[degree])).
extern "C" __global__ void horner(double *y, const double *x, const double *c, int n, int degree)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const double t = x[i];
        double acc = c[degree];
        for (int k = degree - 1; k >= 0; k--) {
            acc = acc * t + c[k];
        }
        y[i] = acc;
    }
}
