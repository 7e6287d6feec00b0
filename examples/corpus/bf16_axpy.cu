// y = a*x + y in bfloat16 (an optimiser's update of bf16 weights), in place in y, computed in float.
#include <cuda_bf16.h>

extern "C" __global__ void bf16_axpy(int n, __nv_bfloat16 a, const __nv_bfloat16 *x, __nv_bfloat16 *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = __float2bfloat16(__bfloat162float(a) * __bfloat162float(x[i]) + __bfloat162float(y[i]));
    }
}
