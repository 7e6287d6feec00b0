// Included before every kernel kforge compiles (--pre-include): what nvcc's implicit <cuda_runtime.h> brings
// in through the host's <math.h> (INFINITY, NAN, HUGE_VAL, M_PI and its kin), so that a kernel written for
// nvcc that uses them without an include compiles here unchanged.
#pragma once
#include <math.h>
