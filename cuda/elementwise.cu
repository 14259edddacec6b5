// cuda/elementwise.cu: unary and binary ops, comparisons, where, clamp and arange on the
// device. Each op's scalar formula is core/elementwise_math.h's, the one the CPU backend
// calls (NaN wins in maximum/minimum, integer division by zero gives 0, bool add/mul are
// or/and); one kernel per dtype serves every op, chosen per element by a switch. A float16 or
// bfloat16 element is widened to float32, computed by the float32 formula and rounded once on store.
#include "cuda/compat.h"

#include <math.h>

#include "core/elementwise_math.h"
#include "cuda/kernel_utils.h"

namespace gradsleuth::cuda {

namespace {

// T is the stored type; C = compute_t<T> the one the formula runs in (float for 16-bit T).
template <class T>
struct UnaryF {
  UnaryOp op;
  __device__ T operator()(T x) const { return narrow<T>(ew::unary_value<compute_t<T>>(op, widen(x))); }
};

template <class T>
struct PredF {
  UnaryOp op;
  __device__ bool operator()(T x) const { return ew::unary_predicate<compute_t<T>>(op, widen(x)); }
};

// A and B are T, or float for the unrounded float32 number beside a 16-bit T (core/ops/op_utils.h,
// scalar_operand_dtype).
template <class T>
struct BinaryF {
  BinaryOp op;
  template <class A, class B>
  __device__ T operator()(A a, B b) const {
    return narrow<T>(ew::binary_value<compute_t<T>>(op, widen(a), widen(b)));
  }
};

template <class T>
struct CompareF {
  BinaryOp op;
  __device__ bool operator()(T a, T b) const { return ew::compare_value<compute_t<T>>(op, widen(a), widen(b)); }
};

// o[i] = f(a[i]) over n elements (row-major order of the shared shape). 1-D grid-stride.
template <class TO, class TI, class F>
__global__ void map1_kernel(TO* o, Strided so, const TI* a, Strided sa, int64_t n, F f) {
  for (GS_GRID_STRIDE(i, n)) o[so.offset(i)] = f(a[sa.offset(i)]);
}

// o[i] = f(a[i], b[i]). 1-D grid-stride.
template <class TO, class TA, class TB, class F>
__global__ void map2_kernel(TO* o, Strided so, const TA* a, Strided sa, const TB* b, Strided sb, int64_t n, F f) {
  for (GS_GRID_STRIDE(i, n)) o[so.offset(i)] = f(a[sa.offset(i)], b[sb.offset(i)]);
}

// o[i] = c[i] ? a[i] : b[i]. 1-D grid-stride.
template <class T>
__global__ void where_kernel(T* o, Strided so, const bool* c, Strided sc, const T* a, Strided sa, const T* b,
                             Strided sb, int64_t n) {
  for (GS_GRID_STRIDE(i, n)) o[so.offset(i)] = c[sc.offset(i)] ? a[sa.offset(i)] : b[sb.offset(i)];
}

// o[i] = clamp(a[i], lo, hi); NaN passes through. 1-D grid-stride.
template <class T>
__global__ void clamp_kernel(T* o, Strided so, const T* a, Strided sa, int64_t n, double lo, double hi) {
  for (GS_GRID_STRIDE(i, n)) {
    const T x = a[sa.offset(i)];
    const double v = static_cast<double>(widen(x));
    o[so.offset(i)] = v < lo ? convert<T>(lo) : (v > hi ? convert<T>(hi) : x);
  }
}

// o[i] = x[i] <= th ? 0 : g[i] (relu's backward): a NaN x passes g, an infinite g where
// x <= th gives 0. The threshold arrives as compute_t<T> (a double compare would differ from the
// CPU's for a float threshold that T cannot hold exactly). 1-D grid-stride.
template <class T>
__global__ void threshold_backward_kernel(T* o, Strided so, const T* g, Strided sg, const T* x, Strided sx, int64_t n,
                                          compute_t<T> th) {
  const T zero = narrow<T>(compute_t<T>(0));
  for (GS_GRID_STRIDE(i, n)) o[so.offset(i)] = widen(x[sx.offset(i)]) <= th ? zero : g[sg.offset(i)];
}

// o[i] = start + i * step, contiguous. 1-D grid-stride.
template <class T>
__global__ void arange_kernel(T* o, int64_t n, double start, double step) {
  for (GS_GRID_STRIDE(i, n)) o[i] = convert<T>(start + static_cast<double>(i) * step);
}

template <class TO, class TI, class F>
void map1(const char* op, const DevTensor& out, const DevTensor& a, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool c = all_contiguous(out, a);
  launch_op(op, map1_kernel<TO, TI, F>, blocks_for(n), kThreads, 0, static_cast<TO*>(out.data), c ? flat(n) : out.g,
            static_cast<const TI*>(a.data), c ? flat(n) : a.g, n, f);
}

template <class TO, class TA, class TB = TA, class F>
void map2(const char* op, const DevTensor& out, const DevTensor& a, const DevTensor& b, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool c = all_contiguous(out, a, b);
  launch_op(op, map2_kernel<TO, TA, TB, F>, blocks_for(n), kThreads, 0, static_cast<TO*>(out.data), c ? flat(n) : out.g,
            static_cast<const TA*>(a.data), c ? flat(n) : a.g, static_cast<const TB*>(b.data), c ? flat(n) : b.g, n, f);
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
  dispatch(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (ew::is_predicate(op))
      map1<bool, T>(unary_op_name(op), out, in, PredF<T>{op});
    else
      map1<T, T>(unary_op_name(op), out, in, UnaryF<T>{op});
  });
}

void binary(BinaryOp op, const DevTensor& out, const DevTensor& a, const DevTensor& b) {
  // Operands of two dtypes: a 16-bit tensor and the float32 number beside it (add/sub/mul/div/pow).
  const bool mixed = a.dtype != b.dtype;
  const DType ct = mixed && is_reduced_float(b.dtype) ? b.dtype : a.dtype;
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    if (mixed) {
      const DType other = ct == a.dtype ? b.dtype : a.dtype;
      GS_CHECK(is_half_v<T> && other == DType::Float32 && out.dtype == ct, binary_op_name(op),
               "internal error: CUDA operands of dtypes ", dtype_name(a.dtype), " and ", dtype_name(b.dtype), " into ",
               dtype_name(out.dtype), " (only a 16-bit tensor with a float32 number mixes)");
      if constexpr (is_half_v<T>) {
        if (a.dtype == ct)
          map2<T, T, float>(binary_op_name(op), out, a, b, BinaryF<T>{op});
        else
          map2<T, float, T>(binary_op_name(op), out, a, b, BinaryF<T>{op});
      }
      return;
    }
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
              static_cast<const T*>(x.data), c ? flat(n) : x.g, n, static_cast<compute_t<T>>(threshold));
  });
}

}  // namespace gradsleuth::cuda
