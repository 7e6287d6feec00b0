// Count how often each bin index occurs in data. Every value of data is a valid bin (0 <= data[i] < bins),
// so it indexes hist directly; hist starts zeroed. One global atomicAdd per element.
extern "C" __global__ void histogram(unsigned int *hist, const int *data, int n, int bins)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        atomicAdd(&hist[data[i]], 1u);
    }
}
