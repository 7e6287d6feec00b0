// Mean filter for image denoising: each output pixel is the average of the pixels of its 5x5 neighbourhood that
// lie inside the image, so pixels near the border average fewer neighbours.
#define RADIUS 2

extern "C" __global__ void mean_filter_valid(const float *input, float *output, int width, int height)
{
    const int px = blockIdx.x * blockDim.x + threadIdx.x;
    const int py = blockIdx.y * blockDim.y + threadIdx.y;
    if (px >= width || py >= height) return;

    float total = 0.0f;
    int n = 0;
    for (int oy = -RADIUS; oy <= RADIUS; ++oy) {
        for (int ox = -RADIUS; ox <= RADIUS; ++ox) {
            const int sx = px + ox;
            const int sy = py + oy;
            if (sx < 0 || sx >= width || sy < 0 || sy >= height) continue;
            total += input[sy * width + sx];
            ++n;
        }
    }
    output[py * width + px] = total / (float)n;
}
