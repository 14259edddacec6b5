// cuda/emu/runtime.cpp: the emulated CUDA runtime: errors, one H100-like device, a registry of
// allocations (for pointer and copy-direction checks), streams, events, and launch validation.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/format.h"
#include "cuda/emu/internal.h"

struct CUstream_st {
  unsigned flags = 0;
};
struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  std::chrono::steady_clock::time_point when;
};

namespace gs_emu {
namespace {

constexpr size_t kTotalGlobalMem = 80ull << 30;
constexpr size_t kSharedPerBlock = 48u << 10;
constexpr size_t kSharedOptin = 232448;  // 227 KiB, as on H100

struct Alloc {
  size_t size;
  bool device;
  void* raw;          // what malloc returned: the red zone before the allocation starts here
  size_t accessible;  // bytes a kernel may touch (set_accessible_size); size by default
  size_t red_after;   // red zone after the allocation
};

std::mutex g_mu;  // guards everything below (the launch itself runs under g_launch_mu)
std::recursive_mutex g_launch_mu;
std::map<uintptr_t, Alloc> g_allocs;
size_t g_device_bytes = 0;
std::set<CUstream_st*> g_streams;
std::set<CUevent_st*> g_events;
std::map<const void*, int> g_max_dyn_smem;
std::map<const void*, std::string> g_names;
cudaError_t g_sticky = cudaSuccess;
thread_local cudaError_t t_last = cudaSuccess;
void* g_dyn_smem = nullptr;
int g_device = 0;
std::string g_last_report;

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}

// The sticky error left by a faulted kernel, if any (every later call returns it, as on a GPU).
cudaError_t sticky() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_sticky;
}

bool find_locked(const void* p, Allocation* out, bool allow_end = false) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = g_allocs.upper_bound(addr);
  if (it == g_allocs.begin()) return false;
  --it;
  const uintptr_t end = it->first + it->second.size;
  if (addr < end || (allow_end && addr == end)) {
    if (out) *out = Allocation{reinterpret_cast<const void*>(it->first), it->second.size, it->second.device};
    return true;
  }
  return false;
}

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "(invalid cudaMemcpyKind)";
}

// Checks that [p, p+count) is memory of the expected side; prints a diagnostic otherwise.
bool check_side(const char* call, const char* which, const void* p, size_t count, bool want_device,
                cudaMemcpyKind kind) {
  Allocation a;
  const bool found = find_locked(p, &a);
  const bool is_dev = found && a.device;
  if (want_device != is_dev) {
    std::fprintf(stderr,
                 "gs_emu: %s(..., %s): %s %p is %s, but %s needs %s memory there. cudaMemcpy(dst, src, bytes, kind) "
                 "copies src to dst: check the argument order and the kind.\n",
                 call, kind_name(kind), which, p, is_dev ? "device memory (cudaMalloc)" : "not device memory",
                 kind_name(kind), want_device ? "device" : "host");
    return false;
  }
  if (found) {
    const size_t left = a.size - (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(a.base));
    if (count > left) {
      std::fprintf(stderr,
                   "gs_emu: %s: %s %p: %zu bytes requested but only %zu bytes remain in its allocation (base %p, %zu "
                   "bytes); check the byte count (elements * sizeof(T)).\n",
                   call, which, p, count, left, a.base, a.size);
      return false;
    }
  }
  return true;
}

cudaError_t do_memcpy(const char* call, void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (cudaError_t s = sticky()) return fail(s);
  if (count == 0) return cudaSuccess;
  if (!dst || !src) {
    std::fprintf(stderr, "gs_emu: %s: null %s pointer\n", call, dst ? "src" : "dst");
    return fail(cudaErrorInvalidValue);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = check_side(call, "dst", dst, count, false, kind) && check_side(call, "src", src, count, false, kind);
      break;
    case cudaMemcpyHostToDevice:
      ok = check_side(call, "dst", dst, count, true, kind) && check_side(call, "src", src, count, false, kind);
      break;
    case cudaMemcpyDeviceToHost:
      ok = check_side(call, "dst", dst, count, false, kind) && check_side(call, "src", src, count, true, kind);
      break;
    case cudaMemcpyDeviceToDevice:
      ok = check_side(call, "dst", dst, count, true, kind) && check_side(call, "src", src, count, true, kind);
      break;
    case cudaMemcpyDefault: {
      Allocation a;
      ok = (!find_locked(dst, &a) || check_side(call, "dst", dst, count, a.device, kind)) &&
           (!find_locked(src, &a) || check_side(call, "src", src, count, a.device, kind));
      break;
    }
    default:
      std::fprintf(stderr, "gs_emu: %s: invalid cudaMemcpyKind %d\n", call, static_cast<int>(kind));
      return fail(cudaErrorInvalidMemcpyDirection);
  }
  if (!ok) return fail(cudaErrorInvalidValue);
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t do_memset(const char* call, void* p, int value, size_t count) {
  if (cudaError_t s = sticky()) return fail(s);
  if (count == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  Allocation a;
  if (!p || !find_locked(p, &a) || !a.device) {
    std::fprintf(stderr, "gs_emu: %s: %p is not device memory (cudaMalloc)\n", call, p);
    return fail(cudaErrorInvalidValue);
  }
  if (!check_side(call, "ptr", p, count, true, cudaMemcpyDefault)) return fail(cudaErrorInvalidValue);
  std::memset(p, value, count);
  return cudaSuccess;
}

bool valid_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
  std::lock_guard<std::mutex> lock(g_mu);
  return g_streams.count(s) != 0;
}

std::string dim_str(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

}  // namespace

bool is_device_pointer(const void* p) {
  std::lock_guard<std::mutex> lock(g_mu);
  Allocation a;
  return find_locked(p, &a) && a.device;
}

bool find_allocation(const void* p, Allocation* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  return find_locked(p, out);
}

Stats stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  Stats s = internal::g_stats;
  s.device_bytes_in_use = g_device_bytes;
  return s;
}
void reset_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  internal::g_stats = Stats{};
}

void set_kernel_name(const void* kernel, const char* name) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_names[kernel] = name;
}

void* dynamic_shared_memory() { return g_dyn_smem; }

std::string last_check_report() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_last_report;
}

void set_accessible_size(const void* base, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(base));
  if (it != g_allocs.end()) it->second.accessible = std::min(bytes, it->second.size);
}

namespace {
// Kernels with internal linkage (anonymous namespace, static) are not in the dynamic symbol table:
// look them up in the executable's own .symtab (absent when the binary is stripped).
struct Symtab {
  std::map<uintptr_t, std::string> funcs;
  std::map<uintptr_t, std::pair<size_t, std::string>> objects;  // start -> (size, mangled name)
};
const Symtab& symtab() {
  static const Symtab table = [] {
    Symtab t;
    std::ifstream in("/proc/self/exe", std::ios::binary);
    const std::vector<char> img((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (img.size() < sizeof(Elf64_Ehdr)) return t;
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(img.data());
    if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64) return t;
    if (eh->e_shoff + static_cast<size_t>(eh->e_shnum) * sizeof(Elf64_Shdr) > img.size()) return t;
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(img.data() + eh->e_shoff);
    uintptr_t bias = 0;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* out) {
          *static_cast<uintptr_t*>(out) = info->dlpi_addr;
          return 1;  // the first object is the executable
        },
        &bias);
    for (int i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strs = sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > img.size() || strs.sh_offset + strs.sh_size > img.size()) continue;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(img.data() + sh[i].sh_offset);
      for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
        if (!syms[k].st_value || syms[k].st_name >= strs.sh_size) continue;
        const char* name = img.data() + strs.sh_offset + syms[k].st_name;
        if (ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC)
          t.funcs[bias + syms[k].st_value] = name;
        else if (ELF64_ST_TYPE(syms[k].st_info) == STT_OBJECT && syms[k].st_size)
          t.objects[bias + syms[k].st_value] = {syms[k].st_size, name};
      }
    }
    return t;
  }();
  return table;
}
std::string symtab_name(const void* fn) {
  const auto& funcs = symtab().funcs;
  auto it = funcs.find(reinterpret_cast<uintptr_t>(fn));
  return it == funcs.end() ? std::string() : it->second;
}
std::string demangle(const std::string& mangled) {
  int status = 0;
  char* dem = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && dem ? dem : mangled;
  std::free(dem);
  return name;
}
}  // namespace

namespace internal {
std::string data_symbol(const void* p, uintptr_t* base) {
  const auto& objs = symtab().objects;
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = objs.upper_bound(a);
  if (it == objs.begin()) return "";
  --it;
  if (a >= it->first + it->second.first) return "";
  *base = it->first;
  std::string name = demangle(it->second.second);
  // "reduce_kernel(float const*, float*, int)::s_sum" -> "s_sum" (a static __shared__ array)
  const size_t colons = name.rfind("::");
  if (colons != std::string::npos && name.find(')') != std::string::npos && colons > name.rfind(')'))
    name = name.substr(colons + 2);
  return name;
}

std::vector<AllocInfo> snapshot_allocations() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<AllocInfo> out;
  out.reserve(g_allocs.size());
  for (const auto& [addr, a] : g_allocs)
    if (a.device)
      out.push_back(AllocInfo{reinterpret_cast<const void*>(addr), a.size, a.accessible,
                              static_cast<size_t>(addr - reinterpret_cast<uintptr_t>(a.raw)), a.red_after});
  return out;
}

std::string kernel_name(const void* kernel) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_names.find(kernel);
    if (it != g_names.end()) return it->second;
  }
  Dl_info info;
  std::string mangled;
  if (dladdr(kernel, &info) && info.dli_sname && info.dli_saddr == kernel) mangled = info.dli_sname;
  if (mangled.empty()) mangled = symtab_name(kernel);
  if (!mangled.empty()) {
    int status = 0;
    char* dem = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
    std::string name = status == 0 && dem ? dem : mangled;
    std::free(dem);
    return name;
  }
  return gradsleuth::str_printf("kernel@%p", kernel);
}
}  // namespace internal

namespace detail {

cudaError_t launch(const void* kernel, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
                   const PointerArg* ptr_args, int n_ptr_args, void (*body)(void*), void* closure) {
  if (cudaError_t s = sticky()) return fail(s);
  auto reject = [&](cudaError_t e, const std::string& why) {
    std::fprintf(stderr, "gs_emu: launch of %s<<<%s, %s, %zu>>> rejected (%s): %s\n",
                 internal::kernel_name(kernel).c_str(), dim_str(grid).c_str(), dim_str(block).c_str(), shmem,
                 cudaGetErrorName(e), why.c_str());
    std::lock_guard<std::mutex> lock(g_mu);
    ++internal::g_stats.failed_launches;
    return fail(e);
  };
  const uint64_t nthreads = static_cast<uint64_t>(block.x) * block.y * block.z;
  if (nthreads == 0 || nthreads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    return reject(cudaErrorInvalidConfiguration,
                  "a block has at most 1024 threads, with blockDim.x,y <= 1024 and blockDim.z <= 64 (and none 0)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    return reject(cudaErrorInvalidConfiguration,
                  "gridDim must be between 1 and (2^31-1, 65535, 65535); for large 2-D problems put the long "
                  "dimension in x");
  if (!valid_stream(stream))
    return reject(cudaErrorInvalidResourceHandle, "the stream was not created or was destroyed");
  size_t limit = kSharedPerBlock;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_max_dyn_smem.find(kernel);
    if (it != g_max_dyn_smem.end() && static_cast<size_t>(it->second) > limit) limit = static_cast<size_t>(it->second);
  }
  if (shmem > limit)
    return reject(cudaErrorInvalidValue,
                  std::to_string(shmem) + " bytes of dynamic shared memory exceed the limit of " +
                      std::to_string(limit) +
                      "; above 48 KiB call cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                      "bytes) first (at most 227 KiB)");
  std::string bad_arg;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (int i = 0; i < n_ptr_args && bad_arg.empty(); ++i) {
      const void* p = ptr_args[i].ptr;
      Allocation a;
      if (p == nullptr || (find_locked(p, &a, true) && a.device)) continue;
      const bool pinned = find_locked(p, &a, true);
      bad_arg = gradsleuth::str_printf(
          "kernel argument %d is %p, %s; kernels may only dereference device memory: cudaMalloc a buffer "
          "and cudaMemcpy the data to it",
          ptr_args[i].index, p,
          pinned ? "pinned host memory from cudaMallocHost (zero-copy is not emulated)"
                 : "a host pointer (not inside any cudaMalloc allocation)");
    }
  }
  if (!bad_arg.empty()) return reject(cudaErrorInvalidValue, bad_arg);
  std::lock_guard<std::recursive_mutex> launch_lock(g_launch_mu);
  // Dynamic shared memory: exact size between red zones (checked like device memory).
  void* smem_raw = shmem ? std::malloc(shmem + 2 * internal::kRedZone) : nullptr;
  void* smem = smem_raw ? static_cast<char*>(smem_raw) + internal::kRedZone : nullptr;
  if (smem) std::memset(smem, 0xff, shmem);  // garbage (NaN as float) like uninitialised shared memory
  g_dyn_smem = smem;
  std::string error;
  // block.x/y/z are read by the checks' per-warp state, so the launch shape is set first.
  detail::g_block_dim = block;
  detail::g_grid_dim = grid;
  internal::check_launch_begin(kernel, ptr_args, n_ptr_args, smem, shmem);
  bool ok = internal::run_grid(grid, block, body, closure, &error);
  cudaError_t check_err = cudaSuccess;
  const std::string findings = internal::check_launch_end(&check_err);
  g_dyn_smem = nullptr;
  std::free(smem_raw);
  const std::string name = (!ok || !findings.empty()) ? internal::kernel_name(kernel) : std::string();
  if (!ok)
    std::fprintf(stderr, "gs_emu: kernel %s<<<%s, %s, %zu>>> failed: %s\n", name.c_str(), dim_str(grid).c_str(),
                 dim_str(block).c_str(), shmem, error.c_str());
  if (!findings.empty()) {
    const std::string text = "kernel " + name + "<<<" + dim_str(grid) + ", " + dim_str(block) + ", " +
                             std::to_string(shmem) + ">>>:\n  " + findings;
    std::fprintf(stderr, "gs_emu: %s\n", text.c_str());
    std::lock_guard<std::mutex> lock(g_mu);
    g_last_report = text;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (!ok || !findings.empty()) {
    const cudaError_t e = ok ? check_err : cudaErrorLaunchFailure;
    g_sticky = e;
    t_last = e;
    ++internal::g_stats.failed_launches;
    return cudaSuccess;  // like a GPU: the fault shows at the next synchronising call
  }
  ++internal::g_stats.launches;
  return cudaSuccess;
}

}  // namespace detail
}  // namespace gs_emu

using namespace gs_emu;

cudaError_t cudaGetLastError() {
  cudaError_t e = t_last;
  t_last = sticky();
  return e;
}
cudaError_t cudaPeekAtLastError() { return t_last; }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define GS_EMU_ERR(x) \
  case x: return #x;
    GS_EMU_ERR(cudaSuccess)
    GS_EMU_ERR(cudaErrorInvalidValue)
    GS_EMU_ERR(cudaErrorMemoryAllocation)
    GS_EMU_ERR(cudaErrorInitializationError)
    GS_EMU_ERR(cudaErrorInvalidConfiguration)
    GS_EMU_ERR(cudaErrorInvalidSymbol)
    GS_EMU_ERR(cudaErrorInvalidDevicePointer)
    GS_EMU_ERR(cudaErrorInvalidMemcpyDirection)
    GS_EMU_ERR(cudaErrorInsufficientDriver)
    GS_EMU_ERR(cudaErrorInvalidDeviceFunction)
    GS_EMU_ERR(cudaErrorNoDevice)
    GS_EMU_ERR(cudaErrorInvalidDevice)
    GS_EMU_ERR(cudaErrorInvalidResourceHandle)
    GS_EMU_ERR(cudaErrorNotReady)
    GS_EMU_ERR(cudaErrorIllegalAddress)
    GS_EMU_ERR(cudaErrorLaunchOutOfResources)
    GS_EMU_ERR(cudaErrorLaunchTimeout)
    GS_EMU_ERR(cudaErrorAssert)
    GS_EMU_ERR(cudaErrorIllegalInstruction)
    GS_EMU_ERR(cudaErrorLaunchFailure)
    GS_EMU_ERR(cudaErrorNotSupported)
    GS_EMU_ERR(cudaErrorUnknown)
#undef GS_EMU_ERR
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

cudaError_t cudaDeviceSynchronize() { return fail(sticky()); }

cudaError_t cudaDeviceReset() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& [addr, a] : g_allocs) std::free(a.raw);
  g_allocs.clear();
  g_device_bytes = 0;
  g_max_dyn_smem.clear();
  g_sticky = cudaSuccess;
  t_last = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  g_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue);
  *device = g_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (!p) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "gradsleuth CPU emulator");
  p->totalGlobalMem = kTotalGlobalMem;
  p->sharedMemPerBlock = kSharedPerBlock;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->concurrentKernels = 1;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  p->maxThreadsPerMultiProcessor = 2048;
  p->sharedMemPerMultiprocessor = 233472;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->sharedMemPerBlockOptin = kSharedOptin;
  p->maxBlocksPerMultiProcessor = 32;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    default: return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (free_bytes) *free_bytes = kTotalGlobalMem - g_device_bytes;
  if (total_bytes) *total_bytes = kTotalGlobalMem;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return fail(cudaErrorInvalidValue);
  if (value < 0 || static_cast<size_t>(value) > kSharedOptin) {
    std::fprintf(stderr,
                 "gs_emu: cudaFuncSetAttribute(%s, cudaFuncAttributeMaxDynamicSharedMemorySize, %d): at most %zu "
                 "bytes per block\n",
                 internal::kernel_name(func).c_str(), value, kSharedOptin);
    return fail(cudaErrorInvalidValue);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_max_dyn_smem[func] = value;
  return cudaSuccess;
}

static cudaError_t alloc(void** ptr, size_t size, bool device, const char* call) {
  if (!ptr) return fail(cudaErrorInvalidValue);
  if (cudaError_t s = sticky()) return fail(s);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  if (device && size > kTotalGlobalMem - g_device_bytes) {
    std::fprintf(stderr, "gs_emu: %s(%zu bytes): out of (emulated 80 GiB) device memory\n", call, size);
    return fail(cudaErrorMemoryAllocation);
  }
  // With the checks compiled in, kRedZone bytes on each side (256-byte aligned, as cudaMalloc is):
  // a kernel that reads or writes just outside lands in memory that is ours and is reported. In
  // the AddressSanitizer build the block has the exact size, so ASan reports it instead.
  void* raw = nullptr;
  void* p = nullptr;
  size_t red_after = 0;
  if (internal::kRedZone > 0) {
    const size_t total = (internal::kRedZone + size + internal::kRedZone + 255) / 256 * 256;
    raw = std::aligned_alloc(256, total);
    if (raw) {
      p = static_cast<char*>(raw) + internal::kRedZone;
      red_after = total - internal::kRedZone - size;
    }
  } else {
    raw = p = std::malloc(size);
  }
  if (!p) return fail(cudaErrorMemoryAllocation);
  // Fresh device memory is garbage on a GPU: here it is 0xFF bytes (NaN as float, -1 as an
  // integer), so an output element a kernel never writes does not pass as a lucky zero.
  if (device) std::memset(p, 0xff, size);
  g_allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{size, device, raw, size, red_after};
  if (device) g_device_bytes += size;
  *ptr = p;
  return cudaSuccess;
}

static cudaError_t release(void* p, bool device, const char* call) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs.end() || it->second.device != device) {
    std::fprintf(stderr,
                 "gs_emu: %s(%p): not the start of a live %s allocation (double free, or the wrong free "
                 "function?)\n",
                 call, p, device ? "cudaMalloc" : "cudaMallocHost");
    t_last = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  if (device) g_device_bytes -= it->second.size;
  void* raw = it->second.raw;
  g_allocs.erase(it);
  std::free(raw);
  return g_sticky;
}

cudaError_t cudaMalloc(void** p, size_t size) { return alloc(p, size, true, "cudaMalloc"); }
cudaError_t cudaMallocManaged(void** p, size_t size, unsigned int) { return alloc(p, size, true, "cudaMallocManaged"); }
cudaError_t cudaMallocHost(void** p, size_t size) { return alloc(p, size, false, "cudaMallocHost"); }
cudaError_t cudaFree(void* p) { return release(p, true, "cudaFree"); }
cudaError_t cudaFreeHost(void* p) { return release(p, false, "cudaFreeHost"); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return do_memcpy("cudaMemcpy", dst, src, count, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  return do_memcpy("cudaMemcpyAsync", dst, src, count, kind);
}
cudaError_t cudaMemset(void* p, int value, size_t count) { return do_memset("cudaMemset", p, value, count); }
cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t stream) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  return do_memset("cudaMemsetAsync", p, value, count);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  if (!s) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  *s = new CUstream_st{flags};
  g_streams.insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_streams.erase(s)) {
    t_last = cudaErrorInvalidResourceHandle;
    return cudaErrorInvalidResourceHandle;
  }
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  return fail(sticky());
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  if (!valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  return fail(sticky());
}
static bool valid_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(g_mu);
  return e && g_events.count(e) != 0;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  if (!valid_stream(s) || !valid_event(e)) return fail(cudaErrorInvalidResourceHandle);
  return fail(sticky());
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  if (!e) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(g_mu);
  *e = new CUevent_st{flags, false, {}};
  g_events.insert(*e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!valid_event(e) || !valid_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  e->recorded = true;
  e->when = std::chrono::steady_clock::now();
  return fail(sticky());
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!valid_event(e)) return fail(cudaErrorInvalidResourceHandle);
  return fail(sticky());
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!valid_event(e)) return fail(cudaErrorInvalidResourceHandle);
  return fail(sticky());
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  if (!valid_event(start) || !valid_event(end)) return fail(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming || !start->recorded || !end->recorded) {
    std::fprintf(stderr,
                 "gs_emu: cudaEventElapsedTime: both events must be recorded and created without "
                 "cudaEventDisableTiming\n");
    return fail(cudaErrorInvalidResourceHandle);
  }
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_events.erase(e)) {
    t_last = cudaErrorInvalidResourceHandle;
    return cudaErrorInvalidResourceHandle;
  }
  delete e;
  return cudaSuccess;
}
