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
// nvcc's implicit <cuda_runtime.h> also brings in the host's <cmath>, where CUDA adds device overloads, so a
// kernel written for nvcc calls std::sqrt, std::fmax or std::isnan with no include. NVRTC declares these
// functions (every overload) in the global namespace only; std gets the same functions, so a kernel's `using
// namespace std;` finds each once. std::min and std::max are <algorithm>'s, but nvcc kernels use them too;
// CUDA's global min and max overloads serve them (kforge's <algorithm> adds CCCL's templates beside them).
namespace std {
using ::abs; using ::fabs; using ::sqrt; using ::cbrt; using ::exp; using ::exp2; using ::expm1; using ::log;
using ::log2; using ::log10; using ::log1p; using ::pow; using ::sin; using ::cos; using ::tan; using ::asin;
using ::acos; using ::atan; using ::atan2; using ::sinh; using ::cosh; using ::tanh; using ::asinh; using ::acosh;
using ::atanh; using ::floor; using ::ceil; using ::round; using ::trunc; using ::rint; using ::nearbyint;
using ::lround; using ::llround; using ::lrint; using ::llrint; using ::fmod; using ::remainder; using ::remquo;
using ::fma; using ::fmin; using ::fmax; using ::fdim; using ::hypot; using ::copysign; using ::erf; using ::erfc;
using ::tgamma; using ::lgamma; using ::isnan; using ::isinf; using ::isfinite; using ::signbit; using ::ldexp;
using ::frexp; using ::modf; using ::ilogb; using ::logb; using ::scalbn; using ::scalbln; using ::nextafter;
using ::min; using ::max;
}
