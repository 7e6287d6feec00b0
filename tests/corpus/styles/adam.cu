// One Adam optimiser step (no bias correction), updating the parameters and both moments in place.
extern "C" __global__ void adam_step(float *param, const float *grad, float *m, float *v,
                                     float lr, float beta1, float beta2, float eps, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = grad[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        param[i] -= lr * m[i] / (sqrtf(v[i]) + eps);
    }
}
