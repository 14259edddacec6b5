// Coverage: every op in the registry runs on the CUDA device and agrees with the CPU, forward
// and backward (the gradient of every floating input under a random upstream gradient), on
// every sample, in float32 and float64, and forward in int64 and bool where the CPU runs the
// sample in those dtypes; then float16 and bfloat16 under the 16-bit tolerance rule. One SUBCASE
// per op, so a failure names the op; an op whose every sample throws on the cpu (nothing compared)
// fails too.
#include "tests/cuda/cuda_test_util.h"

#include "core/op_registry.h"
#include "tests/prop_check.h"
#include "tests/reduced_float_tolerance.h"

namespace {

struct Run {
  gs::Tensor out;
  gs::tensor_list grads;
};

// Runs op.fn on `inputs` moved to `dev` (floating inputs become leaves that require grad), then
// backward with `upstream` (moved to dev) when the op is differentiable.
Run run_on(const gs::OpInfo& op, const gs::tensor_list& inputs, gs::Device dev, const gs::Tensor& upstream,
           uint64_t seed) {
  gs::tensor_list xs;
  for (const gs::Tensor& t : inputs) {
    gs::Tensor x = t.detach().to(dev).clone();
    if (op.differentiable && x.is_floating_point()) x.requires_grad_(true);
    xs.push_back(x);
  }
  gs::manual_seed(seed);  // ops that draw random numbers (dropout) draw the same on both
  Run r;
  r.out = op.fn(xs);
  if (op.differentiable && upstream.defined() && r.out.requires_grad()) {
    r.out.backward(upstream.to(dev));
    for (const gs::Tensor& x : xs)
      if (x.requires_grad()) r.grads.push_back(x.grad().defined() ? x.grad() : gs::zeros_like(x));
  }
  return r;
}

}  // namespace

TEST_CASE("every registered op runs on cuda and matches the cpu, forward and backward") {
  const uint64_t seed = gs::Generator().seed();
  int ops = 0;
  for (const gs::OpInfo& op : gs::op_registry()) {
    ++ops;
    SUBCASE(op.name.c_str()) {
      int compared = 0;  // samples that ran on the cpu and were compared with the device, all dtypes
      for (gs::DType dt : {gs::kFloat32, gs::kFloat64, gs::kInt64, gs::kBool}) {
        gs::Generator gen(seed);
        std::string failures;
        int samples = 0;
        std::vector<gs::OpSample> all;
        try {
          all = op.samples(gen, dt);
        } catch (const std::exception&) {
          continue;  // the op has no samples in this dtype
        }
        for (const gs::OpSample& s : all) {
          ++samples;
          const std::string where = std::string(gs::dtype_name(dt)) + " [" + s.label + "] ";
          gs::Tensor up;
          Run cpu;
          try {
            gs::manual_seed(seed);
            gs::Tensor probe = [&] {
              gs::NoGradGuard ng;
              gs::tensor_list xs;
              for (const gs::Tensor& t : s.inputs) xs.push_back(t.detach());
              gs::manual_seed(seed);
              return op.fn(xs);
            }();
            if (op.differentiable && probe.is_floating_point()) up = gs::randn(probe.shape(), probe.dtype(), &gen);
            cpu = run_on(op, s.inputs, gs::kCPU, up, seed);
          } catch (const std::exception& e) {
            continue;  // the sample is not valid for this dtype on the cpu either
          }
          ++compared;
          try {
            Run dev = run_on(op, s.inputs, gs::kCUDA, up, seed);
            if (!dev.out.is_cuda()) failures += where + "output is on " + dev.out.device().str() + "\n";
            if (std::string m = cuda_test::compare(dev.out, cpu.out); !m.empty())
              failures += where + "forward: " + m + "\n";
            if (dev.grads.size() != cpu.grads.size()) {
              failures += where + "backward: " + std::to_string(dev.grads.size()) + " gradients vs " +
                          std::to_string(cpu.grads.size()) + "\n";
            } else {
              for (size_t i = 0; i < cpu.grads.size(); ++i) {
                if (!dev.grads[i].is_cuda()) failures += where + "grad " + std::to_string(i) + " not on cuda\n";
                if (std::string m = cuda_test::compare(dev.grads[i], cpu.grads[i]); !m.empty())
                  failures += where + "backward, input " + std::to_string(i) + ": " + m + "\n";
              }
            }
          } catch (const std::exception& e) {
            failures += where + "threw: " + e.what() + "\n";
          }
        }
        INFO("op: ", op.name, " (", op.category, "), ", samples, " samples\n", failures);
        CHECK(failures.empty());
      }
      // Every sample skipped (thrown on the cpu in every dtype) would compare nothing and pass.
      INFO("op: ", op.name, " (", op.category, "): no sample ran on the cpu in any dtype, so nothing was compared");
      CHECK(compared > 0);
    }
  }
  CHECK(ops > 20);
}

// The same walk on property-drawn inputs (tests/prop_gen.h): values near the dtype's max,
// subnormals, wide spreads, odd and prime sizes, views, asymmetric conv/pool geometry; float32 and
// float64, six draws per op and dtype, the first failure shrunk by halving.
TEST_CASE("every registered op on property-drawn inputs: cuda matches the cpu, forward and backward") {
  for (const gs::OpInfo& op : gs::op_registry())
    for (gs::DType dt : {gs::kFloat32, gs::kFloat64}) {
      std::string failure;
      for (const proptest::Spec& s : proptest::draw(op, 1, 6)) {
        // The cpu's mean sums again in float64 when its float32 sum overflows; the device's does
        // not (docs/dtypes.md), so values near the max are compared on the cpu only.
        if (op.name == "mean" && s.mode == proptest::Mode::Huge) continue;
        auto fails = [&](const proptest::Spec& x) {
          return !proptest::check_on_device(op, x, dt, gs::kCUDA, 16).empty();
        };
        std::string why;
        try {
          why = proptest::check_on_device(op, s, dt, gs::kCUDA, 16);
        } catch (const std::exception& e) {
          why = std::string("threw: ") + e.what();
        }
        if (why.empty()) continue;
        const proptest::Spec small = proptest::shrink(s, fails);
        failure = "[" + proptest::describe(op, s) + "] " + why + "\n  smallest failing case found: [" +
                  proptest::describe(op, small) + "]";
        break;
      }
      INFO("op: ", op.name, " ", std::string(gs::dtype_name(dt)), "\n", failure);
      CHECK(failure.empty());
    }
}

// float16/bfloat16: every registered op runs on the device in both dtypes and agrees with the cpu,
// forward and backward, within docs/dtypes.md's tolerance rule (k roundings of the dtype's eps,
// normwise; 2k + 2 for gradients), with the 16-bit result dtype and the same NaN/inf pattern; an op
// that refuses must name itself, the dtype and the device. The tensors move between the devices
// bit for bit.
TEST_CASE("float16/bfloat16 on cuda: every registered op matches the cpu (tolerance rule), moving keeps every bit") {
  const uint64_t seed = gs::Generator().seed();
  int compared = 0, grads = 0;
  for (gs::DType t : {gs::kFloat16, gs::kBFloat16}) {
    const std::string dt = gs::dtype_name(t);
    for (const gs::OpInfo& op : gs::op_registry()) {
      gs::Generator gen(seed);
      std::string failures;
      const int k = reduced_float::roundings(op.name);
      for (const gs::OpSample& s : op.samples(gen, gs::kFloat64)) {
        gs::tensor_list in;
        bool has_16bit_operand = false;
        for (const gs::Tensor& x : s.inputs) {
          in.push_back(x.is_floating_point() ? x.to(t) : x);
          has_16bit_operand |= in.back().dtype() == t;
        }
        if (!has_16bit_operand) continue;
        const std::string where = dt + " [" + s.label + "] ";
        gs::Tensor up;
        Run cpu;
        try {
          gs::Tensor probe = [&] {
            gs::NoGradGuard ng;
            gs::manual_seed(seed);
            return op.fn(in);
          }();
          if (op.differentiable && probe.is_floating_point()) up = gs::rand(probe.shape(), probe.dtype(), &gen) + 0.5;
          cpu = run_on(op, in, gs::kCPU, up, seed);
        } catch (const std::exception&) {
          continue;  // not a valid sample on the cpu either
        }
        try {
          Run dev = run_on(op, in, gs::kCUDA, up, seed);
          if (!dev.out.is_cuda()) failures += where + "output is on " + dev.out.device().str() + "\n";
          if (dev.out.dtype() != cpu.out.dtype())
            failures += where + "gave " + gs::dtype_name(dev.out.dtype()) + ", the cpu " +
                        gs::dtype_name(cpu.out.dtype()) + "\n";
          else if (std::string m = reduced_float::compare(dev.out, cpu.out, t, k); !m.empty())
            failures += where + "forward: " + m + "\n";
          ++compared;
          if (dev.grads.size() != cpu.grads.size()) {
            failures += where + "backward: " + std::to_string(dev.grads.size()) + " gradients vs " +
                        std::to_string(cpu.grads.size()) + "\n";
            continue;
          }
          for (size_t i = 0; i < cpu.grads.size(); ++i) {
            if (dev.grads[i].dtype() != cpu.grads[i].dtype())
              failures += where + "grad " + std::to_string(i) + " is " + gs::dtype_name(dev.grads[i].dtype()) + "\n";
            else if (std::string m = reduced_float::compare(dev.grads[i], cpu.grads[i], t, 2 * k + 2); !m.empty())
              failures += where + "backward, input " + std::to_string(i) + ": " + m + "\n";
            ++grads;
          }
        } catch (const gs::Error& e) {
          const std::string msg = e.what();
          if (msg.find(dt) == std::string::npos || msg.find("cuda:0") == std::string::npos || e.op().empty())
            failures += where + "refused without naming the op, dtype and device: " + msg + "\n";
          else
            failures += where + "refused on cuda, ran on the cpu: " + msg + "\n";
        }
      }
      INFO("op: ", op.name, " (", op.category, ") ", dt, "\n", failures);
      CHECK(failures.empty());
    }
    // Moving: cpu -> cuda -> cpu keeps every bit, including a non-contiguous source on the cpu.
    gs::Tensor h = gs::tensor({65504.0, 1e-7, -0.0, 1.0 / 3, INFINITY, 2.5}, {2, 3}, t);
    gs::Tensor back = h.t().to(gs::kCUDA).cpu();
    CHECK(back.dtype() == t);
    CHECK(gs::equal(back.to(gs::kFloat32), h.t().to(gs::kFloat32)));
  }
  CHECK(compared > 200);
  CHECK(grads > 100);
}

// The kernels round once on store, as the cpu does: a 16-bit matmul's K-long sums (cuBLAS with
// float32 accumulation), a sum whose float16 partial sums would overflow, softmax of logits
// thousands apart, and an index_add of many small values into one element give the cpu's values.
TEST_CASE("float16/bfloat16 on cuda: float32 accumulation, one rounding") {
  for (gs::DType t : {gs::kFloat16, gs::kBFloat16}) {
    CAPTURE(t);
    gs::Generator g(3);
    const gs::Tensor a = gs::randn({2, 33, 300}, t, &g), b = gs::randn({2, 300, 17}, t, &g);
    const gs::Tensor mm = gs::matmul(a.to(gs::kCUDA), b.to(gs::kCUDA));
    CHECK(mm.dtype() == t);
    CHECK(reduced_float::compare(mm, gs::matmul(a, b), t, 1) == "");
    // The transposed operand takes cuBLAS's other op, not a copy.
    CHECK(reduced_float::compare(gs::matmul(a.to(gs::kCUDA), b.transpose(1, 2).to(gs::kCUDA).transpose(1, 2)),
                                 gs::matmul(a, b), t, 1) == "");
    // 2000 values of 60000 (bfloat16: 59904): a float16 running sum would overflow; the mean is exact.
    const gs::Tensor big = gs::full({2000}, 60000.0, t);
    const gs::Tensor m = gs::mean(big.to(gs::kCUDA));
    CHECK(m.dtype() == t);
    CHECK(m.item<double>() == big[0].item<double>());
    const gs::Tensor logits = gs::tensor({-3000.0, 0.0, 3000.0, 2999.0}, {1, 4}, t);
    CHECK(reduced_float::compare(gs::log_softmax(logits.to(gs::kCUDA), 1), gs::log_softmax(logits, 1), t, 1) == "");
    // index_select's backward adds 1000 gradients of 1e-4 into one element (index_add): a 16-bit
    // running sum would drift (float16's spacing near 0.1 is 2^-14, 6e-5), a float32 one
    // rounded once gives the cpu's value.
    const gs::Tensor idx = gs::zeros({1000}, gs::kInt64);
    const gs::Tensor up = gs::full({1000}, 1e-4, t);
    gs::Tensor xd = gs::ones({1}, t).to(gs::kCUDA).requires_grad_(true), xc = gs::ones({1}, t).requires_grad_(true);
    gs::index_select(xd, 0, idx.to(gs::kCUDA)).backward(up.to(gs::kCUDA));
    gs::index_select(xc, 0, idx).backward(up);
    CHECK(xd.grad().dtype() == t);
    CHECK(reduced_float::compare(xd.grad(), xc.grad(), t, 1) == "");
    CHECK(xd.grad().item<double>() == doctest::Approx(1000 * up[0].item<double>()).epsilon(reduced_float::eps_of(t)));
  }
}

// Autocast runs its lower-precision rows in 16 bits on CUDA tensors as on CPU ones: the same dtypes,
// the cpu's values within the rule, gradients reaching the float32 inputs in float32.
TEST_CASE("autocast on cuda: 16-bit matmul and linear, float32 rows, float32 gradients") {
  gs::Generator g(5);
  const gs::Tensor a = gs::randn({3, 40}, gs::kFloat32, &g), b = gs::randn({40, 2}, gs::kFloat32, &g);
  for (gs::DType t : {gs::kFloat16, gs::kBFloat16}) {
    CAPTURE(t);
    auto ac = gs::autocast(t);
    gs::Tensor da = a.to(gs::kCUDA).requires_grad_(true), db = b.to(gs::kCUDA).requires_grad_(true);
    gs::Tensor ca = a.clone().requires_grad_(true), cb = b.clone().requires_grad_(true);
    const gs::Tensor dev = gs::matmul(da, db), cpu = gs::matmul(ca, cb);
    CHECK(dev.dtype() == t);
    CHECK(dev.is_cuda());
    CHECK(reduced_float::compare(dev, cpu, t, 1) == "");
    const gs::Tensor s = gs::softmax(dev, 1);
    CHECK(s.dtype() == gs::kFloat32);
    CHECK(s.is_cuda());
    gs::sum(s * s).backward();
    gs::sum(gs::softmax(cpu, 1) * gs::softmax(cpu, 1)).backward();
    CHECK(da.grad().dtype() == gs::kFloat32);
    CHECK(da.grad().is_cuda());
    CHECK(reduced_float::compare(da.grad(), ca.grad(), t, 4) == "");
    CHECK(reduced_float::compare(db.grad(), cb.grad(), t, 4) == "");
    {
      auto off = gs::autocast(t, false);
      const gs::Tensor c = gs::matmul(a.to(gs::kCUDA), b.to(gs::kCUDA));
      CHECK(c.dtype() == gs::kFloat32);
      CHECK(c.is_cuda());
    }
  }
}
