"""The GPU edge both GPU services build on: NVRTC compilation (no GPU needed), probing a device, and
the spawned process that owns a device and is replaced when a kernel breaks it."""
