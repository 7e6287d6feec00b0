// A "valid" 2D convolution (cross-correlation, as deep-learning frameworks define it) of an image with a
// k x k filter: out[y][x] = sum over i, j of image[y + i][x + j] * filt[i][j]. One thread per output.
extern "C" __global__ void conv2d(float *out, const float *image, const float *filt, int height, int width, int k)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int out_w = width - k + 1, out_h = height - k + 1;
    if (x < out_w && y < out_h) {
        float sum = 0.0f;
        for (int i = 0; i < k; i++) {
            for (int j = 0; j < k; j++) {
                sum += image[(y + i) * width + x + j] * filt[i * k + j];
            }
        }
        out[y * out_w + x] = sum;
    }
}
