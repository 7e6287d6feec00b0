// Mean brightness of a pitched float image: each pixel adds its share, pixel / (width * height), with one
// atomic; threads outside the image leave at once.
__global__ void image_mean(const float *__restrict__ img, float *mean, int width, int height, int pitch)
{
    const int px = blockIdx.x * blockDim.x + threadIdx.x;
    const int py = blockIdx.y * blockDim.y + threadIdx.y;
    if (px >= width || py >= height) return;
    const float scale = 1.0f / ((float)width * (float)height);
    atomicAdd(mean, img[py * pitch + px] * scale);
}
