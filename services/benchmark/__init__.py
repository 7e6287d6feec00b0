"""Benchmark: compiles kernels with NVRTC and times them on the GPU its worker is pinned to."""
