// The CPU backend: the reference implementation of every kernel in backend.h.
// Contiguous fast paths use Eigen (vectorised exp/log/tanh, GEMM); the general
// paths walk strides with loops.h. This file is the answer key for cuda/.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#if defined(__linux__)
#include <sys/mman.h>  // madvise(MADV_HUGEPAGE) for large buffers
#endif
#if defined(__GLIBC__)
#include <malloc.h>  // mallopt, see CpuBackend()
#endif

#include "core/backend.h"
#include "core/cpu/accurate_sum.h"
#include "core/cpu/loops.h"
#include "core/generator.h"

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

namespace {

template <class T>
using EArr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ECArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// The size-1 slice at `i` along `dim`, as a plain alias (no autograd, no observer).
Tensor slice_raw(const Tensor& t, int64_t dim, int64_t i) {
  Shape s = t.shape();
  s[dim] = 1;
  return detail::make_alias(t, s, t.strides(), t.offset() + i * t.strides()[dim]);
}

template <class T>
T* at(char* p, int64_t i, int64_t stride) {
  return reinterpret_cast<T*>(p + i * stride);
}

// ---- unary ------------------------------------------------------------------
template <class T>
T unary_scalar(UnaryOp op, T x) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case UnaryOp::LogicalNot: return !x;
      case UnaryOp::Abs: case UnaryOp::Sign: case UnaryOp::Relu: case UnaryOp::Square: return x;
      default: return x;
    }
  } else {
    switch (op) {
      case UnaryOp::Neg: return -x;
      case UnaryOp::Exp: return static_cast<T>(std::exp(x));
      case UnaryOp::Log: return static_cast<T>(std::log(x));
      case UnaryOp::Sqrt: return static_cast<T>(std::sqrt(x));
      case UnaryOp::Abs: return x < 0 ? -x : x;
      case UnaryOp::Sign: return static_cast<T>((x > 0) - (x < 0));
      case UnaryOp::Relu: return x > 0 ? x : T(0);
      case UnaryOp::Sigmoid: {
        // Stable for large |x|: never exponentiates a positive number.
        if (x >= 0) return static_cast<T>(1 / (1 + std::exp(-x)));
        T e = static_cast<T>(std::exp(x));
        return e / (1 + e);
      }
      case UnaryOp::Tanh: return static_cast<T>(std::tanh(x));
      case UnaryOp::Erf: return static_cast<T>(std::erf(x));
      case UnaryOp::Reciprocal: return static_cast<T>(T(1) / x);
      case UnaryOp::Square: return x * x;
      case UnaryOp::Log1p: return static_cast<T>(std::log1p(x));
      case UnaryOp::Expm1: return static_cast<T>(std::expm1(x));
      case UnaryOp::Sin: return static_cast<T>(std::sin(x));
      case UnaryOp::Cos: return static_cast<T>(std::cos(x));
      case UnaryOp::LogicalNot: return static_cast<T>(x == 0);
      default: return x;
    }
  }
}

template <class T>
bool unary_pred(UnaryOp op, T x) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == UnaryOp::IsNan) return std::isnan(x);
    if (op == UnaryOp::IsInf) return std::isinf(x);
    return std::isfinite(x);
  } else {
    return op == UnaryOp::IsFinite;
  }
}

// Vectorised contiguous versions of the transcendental functions (Eigen's
// packet math); returns false when there is none for this op/type.
template <class T>
bool unary_eigen(UnaryOp op, T* o, const T* a, int64_t n) {
  if constexpr (std::is_floating_point_v<T>) {
    EArr<T> y(o, n);
    ECArr<T> x(a, n);
    switch (op) {
      case UnaryOp::Exp: y = x.exp(); return true;
      case UnaryOp::Log: y = x.log(); return true;
      case UnaryOp::Sqrt: y = x.sqrt(); return true;
      case UnaryOp::Tanh: y = x.tanh(); return true;
      case UnaryOp::Sigmoid: {
        // e = exp(-|x|) never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0.
        // (Not 1 - 1/(1+e): that rounds sigmoid(-40) to 0 instead of 4e-18.)
        y = (-x.abs()).exp();
        y = (x >= T(0)).select(T(1), y) / (T(1) + y);
        return true;
      }
      case UnaryOp::Neg: y = -x; return true;
      case UnaryOp::Relu: y = x.max(T(0)); return true;
      case UnaryOp::Square: y = x.square(); return true;
      case UnaryOp::Abs: y = x.abs(); return true;
      case UnaryOp::Reciprocal: y = x.inverse(); return true;
      default: return false;
    }
  }
  return false;
}

// ---- binary -----------------------------------------------------------------
template <class T>
T binary_scalar(BinaryOp op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case BinaryOp::Add: case BinaryOp::Maximum: case BinaryOp::LogicalOr: return a || b;
      case BinaryOp::Mul: case BinaryOp::Minimum: case BinaryOp::LogicalAnd: return a && b;
      case BinaryOp::Sub: return a != b;
      default: return a;
    }
  } else {
    switch (op) {
      case BinaryOp::Add: return a + b;
      case BinaryOp::Sub: return a - b;
      case BinaryOp::Mul: return a * b;
      case BinaryOp::Div:
        if constexpr (std::is_integral_v<T>) return b == 0 ? 0 : a / b;  // ops/ never sends ints here
        else return a / b;
      case BinaryOp::Pow: return static_cast<T>(std::pow(a, b));
      case BinaryOp::Maximum:
        if constexpr (std::is_floating_point_v<T>) if (std::isnan(a) || std::isnan(b)) return a + b;  // NaN wins
        return a > b ? a : b;
      case BinaryOp::Minimum:
        if constexpr (std::is_floating_point_v<T>) if (std::isnan(a) || std::isnan(b)) return a + b;
        return a < b ? a : b;
      case BinaryOp::LogicalAnd: return static_cast<T>((a != 0) && (b != 0));
      case BinaryOp::LogicalOr: return static_cast<T>((a != 0) || (b != 0));
      default: return a;
    }
  }
}

template <class T>
bool compare_scalar(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::LogicalAnd: return (a != T(0)) && (b != T(0));
    case BinaryOp::LogicalOr: return (a != T(0)) || (b != T(0));
    default: return false;
  }
}

// The hot cases spelled out so the compiler vectorises them.
template <class T, class F>
void binary_row(T* o, const T* a, const T* b, int64_t n, int64_t so, int64_t sa, int64_t sb, F f) {
  const int64_t e = sizeof(T);
  if (so == e && sa == e && sb == e) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (so == e && sa == e && sb == 0) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);
  } else if (so == e && sa == 0 && sb == e) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);
  } else {
    char* po = reinterpret_cast<char*>(o);
    const char* pa = reinterpret_cast<const char*>(a);
    const char* pb = reinterpret_cast<const char*>(b);
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<T*>(po + i * so) =
          f(*reinterpret_cast<const T*>(pa + i * sa), *reinterpret_cast<const T*>(pb + i * sb));
  }
}

template <class T>
void binary_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  auto run = [&](auto f) {
    for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
      binary_row<T>(reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]), reinterpret_cast<const T*>(p[2]),
                    n, st[0], st[1], st[2], f);
    });
  };
  switch (op) {
    case BinaryOp::Add: run([](T x, T y) { return static_cast<T>(x + y); }); return;
    case BinaryOp::Sub:
      if constexpr (std::is_same_v<T, bool>) break;
      else { run([](T x, T y) { return static_cast<T>(x - y); }); return; }
    case BinaryOp::Mul: run([](T x, T y) { return static_cast<T>(x * y); }); return;
    case BinaryOp::Div:
      if constexpr (std::is_floating_point_v<T>) { run([](T x, T y) { return x / y; }); return; }
      break;
    default: break;
  }
  run([op](T x, T y) { return binary_scalar<T>(op, x, y); });
}

template <class T>
void compare_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i)
      *at<bool>(p[0], i, st[0]) = compare_scalar<T>(op, *at<T>(p[1], i, st[1]), *at<T>(p[2], i, st[2]));
  });
}

// ---- reductions ---------------------------------------------------------------
template <class T>
T reduce_identity(ReduceOp op) {
  if (op == ReduceOp::Sum) return T(0);
  if constexpr (std::is_floating_point_v<T>) {
    return op == ReduceOp::Max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  } else {
    return op == ReduceOp::Max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
}

template <class T>
T combine(ReduceOp op, T a, T b) {
  if (op == ReduceOp::Sum) {
    if constexpr (std::is_same_v<T, bool>) return a || b;
    else return a + b;
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();  // NaN propagates
  }
  return op == ReduceOp::Max ? (a > b ? a : b) : (a < b ? a : b);
}

// The float64 sum of n floating values at stride `st` (bytes): accurate_sum.h's
// fixed-order lanes, so the result is the same at every SIMD width.
template <class T>
double sum_row(const char* p, int64_t n, int64_t st) {
  if (st == sizeof(T)) return accurate_sum(reinterpret_cast<const T*>(p), n);
  return accurate_sum_strided<T>(p, n, st);
}

// Reduces n elements at stride `st` (bytes) to one value.
template <class T>
T reduce_row(ReduceOp op, const char* p, int64_t n, int64_t st) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::Sum) return static_cast<T>(sum_row<T>(p, n, st));
    if (st == sizeof(T)) {
      ECArr<T> a(reinterpret_cast<const T*>(p), n);
      if (a.isNaN().any()) return std::numeric_limits<T>::quiet_NaN();
      return op == ReduceOp::Max ? a.maxCoeff() : a.minCoeff();
    }
  }
  T acc = reduce_identity<T>(op);
  for (int64_t i = 0; i < n; ++i) acc = combine<T>(op, acc, *reinterpret_cast<const T*>(p + i * st));
  return acc;
}

// reduce_row as the accumulation type A: a float32 sum stays in float64 (no
// rounding to float between a row's sum and the output it is added to).
template <class T, class A>
A reduce_row_as(ReduceOp op, const char* p, int64_t n, int64_t st) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == ReduceOp::Sum) return static_cast<A>(sum_row<T>(p, n, st));
  }
  return static_cast<A>(reduce_row<T>(op, p, n, st));
}

// `in` holds T; `out` holds A, the type the results accumulate in (see reduce()).
template <class T, class A = T>
void reduce_kernel(ReduceOp op, const Tensor& out, const Tensor& in_any, const bool* reduced) {
  const Tensor in = in_any;
  const int64_t nd = in.dim();
  // View `out` with the input's shape: stride 0 along reduced dims.
  Strides ost = out.strides();
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[d]) ost[d] = 0;
  Tensor ov = detail::make_alias(out, in.shape(), ost, out.offset());
  A* o0 = static_cast<A*>(out.raw_data());
  const int64_t on = out.numel();
  for (int64_t i = 0; i < on; ++i) o0[i] = reduce_identity<A>(op);

  StridedIter<2> it(in.shape(), {&ov, &in});
  const int64_t inner = it.inner_size(), outer = it.outer_size();
  const int64_t so = it.strides[0][it.ndim - 1], si = it.strides[1][it.ndim - 1];
  // Folds one input row into the output row it maps to (so != 0: the output
  // moves along the inner dim, e.g. a sum over dim 0).
  auto add_row = [&](char* const p[2]) {
    if (op == ReduceOp::Sum && so == sizeof(A) && si == sizeof(T)) {
      // Performance: plain restrict pointers (out is a fresh buffer, so they
      // cannot overlap) let the compiler vectorise this: 6x faster (sum dim 0).
      A* __restrict o = reinterpret_cast<A*>(p[0]);
      const T* __restrict x = reinterpret_cast<const T*>(p[1]);
      for (int64_t i = 0; i < inner; ++i) o[i] = combine<A>(op, o[i], static_cast<A>(x[i]));
      return;
    }
    for (int64_t i = 0; i < inner; ++i) {
      A& dst = *at<A>(p[0], i, so);
      dst = combine<A>(op, dst, static_cast<A>(*at<T>(p[1], i, si)));
    }
  };
  auto do_rows = [&](int64_t b, int64_t e) {
    char* p[2];
    for (int64_t r = b; r < e; ++r) {
      it.row_ptrs(r, p);
      if (so == 0) {
        A& dst = *reinterpret_cast<A*>(p[0]);
        dst = combine<A>(op, dst, reduce_row_as<T, A>(op, p[1], inner, si));
      } else {
        add_row(p);
      }
    }
  };
  if (on == 1 && outer == 1 && inner >= kParallelGrain && num_threads() > 1) {
    // One long contiguous-ish row: partial results per thread, then combine.
    std::vector<A> partial(num_threads(), reduce_identity<A>(op));
    parallel_for(inner, kParallelGrain, [&](int64_t b, int64_t e) {
#ifdef _OPENMP
      int t = omp_get_thread_num();
#else
      int t = 0;
#endif
      partial[t] = reduce_row_as<T, A>(op, it.base[1] + b * si, e - b, si);
    });
    for (A v : partial) o0[0] = combine<A>(op, o0[0], v);
    return;
  }
  // Rows write disjoint outputs only when the output does not move along the
  // outer dims that are reduced; keep it simple: parallel only for so == 0 with
  // distinct output per row (all reduced dims innermost). (Splitting the columns
  // of a sum over dim 0 across 2 threads was 2-3x slower than the vectorised
  // serial loop in add_row on our 2-core machine.)
  bool rows_disjoint = so == 0;
  for (int d = 0; d < it.ndim - 1 && rows_disjoint; ++d) rows_disjoint = it.strides[0][d] != 0;
  if (rows_disjoint)
    parallel_for(outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)), do_rows);
  else
    do_rows(0, outer);
}

}  // namespace

class CpuBackend final : public Backend {
 public:
  // Performance: glibc starts with a 128 KiB trim threshold and raises it only
  // once a large block has been freed. Until then, freeing a graph of small
  // tensors hands the top of the heap back to the OS and the next graph faults
  // it in again page by page (bench_overhead: 0.19 -> 1.7 us per op). Start at the
  // values glibc converges to anyway (mmap threshold 32 MiB), with a trim
  // threshold of 256 MiB: a CNN step at batch 64 frees ~100 MiB of activations
  // and im2col buffers at once, and with glibc's 64 MiB the heap top was handed
  // back and re-faulted every step (a third of a Fashion-MNIST CNN step in page
  // faults; 2.5x slower). Left alone when the user tunes malloc through GLIBC_TUNABLES.
  CpuBackend() {
#if defined(__GLIBC__) && defined(M_TRIM_THRESHOLD)
    if (!std::getenv("GLIBC_TUNABLES")) {
      mallopt(M_MMAP_THRESHOLD, 32 << 20);
      mallopt(M_TRIM_THRESHOLD, 256 << 20);
    }
#endif
  }
  DeviceType type() const override { return DeviceType::CPU; }
  const char* name() const override { return "cpu"; }

  // Every buffer is 64-byte aligned (a cache line, an AVX-512 register); buffers
  // of 2 MiB or more are 2 MiB aligned and marked MADV_HUGEPAGE, as PyTorch's
  // CPU allocator does with THP_MEM_ALLOC_ENABLE.
  // Performance (docs/benchmarks.md, "Engine"):
  //  - We over-allocate with malloc and align by hand, keeping the malloc'd
  //    pointer just below the block. std::aligned_alloc takes glibc's memalign
  //    path, which skips the per-thread cache (a quarter of the instructions of
  //    a 1-element add) and, for blocks on the heap, kept taking fresh pages
  //    instead of reusing freed ones.
  //  - A fresh buffer is paged in at first touch; with 4 KiB pages those faults
  //    cost more than the op itself (a 64 MiB add: 16k faults). Huge pages take
  //    512x fewer.
  static constexpr size_t kAlign = 64;
  static constexpr size_t kHugeBytes = size_t{2} << 20;

  void* allocate(size_t nbytes) override {
    const size_t align = nbytes >= kHugeBytes ? kHugeBytes : kAlign;
    void* raw = std::malloc(std::max<size_t>(nbytes, 1) + align);
    if (!raw) out_of_memory(nbytes);
    // malloc's result is aligned for max_align_t (16 bytes), so rounding raw + 8
    // up to `align` leaves room for the raw pointer below the block, and the
    // block still ends inside the allocation.
    static_assert(alignof(std::max_align_t) >= 2 * sizeof(void*));
    const uintptr_t a = (reinterpret_cast<uintptr_t>(raw) + sizeof(void*) + align - 1) & ~uintptr_t{align - 1};
    reinterpret_cast<void**>(a)[-1] = raw;
#ifdef MADV_HUGEPAGE
    if (align == kHugeBytes) madvise(reinterpret_cast<void*>(a), nbytes, MADV_HUGEPAGE);  // a hint
#endif
    return reinterpret_cast<void*>(a);
  }
  void deallocate(void* p, size_t) override {
    if (p) std::free(static_cast<void**>(p)[-1]);
  }
  [[noreturn]] static void out_of_memory(size_t nbytes) {
    throw Error("allocate", "out of host memory allocating " + std::to_string(nbytes) + " bytes");
  }
  void copy_to_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }

  void copy(const Tensor& out, const Tensor& in) override {
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

  void fill(const Tensor& out, double value) override {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T v = static_cast<T>(value);
      for_each_row<1>(out.shape(), {&out}, [&](char** p, int64_t n, const int64_t* st) {
        if (st[0] == sizeof(T)) std::fill_n(reinterpret_cast<T*>(p[0]), n, v);
        else for (int64_t k = 0; k < n; ++k) *at<T>(p[0], k, st[0]) = v;
      });
    });
  }

  void arange(const Tensor& out, double start, double step) override {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* o = static_cast<T*>(out.raw_data());
      for (int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(start + static_cast<double>(i) * step);
    });
  }

  void unary(UnaryOp op, const Tensor& out, const Tensor& in) override {
    const bool pred = op == UnaryOp::IsNan || op == UnaryOp::IsInf || op == UnaryOp::IsFinite;
    dispatch_dtype(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (pred) {
        for_each_row<2>(out.shape(), {&out, &in}, [&](char** p, int64_t n, const int64_t* st) {
          for (int64_t k = 0; k < n; ++k) *at<bool>(p[0], k, st[0]) = unary_pred<T>(op, *at<T>(p[1], k, st[1]));
        });
        return;
      }
      for_each_row<2>(out.shape(), {&out, &in}, [&](char** p, int64_t n, const int64_t* st) {
        if (st[0] == sizeof(T) && st[1] == sizeof(T) &&
            unary_eigen<T>(op, reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]), n))
          return;
        for (int64_t k = 0; k < n; ++k) *at<T>(p[0], k, st[0]) = unary_scalar<T>(op, *at<T>(p[1], k, st[1]));
      });
    });
  }

  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override {
    dispatch_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (is_comparison(op) || (out.dtype() == DType::Bool && a.dtype() != DType::Bool))
        compare_kernel<T>(op, out, a, b);
      else
        binary_kernel<T>(op, out, a, b);
    });
  }

  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for_each_row<4>(out.shape(), {&out, &cond, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
        for (int64_t k = 0; k < n; ++k)
          *at<T>(p[0], k, st[0]) = *at<bool>(p[1], k, st[1]) ? *at<T>(p[2], k, st[2]) : *at<T>(p[3], k, st[3]);
      });
    });
  }

  void clamp(const Tensor& out, const Tensor& in, double lo, double hi) override {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, bool>) {
        const double l = lo, h = hi;
        for_each_row<2>(out.shape(), {&out, &in}, [&](char** p, int64_t n, const int64_t* st) {
          for (int64_t k = 0; k < n; ++k) {
            T x = *at<T>(p[1], k, st[1]);
            double v = static_cast<double>(x);
            // NaN passes through unchanged (comparisons with NaN are false).
            *at<T>(p[0], k, st[0]) = v < l ? static_cast<T>(l) : (v > h ? static_cast<T>(h) : x);
          }
        });
      }
    });
  }

  void reduce(ReduceOp op, const Tensor& out, const Tensor& in, const bool* reduced) override {
    dispatch_dtype(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float>) {
        if (op == ReduceOp::Sum) {
          // float32 sums accumulate in float64: along an outer dim each element
          // is added one by one, and 0.1f added 2^18 times in float is 0.25% off.
          Tensor acc = empty(out.shape(), kFloat64);
          reduce_kernel<float, double>(op, acc, in, reduced);
          copy(out, acc);
          return;
        }
      }
      reduce_kernel<T>(op, out, in, reduced);
    });
  }

  void arg_reduce(bool is_max, const Tensor& out, const Tensor& in, int64_t dim) override {
    // Walk every output position; scan along `dim` with its stride.
    const int64_t n = in.shape()[dim], st = in.strides()[dim];
    Shape oshape = in.shape();
    oshape[dim] = 1;
    int64_t* o = static_cast<int64_t*>(out.raw_data());
    dispatch_dtype(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* base = static_cast<const T*>(in.raw_data());
      int64_t k = 0;
      for_each_index(oshape, [&](const int64_t* idx) {
        int64_t off = 0;
        for (int64_t d = 0; d < in.dim(); ++d) off += idx[d] * in.strides()[d];
        int64_t best = 0;
        T bv = base[off];
        for (int64_t i = 1; i < n; ++i) {
          T v = base[off + i * st];
          bool better = is_max ? v > bv : v < bv;
          if constexpr (std::is_floating_point_v<T>) {
            if (std::isnan(bv)) better = false;  // first NaN wins, as in PyTorch
            else if (std::isnan(v)) better = true;
          }
          if (better) { bv = v; best = i; }
        }
        o[k++] = best;
      });
    });
  }

  void softmax_lastdim(const Tensor& out, const Tensor& in, bool log) override {
    const int64_t C = in.shape().back(), R = in.numel() / std::max<int64_t>(C, 1);
    dispatch_dtype(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_floating_point_v<T>) {
        const T* x = static_cast<const T*>(in.raw_data());
        T* y = static_cast<T*>(out.raw_data());
        parallel_for(R, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            ECArr<T> xr(x + r * C, C);
            EArr<T> yr(y + r * C, C);
            const T m = xr.maxCoeff();
            if (!std::isfinite(m)) {  // all -inf, or a NaN/inf in the row: the slow exact path
              for (int64_t c = 0; c < C; ++c) y[r * C + c] = std::numeric_limits<T>::quiet_NaN();
              if (m == -std::numeric_limits<T>::infinity() || std::isnan(m)) continue;
            }
            yr = (xr - m).exp();
            const T s = static_cast<T>(accurate_sum(y + r * C, C));  // the same at every SIMD width
            if (log) yr = (xr - m) - std::log(s);
            else yr /= s;
          }
        });
      }
    });
  }

  void bmm(const Tensor& out, const Tensor& a, const Tensor& b) override {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, bool>) bmm_typed<T>(out, a, b);
    });
  }

  void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override {
    dispatch_dtype(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in.raw_data());
      const int64_t* ix = static_cast<const int64_t*>(index.raw_data());
      T* o = static_cast<T*>(out.raw_data());
      int64_t k = 0;
      for_each_index(index.shape(), [&](const int64_t* idx) {
        int64_t xo = 0, io = 0;
        for (int64_t d = 0; d < in.dim(); ++d) {
          io += idx[d] * index.strides()[d];
          if (d != dim) xo += idx[d] * in.strides()[d];
        }
        o[k++] = x[xo + ix[io] * in.strides()[dim]];
      });
    });
  }

  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* o = static_cast<T*>(out.raw_data());
      const int64_t* ix = static_cast<const int64_t*>(index.raw_data());
      const T* s = static_cast<const T*>(src.raw_data());
      for_each_index(index.shape(), [&](const int64_t* idx) {
        int64_t oo = 0, io = 0, so = 0;
        for (int64_t d = 0; d < out.dim(); ++d) {
          io += idx[d] * index.strides()[d];
          so += idx[d] * src.strides()[d];
          if (d != dim) oo += idx[d] * out.strides()[d];
        }
        T& dst = o[oo + ix[io] * out.strides()[dim]];
        dst = static_cast<T>(dst + s[so]);
      });
    });
  }

  void index_select(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) override {
    // Copy slice in[..., index[j], ...] to out[..., j, ...] for each j.
    const int64_t* ix = static_cast<const int64_t*>(index.raw_data());
    const int64_t ist = index.dim() ? index.strides()[0] : 0;
    for (int64_t j = 0; j < index.numel(); ++j)
      copy(slice_raw(out, dim, j), slice_raw(in, dim, ix[j * ist]));
  }

  void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override {
    const int64_t* ix = static_cast<const int64_t*>(index.raw_data());
    const int64_t ist = index.dim() ? index.strides()[0] : 0;
    for (int64_t j = 0; j < index.numel(); ++j) {
      Tensor dst = slice_raw(out, dim, ix[j * ist]);
      binary(BinaryOp::Add, dst, dst, slice_raw(src, dim, j));
    }
  }

  void im2col(const Tensor& cols, const Tensor& in, const Conv2dGeometry& g) override {
    dispatch_dtype(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in.raw_data());
      T* c = static_cast<T*>(cols.raw_data());
      const int64_t L = g.outH * g.outW, K = g.C * g.kH * g.kW;
      parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
        for (int64_t nc = b; nc < e; ++nc) {
          const int64_t n = nc / g.C, ch = nc % g.C;
          const T* xp = x + nc * g.H * g.W;
          for (int64_t ki = 0; ki < g.kH; ++ki)
            for (int64_t kj = 0; kj < g.kW; ++kj) {
              const int64_t row = (ch * g.kH + ki) * g.kW + kj;
              T* cp = c + (n * K + row) * L;
              for (int64_t oh = 0; oh < g.outH; ++oh) {
                const int64_t h = oh * g.sH - g.pH + ki * g.dH;
                for (int64_t ow = 0; ow < g.outW; ++ow) {
                  const int64_t w = ow * g.sW - g.pW + kj * g.dW;
                  cp[oh * g.outW + ow] = (h >= 0 && h < g.H && w >= 0 && w < g.W) ? xp[h * g.W + w] : T(0);
                }
              }
            }
        }
      });
    });
  }

  void col2im(const Tensor& out, const Tensor& cols, const Conv2dGeometry& g) override {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* x = static_cast<T*>(out.raw_data());
      const T* c = static_cast<const T*>(cols.raw_data());
      const int64_t L = g.outH * g.outW, K = g.C * g.kH * g.kW;
      parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
        for (int64_t nc = b; nc < e; ++nc) {
          const int64_t n = nc / g.C, ch = nc % g.C;
          T* xp = x + nc * g.H * g.W;
          for (int64_t ki = 0; ki < g.kH; ++ki)
            for (int64_t kj = 0; kj < g.kW; ++kj) {
              const int64_t row = (ch * g.kH + ki) * g.kW + kj;
              const T* cp = c + (n * K + row) * L;
              for (int64_t oh = 0; oh < g.outH; ++oh) {
                const int64_t h = oh * g.sH - g.pH + ki * g.dH;
                if (h < 0 || h >= g.H) continue;
                for (int64_t ow = 0; ow < g.outW; ++ow) {
                  const int64_t w = ow * g.sW - g.pW + kj * g.dW;
                  if (w >= 0 && w < g.W) xp[h * g.W + w] += cp[oh * g.outW + ow];
                }
              }
            }
        }
      });
    });
  }

  void max_pool2d(const Tensor& out, const Tensor& argmax, const Tensor& in, const Conv2dGeometry& g) override {
    dispatch_dtype(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in.raw_data());
      T* o = static_cast<T*>(out.raw_data());
      int64_t* am = static_cast<int64_t*>(argmax.raw_data());
      parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
        if (g.pH == 0 && g.pW == 0) {
          // Fast path (no padding: every window lies inside the plane): no bounds
          // checks and no data-dependent branches, so random inputs cost no
          // mispredictions (2-3x faster than the general loop below). Same rule:
          // the first maximum wins ties, and the first NaN wins outright.
          const int64_t H = g.H, W = g.W, oH = g.outH, oW = g.outW, kH = g.kH, kW = g.kW;
          const int64_t sH = g.sH, sW = g.sW, dH = g.dH, dW = g.dW;
          for (int64_t nc = b; nc < e; ++nc) {
            const T* xp = x + nc * H * W;
            T* op = o + nc * oH * oW;
            int64_t* ap = am + nc * oH * oW;
            for (int64_t oh = 0; oh < oH; ++oh)
              for (int64_t ow = 0; ow < oW; ++ow) {
                const int64_t base = oh * sH * W + ow * sW;
                T best = xp[base];
                int64_t bi = base;
                for (int64_t ki = 0; ki < kH; ++ki)
                  for (int64_t kj = 0; kj < kW; ++kj) {
                    const int64_t i = base + ki * dH * W + kj * dW;
                    const T v = xp[i];
                    const bool take = (v > best || v != v) && best == best;  // v != v: v is NaN
                    best = take ? v : best;
                    bi = take ? i : bi;
                  }
                op[oh * oW + ow] = best;
                ap[oh * oW + ow] = bi;
              }
          }
          return;
        }
        for (int64_t nc = b; nc < e; ++nc) {
          const T* xp = x + nc * g.H * g.W;
          for (int64_t oh = 0; oh < g.outH; ++oh)
            for (int64_t ow = 0; ow < g.outW; ++ow) {
              T best = std::numeric_limits<T>::lowest();
              if constexpr (std::is_floating_point_v<T>) best = -std::numeric_limits<T>::infinity();
              int64_t bi = -1;
              for (int64_t ki = 0; ki < g.kH; ++ki) {
                const int64_t h = oh * g.sH - g.pH + ki * g.dH;
                if (h < 0 || h >= g.H) continue;
                for (int64_t kj = 0; kj < g.kW; ++kj) {
                  const int64_t w = ow * g.sW - g.pW + kj * g.dW;
                  if (w < 0 || w >= g.W) continue;
                  const T v = xp[h * g.W + w];
                  bool nan = false;
                  if constexpr (std::is_floating_point_v<T>) nan = std::isnan(v);
                  if (bi < 0 || v > best || nan) { best = v; bi = h * g.W + w; if (nan) { kj = g.kW; ki = g.kH; } }
                }
              }
              const int64_t oi = nc * g.outH * g.outW + oh * g.outW + ow;
              o[oi] = best;
              am[oi] = bi;
            }
        }
      });
    });
  }

  void max_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& argmax,
                           const Conv2dGeometry& g) override {
    dispatch_dtype(grad_in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* gi = static_cast<T*>(grad_in.raw_data());
      const T* go = static_cast<const T*>(grad_out.raw_data());
      const int64_t* am = static_cast<const int64_t*>(argmax.raw_data());
      const int64_t L = g.outH * g.outW;
      parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
        for (int64_t nc = b; nc < e; ++nc)
          for (int64_t l = 0; l < L; ++l) {
            const int64_t a = am[nc * L + l];
            if (a >= 0) gi[nc * g.H * g.W + a] += go[nc * L + l];
          }
      });
    });
  }

  void avg_pool2d(const Tensor& out, const Tensor& in, const Conv2dGeometry& g) override {
    dispatch_dtype(in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in.raw_data());
      T* o = static_cast<T*>(out.raw_data());
      const double inv = 1.0 / static_cast<double>(g.kH * g.kW);
      parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
        for (int64_t nc = b; nc < e; ++nc) {
          const T* xp = x + nc * g.H * g.W;
          for (int64_t oh = 0; oh < g.outH; ++oh)
            for (int64_t ow = 0; ow < g.outW; ++ow) {
              double s = 0;
              for (int64_t ki = 0; ki < g.kH; ++ki) {
                const int64_t h = oh * g.sH - g.pH + ki;
                if (h < 0 || h >= g.H) continue;
                for (int64_t kj = 0; kj < g.kW; ++kj) {
                  const int64_t w = ow * g.sW - g.pW + kj;
                  if (w >= 0 && w < g.W) s += static_cast<double>(xp[h * g.W + w]);
                }
              }
              o[nc * g.outH * g.outW + oh * g.outW + ow] = static_cast<T>(s * inv);
            }
        }
      });
    });
  }

  void avg_pool2d_backward(const Tensor& grad_in, const Tensor& grad_out, const Conv2dGeometry& g) override {
    dispatch_dtype(grad_in.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* gi = static_cast<T*>(grad_in.raw_data());
      const T* go = static_cast<const T*>(grad_out.raw_data());
      const double inv = 1.0 / static_cast<double>(g.kH * g.kW);
      parallel_for(g.N * g.C, 4, [&](int64_t b, int64_t e) {
        for (int64_t nc = b; nc < e; ++nc) {
          T* gp = gi + nc * g.H * g.W;
          for (int64_t oh = 0; oh < g.outH; ++oh)
            for (int64_t ow = 0; ow < g.outW; ++ow) {
              const T v = static_cast<T>(go[nc * g.outH * g.outW + oh * g.outW + ow] * inv);
              for (int64_t ki = 0; ki < g.kH; ++ki) {
                const int64_t h = oh * g.sH - g.pH + ki;
                if (h < 0 || h >= g.H) continue;
                for (int64_t kj = 0; kj < g.kW; ++kj) {
                  const int64_t w = ow * g.sW - g.pW + kj;
                  if (w >= 0 && w < g.W) gp[h * g.W + w] += v;
                }
              }
            }
        }
      });
    });
  }

  void uniform(const Tensor& out, double lo, double hi, uint64_t seed, uint64_t offset) override {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* o = static_cast<T*>(out.raw_data());
      const int64_t n = out.numel();
      // float: element i is word i; double: element i uses words 2i and 2i+1.
      parallel_for((n + 3) / 4, 4096, [&](int64_t b, int64_t e) {
        uint32_t r[4], r2[4];
        for (int64_t blk = b; blk < e; ++blk) {
          if constexpr (std::is_same_v<T, double>) {
            Philox4x32::round4(seed, offset + 2 * blk, r);
            Philox4x32::round4(seed, offset + 2 * blk + 1, r2);
            const uint32_t w[8] = {r[0], r[1], r[2], r[3], r2[0], r2[1], r2[2], r2[3]};
            for (int j = 0; j < 4 && blk * 4 + j < n; ++j)
              o[blk * 4 + j] = lo + (hi - lo) * Philox4x32::uniform_double(w[2 * j], w[2 * j + 1]);
          } else {
            Philox4x32::round4(seed, offset + blk, r);
            for (int j = 0; j < 4 && blk * 4 + j < n; ++j) {
              const double u = Philox4x32::uniform_float(r[j]);
              if constexpr (std::is_same_v<T, bool>) o[blk * 4 + j] = u < 0.5;
              else if constexpr (std::is_integral_v<T>) o[blk * 4 + j] = static_cast<T>(std::floor(lo + (hi - lo) * u));
              else o[blk * 4 + j] = static_cast<T>(lo + (hi - lo) * u);
            }
          }
        }
      });
    });
  }

  void normal(const Tensor& out, double mean, double std, uint64_t seed, uint64_t offset) override {
    dispatch_dtype(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* o = static_cast<T*>(out.raw_data());
      const int64_t n = out.numel();
      // Box–Muller: elements (2j, 2j+1) come from block offset + j.
      parallel_for((n + 1) / 2, 2048, [&](int64_t b, int64_t e) {
        uint32_t r[4];
        for (int64_t j = b; j < e; ++j) {
          Philox4x32::round4(seed, offset + j, r);
          const double u1 = 1.0 - Philox4x32::uniform_double(r[0], r[1]);  // (0, 1]
          const double u2 = Philox4x32::uniform_double(r[2], r[3]);
          const double rad = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
          o[2 * j] = static_cast<T>(mean + std * rad * std::cos(th));
          if (2 * j + 1 < n) o[2 * j + 1] = static_cast<T>(mean + std * rad * std::sin(th));
        }
      });
    });
  }

 private:
  // GEMM through Eigen maps of the operands' own memory: a row-major or a
  // column-major (transposed view) operand is mapped without a copy.
  template <class T>
  void bmm_typed(const Tensor& out, const Tensor& a, const Tensor& b) {
    using Dyn = Eigen::Stride<Eigen::Dynamic, 1>;
    using RowM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using ColM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
    const int64_t B = out.shape()[0], N = out.shape()[1], M = out.shape()[2], K = a.shape()[2];
    T* o = static_cast<T*>(out.raw_data());
    // Layout of the last two dims: 0 = row-major, 1 = column-major, -1 = neither.
    auto layout = [](const Tensor& t, int64_t rows, int64_t cols, int64_t& ld) {
      const int64_t sr = t.strides()[1], sc = t.strides()[2];
      if (sc == 1 || cols == 1) { ld = std::max<int64_t>(rows == 1 ? cols : sr, cols); return (rows == 1 || sr >= cols) ? 0 : -1; }
      if (sr == 1 || rows == 1) { ld = std::max<int64_t>(cols == 1 ? rows : sc, rows); return (cols == 1 || sc >= rows) ? 1 : -1; }
      return -1;
    };
    int64_t lda = 0, ldb = 0;
    const Tensor A = layout(a, N, K, lda) < 0 ? a.contiguous() : a;
    const Tensor Bt = layout(b, K, M, ldb) < 0 ? b.contiguous() : b;
    const int la = layout(A, N, K, lda), lb = layout(Bt, K, M, ldb);
    const T* pa = static_cast<const T*>(A.raw_data());
    const T* pb = static_cast<const T*>(Bt.raw_data());
    for (int64_t i = 0; i < B; ++i) {
      Eigen::Map<RowM> C(o + i * N * M, N, M);
      const T* ai = pa + i * A.strides()[0];
      const T* bi = pb + i * Bt.strides()[0];
      auto run = [&](const auto& Am) {
        if (lb == 0) C.noalias() = Am * Eigen::Map<const RowM, 0, Dyn>(bi, K, M, Dyn(ldb, 1));
        else C.noalias() = Am * Eigen::Map<const ColM, 0, Dyn>(bi, K, M, Dyn(ldb, 1));
      };
      if (la == 0) run(Eigen::Map<const RowM, 0, Dyn>(ai, N, K, Dyn(lda, 1)));
      else run(Eigen::Map<const ColM, 0, Dyn>(ai, N, K, Dyn(lda, 1)));
    }
  }
};

}  // namespace cpu

Backend& cpu_backend() {
  static cpu::CpuBackend b;
  return b;
}

}  // namespace gradsleuth
