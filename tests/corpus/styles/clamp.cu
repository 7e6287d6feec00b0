// Clamp every value of a buffer to [lo, hi], in place. Each thread walks the array with a while loop.
extern "C" __global__ void clamp_values(float *data, unsigned n, float lo, float hi)
{
    unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned stride = blockDim.x * gridDim.x;
    while (idx < n) {
        float v = data[idx];
        data[idx] = v < lo ? lo : (v > hi ? hi : v);
        idx += stride;
    }
}
