// cuda/elementwise.cu: unary and binary ops, comparisons, where, clamp and arange on the
// device, with the CPU backend's scalar semantics (core/cpu/elementwise.cpp): NaN wins in
// maximum/minimum, integer division by zero gives 0, bool add/mul are or/and.
#include "cuda/compat.h"

#include <math.h>

#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

template <class T>
struct UnaryF {
  UnaryOp op;
  __device__ T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return op == UnaryOp::LogicalNot ? !x : x;  // abs/sign/relu/square of a bool are the bool
    } else {
      using M = MathT<T>;
      const M m = static_cast<M>(x);
      switch (op) {
        case UnaryOp::Neg: return static_cast<T>(-x);
        case UnaryOp::Exp: return static_cast<T>(exp(m));
        case UnaryOp::Log: return static_cast<T>(log(m));
        case UnaryOp::Sqrt: return static_cast<T>(sqrt(m));
        case UnaryOp::Abs: return x < 0 ? static_cast<T>(-x) : x;
        case UnaryOp::Sign: return static_cast<T>((x > 0) - (x < 0));
        case UnaryOp::Relu: return x <= T(0) ? T(0) : x;  // NaN passes through, as on the CPU
        case UnaryOp::Sigmoid: {
          // Stable for large |x|: never exponentiates a positive number.
          if (m >= 0) return static_cast<T>(M(1) / (M(1) + exp(-m)));
          const M e = exp(m);
          return static_cast<T>(e / (M(1) + e));
        }
        case UnaryOp::Tanh: return static_cast<T>(tanh(m));
        case UnaryOp::Erf: return static_cast<T>(erf(m));
        case UnaryOp::Reciprocal: return static_cast<T>(M(1) / m);
        case UnaryOp::Square: return static_cast<T>(x * x);
        case UnaryOp::Log1p: return static_cast<T>(log1p(m));
        case UnaryOp::Expm1: return static_cast<T>(expm1(m));
        case UnaryOp::Sin: return static_cast<T>(sin(m));
        case UnaryOp::Cos: return static_cast<T>(cos(m));
        case UnaryOp::LogicalNot: return static_cast<T>(x == 0);
        case UnaryOp::IsNan:  // predicates go through PredF; listed so that a new op is a compile warning
        case UnaryOp::IsInf:
        case UnaryOp::IsFinite:
        case UnaryOp::kCount: return x;
      }
      return x;
    }
  }
};

template <class T>
struct PredF {
  UnaryOp op;
  __device__ bool operator()(T x) const {
    if constexpr (is_float_v<T>) {
      const bool nan = x != x;
      const bool inf = x == static_cast<T>(INFINITY) || x == -static_cast<T>(INFINITY);
      if (op == UnaryOp::IsNan) return nan;
      if (op == UnaryOp::IsInf) return inf;
      return !nan && !inf;
    } else {
      return op == UnaryOp::IsFinite;
    }
  }
};

template <class T>
struct BinaryF {
  BinaryOp op;
  __device__ T operator()(T a, T b) const {
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
        case BinaryOp::Add: return static_cast<T>(a + b);
        case BinaryOp::Sub: return static_cast<T>(a - b);
        case BinaryOp::Mul: return static_cast<T>(a * b);
        case BinaryOp::Div:
          if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : static_cast<T>(a / b);  // ops/ never sends ints here
          else return a / b;
        case BinaryOp::Pow: return static_cast<T>(pow(static_cast<MathT<T>>(a), static_cast<MathT<T>>(b)));
        case BinaryOp::Maximum:
          if (is_nan(a) || is_nan(b)) return a + b;  // NaN wins
          return a > b ? a : b;
        case BinaryOp::Minimum:
          if (is_nan(a) || is_nan(b)) return a + b;
          return a < b ? a : b;
        case BinaryOp::LogicalAnd: return static_cast<T>((a != 0) && (b != 0));
        case BinaryOp::LogicalOr: return static_cast<T>((a != 0) || (b != 0));
        case BinaryOp::Eq: case BinaryOp::Ne: case BinaryOp::Lt: case BinaryOp::Le: case BinaryOp::Gt:
        case BinaryOp::Ge: case BinaryOp::kCount: return a;  // comparisons go through CompareF
      }
      return a;
    }
  }
};

template <class T>
struct CompareF {
  BinaryOp op;
  __device__ bool operator()(T a, T b) const {
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
};

// o[i] = f(a[i]) over n elements (row-major order of the shared shape). 1-D grid-stride.
template <class TO, class TI, class F>
__global__ void map1_kernel(TO* o, Strided so, const TI* a, Strided sa, int64_t n, F f) {
  for (GS_GRID_STRIDE(i, n)) o[so.offset(i)] = f(a[sa.offset(i)]);
}

// o[i] = f(a[i], b[i]). 1-D grid-stride.
template <class TO, class TI, class F>
__global__ void map2_kernel(TO* o, Strided so, const TI* a, Strided sa, const TI* b, Strided sb, int64_t n, F f) {
  for (GS_GRID_STRIDE(i, n)) o[so.offset(i)] = f(a[sa.offset(i)], b[sb.offset(i)]);
}

// o[i] = c[i] ? a[i] : b[i]. 1-D grid-stride.
template <class T>
__global__ void where_kernel(T* o, Strided so, const bool* c, Strided sc, const T* a, Strided sa, const T* b, Strided sb,
                             int64_t n) {
  for (GS_GRID_STRIDE(i, n)) o[so.offset(i)] = c[sc.offset(i)] ? a[sa.offset(i)] : b[sb.offset(i)];
}

// o[i] = clamp(a[i], lo, hi); NaN passes through. 1-D grid-stride.
template <class T>
__global__ void clamp_kernel(T* o, Strided so, const T* a, Strided sa, int64_t n, double lo, double hi) {
  for (GS_GRID_STRIDE(i, n)) {
    const T x = a[sa.offset(i)];
    const double v = static_cast<double>(x);
    o[so.offset(i)] = v < lo ? static_cast<T>(lo) : (v > hi ? static_cast<T>(hi) : x);
  }
}

// o[i] = x[i] <= th ? 0 : g[i] (relu's backward): a NaN x passes g, an infinite g where
// x <= th gives 0. The threshold arrives as T (a double compare would differ from the CPU's
// for a float threshold that T cannot hold exactly). 1-D grid-stride.
template <class T>
__global__ void threshold_backward_kernel(T* o, Strided so, const T* g, Strided sg, const T* x, Strided sx, int64_t n,
                                          T th) {
  for (GS_GRID_STRIDE(i, n)) o[so.offset(i)] = x[sx.offset(i)] <= th ? T(0) : g[sg.offset(i)];
}

// o[i] = start + i * step, contiguous. 1-D grid-stride.
template <class T>
__global__ void arange_kernel(T* o, int64_t n, double start, double step) {
  for (GS_GRID_STRIDE(i, n)) o[i] = static_cast<T>(start + static_cast<double>(i) * step);
}

template <class TO, class TI, class F>
void map1(const char* op, const DevTensor& out, const DevTensor& a, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool c = all_contiguous(out, a);
  launch_op(op, map1_kernel<TO, TI, F>, blocks_for(n), kThreads, 0, static_cast<TO*>(out.data), c ? flat(n) : out.g,
            static_cast<const TI*>(a.data), c ? flat(n) : a.g, n, f);
}

template <class TO, class TI, class F>
void map2(const char* op, const DevTensor& out, const DevTensor& a, const DevTensor& b, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool c = all_contiguous(out, a, b);
  launch_op(op, map2_kernel<TO, TI, F>, blocks_for(n), kThreads, 0, static_cast<TO*>(out.data), c ? flat(n) : out.g,
            static_cast<const TI*>(a.data), c ? flat(n) : a.g, static_cast<const TI*>(b.data), c ? flat(n) : b.g, n, f);
}

}  // namespace

void arange(const DevTensor& out, double start, double step) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("arange", arange_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data), n, start, step);
  });
}

void unary(UnaryOp op, const DevTensor& out, const DevTensor& in) {
  const bool pred = op == UnaryOp::IsNan || op == UnaryOp::IsInf || op == UnaryOp::IsFinite;
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (pred) map1<bool, T>(unary_op_name(op), out, in, PredF<T>{op});
    else map1<T, T>(unary_op_name(op), out, in, UnaryF<T>{op});
  });
}

void binary(BinaryOp op, const DevTensor& out, const DevTensor& a, const DevTensor& b) {
  dispatch(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (is_comparison(op) || (out.dtype == DType::Bool && a.dtype != DType::Bool))
      map2<bool, T>(binary_op_name(op), out, a, b, CompareF<T>{op});
    else
      map2<T, T>(binary_op_name(op), out, a, b, BinaryF<T>{op});
  });
}

void where(const DevTensor& out, const DevTensor& cond, const DevTensor& a, const DevTensor& b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    launch_op("where", where_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data), out.g,
              static_cast<const bool*>(cond.data), cond.g, static_cast<const T*>(a.data), a.g,
              static_cast<const T*>(b.data), b.g, n);
  });
}

void clamp(const DevTensor& out, const DevTensor& in, double lo, double hi) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>)  // as on the CPU: clamp of bool is not a kernel
      launch_op("clamp", clamp_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data), out.g,
                static_cast<const T*>(in.data), in.g, n, lo, hi);
  });
}

void threshold_backward(const DevTensor& out, const DevTensor& grad, const DevTensor& x, double threshold) {
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    const bool c = all_contiguous(out, grad, x);
    launch_op("threshold_backward", threshold_backward_kernel<T>, blocks_for(n), kThreads, 0, static_cast<T*>(out.data),
              c ? flat(n) : out.g, static_cast<const T*>(grad.data), c ? flat(n) : grad.g,
              static_cast<const T*>(x.data), c ? flat(n) : x.g, n, static_cast<T>(threshold));
  });
}

}  // namespace gradsleuth::cuda
