"""The GPU edge both GPU services build on: NVRTC compilation (no GPU needed), probing a device, the
spawned process that owns a device and is replaced when a kernel breaks it (GpuProcess, kept warm by
WarmProcess, which also remembers that there is no device), and the session it serves (GpuSession)."""
