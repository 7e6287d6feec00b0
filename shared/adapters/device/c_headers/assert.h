// kforge's <assert.h> for NVRTC, which has no C library headers: assert() as CUDA's device runtime provides it
// (__assertfail reports the failed condition and traps), or nothing under NDEBUG. Self-contained, as <limits.h> is.
#pragma once
#undef assert
#ifdef NDEBUG
#define assert(condition) ((void)0)
#else
#define assert(condition) ((condition) ? (void)0 : __assertfail(#condition, __FILE__, __LINE__, __func__, sizeof(char)))
#endif
