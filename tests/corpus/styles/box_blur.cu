// 5x5 box blur (RADIUS 2): each interior pixel becomes the mean of its neighbourhood; pixels closer than
// RADIUS to an edge are not written.
#define RADIUS 2

extern "C" __global__ void box_blur(const float *in, float *out, int w, int h)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (col < RADIUS || row < RADIUS || col >= w - RADIUS || row >= h - RADIUS) return;
    float sum = 0.0f;
    for (int r = row - RADIUS; r <= row + RADIUS; r++)
        for (int c = col - RADIUS; c <= col + RADIUS; c++)
            sum += in[r * w + c];
    out[row * w + col] = sum / ((2 * RADIUS + 1) * (2 * RADIUS + 1));
}
