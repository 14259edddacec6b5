// CPU backend, the fused conv2d (groups = 1, NCHW, float32/float64): forward and
// first-order backward one sample at a time, each sample's columns built in a
// scratch buffer that stays in cache instead of one (C*kH*kW, N*L) buffer for the
// whole batch (14 MB for the CNN's second conv, every pass over it from memory).
//
//   forward   out[n] (O, L)  = bias + W (O, CK) @ cols(x[n]) (CK, L)   written in place, NCHW
//   backward  dW  (O, CK)   += dOut[n] (O, L) @ cols(x[n])^T           (columns recomputed)
//             dx[n]          = col2im(W^T (CK, O) @ dOut[n])           (zeroed per sample)
//             db[o]          = sum over n, l of dOut[n][o][l]          (float64 sums)
//
// Each product is done by one of the algorithms below; pick_algo() is the one place
// that chooses, one branch per algorithm:
//   kGemm    the BLAS (blas.h; Eigen's product without one) on one sample's operands,
//            all L2-resident: the CNN's second conv (64 x 288 x 196) ran at 96 GFLOP/s
//            this way against 77 for the single batched (64 x 288 x 12544) GEMM.
//   kSmallK  C*kH*kW <= kSmallK (a first conv on 1-3 channels): with K = 9 a GEMM is
//            mostly packing (35 GFLOP/s); a hand-written loop over the L1-resident
//            columns keeps each output block in registers across the taps.
// The composite path of ops/conv.cpp (unfold + matmul) is the reference; the tests
// compare the two on many geometries.
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include "core/cpu/accurate_sum.h"
#include "core/cpu/blas.h"
#include "core/cpu/conv_cols.h"
#include "core/cpu/cpu_backend.h"

namespace gradsleuth::cpu {

namespace {

enum class ConvAlgo { kGemm, kSmallK };

// Up to this many rows of columns (C*kH*kW) the direct kernel beats the BLAS (see
// the top of the file; measured on the CNN's first conv, C*kH*kW = 9).
constexpr int64_t kSmallK = 16;

ConvAlgo pick_algo(const Conv2dGeometry& g) {
  const int64_t CK = g.C * g.kH * g.kW;
  if (CK <= kSmallK) return ConvAlgo::kSmallK;
  return ConvAlgo::kGemm;
}

// A 1x1 kernel with stride 1 and no padding reads the input as it is: its columns
// are x[n] itself, (C, H*W), and col2im is the identity.
bool cols_are_input(const Conv2dGeometry& g) {
  return g.kH == 1 && g.kW == 1 && g.sH == 1 && g.sW == 1 && g.pH == 0 && g.pW == 0;
}

// Uninitialised scratch (every use writes it before reading), 64-byte aligned: the
// kernels' 64-byte vector loads would otherwise straddle two cache lines each.
struct AlignedFree {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
template <class T>
std::unique_ptr<T[], AlignedFree> scratch(int64_t n) {
  const size_t count = static_cast<size_t>(n > 0 ? n : 1);
  return std::unique_ptr<T[], AlignedFree>(static_cast<T*>(::operator new[](count * sizeof(T), std::align_val_t(64))));
}

// C (M, N) row-major, leading dimension ldc, = A @ B (+ C when accumulate). A and
// B row- or column-major as in blas_gemm. The BLAS when built in, else Eigen.
template <class T>
void gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
          int64_t ldb, bool accumulate, T* C, int64_t ldc) {
  if (blas_gemm(a_col, b_col, M, N, K, A, lda, B, ldb, accumulate ? T(1) : T(0), C, ldc)) return;
  using Dyn = Eigen::Stride<Eigen::Dynamic, 1>;
  using RowM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  Eigen::Map<RowM, 0, Dyn> Cm(C, M, N, Dyn(ldc, 1));
  auto with_b = [&](const auto& Am) {
    auto run = [&](const auto& Bm) {
      if (accumulate) Cm.noalias() += Am * Bm;
      else Cm.noalias() = Am * Bm;
    };
    if (b_col) run(Eigen::Map<const ColM, 0, Dyn>(B, K, N, Dyn(ldb, 1)));
    else run(Eigen::Map<const RowM, 0, Dyn>(B, K, N, Dyn(ldb, 1)));
  };
  if (a_col) with_b(Eigen::Map<const ColM, 0, Dyn>(A, M, K, Dyn(lda, 1)));
  else with_b(Eigen::Map<const RowM, 0, Dyn>(A, M, K, Dyn(lda, 1)));
}

// kSmallK's kernels are written with GCC/Clang vector types of 64 bytes (16 floats,
// 8 doubles; the compiler splits them for narrower units): the accumulators of a
// register block are named values, so they stay in registers across the K loop (a
// plain `T acc[32]` array was kept on the stack: 10x slower). The lane count is
// fixed, so the order of every addition is the same on every machine.
template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(64)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(64)));
};
template <class T>
using Vec = typename VecOf<T>::type;
template <class T>
constexpr int64_t kVec = 64 / static_cast<int64_t>(sizeof(T));
template <class T>
Vec<T> loadv(const T* p) {
  Vec<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void storev(T* p, const Vec<T>& v) {
  std::memcpy(p, &v, sizeof v);
}

// C rows [0, MR) = bias + A (MR, K) @ B (K, L), columns [j, j + 2 * kVec): 2 * MR accumulators.
template <class T, int MR>
void small_k_block(const T* A, const T* bias, const T* B, T* C, int64_t K, int64_t L, int64_t j) {
  constexpr int64_t V = kVec<T>;
  Vec<T> acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = Vec<T>{} + (bias ? bias[r] : T(0));
  for (int64_t k = 0; k < K; ++k) {
    const Vec<T> b0 = loadv(B + k * L + j), b1 = loadv(B + k * L + j + V);
    for (int r = 0; r < MR; ++r) {
      const T a = A[r * K + k];
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
    }
  }
  for (int r = 0; r < MR; ++r) {
    storev(C + r * L + j, acc[r][0]);
    storev(C + r * L + j + V, acc[r][1]);
  }
}

// kSmallK's product: C (M, L) = bias + A (M, K) @ B (K, L), all row-major and dense,
// K small. Blocks of 4 rows x 2 vectors: per row of B two loads feed
// eight multiply-adds. bias may be null (0).
template <class T>
void small_k_product(const T* A, const T* bias, const T* B, T* C, int64_t M, int64_t K, int64_t L) {
  constexpr int64_t J = 2 * kVec<T>;
  const int64_t Lv = L / J * J;
  const int64_t M4 = M / 4 * 4;
  // Column blocks outside: a block of B (K x J) is read from L1 by every row block.
  for (int64_t j = 0; j < Lv; j += J) {
    for (int64_t m = 0; m < M4; m += 4) small_k_block<T, 4>(A + m * K, bias ? bias + m : nullptr, B, C + m * L, K, L, j);
    for (int64_t m = M4; m < M; ++m) small_k_block<T, 1>(A + m * K, bias ? bias + m : nullptr, B, C + m * L, K, L, j);
  }
  for (int64_t m = 0; m < M; ++m)  // the last L % J columns
    for (int64_t j = Lv; j < L; ++j) {
      T acc = bias ? bias[m] : T(0);
      for (int64_t k = 0; k < K; ++k) acc += A[m * K + k] * B[k * L + j];
      C[m * L + j] = acc;
    }
}

// acc (M, K) (float64) += D rows [m, m + MR) . B rows [k, k + KB) over the first Lv
// columns: MR * KB vector accumulators, lanes summed in float64 at the end.
template <class T, int MR, int KB>
void weight_grad_block(const T* D, const T* B, double* acc, int64_t K, int64_t L, int64_t Lv, int64_t m, int64_t k) {
  constexpr int64_t V = kVec<T>;
  Vec<T> s[MR][KB] = {};
  for (int64_t j = 0; j < Lv; j += V) {
    Vec<T> b[KB];
    for (int q = 0; q < KB; ++q) b[q] = loadv(B + (k + q) * L + j);
    for (int r = 0; r < MR; ++r) {
      const Vec<T> d = loadv(D + (m + r) * L + j);
      for (int q = 0; q < KB; ++q) s[r][q] += d * b[q];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < KB; ++q) {
      double t = 0;
      for (int64_t i = 0; i < V; ++i) t += static_cast<double>(s[r][q][i]);
      acc[(m + r) * K + k + q] += t;
    }
}

// kSmallK's weight gradient for one sample: acc (M, K) += D (M, L) @ B (K, L)^T in
// float64. Each dot product runs in kVec partial sums of T (one per lane, a fixed
// order), added to the float64 accumulator once per sample: over a batch the error
// is that of an L-long float sum, not of an N*L-long one.
template <class T>
void small_k_weight_grad(const T* D, const T* B, double* acc, int64_t M, int64_t K, int64_t L) {
  const int64_t Lv = L / kVec<T> * kVec<T>;
  int64_t m = 0;
  for (; m + 4 <= M; m += 4) {
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) weight_grad_block<T, 4, 4>(D, B, acc, K, L, Lv, m, k);
    for (; k < K; ++k) weight_grad_block<T, 4, 1>(D, B, acc, K, L, Lv, m, k);
  }
  for (; m < M; ++m) {
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) weight_grad_block<T, 1, 4>(D, B, acc, K, L, Lv, m, k);
    for (; k < K; ++k) weight_grad_block<T, 1, 1>(D, B, acc, K, L, Lv, m, k);
  }
  for (m = 0; m < M; ++m)  // the last L % kVec columns
    for (int64_t k = 0; k < K; ++k) {
      double t = 0;
      for (int64_t j = Lv; j < L; ++j) t += static_cast<double>(D[m * L + j]) * static_cast<double>(B[k * L + j]);
      acc[m * K + k] += t;
    }
}

template <class T>
void forward_typed(const Tensor& out_t, const Tensor& x_t, const Tensor& w_t, const Tensor& bias_t,
                   const Conv2dGeometry& g) {
  const T* x = static_cast<const T*>(x_t.raw_data());
  const T* w = static_cast<const T*>(w_t.raw_data());
  const T* bias = bias_t.defined() ? static_cast<const T*>(bias_t.raw_data()) : nullptr;
  T* out = static_cast<T*>(out_t.raw_data());
  const int64_t O = out_t.size(1), CK = g.C * g.kH * g.kW, L = g.outH * g.outW, xs = g.C * g.H * g.W;
  const FlatTaps flat = flat_taps(g);
  switch (pick_algo(g)) {
    case ConvAlgo::kSmallK:
      // Samples are independent: one scratch per thread.
      parallel_for(g.N, 2, [&](int64_t b, int64_t e) {
        auto cols = scratch<T>(CK * L);
        for (int64_t n = b; n < e; ++n) {
          im2col_sample(x + n * xs, cols.get(), L, g, flat, 0, g.C);
          small_k_product(w, bias, cols.get(), out + n * O * L, O, CK, L);
        }
      });
      return;
    case ConvAlgo::kGemm: {
      // One sample at a time: the BLAS threads each product itself.
      const bool direct = cols_are_input(g);
      auto cols = scratch<T>(direct ? 0 : CK * L);
      for (int64_t n = 0; n < g.N; ++n) {
        const T* c = x + n * xs;
        if (!direct) {
          im2col_sample(x + n * xs, cols.get(), L, g, flat, 0, g.C);
          c = cols.get();
        }
        T* on = out + n * O * L;
        if (bias)  // prefilled, and the product adds to it (beta = 1): no pass of its own
          for (int64_t o = 0; o < O; ++o) std::fill_n(on + o * L, L, bias[o]);
        gemm<T>(false, false, O, L, CK, w, CK, c, L, bias != nullptr, on, L);
      }
      return;
    }
  }
}

template <class T>
void backward_typed(const Tensor& gx_t, const Tensor& gw_t, const Tensor& gb_t, const Tensor& go_t, const Tensor& x_t,
                    const Tensor& w_t, const Conv2dGeometry& g) {
  const T* go = static_cast<const T*>(go_t.raw_data());
  const T* x = x_t.defined() ? static_cast<const T*>(x_t.raw_data()) : nullptr;
  const T* w = w_t.defined() ? static_cast<const T*>(w_t.raw_data()) : nullptr;
  T* gx = gx_t.defined() ? static_cast<T*>(gx_t.raw_data()) : nullptr;
  T* gw = gw_t.defined() ? static_cast<T*>(gw_t.raw_data()) : nullptr;
  T* gb = gb_t.defined() ? static_cast<T*>(gb_t.raw_data()) : nullptr;
  const int64_t O = go_t.size(1), CK = g.C * g.kH * g.kW, L = g.outH * g.outW, xs = g.C * g.H * g.W;
  const FlatTaps flat = flat_taps(g);
  const ConvAlgo algo = pick_algo(g);
  const bool direct = cols_are_input(g);

  // float64 sums: db (accurate_sum.h's sums of each dOut row, added over the batch)
  // and kSmallK's dW.
  std::unique_ptr<double[]> acc_b(gb ? new double[static_cast<size_t>(O)]() : nullptr);
  std::unique_ptr<double[]> acc_w(gw && algo == ConvAlgo::kSmallK ? new double[static_cast<size_t>(O * CK)]() : nullptr);
  auto cols = scratch<T>(gw && !direct ? CK * L : 0);
  auto dcols = scratch<T>(gx && !direct ? CK * L : 0);
  auto wt = scratch<T>(gx && algo == ConvAlgo::kSmallK ? CK * O : 0);
  if (gx && algo == ConvAlgo::kSmallK)  // W^T for dCols = W^T @ dOut[n] with the forward's kernel (tiny)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t k = 0; k < CK; ++k) wt[k * O + o] = w[o * CK + k];

  // One sample at a time, every gradient while its dOut[n] is in cache: dOut is read
  // from memory once.
  for (int64_t n = 0; n < g.N; ++n) {
    const T* gon = go + n * O * L;
    if (gb)
      for (int64_t o = 0; o < O; ++o) acc_b[o] += accurate_sum(gon + o * L, L);
    if (gw) {
      const T* c = x + n * xs;  // recomputed, not saved: the batch's columns would not fit in cache
      if (!direct) {
        im2col_sample(x + n * xs, cols.get(), L, g, flat, 0, g.C);
        c = cols.get();
      }
      switch (algo) {
        case ConvAlgo::kSmallK: small_k_weight_grad(gon, c, acc_w.get(), O, CK, L); break;
        // dW = sum_n dOut[n] @ cols[n]^T: the first sample writes, the others add (beta = 1).
        case ConvAlgo::kGemm: gemm<T>(false, true, O, CK, L, gon, L, c, L, n > 0, gw, CK); break;
      }
    }
    if (gx) {
      T* gxn = gx + n * xs;
      T* dst = direct ? gxn : dcols.get();  // 1x1: col2im is the identity
      switch (algo) {
        case ConvAlgo::kSmallK: small_k_product<T>(wt.get(), nullptr, gon, dst, CK, O, L); break;
        // W is (O, CK) row-major, so W^T (CK, O) is column-major with leading dimension CK.
        case ConvAlgo::kGemm: gemm<T>(true, false, CK, L, O, w, CK, gon, L, false, dst, L); break;
      }
      if (!direct) {
        std::fill_n(gxn, xs, T(0));  // zeroed here, cache-hot, instead of one pass over the batch
        col2im_sample(gxn, dcols.get(), L, g, flat, 0, g.C);
      }
    }
  }
  if (gb)
    for (int64_t o = 0; o < O; ++o) gb[o] = static_cast<T>(acc_b[o]);
  if (acc_w)
    for (int64_t i = 0; i < O * CK; ++i) gw[i] = static_cast<T>(acc_w[i]);
}

}  // namespace

bool CpuBackend::conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,
                                const Conv2dGeometry& g) {
  if (x.dtype() == kFloat32) forward_typed<float>(out, x, w, bias, g);
  else if (x.dtype() == kFloat64) forward_typed<double>(out, x, w, bias, g);
  else return false;
  return true;
}

bool CpuBackend::conv2d_backward(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_b,
                                 const Tensor& grad_out, const Tensor& x, const Tensor& w, const Conv2dGeometry& g) {
  if (grad_out.dtype() == kFloat32) backward_typed<float>(grad_x, grad_w, grad_b, grad_out, x, w, g);
  else if (grad_out.dtype() == kFloat64) backward_typed<double>(grad_x, grad_w, grad_b, grad_out, x, w, g);
  else return false;
  return true;
}

}  // namespace gradsleuth::cpu
