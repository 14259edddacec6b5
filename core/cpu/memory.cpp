// CPU backend, memory: the aligned host allocator, host copies, copy (with dtype
// casts over any strides) and fill. The backend's singleton lives here too.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#if defined(__GLIBC__)
#include <malloc.h>  // mallopt, see CpuBackend()
#endif

#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"

namespace gradsleuth {
namespace cpu {

int num_threads() {
#ifdef _OPENMP
  static int n = omp_get_max_threads();
  return n;
#else
  return 1;
#endif
}

// Performance: glibc starts with a 128 KiB trim threshold and raises it only
// once a large block has been freed. Until then, freeing a graph of small
// tensors hands the top of the heap back to the OS and the next graph faults
// it in again page by page (bench_overhead: 0.19 -> 1.7 us per op). Start at the
// values glibc converges to anyway (mmap threshold 32 MiB), with a trim
// threshold of 256 MiB: a CNN step at batch 64 frees ~100 MiB of activations
// and im2col buffers at once, and with glibc's 64 MiB the heap top was handed
// back and re-faulted every step (a third of a Fashion-MNIST CNN step in page
// faults; 2.5x slower). Left alone when the user tunes malloc through GLIBC_TUNABLES.
CpuBackend::CpuBackend() {
#if defined(__GLIBC__) && defined(M_TRIM_THRESHOLD)
  if (!std::getenv("GLIBC_TUNABLES")) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
  }
#endif
}

// Every buffer is 64-byte aligned (a cache line, an AVX-512 register); with tuned kernels
// on, buffers of 2 MiB or more come from fast::allocate_huge (2 MiB aligned, huge pages).
// Performance (docs/benchmarks.md, "Engine"): we over-allocate with malloc and align by
// hand, keeping the malloc'd pointer just below the block. std::aligned_alloc takes glibc's
// memalign path, which skips the per-thread cache (a quarter of the instructions of a
// 1-element add) and, for blocks on the heap, kept taking fresh pages instead of reusing
// freed ones.
// Sanitizer builds: no slack. Each buffer is exactly nbytes (posix_memalign), so
// ASan reports the first byte read or written past the end; the hand-aligned
// block below ends up to `align` bytes before its malloc'd end, which hid overruns.
#if defined(__SANITIZE_ADDRESS__)
#define GS_CPU_EXACT_ALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS_CPU_EXACT_ALLOC 1
#endif
#endif

void* CpuBackend::aligned_block(size_t nbytes, size_t align) {
  void* raw = std::malloc(std::max<size_t>(nbytes, 1) + align);
  if (!raw) out_of_memory(nbytes);
  // malloc's result is aligned for max_align_t (16 bytes), so rounding raw + 8
  // up to `align` leaves room for the raw pointer below the block, and the
  // block still ends inside the allocation.
  static_assert(alignof(std::max_align_t) >= 2 * sizeof(void*));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(raw) + sizeof(void*) + align - 1) & ~uintptr_t{align - 1};
  reinterpret_cast<void**>(a)[-1] = raw;
  return reinterpret_cast<void*>(a);
}

void* CpuBackend::allocate(size_t nbytes) {
#ifdef GS_CPU_EXACT_ALLOC
  void* p = nullptr;
  if (posix_memalign(&p, kAlign, std::max<size_t>(nbytes, 1)) != 0) out_of_memory(nbytes);
  return p;
#endif
  if (cpu_fast_kernels())
    if (void* p = fast::allocate_huge(nbytes)) return p;
  return aligned_block(nbytes, kAlign);
}

void CpuBackend::deallocate(void* p, size_t) {
#ifdef GS_CPU_EXACT_ALLOC
  std::free(p);
  return;
#endif
  if (p) std::free(static_cast<void**>(p)[-1]);
}

void CpuBackend::out_of_memory(size_t nbytes) {
  throw Error("allocate", "out of host memory allocating " + std::to_string(nbytes) + " bytes");
}

void CpuBackend::copy_to_host(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }

void CpuBackend::copy_from_host(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }

void CpuBackend::copy(const Tensor& out, const Tensor& in) {
  if (out.dtype() == in.dtype() && out.is_contiguous() && in.is_contiguous()) {
    std::memcpy(out.raw_data(), in.raw_data(), out.nbytes());
    return;
  }
  dispatch_dtype(out.dtype(), [&](auto o) {
    using TO = decltype(o);
    dispatch_dtype(in.dtype(), [&](auto i) {
      using TI = decltype(i);
      for_each_row<2>(out.shape(), {&out, &in}, [&](char** p, int64_t n, const int64_t* st) {
        if (st[0] == sizeof(TO) && st[1] == sizeof(TI)) {
          TO* po = reinterpret_cast<TO*>(p[0]);
          const TI* pi = reinterpret_cast<const TI*>(p[1]);
          for (int64_t k = 0; k < n; ++k) po[k] = static_cast<TO>(pi[k]);
        } else {
          for (int64_t k = 0; k < n; ++k) *at<TO>(p[0], k, st[0]) = static_cast<TO>(*at<TI>(p[1], k, st[1]));
        }
      });
    });
  });
}

void CpuBackend::fill(const Tensor& out, double value) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(value);
    for_each_row<1>(out.shape(), {&out}, [&](char** p, int64_t n, const int64_t* st) {
      if (st[0] == sizeof(T))
        std::fill_n(reinterpret_cast<T*>(p[0]), n, v);
      else
        for (int64_t k = 0; k < n; ++k) *at<T>(p[0], k, st[0]) = v;
    });
  });
}

}  // namespace cpu

// The CPU backend, behind the layer that runs its kernels in float32 for float16/bfloat16
// tensors (reduced_float.cpp).
Backend& cpu_backend() {
  static cpu::CpuBackend b;
  static const std::unique_ptr<Backend> with_16bit = cpu::with_reduced_floats(b);
  return *with_16bit;
}

}  // namespace gradsleuth
