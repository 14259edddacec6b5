// core/host_device.h: GS_HOST_DEVICE marks a function of a header that both backends compile:
// __host__ __device__ under nvcc, nothing in plain C++ (the CPU backend, the CUDA emulator).
#pragma once

#if defined(__CUDACC__)
#define GS_HOST_DEVICE __host__ __device__
#else
#define GS_HOST_DEVICE
#endif
