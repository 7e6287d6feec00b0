// kforge's <string.h> for NVRTC: memcpy and memset are NVRTC built-ins; this adds size_t and NULL.
#pragma once
#include <stddef.h>
