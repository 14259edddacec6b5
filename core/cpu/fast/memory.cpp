// Tuned allocation (fast.h): buffers of 2 MiB or more on huge pages. The reference is
// core/cpu/memory.cpp's 64-byte aligned block (CpuBackend::aligned_block).
#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/fast.h"

#if defined(__linux__)
#include <sys/mman.h>  // madvise(MADV_HUGEPAGE)
#endif

namespace gradsleuth::cpu::fast {

void* allocate_huge(size_t nbytes) {
  if (nbytes < CpuBackend::kHugeBytes) return nullptr;
  void* p = CpuBackend::aligned_block(nbytes, CpuBackend::kHugeBytes);
#ifdef MADV_HUGEPAGE
  madvise(p, nbytes, MADV_HUGEPAGE);  // a hint: the kernel may decline
#endif
  return p;
}

}  // namespace gradsleuth::cpu::fast
