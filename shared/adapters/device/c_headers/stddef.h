// kforge's <stddef.h> for NVRTC, which has no C library headers: ptrdiff_t, NULL and offsetof, from the
// compiler's own types and built-ins (size_t is an NVRTC built-in). Self-contained, as <limits.h> is.
#pragma once
#if __cplusplus >= 201103L
typedef decltype(static_cast<char *>(0) - static_cast<char *>(0)) ptrdiff_t;
#else
typedef long ptrdiff_t;  // C++03 has no decltype; NVRTC's LP64 pointer difference
#endif
#ifndef NULL
#define NULL 0
#endif
#ifndef offsetof  // the classic pointer form, not a constant expression: NVRTC 13.0 has no __builtin_offsetof
#define offsetof(type, member) ((size_t)&reinterpret_cast<const volatile char &>(((type *)0)->member))
#endif
