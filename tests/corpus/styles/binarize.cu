// Threshold an 8-bit grayscale image to black and white.
extern "C" __global__ void binarize(unsigned char *out, const unsigned char *in, int w, int h, int thresh)
{
    int x = threadIdx.x + blockIdx.x * blockDim.x;
    int y = threadIdx.y + blockIdx.y * blockDim.y;
    if (x < w && y < h) {
        int i = y * w + x;
        out[i] = in[i] > thresh ? 255 : 0;
    }
}
