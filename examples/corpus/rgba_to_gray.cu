// Convert an 8-bit RGBA image to float luminance (ITU-R BT.601 weights), one thread per pixel on a 2D grid.
extern "C" __global__ void rgba_to_gray(float *gray, const unsigned char *rgba, int height, int width)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        const unsigned char *p = rgba + 4 * (y * width + x);
        gray[y * width + x] = 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2];
    }
}
