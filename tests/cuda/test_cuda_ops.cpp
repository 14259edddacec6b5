// Coverage: every op in the registry runs on the CUDA device and agrees with the CPU, forward
// and backward (the gradient of every floating input under a random upstream gradient), on
// every sample, in float32 and float64, and forward in int64 and bool where the CPU runs the
// sample in those dtypes. One SUBCASE per op, so a failure names the op; an op whose every
// sample throws on the cpu (nothing compared) fails too.
#include "tests/cuda/cuda_test_util.h"

#include "core/op_registry.h"
#include "tests/prop_check.h"

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

// float16/bfloat16 have no CUDA kernels: every registry op that runs a kernel on them on the device
// refuses with a gradsleuth::Error naming the op, the dtype and the device (never a silent no-op
// kernel); the views, which run none, give what the cpu gives; the tensors move between the
// devices bit for bit.
TEST_CASE("float16/bfloat16 on cuda: every registered op refuses by name; moving works") {
  int refused = 0, views = 0;
  for (gs::DType t : {gs::kFloat16, gs::kBFloat16}) {
    const std::string dt = gs::dtype_name(t);
    for (const gs::OpInfo& op : gs::op_registry()) {
      gs::Generator gen(0);
      for (const gs::OpSample& s : op.samples(gen, gs::kFloat64)) {
        gs::tensor_list xs, cpu;
        bool has_16bit_operand = false;
        for (const gs::Tensor& x : s.inputs) {
          gs::Tensor y = x.is_floating_point() ? x.to(t) : x;
          has_16bit_operand |= y.dtype() == t;
          cpu.push_back(y);
          xs.push_back(y.to(gs::kCUDA));
        }
        if (!has_16bit_operand) continue;
        INFO("op: ", op.name, " [", s.label, "] ", dt);
        gs::Tensor r;
        try {
          r = op.fn(xs);
        } catch (const gs::Error& e) {
          const std::string msg = e.what();
          CHECK(msg.find(dt) != std::string::npos);
          CHECK(msg.find("cuda:0") != std::string::npos);
          CHECK(msg.find(".cpu()") != std::string::npos);
          CHECK_FALSE(e.op().empty());
          if (op.name == "exp" || op.name == "add" || op.name == "mul" || op.name == "eq" || op.name == "isnan")
            CHECK(e.op() == op.name);  // a kernel op's row refuses under its own name
          ++refused;
          continue;
        }
        // No kernel ran: a view, whose elements are the cpu's.
        CHECK(op.category == "view");
        CHECK(r.dtype() == t);
        CHECK(r.is_cuda());
        const gs::Tensor want = op.fn(cpu);
        CHECK(r.shape() == want.shape());
        CHECK(r.strides() == want.strides());
        if (r.is_contiguous()) CHECK(gs::equal(r.cpu().to(gs::kFloat32), want.to(gs::kFloat32)));
        ++views;
      }
    }
    // Moving: cpu -> cuda -> cpu keeps every bit, including a non-contiguous source on the cpu.
    gs::Tensor h = gs::tensor({65504.0, 1e-7, -0.0, 1.0 / 3, INFINITY, 2.5}, {2, 3}, t);
    gs::Tensor back = h.t().to(gs::kCUDA).cpu();
    CHECK(back.dtype() == t);
    CHECK(gs::equal(back.to(gs::kFloat32), h.t().to(gs::kFloat32)));
  }
  CHECK(refused > 100);
  CHECK(views > 0);
}

// Autocast (core/autocast.h) decides the same on every device, but an op it would run in 16 bits
// on a CUDA tensor is refused there by autocast itself, naming the op and the device; the float32
// rows cast up and run; switched off, the op runs in float32.
TEST_CASE("autocast on cuda: lower-precision ops refuse clearly, float32 ones run") {
  const gs::Tensor a = gs::randn({3, 4}).to(gs::kCUDA), b = gs::randn({4, 2}).to(gs::kCUDA);
  auto ac = gs::autocast(gs::kBFloat16);
  std::string msg;
  try {
    gs::matmul(a, b);
  } catch (const gs::Error& e) {
    msg = e.what();
    CHECK(e.op() == "matmul");
  }
  INFO(msg);
  CHECK(msg.find("autocast would run it in bfloat16 on cuda:0") != std::string::npos);
  CHECK(msg.find("gs::autocast(gs::autocast_dtype(), false)") != std::string::npos);
  CHECK(gs::autocast_enabled());
  const gs::Tensor s = gs::softmax(a, 1);
  CHECK(s.dtype() == gs::kFloat32);
  CHECK(s.is_cuda());
  {
    auto off = gs::autocast(gs::kBFloat16, false);
    const gs::Tensor c = gs::matmul(a, b);
    CHECK(c.dtype() == gs::kFloat32);
    CHECK(c.is_cuda());
  }
}
