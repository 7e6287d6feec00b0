// Sobel gradient magnitude of a grayscale image; the one-pixel border of mag is left alone.
__device__ __forceinline__ float at(const float *img, int x, int y, int w)
{
    return img[y * w + x];
}

extern "C" __global__ void sobel_magnitude(float *mag, const float *img, int w, int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= 1 && x < w - 1 && y >= 1 && y < h - 1) {
        float gx = at(img, x + 1, y - 1, w) + 2.0f * at(img, x + 1, y, w) + at(img, x + 1, y + 1, w)
                 - at(img, x - 1, y - 1, w) - 2.0f * at(img, x - 1, y, w) - at(img, x - 1, y + 1, w);
        float gy = at(img, x - 1, y + 1, w) + 2.0f * at(img, x, y + 1, w) + at(img, x + 1, y + 1, w)
                 - at(img, x - 1, y - 1, w) - 2.0f * at(img, x, y - 1, w) - at(img, x + 1, y - 1, w);
        mag[y * w + x] = sqrtf(gx * gx + gy * gy);
    }
}
