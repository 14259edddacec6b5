// CPU backend, elementwise: unary and binary ops, comparisons, where, clamp and
// arange. Contiguous transcendental paths use Eigen's vectorised packet math.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/cpu/cpu_backend.h"

namespace gradsleuth::cpu {

namespace {

// ---- unary ------------------------------------------------------------------
template <class T>
T unary_scalar(UnaryOp op, T x) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case UnaryOp::LogicalNot: return !x;
      case UnaryOp::Abs: case UnaryOp::Sign: case UnaryOp::Relu: case UnaryOp::Square: return x;
      case UnaryOp::Neg: case UnaryOp::Exp: case UnaryOp::Log: case UnaryOp::Sqrt: case UnaryOp::Sigmoid:
      case UnaryOp::Tanh: case UnaryOp::Erf: case UnaryOp::Reciprocal: case UnaryOp::Log1p: case UnaryOp::Expm1:
      case UnaryOp::Sin: case UnaryOp::Cos: case UnaryOp::IsNan: case UnaryOp::IsInf: case UnaryOp::IsFinite:
      case UnaryOp::kCount: return x;
    }
    return x;
  } else {
    switch (op) {
      case UnaryOp::Neg: return -x;
      case UnaryOp::Exp: return static_cast<T>(std::exp(x));
      case UnaryOp::Log: return static_cast<T>(std::log(x));
      case UnaryOp::Sqrt: return static_cast<T>(std::sqrt(x));
      case UnaryOp::Abs: return x < 0 ? -x : x;
      case UnaryOp::Sign: return static_cast<T>((x > 0) - (x < 0));
      case UnaryOp::Relu: return x <= T(0) ? T(0) : x;  // NaN propagates (as in PyTorch) on every path
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
      // Predicates go through unary_pred. No default: a new UnaryOp without a case here is
      // a -Wswitch warning, not a silent identity.
      case UnaryOp::IsNan: case UnaryOp::IsInf: case UnaryOp::IsFinite: case UnaryOp::kCount: return x;
    }
    return x;
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

// Recomputes with the scalar function every element whose input lies outside
// [lo, hi] (NaN included). Such inputs are rare: a branch-free pass (which the
// compiler vectorises) finds whether there are any before the scalar one runs.
template <class T>
void redo_outside(UnaryOp op, T* o, const T* a, int64_t n, T lo, T hi) {
  bool any = false;
  for (int64_t i = 0; i < n; ++i) any |= !(a[i] >= lo && a[i] <= hi);
  if (!any) return;
  for (int64_t i = 0; i < n; ++i)
    if (!(a[i] >= lo && a[i] <= hi)) o[i] = unary_scalar<T>(op, a[i]);
}

// Vectorised contiguous versions of the transcendental functions (Eigen's
// packet math); returns false when there is none for this op/type.
template <class T>
bool unary_eigen(UnaryOp op, T* o, const T* a, int64_t n) {
  if constexpr (std::is_floating_point_v<T>) {
    EArr<T> y(o, n);
    ECArr<T> x(a, n);
    // Where exp(x) is a normal finite number, with a margin of 1 at the top. Eigen's
    // packet exp clamps its argument to about that range, so beyond it exp(-inf) came
    // out as 2.9e-39 (float) or 5.6e-309 (double) instead of 0, exp(-1000) likewise
    // (log(exp(-1000)) = -87.3 instead of -inf), results in the denormal range were
    // wrong, and float exp(88.5) = 2.7e38 overflowed to inf: those inputs are redone
    // with std::exp, which underflows to 0 and overflows to inf exactly where it must.
    const T exp_lo = std::log(std::numeric_limits<T>::min()), exp_hi = std::log(std::numeric_limits<T>::max()) - T(1);
    switch (op) {
      case UnaryOp::Exp:
        if (o == a) return false;  // the fix-up re-reads the input
        y = x.exp();
        redo_outside<T>(op, o, a, n, exp_lo, exp_hi);
        return true;
      case UnaryOp::Log:
        // Eigen's packet log flushes denormal inputs to the smallest normal number
        // (log(1e-40f) = -87.3 instead of -92.1): redone, with 0, negatives and NaN.
        if (o == a) return false;
        y = x.log();
        redo_outside<T>(op, o, a, n, std::numeric_limits<T>::min(), std::numeric_limits<T>::infinity());
        return true;
      case UnaryOp::Sqrt: y = x.sqrt(); return true;
      case UnaryOp::Tanh: y = x.tanh(); return true;
      case UnaryOp::Sigmoid: {
        // e = exp(-|x|) never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0.
        // (Not 1 - 1/(1+e): that rounds sigmoid(-40) to 0 instead of 4e-18.)
        // exp(-|x|) leaves Eigen's exact range for |x| > -exp_lo: redone as above.
        if (o == a) return false;
        y = (-x.abs()).exp();
        y = (x >= T(0)).select(T(1), y) / (T(1) + y);
        redo_outside<T>(op, o, a, n, exp_lo, -exp_lo);
        return true;
      }
      case UnaryOp::Neg: y = -x; return true;
      case UnaryOp::Relu: y = (x <= T(0)).select(T(0), x); return true;  // NaN propagates, like unary_scalar
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
      case BinaryOp::Div: case BinaryOp::Pow: case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt:
      case BinaryOp::Le: case BinaryOp::Gt: case BinaryOp::Ge: case BinaryOp::kCount: return a;
    }
    return a;
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
      // Comparisons go through compare_scalar.
      case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt: case BinaryOp::Le: case BinaryOp::Gt:
      case BinaryOp::Ge: case BinaryOp::kCount: return a;
    }
    return a;
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
    case BinaryOp::Add: case BinaryOp::Sub: case BinaryOp::Mul: case BinaryOp::Div: case BinaryOp::Pow:
    case BinaryOp::Maximum: case BinaryOp::Minimum: case BinaryOp::kCount: return false;
  }
  return false;
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

// out (bool) = f(a, b). Contiguous rows, and rows against a broadcast scalar (relu's
// backward compares with 0), are spelled out so they vectorise: the op is chosen
// once per call, not per element.
template <class T, class F>
void compare_rows(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  for_each_row<3>(out.shape(), {&out, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
    bool* o = reinterpret_cast<bool*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    constexpr int64_t e = sizeof(T);
    if (st[0] == 1 && st[1] == e && st[2] == e) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (st[0] == 1 && st[1] == e && st[2] == 0) {
      const T yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else {
      for (int64_t i = 0; i < n; ++i) *at<bool>(p[0], i, st[0]) = f(*at<T>(p[1], i, st[1]), *at<T>(p[2], i, st[2]));
    }
  });
}

template <class T>
void compare_kernel(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (op) {
    case BinaryOp::Gt: compare_rows<T>(out, a, b, [](T x, T y) { return x > y; }); return;
    case BinaryOp::Ge: compare_rows<T>(out, a, b, [](T x, T y) { return x >= y; }); return;
    case BinaryOp::Lt: compare_rows<T>(out, a, b, [](T x, T y) { return x < y; }); return;
    case BinaryOp::Le: compare_rows<T>(out, a, b, [](T x, T y) { return x <= y; }); return;
    case BinaryOp::Eq: compare_rows<T>(out, a, b, [](T x, T y) { return x == y; }); return;
    case BinaryOp::Ne: compare_rows<T>(out, a, b, [](T x, T y) { return x != y; }); return;
    default: compare_rows<T>(out, a, b, [op](T x, T y) { return compare_scalar<T>(op, x, y); }); return;
  }
}

}  // namespace

void CpuBackend::arange(const Tensor& out, double start, double step) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.raw_data());
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
}

void CpuBackend::unary(UnaryOp op, const Tensor& out, const Tensor& in) {
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

void CpuBackend::binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (is_comparison(op) || (out.dtype() == DType::Bool && a.dtype() != DType::Bool))
      compare_kernel<T>(op, out, a, b);
    else
      binary_kernel<T>(op, out, a, b);
  });
}

namespace {
// One row of where() with contiguous out and cond, each branch contiguous (A_ / B_
// true) or a broadcast scalar: a select GCC vectorises. relu's backward is
// where(x <= 0, 0, g) over a CNN's activations; through the strided loop it cost a
// tenth of a CNN step.
template <class T, bool A_, bool B_>
void where_row(T* o, const uint8_t* c, const T* a, const T* b, int64_t n) {  // out may be b (masked_fill_)
  const T av = A_ ? T() : *a, bv = B_ ? T() : *b;  // a broadcast side has its one element
  // Both sides loaded unconditionally and the condition read as bytes: GCC 12 neither
  // if-converts a conditional load nor finds a vector type for a bool load.
  for (int64_t i = 0; i < n; ++i) {
    const T x = A_ ? a[i] : av, y = B_ ? b[i] : bv;
    o[i] = c[i] != 0 ? x : y;
  }
}
}  // namespace

void CpuBackend::where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_each_row<4>(out.shape(), {&out, &cond, &a, &b}, [&](char** p, int64_t n, const int64_t* st) {
      constexpr int64_t e = sizeof(T);
      if (st[0] == e && st[1] == 1 && (st[2] == e || st[2] == 0) && (st[3] == e || st[3] == 0)) {
        T* o = reinterpret_cast<T*>(p[0]);
        const uint8_t* c = reinterpret_cast<const uint8_t*>(p[1]);  // a bool is one byte, 0 or 1
        const T* x = reinterpret_cast<const T*>(p[2]);
        const T* y = reinterpret_cast<const T*>(p[3]);
        if (st[2] == e && st[3] == e) where_row<T, true, true>(o, c, x, y, n);
        else if (st[2] == e) where_row<T, true, false>(o, c, x, y, n);
        else if (st[3] == e) where_row<T, false, true>(o, c, x, y, n);
        else where_row<T, false, false>(o, c, x, y, n);
        return;
      }
      for (int64_t k = 0; k < n; ++k)
        *at<T>(p[0], k, st[0]) = *at<bool>(p[1], k, st[1]) ? *at<T>(p[2], k, st[2]) : *at<T>(p[3], k, st[3]);
    });
  });
}

namespace {
// One contiguous row of relu's backward. Both x and g are loaded unconditionally (as in
// where_row: GCC 12 does not if-convert a conditional load), so the loop is a compare and
// a masked move; a select, not g * (x > 0), so that an infinite g at x <= 0 gives 0.
template <class T>
void threshold_backward_row(T* o, const T* g, const T* x, int64_t n, T th) {
  for (int64_t i = 0; i < n; ++i) {
    const T gv = g[i], xv = x[i];
    o[i] = xv <= th ? T(0) : gv;
  }
}
}  // namespace

// relu's backward in one pass: where(x <= 0, 0, g) read x, wrote a bool mask, then read
// the mask and g (a tenth of a CNN step's time went to the two passes).
void CpuBackend::threshold_backward(const Tensor& out, const Tensor& grad, const Tensor& x, double threshold) {
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T th = static_cast<T>(threshold);  // as the compare with a wrapped scalar: in x's dtype
    for_each_row<3>(out.shape(), {&out, &grad, &x}, [&](char** p, int64_t n, const int64_t* st) {
      constexpr int64_t e = sizeof(T);
      if (st[0] == e && st[1] == e && st[2] == e) {
        threshold_backward_row<T>(reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]),
                                  reinterpret_cast<const T*>(p[2]), n, th);
        return;
      }
      for (int64_t k = 0; k < n; ++k) *at<T>(p[0], k, st[0]) = *at<T>(p[2], k, st[2]) <= th ? T(0) : *at<T>(p[1], k, st[1]);
    });
  });
}

void CpuBackend::clamp(const Tensor& out, const Tensor& in, double lo, double hi) {
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

}  // namespace gradsleuth::cpu
