// Included before every kernel kforge compiles (--pre-include): the infinities and NaN that nvcc's implicit
// <cuda_runtime.h> brings in through the host's <math.h>, as constant expressions (glibc's are built-ins too),
// so that a kernel written for nvcc that uses them without an include compiles here unchanged. Not M_PI and
// its kin: kernels written for NVRTC, which lacks them, often declare their own.
#pragma once
#ifndef INFINITY
#define INFINITY __builtin_bit_cast(float, 0x7f800000U)
#endif
#ifndef NAN
#define NAN __builtin_bit_cast(float, 0x7fffffffU)
#endif
#ifndef HUGE_VALF
#define HUGE_VALF __builtin_bit_cast(float, 0x7f800000U)
#endif
#ifndef HUGE_VAL
#define HUGE_VAL __builtin_bit_cast(double, 0x7ff0000000000000ULL)
#endif
