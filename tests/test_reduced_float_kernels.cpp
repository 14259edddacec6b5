// The CPU's float16/bfloat16 kernel paths that skip whole-tensor float32 copies (core/cpu/reduced_float.cpp):
// the packing-free SGEMM reading 16-bit operands, elementwise ops and optimizer steps block by block.
// Each must give, bit for bit, what widening every operand, computing in float32 and rounding once gives.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/autocast.h"
#include "core/backend.h"
#include "core/cpu/fast/blas.h"
#include "core/cpu/fast/sgemm.h"
#include "core/fast_kernels.h"
#include "core/ops.h"
#include "core/optim_step.h"
#include "core/tensor.h"

namespace {

using gs::DType;
using gs::Tensor;
namespace fast = gs::cpu::fast;

const DType kReduced[] = {gs::kFloat16, gs::kBFloat16};

// Values of every kind a 16-bit float holds: normal of both signs and many exponents, subnormal,
// zeros, and (where `specials`) infinities and NaN.
Tensor draw(const gs::Shape& shape, DType t, uint32_t seed, bool specials) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(-30, 6), pick(0, 99);
  std::vector<float> v(static_cast<size_t>(gs::numel_of(shape)));
  for (float& x : v) {
    const int p = pick(gen);
    if (p < 3)
      x = std::ldexp(u(gen), -20);  // subnormal in float16
    else if (p < 5)
      x = p == 3 ? 0.0f : -0.0f;
    else if (specials && p == 5)
      x = u(gen) < 0 ? -INFINITY : INFINITY;
    else if (specials && p == 6)
      x = NAN;
    else
      x = std::ldexp(u(gen), e(gen) / 4);
  }
  return gs::tensor(v, shape, gs::kFloat32).to(t);
}

// Bitwise equality of two tensors of one dtype and shape (NaNs compared by their bits too).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

Tensor f32(const Tensor& t) { return t.to(gs::kFloat32); }

// Runs with OpenMP at one thread (the packing-free SGEMM takes products on one thread only).
struct OneThread {
#ifdef _OPENMP
  int prev = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(prev); }
#endif
};

fast::Elem elem_of(DType t) {
  return t == gs::kBFloat16 ? fast::Elem::BFloat16 : t == gs::kFloat16 ? fast::Elem::Float16 : fast::Elem::Float32;
}

}  // namespace

TEST_CASE("sgemm_direct_mixed: every layout and format, odd sizes, equals sgemm_direct on widened copies") {
  if (!fast::sgemm_direct_available()) {
    const float a = 1, b = 1;
    float c = 0;
    CHECK(!fast::sgemm_direct_mixed(false, false, 1, 1, 1, &a, fast::Elem::Float32, 1, &b, fast::Elem::Float32, 1, &c,
                                    1));
    return;
  }
  // Narrow and wide N (the broadcast operand widened in the kernel or into scratch), K over one
  // k-block (256), sides that are not multiples of the tiles or of 8 (the transposes' edges).
  const int shapes[][3] = {{1, 1, 1},     {7, 9, 5},     {13, 33, 17},  {37, 70, 41},
                           {12, 64, 300}, {64, 150, 64}, {50, 200, 513}};
  const DType kinds[] = {gs::kFloat32, gs::kBFloat16, gs::kFloat16};
  uint32_t seed = 1;
  for (const auto& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (DType ta : kinds)
        for (DType tb : kinds) {
          const int64_t M = s[0], N = s[1], K = s[2];
          const bool a_col = layout & 1, b_col = layout & 2;
          const int64_t lda = (a_col ? M : K) + 3, ldb = (b_col ? K : N) + 1, ldc = N + 2;
          // Stored as (rows, ld) with padding, the matrix in the first columns.
          const Tensor A = draw({a_col ? K : M, lda}, ta, seed++, false),
                       B = draw({b_col ? N : K, ldb}, tb, seed++, false);
          const Tensor A32 = f32(A), B32 = f32(B);
          std::vector<float> want(static_cast<size_t>(M * ldc), -7.0f), got(want);
          CAPTURE(M);
          CAPTURE(N);
          CAPTURE(K);
          CAPTURE(layout);
          CAPTURE(std::string(gs::dtype_name(ta)));
          CAPTURE(std::string(gs::dtype_name(tb)));
          REQUIRE(fast::sgemm_direct(a_col, b_col, M, N, K, static_cast<const float*>(A32.raw_data()), lda,
                                     static_cast<const float*>(B32.raw_data()), ldb, 0.0f, want.data(), ldc));
          REQUIRE(fast::sgemm_direct_mixed(a_col, b_col, M, N, K, A.raw_data(), elem_of(ta), lda, B.raw_data(),
                                           elem_of(tb), ldb, got.data(), ldc));
          CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
        }
}

TEST_CASE("sgemm_direct_mixed rounding as it stores: the bits of its result rounded through afterwards") {
  if (!fast::sgemm_direct_available()) return;  // checked above: the call refuses
  // Every layout (the C^T form rounds C^T's tiles before transposing them), K over several
  // k-blocks (only the last one stores final values), values with infinities, NaNs and sums past
  // float16's range (they round to inf).
  const int shapes[][3] = {{13, 33, 17}, {64, 150, 64}, {50, 200, 513}, {40, 96, 700}};
  const DType kinds[] = {gs::kFloat32, gs::kBFloat16};
  uint32_t seed = 2100;
  for (const auto& s : shapes)
    for (int layout = 0; layout < 4; ++layout)
      for (DType ta : kinds)
        for (DType through : kReduced) {
          const int64_t M = s[0], N = s[1], K = s[2];
          const bool a_col = layout & 1, b_col = layout & 2;
          const int64_t lda = a_col ? M : K, ldb = b_col ? K : N, ldc = N + 2;
          // K = 700: finite values whose sums pass float16's range; the others: infinities and NaNs.
          const bool specials = K != 700;
          const double scale = specials ? 40.0 : 300.0;
          const Tensor A = draw({a_col ? K : M, lda}, ta, seed++, specials) * scale,
                       B = draw({b_col ? N : K, ldb}, gs::kFloat32, seed++, specials) * scale;
          std::vector<float> want(static_cast<size_t>(M * ldc), -7.0f), got(want);
          CAPTURE(M);
          CAPTURE(K);
          CAPTURE(layout);
          CAPTURE(std::string(gs::dtype_name(ta)));
          CAPTURE(std::string(gs::dtype_name(through)));
          REQUIRE(fast::sgemm_direct_mixed(a_col, b_col, M, N, K, A.raw_data(), elem_of(ta), lda, B.raw_data(),
                                           fast::Elem::Float32, ldb, want.data(), ldc));
          REQUIRE(fast::sgemm_direct_mixed(a_col, b_col, M, N, K, A.raw_data(), elem_of(ta), lda, B.raw_data(),
                                           fast::Elem::Float32, ldb, got.data(), ldc, elem_of(through)));
          const Tensor w = gs::tensor(want, {static_cast<int64_t>(want.size())}, gs::kFloat32);
          REQUIRE(gs::backend_of(w).round_through(w, through));
          CHECK(std::memcmp(w.raw_data(), got.data(), got.size() * sizeof(float)) == 0);
          // The cases are not vacuous: sums past float16's range became inf, and NaNs were rounded.
          if (through == gs::kFloat16 && !specials)
            CHECK(std::any_of(got.begin(), got.end(), [](float v) { return std::isinf(v); }));
          if (specials) CHECK(std::any_of(got.begin(), got.end(), [](float v) { return std::isnan(v); }));
        }
}

// C = A @ B with A row-major (M x lda) and B column-major (N x ldb), both bfloat16, on the dot-product
// path or the FMA path (fast::set_sgemm_bf16_dot), with C's row stride N + 1 (-7 between the rows).
std::vector<float> bf16_product(bool dot, const Tensor& A, const Tensor& B, int64_t K, fast::Elem round) {
  const int64_t M = A.shape()[0], N = B.shape()[0];
  std::vector<float> c(static_cast<size_t>(M * (N + 1)), -7.0f);
  fast::set_sgemm_bf16_dot(dot);
  const bool ok = fast::sgemm_direct_mixed(false, true, M, N, K, A.raw_data(), fast::Elem::BFloat16, A.shape()[1],
                                           B.raw_data(), fast::Elem::BFloat16, B.shape()[1], c.data(), N + 1, round);
  fast::set_sgemm_bf16_dot(true);
  REQUIRE(ok);
  return c;
}

TEST_CASE("bfloat16 products on the dot-product instruction: the FMA path's bits, or the FMA path") {
  if (!fast::sgemm_direct_available()) return;  // the call refuses (checked above)
  const Tensor a0 = draw({64, 784}, gs::kBFloat16, 5, false), b0 = draw({256, 784}, gs::kBFloat16, 6, false);
  if (!fast::sgemm_bf16_dot_available()) {  // without the instruction nothing takes that path
    const uint64_t before = fast::sgemm_bf16_dot_products();
    bf16_product(true, a0, b0, 784, fast::Elem::Float32);
    CHECK(fast::sgemm_bf16_dot_products() == before);
    return;
  }
  // M >= N (A read where it is) and M < N (C^T into scratch), odd K (the last k's FMA), K over
  // several k-blocks (256 k's), column panels narrower than one or two vectors, row tiles of every
  // height, and even and odd row strides (an odd one packs B word by word).
  const int shapes[][3] = {{2, 1, 2},      {13, 33, 17},   {40, 12, 3},  {64, 256, 784},
                           {256, 64, 784}, {50, 200, 513}, {37, 70, 41}, {12, 17, 700}};
  const fast::Elem rounds[] = {fast::Elem::Float32, fast::Elem::BFloat16, fast::Elem::Float16};
  uint32_t seed = 4000;
  for (const auto& s : shapes)
    for (int64_t pad : {0, 1, 8})
      for (fast::Elem round : rounds) {
        const int64_t M = s[0], N = s[1], K = s[2];
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        CAPTURE(pad);
        CAPTURE(static_cast<int>(round));
        const Tensor A = draw({M, K + pad}, gs::kBFloat16, seed++, false),
                     B = draw({N, K + pad}, gs::kBFloat16, seed++, false);
        const uint64_t before = fast::sgemm_bf16_dot_products();
        const std::vector<float> got = bf16_product(true, A, B, K, round);
        CHECK(fast::sgemm_bf16_dot_products() == before + 1);  // taken
        const std::vector<float> want = bf16_product(false, A, B, K, round);
        CHECK(fast::sgemm_bf16_dot_products() == before + 1);  // not taken when off
        CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
      }
  // Operands the instruction would read or sum otherwise (it takes subnormal inputs and results as
  // 0): each product takes the FMA path, with its bits.
  const Tensor x = draw({40, 301}, gs::kFloat32, 7, false), y = draw({70, 301}, gs::kFloat32, 8, false);
  const auto bf = [](const Tensor& t) { return t.to(gs::kBFloat16); };
  const auto with_at = [](const Tensor& t, float v) {  // a copy of t with its first value v, as bfloat16
    Tensor c = t.to(gs::kBFloat16).contiguous().clone();
    const Tensor one = gs::tensor(std::vector<float>{v}, {1}, gs::kFloat32).to(gs::kBFloat16);
    std::memcpy(c.raw_data(), one.raw_data(), sizeof(uint16_t));
    return c;
  };
  struct Case {
    const char* what;
    Tensor a, b;
    bool subnormal_result;  // the FMA path's result holds a subnormal value (the instruction would flush it)
  };
  const double tiny = std::ldexp(1.0, -66), huge = std::ldexp(1.0, 62);
  const Case cases[] = {
      {"a subnormal operand", with_at(x, std::ldexp(1.0f, -130)), bf(y * std::ldexp(1.0, 100)), false},
      {"products below float32's normal range", bf(x * tiny), bf(y * tiny), true},
      {"an infinity", with_at(x, INFINITY), bf(y), false},
      {"a NaN", bf(x), with_at(y, NAN), false},
      {"sums past float32's range", bf(x * huge), bf(y * huge), false},
  };
  for (const Case& c : cases) {
    CAPTURE(std::string(c.what));
    const uint64_t before = fast::sgemm_bf16_dot_products();
    const std::vector<float> got = bf16_product(true, c.a, c.b, 301, fast::Elem::Float32);
    CHECK(fast::sgemm_bf16_dot_products() == before);
    const std::vector<float> want = bf16_product(false, c.a, c.b, 301, fast::Elem::Float32);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
    if (c.subnormal_result)
      CHECK(std::any_of(got.begin(), got.end(), [](float v) { return std::fpclassify(v) == FP_SUBNORMAL; }));
  }
  // The rule's edge: the smallest nonzero magnitudes' exponent fields (biased, bfloat16) summing to
  // 142 take the instruction (every partial sum a multiple of 2^-126), to 141 the FMA path.
  const auto lowest_field = [](const Tensor& t) {
    const Tensor c = t.contiguous();
    const auto* p = static_cast<const uint16_t*>(c.raw_data());
    int lo = 255;
    for (int64_t i = 0; i < c.numel(); ++i)
      if ((p[i] & 0x7FFF) != 0) lo = std::min(lo, (p[i] & 0x7FFF) >> 7);
    return lo;
  };
  const Tensor xb = bf(x), yb = bf(y);
  const int room = 142 - lowest_field(xb) - lowest_field(yb);
  for (int below : {0, 1}) {
    CAPTURE(below);
    const Tensor xs = bf(x * std::ldexp(1.0, room - below));
    REQUIRE(lowest_field(xs) + lowest_field(yb) == 142 - below);
    const uint64_t before = fast::sgemm_bf16_dot_products();
    const std::vector<float> got = bf16_product(true, xs, yb, 301, fast::Elem::Float32);
    CHECK(fast::sgemm_bf16_dot_products() == before + (below ? 0 : 1));
    const std::vector<float> want = bf16_product(false, xs, yb, 301, fast::Elem::Float32);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("16-bit matmul and linear on the packing-free SGEMM: the widen-compute-round bits") {
  OneThread one;
  // Products the kernel takes (every side >= 32, >= 2^20 multiply-adds), plain and transposed.
  const int shapes[][3] = {{64, 784, 256}, {37, 300, 129}, {96, 331, 33}, {256, 784, 256}};
  uint32_t seed = 100;
  for (DType t : kReduced)
    for (const auto& s : shapes)
      for (int layout = 0; layout < 4; ++layout) {
        const int64_t N = s[0], K = s[1], M = s[2];
        CAPTURE(std::string(gs::dtype_name(t)));
        CAPTURE(N);
        CAPTURE(K);
        CAPTURE(M);
        CAPTURE(layout);
        // No NaN inputs: which operand's payload a NaN product keeps depends on the layout's path.
        const Tensor a = (layout & 1) ? draw({K, N}, t, seed++, false).t() : draw({N, K}, t, seed++, false);
        const Tensor b = (layout & 2) ? draw({M, K}, t, seed++, false).t() : draw({K, M}, t, seed++, false);
        const Tensor got = gs::matmul(a, b);
        CHECK(got.dtype() == t);
        CHECK(same_bits(got, gs::matmul(f32(a), f32(b)).to(t)));
      }
  // A batch of products, and linear (x @ w.t() + bias).
  for (DType t : kReduced) {
    const Tensor a = draw({3, 40, 200}, t, 7, false), b = draw({3, 200, 150}, t, 8, false);
    CHECK(same_bits(gs::matmul(a, b), gs::matmul(f32(a), f32(b)).to(t)));
    const Tensor x = draw({64, 784}, t, 9, false), w = draw({256, 784}, t, 10, false), bias = draw({256}, t, 11, false);
    const Tensor y = gs::matmul(f32(x), f32(w).t()).to(t);
    CHECK(same_bits(gs::linear(x, w, bias), (f32(y) + f32(bias)).to(t)));
  }
}

TEST_CASE("16-bit elementwise ops block by block: the widen-compute-round bits") {
  // Several blocks (8192 values each) and a partial one; broadcast operands (a bias row, a
  // scalar) and a transposed one (no blocks: widened copies).
  uint32_t seed = 300;
  for (DType t : kReduced) {
    CAPTURE(std::string(gs::dtype_name(t)));
    const Tensor a = draw({7, 3001}, t, seed++, true), b = draw({7, 3001}, t, seed++, true);
    const Tensor row = draw({3001}, t, seed++, true), scalar = draw({}, t, seed++, false);
    const Tensor bt = draw({3001, 7}, t, seed++, true).t();
    CHECK(same_bits(gs::relu(a), gs::relu(f32(a)).to(t)));
    // relu on the 16-bit bits (chunks of 64 without NaN; above, about half the chunks hold one):
    // zeros of both signs, subnormals and infinities, a transposed input (the widening path).
    const Tensor finite = draw({3, 1000}, t, seed++, false);
    CHECK(same_bits(gs::relu(finite), gs::relu(f32(finite)).to(t)));
    CHECK(same_bits(gs::relu(bt), gs::relu(f32(bt)).to(t)));
    const Tensor edges =
        gs::tensor(std::vector<float>{-0.0f, 0.0f, -INFINITY, INFINITY, -NAN, NAN, 1e-7f, -1e-7f}, {8}, gs::kFloat32)
            .to(t);
    CHECK(same_bits(gs::relu(edges), gs::relu(f32(edges)).to(t)));
    CHECK(same_bits(gs::relu(edges.narrow(0, 0, 4)), gs::relu(f32(edges.narrow(0, 0, 4))).to(t)));
    CHECK(same_bits(gs::abs(a), gs::abs(f32(a)).to(t)));
    CHECK(same_bits(-a, (-f32(a)).to(t)));
    CHECK(same_bits(gs::square(a), gs::square(f32(a)).to(t)));
    for (const Tensor* other : {&b, &row, &scalar, &bt}) {
      const Tensor o = *other;
      CHECK(same_bits(a + o, (f32(a) + f32(o)).to(t)));
      CHECK(same_bits(a - o, (f32(a) - f32(o)).to(t)));
      CHECK(same_bits(a * o, (f32(a) * f32(o)).to(t)));
      CHECK(same_bits(a / o, (f32(a) / f32(o)).to(t)));
      CHECK(same_bits(gs::maximum(a, o), gs::maximum(f32(a), f32(o)).to(t)));
      CHECK(same_bits(gs::minimum(a, o), gs::minimum(f32(a), f32(o)).to(t)));
      CHECK(same_bits(a < o, f32(a) < f32(o)));
      CHECK(same_bits(gs::where(a > 0.0, o, a), gs::where(f32(a) > 0.0, f32(o), f32(a)).to(t)));
    }
    CHECK(same_bits(gs::clamp(a, -0.25, 0.5), gs::clamp(f32(a), -0.25, 0.5).to(t)));
    // In place: out is an input.
    Tensor c = a.clone();
    c.add_(b);
    CHECK(same_bits(c, (f32(a) + f32(b)).to(t)));
    // relu's backward kernel: 0 where x <= 0, else the gradient.
    const Tensor g = draw({7, 3001}, t, seed++, true);
    Tensor got = gs::empty({7, 3001}, t), want = gs::empty({7, 3001}, gs::kFloat32);
    gs::backend_of(g).threshold_backward(got, g, a, 0.0);
    gs::backend_of(g).threshold_backward(want, f32(g), f32(a), 0.0);
    CHECK(same_bits(got, want.to(t)));
    const Tensor gf = draw({3, 1000}, t, seed++, false);  // no NaN in x or g: the integer selects
    Tensor got_f = gs::empty({3, 1000}, t), want_f = gs::empty({3, 1000}, gs::kFloat32);
    gs::backend_of(gf).threshold_backward(got_f, gf, finite, 0.0);
    gs::backend_of(gf).threshold_backward(want_f, f32(gf), f32(finite), 0.0);
    CHECK(same_bits(got_f, want_f.to(t)));
  }
}

TEST_CASE("16-bit optimizer steps block by block: the widen-step-round bits, state included") {
  uint32_t seed = 500;
  for (DType t : kReduced)
    for (int which = 0; which < 5; ++which) {  // SGD, Adam, RMSprop; SGD's and Adam's other options
      CAPTURE(std::string(gs::dtype_name(t)));
      CAPTURE(which);
      // 3 x 8192 + 17 values: three whole blocks and a partial one.
      const gs::Shape shape{17, 1447};
      const Tensor p = draw(shape, t, seed++, false), g = draw(shape, t, seed++, false);
      const Tensor s1 = draw(shape, t, seed++, false).abs(), s2 = draw(shape, t, seed++, false).abs();
      const Tensor s3 = draw(shape, t, seed++, false);
      Tensor p16 = p.clone(), a16 = s1.clone(), b16 = s2.clone(), c16 = s3.clone();
      Tensor p32 = f32(p), a32 = f32(s1), b32 = f32(s2), c32 = f32(s3);
      gs::Backend& be = gs::backend_of(p);
      bool ran16 = false, ran32 = false;
      if (which == 0) {
        gs::SgdStep s;
        s.lr = 0.1, s.momentum = 0.9, s.weight_decay = 0.01, s.dampening = 0.1;
        ran16 = be.sgd_step(p16, g, a16, s);
        ran32 = be.sgd_step(p32, f32(g), a32, s);
      } else if (which == 1) {
        gs::AdamStep s;
        s.lr = 0.01, s.step_size = 0.02, s.bc2_sqrt = 0.3, s.weight_decay = 0.01, s.decoupled = true, s.amsgrad = true;
        ran16 = be.adam_step(p16, g, a16, b16, c16, s);
        ran32 = be.adam_step(p32, f32(g), a32, b32, c32, s);
      } else if (which == 3) {
        gs::SgdStep s;
        s.lr = 0.1, s.momentum = 0.9, s.nesterov = true, s.first = true;
        ran16 = be.sgd_step(p16, g, a16, s);
        ran32 = be.sgd_step(p32, f32(g), a32, s);
      } else if (which == 4) {
        gs::AdamStep s;
        s.lr = 0.01, s.step_size = 0.02, s.bc2_sqrt = 0.3, s.weight_decay = 0.01, s.l2 = true;
        ran16 = be.adam_step(p16, g, a16, b16, Tensor(), s);
        ran32 = be.adam_step(p32, f32(g), a32, b32, Tensor(), s);
      } else {
        gs::RmspropStep s;
        s.lr = 0.01, s.momentum = 0.5, s.centered = true;
        ran16 = be.rmsprop_step(p16, g, a16, c16, b16, s);
        ran32 = be.rmsprop_step(p32, f32(g), a32, c32, b32, s);
      }
      CHECK(ran16 == ran32);
      if (!ran16) continue;  // the reference kernels have no fused step: the optimizer's tensor ops run
      CHECK(same_bits(p16, p32.to(t)));
      CHECK(same_bits(a16, a32.to(t)));
      if (which == 1 || which == 2 || which == 4) CHECK(same_bits(b16, b32.to(t)));
      if (which == 1 || which == 2) CHECK(same_bits(c16, c32.to(t)));
    }
}

TEST_CASE("relu's backward on 16-bit x and gradient: x <= 0 ? 0 : g, the widened formula's bits") {
  uint32_t seed = 700;
  for (DType t : kReduced) {
    CAPTURE(std::string(gs::dtype_name(t)));
    const Tensor x0 = draw({5, 4099}, t, seed++, true), g = draw({5, 4099}, t, seed++, true);
    Tensor x = x0.clone().requires_grad_(true);
    gs::relu(x).backward(g);
    const Tensor want = gs::where(f32(x0) <= 0.0, gs::zeros({}, gs::kFloat32), f32(g)).to(t);
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == t);
    CHECK(same_bits(x.grad(), want));
  }
}

TEST_CASE("16-bit max_pool2d and its backward, block by block of samples: the widened bits") {
  uint32_t seed = 900;
  for (DType t : kReduced)
    for (int config = 0; config < 2; ++config) {
      CAPTURE(std::string(gs::dtype_name(t)));
      CAPTURE(config);
      // 37 samples of 3 x 29 x 29: several blocks and a partial one; 2x2/2 and 3x3/1 with padding.
      const Tensor x0 = draw({37, 3, 29, 29}, t, seed++, true);
      const int64_t k = config == 0 ? 2 : 3, st = config == 0 ? 2 : 1, pad = config == 0 ? 0 : 1;
      Tensor x = x0.clone().requires_grad_(true), x32 = f32(x0).requires_grad_(true);
      const Tensor y = gs::max_pool2d(x, {k, k}, {st, st}, {pad, pad}),
                   y32 = gs::max_pool2d(x32, {k, k}, {st, st}, {pad, pad});
      CHECK(same_bits(y, y32.to(t)));
      const Tensor g = draw(y.shape(), t, seed++, false);
      y.backward(g);
      y32.backward(f32(g));
      CHECK(same_bits(x.grad(), x32.grad().to(t)));
    }
}

TEST_CASE("round_through: the bits of to(dtype) and back to float32, in place, for every float32 bit pattern") {
  std::mt19937 gen(1200);
  std::vector<uint32_t> bits(4099);  // several of the kernel's blocks and a partial one
  for (uint32_t& b : bits) b = static_cast<uint32_t>(gen());
  // The edges: zeros, infinities, NaNs, the largest finite values and the halfway cases.
  const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00001u, 0xFF812345u,
                            0x7F7FFFFFu, 0x477FF000u, 0x477FEFFFu, 0x3F808000u, 0x3F818000u, 0x00000001u};
  std::copy(std::begin(edges), std::end(edges), bits.begin());
  std::vector<float> v(bits.size());
  std::memcpy(v.data(), bits.data(), bits.size() * sizeof(float));
  const Tensor x = gs::tensor(v, {static_cast<int64_t>(v.size())}, gs::kFloat32);
  for (DType t : kReduced) {
    CAPTURE(std::string(gs::dtype_name(t)));
    const Tensor got = x.clone();
    REQUIRE(gs::backend_of(got).round_through(got, t));
    CHECK(got.dtype() == gs::kFloat32);
    CHECK(same_bits(got, x.to(t).to(gs::kFloat32)));
  }
}

TEST_CASE("autocast's cast of a float32 parameter: the fused backward gives the unfused gradients' bits") {
  OneThread one;
  // linear (the weight reaches the product through its transpose), matmul, a weight used twice
  // (two gradients for one cast: not fused) and an input that needs its gradient too.
  struct Case {
    int64_t n, k, m;
    int use;  // 0: linear, 1: matmul(x, w.t()), 2: linear twice with one weight
    bool x_grad;
  };
  // 64 x 784 -> 256 and 300 x 96 -> 128: the weight gradient's product is the packing-free
  // SGEMM's and rounds as it stores (over two k-blocks for the batch of 300); the others round
  // in the cast's pass.
  const Case cases[] = {{64, 784, 256, 0, false}, {37, 131, 45, 0, true}, {64, 784, 10, 1, false},
                        {21, 50, 33, 2, true},    {300, 96, 128, 0, true}};
  uint32_t seed = 1300;
  for (DType t : kReduced)
    for (const Case& c : cases) {
      CAPTURE(std::string(gs::dtype_name(t)));
      CAPTURE(c.use);
      CAPTURE(c.n);
      // float32 leaves holding values with more bits than 16 (no NaN: a NaN's payload may come
      // from either operand of a product, whichever path computes it).
      const Tensor x0 = draw({c.n, c.k}, gs::kFloat32, seed++, false) * 1.001;
      const Tensor w0 = draw({c.m, c.k}, gs::kFloat32, seed++, false) * 1.001;
      const Tensor b0 = draw({c.m}, gs::kFloat32, seed++, false) * 1.001;
      // float16's gradients overflow to inf where they exceed its range.
      const Tensor g = draw({c.n, c.m}, t, seed++, true) * (t == gs::kFloat16 ? 300.0 : 1.0);
      std::vector<Tensor> grads[2];
      for (int fused = 0; fused < 2; ++fused) {
        gs::detail::set_cast_backward_fused(fused == 1);
        Tensor x = x0.clone().requires_grad_(c.x_grad), w = w0.clone().requires_grad_(true),
               b = b0.clone().requires_grad_(true);
        Tensor y;
        {
          auto ac = gs::autocast(t);
          if (c.use == 0) y = gs::linear(x, w, b);
          if (c.use == 1) y = gs::matmul(x, w.t());
          if (c.use == 2) y = gs::linear(x, w, b) + gs::linear(x * 0.5, w, b);
        }
        REQUIRE(y.dtype() == t);
        y.backward(g);
        for (const Tensor* p : {&w, &b, &x})
          if (p->grad().defined()) grads[fused].push_back(p->grad());
      }
      gs::detail::set_cast_backward_fused(true);
      REQUIRE(grads[0].size() == grads[1].size());
      for (size_t i = 0; i < grads[0].size(); ++i) {
        CAPTURE(i);
        CHECK(grads[1][i].dtype() == gs::kFloat32);
        CHECK(same_bits(grads[1][i], grads[0][i]));
      }
    }
}

TEST_CASE("a hook on a cast's output sees the 16-bit gradient: that cast's backward is not fused") {
  for (DType t : kReduced) {
    CAPTURE(std::string(gs::dtype_name(t)));
    const Tensor x = draw({16, 40}, t, 1400, false);
    Tensor w = (draw({24, 40}, gs::kFloat32, 1401, false) * 1.001).requires_grad_(true);
    Tensor w16 = w.to(t);
    DType seen = gs::kFloat64;
    w16.register_hook([&seen](const Tensor& g) {
      seen = g.dtype();
      return Tensor();
    });
    gs::matmul(x, w16.t()).backward(draw({16, 24}, t, 1402, false));
    CHECK(seen == t);
    REQUIRE(w.grad().defined());
    CHECK(w.grad().dtype() == gs::kFloat32);
    CHECK(same_bits(w.grad(), w.grad().to(t).to(gs::kFloat32)));
  }
}
