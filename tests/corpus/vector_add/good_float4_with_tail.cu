// Correct: four elements per thread through float4, with the last n % 4 elements done one by one.
extern "C" __global__ void vector_add(float *c, const float *a, const float *b, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    int quads = n / 4;
    if (i < quads) {
        float4 x = reinterpret_cast<const float4 *>(a)[i], y = reinterpret_cast<const float4 *>(b)[i];
        reinterpret_cast<float4 *>(c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    if (i < n - 4 * quads) c[4 * quads + i] = a[4 * quads + i] + b[4 * quads + i];
}
