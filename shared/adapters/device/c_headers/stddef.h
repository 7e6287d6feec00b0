// kforge's <stddef.h> for NVRTC, which has no C library headers: size_t, ptrdiff_t, NULL and offsetof, from the
// compiler's own types and built-ins. Self-contained, as <limits.h> is.
#pragma once
typedef decltype(sizeof(0)) size_t;
typedef decltype(static_cast<char *>(0) - static_cast<char *>(0)) ptrdiff_t;
#ifndef NULL
#define NULL 0
#endif
#ifndef offsetof
#define offsetof(type, member) __builtin_offsetof(type, member)
#endif
