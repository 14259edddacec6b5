# gs_enable_cuda(): turns on nvcc in the calling directory with the project's settings
# (C++17 device code, the shared runtime, sm_80 and sm_90 unless the user chose others:
# "native" fails on a machine without a GPU) and finds the toolkit's libraries. A macro,
# so the CMAKE_CUDA_* settings land in the caller's scope, where enable_language needs them.
include_guard(DIRECTORY)
macro(gs_enable_cuda)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80;90")
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endmacro()
