// The bug zoo on the CUDA backend (debug::zoo::Options::device): a few recipes trained on the
// device, with every check attached, reach the verdicts of the same recipes on the CPU (which
// checks fire, whether the intended one does), the clean reference stays silent there, and the
// host-only checks (M13's gradient check, M18's half-precision comparison) run on a CPU copy and
// leave the model on the device. A reduced budget keeps the emulated run short.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "../fashion_mnist_required.h"
#include "debug/zoo/zoo.h"
#include "tests/cuda/cuda_test_util.h"

namespace zoo = gs::debug::zoo;
namespace nn = gs::nn;

namespace {

// The quick recipe, smaller, so the emulator runs a variant in seconds: 30 steps on 1,280 images,
// 60 steps for the gate's overfit-one-batch (M14), 500 test images. Adam's lr is 3e-3 (not 1e-3)
// so that 30 steps grow the logits past fp16's exp range as 150 steps do in the quick budget,
// which is what B21's check (M18) needs; on the CPU the clean reference stays silent with it and
// B12, B21, B22 are caught (as they are from lr 2e-3 on; at 1e-3, 60 steps are needed for B21).
zoo::Options small_budget(gs::Device d) {
  zoo::Options o = zoo::Options::quick();
  o.train_examples = 1280;
  o.test_examples = 500;
  o.steps = 30;
  o.overfit_steps = 60;
  o.lr = 3e-3;
  o.device = d;
  return o;
}

std::string fired_text(const zoo::RunResult& r) {
  std::string s;
  for (const auto& c : r.fired) s += c + " ";
  return s + "\n" + r.report.str(false);
}

// Runs one variant on `d`, checking that the model is on `d` before and after (the checks that
// work on a CPU copy move it back).
zoo::RunResult run_on(const nn::BugSet& bugs, gs::Device d) {
  const zoo::Options o = small_budget(d);
  zoo::Variant v = zoo::build(bugs, o);
  for (const gs::Tensor& p : v.model->parameters()) REQUIRE(p.device() == d);
  zoo::RunResult r = zoo::run_variant(v, o);
  for (const gs::Tensor& p : v.model->parameters()) CHECK(p.device() == d);
  return r;
}

}  // namespace

TEST_CASE("zoo on cuda: the clean reference and bugs B12, B21, B22 get the cpu's verdicts") {
  testdata::require_fashion_mnist();
  // B22 is caught by M13 and B21 by M18, the two checks that run on a CPU copy of a device
  // model; B12 by M5 (gradient flow), from gradients computed on the device.
  for (const nn::BugSet& bugs :
       {nn::BugSet{}, nn::BugSet{nn::Bug::B12}, nn::BugSet{nn::Bug::B21}, nn::BugSet{nn::Bug::B22}}) {
    const std::string id = bugs.empty() ? "clean" : bugs.str();
    CAPTURE(id);
    const zoo::RunResult cpu = run_on(bugs, gs::kCPU), dev = run_on(bugs, gs::kCUDA);
    INFO("cpu fired: ", fired_text(cpu));
    INFO("cuda fired: ", fired_text(dev));
    CHECK(dev.fired == cpu.fired);
    CHECK(dev.caught == cpu.caught);
    CHECK(dev.steps == cpu.steps);
    CHECK(dev.steps == small_budget(gs::kCUDA).steps);
    CHECK(dev.stopped.empty());
    // The same training, up to float32 summation order.
    CHECK(dev.test_accuracy == doctest::Approx(cpu.test_accuracy).epsilon(0.02));
    if (bugs.empty()) {
      CHECK(dev.fired.empty());
      CHECK(dev.test_accuracy > 0.6);  // it learned
    } else {
      CHECK(dev.caught);
    }
  }
}
