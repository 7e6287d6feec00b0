// Brightness/contrast on a float image whose rows are `pitch` elements apart (pitch >= width, padded rows
// as cudaMallocPitch gives them). Only the width x height pixels are touched; the padding is left alone.
extern "C" __global__ void brightness_contrast(float *img, int width, int height, int pitch, float gain, float offset)
{
    int ix = blockIdx.x * blockDim.x + threadIdx.x;
    int iy = blockIdx.y * blockDim.y + threadIdx.y;
    if (ix >= width || iy >= height) return;
    float v = img[iy * pitch + ix] * gain + offset;
    img[iy * pitch + ix] = fminf(fmaxf(v, 0.0f), 1.0f);
}
