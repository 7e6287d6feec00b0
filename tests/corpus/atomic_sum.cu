// Sum of n floats, one atomicAdd per element: the order in which the additions land changes from launch to
// launch, so the float total differs from itself in its last bits. The total starts at zero, as kforge's
// outputs do. tests/gpu/test_self_spread.py baselines and verifies it with no tolerance set by hand.
extern "C" __global__ void atomic_sum(float *total, const float *x, int n) {
    int i = blockIdx.x * block_size_x + threadIdx.x;
    if (i < n) atomicAdd(total, x[i]);
}
