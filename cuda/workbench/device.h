// cuda/workbench/device.h: what the workbench's .cu files share: CUDA (or the emulator) via
// cuda/compat.h, the build's namespace (gradsleuth::workbench::emu or ::gpu), a float4 that works in
// both builds, and the per-family launchers that run.cu dispatches to.
#pragma once
#include "cuda/compat.h"
#include "workbench/workbench.h"

#if GS_CUDA_EMU
#define GS_WB_NS emu
#else
#define GS_WB_NS gpu
#endif

namespace gradsleuth::workbench::GS_WB_NS {

// Four floats loaded or stored as one 16-byte access (float4 under nvcc). The address must be
// 16-byte aligned: a multiple of 4 floats from the start of a cudaMalloc buffer.
#if GS_CUDA_EMU
struct alignas(16) f4 {
  float x, y, z, w;
};
#else
using f4 = float4;
#endif

// Launches version `version` of one family on device buffers: in[i] are the inputs in the
// order of Problem::inputs, out the output. Returns the launch error (cudaGetLastError).
cudaError_t launch_matmul(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream);
cudaError_t launch_softmax(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream);
cudaError_t launch_reduce(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream);
cudaError_t launch_layernorm(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream);
cudaError_t launch_gelu(int version, const float* const* in, float* out, const Shape& s, cudaStream_t stream);

// Releases the cuBLAS handle of matmul version 7 (before cudaDeviceReset).
void release_cublas();

inline unsigned ceil_div(int64_t n, int64_t d) { return static_cast<unsigned>((n + d - 1) / d); }

}  // namespace gradsleuth::workbench::GS_WB_NS
