// 5x5 "same" convolution with zero padding: the output has the image's size, and filter taps that fall outside
// the image add nothing (the usual `if (inside) sum += ...` guard).
#define FILTER_RADIUS 2
#define FILTER_WIDTH (2 * FILTER_RADIUS + 1)

extern "C" __global__ void conv_same_pad(const float *__restrict__ image, const float *__restrict__ filter,
                                         float *__restrict__ result, int width, int height)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col >= width || row >= height) return;
    float acc = 0.0f;
    for (int fy = 0; fy < FILTER_WIDTH; ++fy) {
        for (int fx = 0; fx < FILTER_WIDTH; ++fx) {
            const int in_row = row - FILTER_RADIUS + fy;
            const int in_col = col - FILTER_RADIUS + fx;
            if (in_row >= 0 && in_row < height && in_col >= 0 && in_col < width) {
                acc += filter[fy * FILTER_WIDTH + fx] * image[in_row * width + in_col];
            }
        }
    }
    result[row * width + col] = acc;
}
