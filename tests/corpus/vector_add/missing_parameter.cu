// Fault: b was dropped from the parameters (c = 2a): the signature no longer matches args.
extern "C" __global__ void vector_add(float *c, const float *a, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) c[i] = a[i] + a[i];
}
