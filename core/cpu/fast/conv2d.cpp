// CPU backend, the fused conv2d (groups = 1, NCHW, float32/float64): forward and
// first-order backward one sample at a time, each sample's columns built in a
// scratch buffer that stays in cache instead of one (C*kH*kW, N*L) buffer for the
// whole batch (14 MB for the CNN's second conv, every pass over it from memory).
//
//   forward   out[n] (O, L)  = bias + W (O, CK) @ cols(x[n]) (CK, L)   written in place, NCHW
//   backward  dW  (O, CK)   += dOut[n] (O, L) @ cols(x[n])^T           (columns recomputed;
//                                                                       or Winograd, below)
//             dx[n]          = col2im(W^T (CK, O) @ dOut[n])           (zeroed per sample)
//             db[o]          = sum over n, l of dOut[n][o][l]          (float64 sums)
//
// pick_algo() is the one place that chooses how the products run, one branch per
// algorithm in forward_typed/backward_typed:
//   kGemm      the BLAS (blas.h; Eigen's product without one) on one sample's operands,
//              all L2-resident: the CNN's second conv (64 x 288 x 196) ran at 96 GFLOP/s
//              this way against 77 for the single batched (64 x 288 x 12544) GEMM.
//   kWinograd  float32, 3x3 / stride 1 / padding 1 with >= 8 channels going in (the
//              forward's C, the input gradient's O), unless set_conv_algorithm(Gemm):
//              winograd.h over the whole batch, about 2x the GEMM's speed at the CNN's
//              second conv (bench_conv); below 8 channels its transforms cost more than
//              the multiply-adds it saves. The weight gradient too when both C and O are
//              >= 8 (F(3x3, 2x2), one call over the batch; the per-sample loop then
//              computes only db): 3.3 ms against 7.2 for per-sample im2col + GEMM at
//              the second conv; with O = 64, 0.83x at C = 4, 1.1-1.3x at C = 8, 2x at
//              C = 16; with C = 32, 3.6-5x at O = 4..16 (bench_conv's wgrad cases, one
//              thread, Zen 5). O >= 8 is a conservative choice: no layer here has fewer.
// A direct kernel for small C*kH*kW (the first conv, K = 9: the batched GEMM with K = 9
// or N = 9 ran at ~35 GFLOP/s) was tried and lost to the per-sample GEMM at every K
// from 1 to 9 (O 32, L 784, OpenBLAS, one thread; forward 0.43 ms against 0.68 ms for
// the batch of 64, weight gradient 0.34 ms against 0.74 ms): per sample, N = L = 784
// is a shape the BLAS packs cheaply, and the output's 6.4 MB of stores bound both.
// The composite path of ops/conv.cpp (unfold + matmul) is the reference; the tests
// compare the two on many geometries.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "core/cpu/accurate_sum.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/conv_cols.h"
#include "core/cpu/fast/fast.h"
#include "core/cpu/fast/winograd.h"
#include "core/ops.h"

namespace gradsleuth::cpu::fast {

namespace {

enum class ConvAlgo { kGemm, kWinograd };

// channels_in: the forward's C, or the input gradient's O (the channels its product sums);
// for the weight gradient the smaller of C and O (its GEMMs are (O x tiles) @ (tiles x C)).
constexpr int64_t kWinogradMinChannels = 8;
constexpr int64_t kWinogradWgradMinChannels = 8;
template <class T>
ConvAlgo pick_algo(const Conv2dGeometry& g, int64_t channels_in, int64_t min_channels = kWinogradMinChannels) {
  if (std::is_same_v<T, float> && conv_algorithm() == ConvAlgorithm::Auto && winograd_eligible(g) &&
      channels_in >= min_channels)
    return ConvAlgo::kWinograd;
  return ConvAlgo::kGemm;
}

// A 1x1 kernel with stride 1 and no padding reads the input as it is: its columns
// are x[n] itself, (C, H*W), and col2im is the identity.
bool cols_are_input(const Conv2dGeometry& g) {
  return g.kH == 1 && g.kW == 1 && g.sH == 1 && g.sW == 1 && g.pH == 0 && g.pW == 0;
}

// Uninitialised scratch (every use writes it before reading), 64-byte aligned (whole
// cache lines for the BLAS's and the im2col loops' vector accesses).
struct AlignedFree {
  void operator()(void* p) const { ::operator delete[](p, std::align_val_t(64)); }
};
template <class T>
std::unique_ptr<T[], AlignedFree> scratch(int64_t n) {
  const size_t count = static_cast<size_t>(n > 0 ? n : 1);
  return std::unique_ptr<T[], AlignedFree>(static_cast<T*>(::operator new[](count * sizeof(T), std::align_val_t(64))));
}

// C (M, N) row-major, leading dimension ldc, = A @ B (+ C when accumulate). A and
// B row- or column-major as in blas_gemm. The BLAS when built in (fused_conv_applies leaves
// sizes it cannot take to the reference loops), else Eigen.
template <class T>
void gemm(bool a_col, bool b_col, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
          bool accumulate, T* C, int64_t ldc) {
  if (blas_gemm(a_col, b_col, M, N, K, A, lda, B, ldb, accumulate ? T(1) : T(0), C, ldc)) return;
#if GS_EIGEN_GEMM
  eigen_gemm<T>(a_col, b_col, M, N, K, A, lda, B, ldb, accumulate, C, ldc);
#else
  throw std::logic_error("conv2d: the BLAS declined a product whose sizes fit its int (" + std::to_string(M) + " x " +
                         std::to_string(K) + " @ " + std::to_string(K) + " x " + std::to_string(N) + ")");
#endif
}

template <class T>
void forward_typed(const Tensor& out_t, const Tensor& x_t, const Tensor& w_t, const Tensor& bias_t,
                   const Conv2dGeometry& g) {
  const T* x = static_cast<const T*>(x_t.raw_data());
  const T* w = static_cast<const T*>(w_t.raw_data());
  const T* bias = bias_t.defined() ? static_cast<const T*>(bias_t.raw_data()) : nullptr;
  T* out = static_cast<T*>(out_t.raw_data());
  const int64_t O = out_t.size(1), CK = g.C * g.kH * g.kW, L = g.outH * g.outW, xs = g.C * g.H * g.W;
  switch (pick_algo<T>(g, g.C)) {
    case ConvAlgo::kWinograd:
      if constexpr (std::is_same_v<T, float>) winograd_conv3x3(x, w, bias, out, g.N, g.C, g.H, g.W, O);
      return;
    case ConvAlgo::kGemm: {
      // One sample at a time, each product on one BLAS thread (see fused_conv_applies).
      const bool direct = cols_are_input(g);
      const FlatTaps flat = direct ? FlatTaps{} : flat_taps(g);
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
  const bool direct = cols_are_input(g);
  // The input gradient by Winograd: one call over the batch with the flipped, transposed
  // weight (C, O, 3, 3); the weight gradient likewise, F(3x3, 2x2) summed over the batch.
  // The per-sample loop below then computes only what is left (db at least).
  if constexpr (std::is_same_v<T, float>) {
    if (gx && pick_algo<T>(g, O) == ConvAlgo::kWinograd) {
      auto wt = scratch<float>(g.C * O * 9);
      flip_transpose_3x3(w, wt.get(), O, g.C);
      winograd_conv3x3(go, wt.get(), nullptr, gx, g.N, O, g.H, g.W, g.C);
      gx = nullptr;
    }
    if (gw && pick_algo<T>(g, std::min(g.C, O), kWinogradWgradMinChannels) == ConvAlgo::kWinograd) {
      winograd_conv3x3_weight_grad(x, go, gw, g.N, g.C, g.H, g.W, O);
      gw = nullptr;
    }
  }

  // db in float64: accurate_sum.h's sum of each dOut row, added over the batch.
  std::unique_ptr<double[]> acc_b(gb ? new double[static_cast<size_t>(O)]() : nullptr);
  auto cols = scratch<T>(gw && !direct ? CK * L : 0);
  auto dcols = scratch<T>(gx && !direct ? CK * L : 0);
  // The tap ranges of im2col/col2im, only when a GEMM product is left for them.
  const FlatTaps flat = (gw || gx) && !direct ? flat_taps(g) : FlatTaps{};

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
      // dW = sum_n dOut[n] @ cols[n]^T: the first sample writes, the others add (beta = 1).
      gemm<T>(false, true, O, CK, L, gon, L, c, L, n > 0, gw, CK);
    }
    if (gx) {
      T* gxn = gx + n * xs;
      T* dst = direct ? gxn : dcols.get();  // 1x1: col2im is the identity
      // W is (O, CK) row-major, so W^T (CK, O) is column-major with leading dimension CK.
      gemm<T>(true, false, CK, L, O, w, CK, gon, L, false, dst, L);
      if (!direct) {
        std::fill_n(gxn, xs, T(0));  // zeroed here, cache-hot, instead of one pass over the batch
        col2im_sample(gxn, dcols.get(), L, g, flat, 0, g.C);
      }
    }
  }
  if (gb)
    for (int64_t o = 0; o < O; ++o) gb[o] = static_cast<T>(acc_b[o]);
}

// Any thread count: the products run on one BLAS thread (BlasSingleThread in the entry
// points below). Threaded, every per-sample product became a threaded BLAS call (3 x 64
// thread hand-offs per CNN step instead of 3): on 2 cores with other processes running,
// the second conv's forward + backward then took 1.3-1.5 s of wall time against
// 0.26-0.34 s for the composite path's three batch-wide products (docs/benchmarks.md). One thread of the
// fused path (with Winograd) is faster than the composite path on two; splitting the
// samples and Winograd's tile blocks over threads would use the others (not done).
// Empty batches, channels or outputs stay on the composite path (its GEMMs give
// the zero gradients of an empty sum; the per-sample loops here would leave them unset).
// With a BLAS, the products' sizes (O, C kH kW and outH outW, which are also their leading
// dimensions) must fit CBLAS's int.
bool fused_conv_applies(const Conv2dGeometry& g, int64_t O, DType dt) {
  if (g.N <= 0 || g.C <= 0 || O <= 0 || (dt != kFloat32 && dt != kFloat64)) return false;
#if GS_EIGEN_GEMM
  return true;
#else
  const int64_t CK = g.C * g.kH * g.kW, L = g.outH * g.outW;
  return gemm_fits_cblas(O, L, CK, CK, L, L);
#endif
}

}  // namespace

bool conv2d_supported(const Conv2dGeometry& g, int64_t O, DType dt) { return fused_conv_applies(g, O, dt); }

bool conv2d_forward(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dGeometry& g) {
  if (!fused_conv_applies(g, w.size(0), x.dtype())) return false;
  BlasSingleThread one_blas_thread;
  if (x.dtype() == kFloat32)
    forward_typed<float>(out, x, w, bias, g);
  else
    forward_typed<double>(out, x, w, bias, g);
  return true;
}

bool conv2d_backward(const Tensor& grad_x, const Tensor& grad_w, const Tensor& grad_b, const Tensor& grad_out,
                     const Tensor& x, const Tensor& w, const Conv2dGeometry& g) {
  if (!fused_conv_applies(g, grad_out.size(1), grad_out.dtype())) return false;
  BlasSingleThread one_blas_thread;
  if (grad_out.dtype() == kFloat32)
    backward_typed<float>(grad_x, grad_w, grad_b, grad_out, x, w, g);
  else
    backward_typed<double>(grad_x, grad_w, grad_b, grad_out, x, w, g);
  return true;
}

}  // namespace gradsleuth::cpu::fast
