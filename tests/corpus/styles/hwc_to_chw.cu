// Interleaved (HWC) to planar (CHW) for an int-valued multi-channel image: x and y over the pixels, one
// grid layer (blockIdx.z) per channel.
extern "C" __global__ void hwc_to_chw(int *chw, const int *hwc, int H, int W, int C)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int c = blockIdx.z;
    if (x < W && y < H && c < C)
        chw[(c * H + y) * W + x] = hwc[(y * W + x) * C + c];
}
