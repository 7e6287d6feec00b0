// kforge's <stdlib.h> for NVRTC: abs, labs, llabs, malloc and free are NVRTC built-ins (device-side malloc
// included); this adds size_t and NULL. <cuda.h> includes it.
#pragma once
#include <stddef.h>
