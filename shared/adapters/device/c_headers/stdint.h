// kforge's <stdint.h> for NVRTC, which has no C library headers: CCCL's, which defines the same names globally there.
#pragma once
#include <cuda/std/cstdint>
