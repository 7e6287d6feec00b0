// Reorder a batch of feature maps from NCHW to NHWC: one thread per input element, its coordinates
// recovered from the flat index.
extern "C" __global__ void nchw_to_nhwc(float *out, const float *in, int N, int C, int H, int W)
{
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int total = N * C * H * W;
    if (idx >= total) return;
    int w = idx % W;
    int h = (idx / W) % H;
    int c = (idx / (W * H)) % C;
    int n = idx / (W * H * C);
    out[((n * H + h) * W + w) * C + c] = in[idx];
}
