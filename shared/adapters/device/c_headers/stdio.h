// kforge's <stdio.h> for NVRTC: a kernel's printf is an NVRTC built-in, so there is nothing to declare.
#pragma once
