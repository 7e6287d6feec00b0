// Convert float32 activations to float16 for storage. No cuda_fp16.h: the conversion is one PTX cvt,
// round to nearest even, and the halves are kept as raw 16-bit words.
__device__ __forceinline__ unsigned short to_half_bits(float f)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

extern "C" __global__ void f32_to_f16(unsigned short *dst, const float *src, int count)
{
    int i = threadIdx.x + blockIdx.x * blockDim.x;
    if (i < count)
        dst[i] = to_half_bits(src[i]);
}
