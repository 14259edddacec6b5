// CBLAS sgemm/dgemm for the CPU backend (see blas.h), the BLAS's and the CPU's self-description,
// and the measured choice between the BLAS and the engine's own kernel. GS_CBLAS is 1 (OpenBLAS)
// or 2 (BLIS) when core/CMakeLists.txt found the library, else 0.
#include "core/cpu/fast/blas.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "core/cpu/fast/sgemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef GS_CBLAS
#define GS_CBLAS 0
#endif

#if GS_CBLAS
// The CBLAS interface (its enums are C ints): the part we call.
extern "C" {
void cblas_sgemm(int layout, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);
void cblas_dgemm(int layout, int trans_a, int trans_b, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc);
#if GS_CBLAS == 1
void openblas_set_num_threads(int n);
#else
void bli_thread_set_num_threads(long n);
#endif
}
#endif

namespace gradsleuth::cpu::fast {

namespace {
bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }
}  // namespace

bool gemm_fits_cblas(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  return fits_int(M) && fits_int(N) && fits_int(K) && fits_int(lda) && fits_int(ldb) && fits_int(ldc);
}

const char* gemm_library() {
#if GS_CBLAS == 1
  return "OpenBLAS";
#elif GS_CBLAS == 2
  return "BLIS";
#else
  return "Eigen";
#endif
}

namespace {
thread_local int g_single_thread_scopes = 0;  // live BlasSingleThread objects on this thread

const char* level_name(int level) {
  switch (level) {
    case 1: return "SSE";
    case 2: return "AVX";
    case 3: return "AVX2";
    case 4: return "AVX-512";
    default: return "unknown";
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The ISA level of a BLAS's kernel set, by the name the library gives it (OpenBLAS's core
// names, BLIS's configuration names); 0 when unknown.
int core_level_of(const std::string& name) {
  const std::string n = lower(name);
  for (const char* c : {"skylakex", "cooperlake", "sapphirerapids", "skx", "knl", "zen4", "zen5"})
    if (n == c) return 4;
  for (const char* c : {"haswell", "zen", "zen2", "zen3", "excavator"})
    if (n == c) return 3;
  for (const char* c : {"sandybridge", "bulldozer", "piledriver", "steamroller"})
    if (n == c) return 2;
  for (const char* c :
       {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "katmai", "coppermine", "northwood", "banias",
        "opteron", "opteron_sse3", "barcelona", "bobcat", "nano", "athlon", "generic"})
    if (n == c) return 1;
  return 0;
}

// A symbol of the process's libraries, or of the BLAS loaded by name when it was loaded locally.
void* find_symbol(const char* name, const char* library) {
  if (void* p = dlsym(RTLD_DEFAULT, name)) return p;
  if (void* h = dlopen(library, RTLD_NOW | RTLD_NOLOAD)) {
    void* p = dlsym(h, name);
    dlclose(h);
    return p;
  }
  return nullptr;
}
}  // namespace
BlasSingleThread::BlasSingleThread() { ++g_single_thread_scopes; }
BlasSingleThread::~BlasSingleThread() { --g_single_thread_scopes; }

int CpuIsa::level() const {
  if (avx512f) return 4;
  if (avx2_fma) return 3;
  if (avx) return 2;
#if defined(__x86_64__) || defined(__i386__)
  return 1;
#else
  return 0;
#endif
}

std::string CpuIsa::str() const {
  std::string s;
  const auto add = [&s](const char* part) { s += (s.empty() ? "" : ", ") + std::string(part); };
  if (avx512f) add("AVX-512F");
  if (avx2_fma)
    add("AVX2+FMA");
  else if (avx)
    add("AVX");
  if (s.empty()) add(level() == 1 ? "SSE" : "no x86 vector extensions");
  if (level() >= 3) add(amx ? "AMX" : "no AMX");
  return s;
}

namespace {
// /sys/devices/system/cpu/cpu0/cache/index*: (level, type, bytes) of each cache cpu0 sees.
void read_cache_sizes(CpuIsa& c) {
  int llc_level = 0;
  for (int idx = 0; idx < 8; ++idx) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/";
    std::ifstream level_f(dir + "level"), type_f(dir + "type"), size_f(dir + "size");
    int level = 0;
    std::string type, size;
    if (!(level_f >> level) || !(type_f >> type) || !(size_f >> size) || size.empty()) continue;
    const int64_t unit = size.back() == 'K' ? 1024 : size.back() == 'M' ? (int64_t{1} << 20) : 1;
    const int64_t bytes = std::atoll(size.c_str()) * unit;
    if (bytes <= 0) continue;
    if (level == 1 && type == "Data") c.l1d = bytes;
    if (level == 2 && type != "Instruction") c.l2 = bytes;
    if (level >= 2 && level >= llc_level && type != "Instruction") {
      c.llc = bytes;
      llc_level = level;
    }
  }
  const auto conf = [](int name) { return std::max<int64_t>(0, sysconf(name)); };
  if (c.l1d == 0) c.l1d = conf(_SC_LEVEL1_DCACHE_SIZE);
  if (c.l2 == 0) c.l2 = conf(_SC_LEVEL2_CACHE_SIZE);
  if (c.llc == 0) c.llc = std::max(conf(_SC_LEVEL3_CACHE_SIZE), c.l2);
}
}  // namespace

const CpuIsa& cpu_isa() {
  static const CpuIsa isa = [] {
    CpuIsa c;
    read_cache_sizes(c);
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    c.intel = __builtin_cpu_is("intel");
    c.amd = __builtin_cpu_is("amd");
    // libgcc's checks include the OS's support for the wider registers (XGETBV).
    c.avx = __builtin_cpu_supports("avx");
    c.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    c.avx512f = __builtin_cpu_supports("avx512f");
    unsigned a = 0, b = 0, cx = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &cx, &d)) c.amx = ((d >> 24) & 1u) != 0;  // AMX-TILE
    if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u) {
      unsigned r[12] = {};
      for (unsigned i = 0; i < 3; ++i)
        __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
      char text[49] = {};
      std::memcpy(text, r, 48);
      c.brand = text;
      const auto b0 = c.brand.find_first_not_of(' ');
      c.brand = b0 == std::string::npos ? "" : c.brand.substr(b0, c.brand.find_last_not_of(' ') - b0 + 1);
    }
#endif
    return c;
  }();
  return isa;
}

std::string BlasInfo::str() const {
  if (library == "Eigen") return "none: Eigen's own kernel (no BLAS built in)";
  std::string s = library + (version.empty() ? "" : " " + version);
  if (core.empty()) return s + " (it does not name its kernels)";
  s += ", core " + core;
  const int cpu = cpu_isa().level();
  if (core_level == 0) return s + " (kernels of unknown ISA)";
  if (generic) return s + " (generic: this CPU is newer than the library)";
  if (below_cpu) return s + " (" + level_name(core_level) + " kernels; this CPU has " + level_name(cpu) + ")";
  return s + " (" + level_name(core_level) + " kernels, as this CPU)";
}

const BlasInfo& blas_info() {
  static const BlasInfo info = [] {
    BlasInfo b;
    b.library = gemm_library();
#if GS_CBLAS == 1
    using Text = char* (*)();
    if (auto f = reinterpret_cast<Text>(find_symbol("openblas_get_config", "libopenblas.so.0"))) {
      const std::string config = f() ? f() : "";  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Haswell MAX_THREADS=64"
      if (config.rfind("OpenBLAS ", 0) == 0) b.version = config.substr(9, config.find(' ', 9) - 9);
    }
    if (auto f = reinterpret_cast<Text>(find_symbol("openblas_get_corename", "libopenblas.so.0")))
      b.core = f() ? f() : "";
#elif GS_CBLAS == 2
    using Text = const char* (*)();
    using ArchId = int (*)();
    using ArchName = const char* (*)(int);
    if (auto f = reinterpret_cast<Text>(find_symbol("bli_info_get_version_str", "libblis.so.4"))) b.version = f();
    auto id = reinterpret_cast<ArchId>(find_symbol("bli_arch_query_id", "libblis.so.4"));
    auto name = reinterpret_cast<ArchName>(find_symbol("bli_arch_string", "libblis.so.4"));
    if (id && name) b.core = name(id());
#endif
    const CpuIsa& cpu = cpu_isa();
    b.core_level = core_level_of(b.core);
    b.below_cpu = b.core_level > 0 && b.core_level < cpu.level();
    b.generic = b.core_level == 1 && cpu.level() >= 3;
    b.far_below = b.generic || (b.core_level > 0 && cpu.level() - b.core_level >= 2);
    if (b.library == "OpenBLAS") {
      if (cpu.level() == 4)
        b.suggested_core = "SkylakeX";
      else if (cpu.level() == 3)
        b.suggested_core = cpu.amd ? "Zen" : "Haswell";
      else if (cpu.level() == 2)
        b.suggested_core = "Sandybridge";
    }
    return b;
  }();
  return info;
}

namespace {
std::atomic<int> g_route{-1};  // a GemmRoute; -1 until GRADSLEUTH_GEMM has been read
std::atomic<bool> g_decided{false}, g_engine{false};
std::atomic<int> g_notes{0};
std::mutex g_decision_mutex;
GemmDecision g_decision;

// True once: for the caller that prints the note.
bool first_note() {
  int none = 0;
  return g_notes.compare_exchange_strong(none, 1);
}

GemmRoute route_from_env() {
  const char* e = std::getenv("GRADSLEUTH_GEMM");
  const std::string v = e ? lower(e) : "";
  if (v.empty() || v == "auto") return GemmRoute::Auto;
  if (v == "blas") return GemmRoute::Blas;
  if (v == "engine") return GemmRoute::Engine;
  std::fprintf(stderr, "gradsleuth: GRADSLEUTH_GEMM=%s is not auto, blas or engine: using auto\n", e);
  return GemmRoute::Auto;
}

GemmDecision decide();
}  // namespace

void set_gemm_route(GemmRoute r) {
  g_route.store(static_cast<int>(r));
  g_decided.store(false);
}
GemmRoute gemm_route() {
  int r = g_route.load();
  if (r < 0) {
    int want = -1;
    g_route.compare_exchange_strong(want, static_cast<int>(route_from_env()));
    r = g_route.load();
  }
  return static_cast<GemmRoute>(r);
}

const GemmDecision& gemm_decision() {
  std::lock_guard<std::mutex> lock(g_decision_mutex);
  if (!g_decided.load()) {
    g_decision = decide();
    g_engine.store(g_decision.engine);
    g_decided.store(true);
  }
  return g_decision;
}
int gemm_notes_printed() { return g_notes.load(); }

namespace {
// Whether float32 products go to the engine's kernel (blas_gemm's first question).
bool engine_route() {
  // Without a BLAS the float32 products take Eigen's kernel (blas_gemm declines): no route to take.
  if (GS_CBLAS == 0 || !sgemm_direct_available() || !sgemm_direct_enabled()) return false;
  switch (gemm_route()) {
    case GemmRoute::Blas: return false;
    case GemmRoute::Engine: return true;
    case GemmRoute::Auto: break;
  }
  if (!g_decided.load()) gemm_decision();
  return g_engine.load();
}
}  // namespace
bool gemm_uses_engine() { return engine_route(); }

#if GS_CBLAS
namespace {
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS enum values

// The threads a product gets: OpenMP's setting (one thread by default in gradsleuth's
// tools), re-read on every call so omp_set_num_threads works; one inside a
// BlasSingleThread scope.
int gemm_threads() {
#ifdef _OPENMP
  return g_single_thread_scopes > 0 ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

// The BLAS keeps its own thread pool: give it gemm_threads().
thread_local int g_blas_threads = -1;  // what this thread last told the BLAS
void set_blas_threads(int n) {
#if GS_CBLAS == 1
  openblas_set_num_threads(n);
#else
  bli_thread_set_num_threads(n);
#endif
  g_blas_threads = n;
}
void sync_threads() {
  const int want = gemm_threads();
  if (want != g_blas_threads) set_blas_threads(want);
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The packing-free kernel (sgemm.h) takes a float32 product when it runs on one thread
// and the measured rule says it beats the BLAS there.
bool use_direct(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K) {
  return gemm_threads() == 1 && sgemm_direct_enabled() && sgemm_direct_pays(a_col, b_col, M, N, K);
}

template <class T, class Gemm>
bool gemm(Gemm f, bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  // CBLAS takes int sizes: a larger problem is declined (the callers take the reference loops).
  if (!gemm_fits_cblas(M, N, K, lda, ldb, ldc)) return false;
  // Leading dimensions must be >= 1 even for empty or single-row operands.
  const auto ld = [](int64_t v) { return static_cast<int>(v < 1 ? 1 : v); };
  sync_threads();
  // A column-major (M, K) operand is a row-major (K, M) one, transposed.
  f(kRowMajor, a_col ? kTrans : kNoTrans, b_col ? kTrans : kNoTrans, static_cast<int>(M), static_cast<int>(N),
    static_cast<int>(K), T(1), A, ld(lda), B, ld(ldb), beta, C, ld(ldc));
  return true;
}

// The engine's kernel on gemm_threads() threads: each takes a band of C's rows (or columns,
// when C is wider than tall), so every element is still one FMA chain in k order and the bits
// do not depend on the thread count.
void engine_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                 int64_t ldb, float beta, float* C, int64_t ldc) {
  int threads = gemm_threads();
#ifdef _OPENMP
  if (omp_in_parallel()) threads = 1;
#endif
  // Below about 2^18 multiply-adds a band is too small to pay for waking a thread.
  const double work = static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  if (threads <= 1 || work < double(1 << 18) || std::max(M, N) < 2 * threads) {
    sgemm_direct(a_col, b_col, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool rows = M >= N;
  const int64_t total = rows ? M : N;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int p = 0; p < threads; ++p) {
    const int64_t s = total * p / threads, e = total * (p + 1) / threads;
    if (e <= s) continue;
    if (rows)
      sgemm_direct(a_col, b_col, e - s, N, K, a_col ? A + s : A + s * lda, lda, B, ldb, beta, C + s * ldc, ldc);
    else
      sgemm_direct(a_col, b_col, M, e - s, K, A, lda, b_col ? B + s * ldb : B + s, ldb, beta, C + s, ldc);
  }
}

// The probe: a 128^3 product, one thread, best of five, through the BLAS and the engine's kernel.
GemmDecision decide() {
  GemmDecision d;
  const BlasInfo& info = blas_info();
  if (!info.far_below) {
    d.why = "the BLAS's kernels suit this CPU: it keeps the products";
    return d;
  }
  if (!sgemm_direct_available()) {
    d.why = info.str() + "; this build has no kernel of its own to compare (a portable build)";
    if (info.generic && gemm_route() == GemmRoute::Auto && first_note())
      std::fprintf(stderr,
                   "gradsleuth: %s %s runs its %s kernels on this %s CPU, and this build has no kernel of its own to "
                   "take over: set OPENBLAS_CORETYPE=%s for the right ones\n",
                   info.library.c_str(), info.version.c_str(), info.core.c_str(), level_name(cpu_isa().level()),
                   info.suggested_core.c_str());
    return d;
  }
  constexpr int n = 128;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 7) % 13) / 13.0f - 0.5f;
    b[i] = static_cast<float>((i * 5) % 11) / 11.0f - 0.5f;
  }
  set_blas_threads(1);
  double blas = 1e30, engine = 1e30;
  for (int r = 0; r < 6; ++r) {  // the first round warms both up and is not counted
    double t = seconds_now();
    cblas_sgemm(kRowMajor, kNoTrans, kNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    t = seconds_now() - t;
    if (r > 0) blas = std::min(blas, t);
    t = seconds_now();
    sgemm_direct(false, false, n, n, n, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    t = seconds_now() - t;
    if (r > 0) engine = std::min(engine, t);
  }
  g_blas_threads = -1;  // the next product sets the BLAS's threads again
  const double flop = 2.0 * n * n * n;
  d.probed = true;
  d.blas_gflops = flop / std::max(blas, 1e-9) / 1e9;
  d.engine_gflops = flop / std::max(engine, 1e-9) / 1e9;
  d.engine = d.blas_gflops < kEngineRatio * d.engine_gflops;
  char line[400];
  std::snprintf(line, sizeof line, "the BLAS %.0f GFLOP/s against %.0f for gradsleuth's own kernel (128^3, one thread)",
                d.blas_gflops, d.engine_gflops);
  d.why =
      std::string(line) + (d.engine ? ": float32 products go to gradsleuth's kernel" : ": the BLAS keeps the products");
  if (d.engine && gemm_route() == GemmRoute::Auto && first_note())
    std::fprintf(stderr,
                 "gradsleuth: %s %s runs its %s kernels on this %s CPU: %.0f GFLOP/s against %.0f for gradsleuth's own "
                 "kernel, so float32 products go to gradsleuth's kernel. The fix: set OPENBLAS_CORETYPE=%s for the "
                 "BLAS's right kernels (GRADSLEUTH_GEMM=blas or =engine forces either path).\n",
                 info.library.c_str(), info.version.c_str(), info.core.c_str(), level_name(cpu_isa().level()),
                 d.blas_gflops, d.engine_gflops,
                 info.suggested_core.empty() ? "(the core type for this CPU)" : info.suggested_core.c_str());
  return d;
}
}  // namespace

bool gemm_routes_direct(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K) {
  return gemm_threads() == 1 && (engine_route() || use_direct(a_col, b_col, M, N, K));
}
bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float beta, float* C, int64_t ldc) {
  if (engine_route()) {
    engine_gemm(a_col, b_col, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return true;
  }
  if (use_direct(a_col, b_col, M, N, K) && sgemm_direct(a_col, b_col, M, N, K, A, lda, B, ldb, beta, C, ldc))
    return true;
  return gemm<float>(cblas_sgemm, a_col, b_col, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
bool blas_gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
               int64_t ldb, double beta, double* C, int64_t ldc) {
  // The engine's kernel is float32 only: a float64 product stays on the BLAS on either route.
  return gemm<double>(cblas_dgemm, a_col, b_col, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
#else
bool gemm_routes_direct(bool, bool, int64_t, int64_t, int64_t) { return false; }
namespace {
GemmDecision decide() {
  GemmDecision d;
  d.why = blas_info().str();
  return d;
}
}  // namespace
bool blas_gemm(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float, float*,
               int64_t) {
  return false;
}
bool blas_gemm(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t, double, double*,
               int64_t) {
  return false;
}
#endif

}  // namespace gradsleuth::cpu::fast
