// Lab 12's range watch: one training step of a small MLP under float16 autocast, without loss
// scaling and then with your LossScaler (tutorials/lab12_precision/lab12.cpp), each measured by the
// debug module's range watch (M28, debug/checks/model/range_watch.h). Prints, per layer, the
// histogram of the parameter gradients' powers of two as the float16 backward made them, the share
// lost to float16's range, and M28's finding.
//   build/tutorials/lab12_watch [--scale S]     (S: your scaler's init_scale, default 65536)
// Exit status: 0 (with your scaler unfinished, its half is reported as not implemented).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/autocast.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/model/range_watch.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tutorials/lab12_precision/lab12.h"

namespace gs = gradsleuth;
namespace nn = gs::nn;
namespace lab12 = gs::lab12;
using gs::Tensor;

namespace {

// The loss is averaged over many elements (as a per-token loss over a long batch is): its
// gradients are small, and many fall below float16's smallest subnormal, 2^-24.
constexpr double kLossFactor = 1e-4;

std::shared_ptr<nn::Sequential> make_model() {
  gs::manual_seed(12);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 64), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(64, 64), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(64, 1));
}

// One bar per power of two from 2^-40 to 2^19, only the rows with values; the zero row first.
void print_histogram(const gs::debug::RangeCounts& c) {
  auto bar = [&](int64_t n) {
    const int width = c.values ? static_cast<int>(std::lround(40.0 * static_cast<double>(n) / c.values)) : 0;
    return std::string(static_cast<size_t>(width), '#') + (n > 0 && width == 0 ? "." : "");
  };
  std::printf("      %-10s %7lld  %s\n", "zero", static_cast<long long>(c.values - c.nonzero),
              bar(c.values - c.nonzero).c_str());
  for (int i = 0; i < static_cast<int>(c.exponents.size()); ++i) {
    const int64_t n = c.exponents[static_cast<size_t>(i)];
    if (n == 0) continue;
    const int e = i - 40;
    const char* mark = e < -24 ? "  (below float16's smallest subnormal)" : e < -14 ? "  (float16 subnormal)" : "";
    std::printf("      2^%-8d %7lld  %s%s\n", e, static_cast<long long>(n), bar(n).c_str(), mark);
  }
  if (c.overflow > 0)
    std::printf("      %-10s %7lld  %s  (past float16's largest finite value, 65504)\n", "inf/NaN",
                static_cast<long long>(c.overflow), bar(c.overflow).c_str());
}

// One step: forward under autocast(float16), backward scaled by `scaler` (none: unscaled), the
// range watch attached. Returns false when the scaler is not written yet.
bool run(const char* title, lab12::LossScaler* scaler, const Tensor& x, const Tensor& y) {
  std::printf("\n== %s ==\n", title);
  auto model = make_model();
  gs::optim::SGD opt(model->parameters(), gs::optim::SGDOptions(0.01));
  gs::debug::RangeWatch watch;
  watch.attach(*model);
  watch.set_step(1);
  Tensor loss;
  {
    auto ac = gs::autocast(gs::kFloat16);
    loss = nn::functional::mse_loss((*model)(x), y) * kLossFactor;
  }
  if (scaler)
    std::printf("   loss %.6g, scaled by %g before backward\n", loss.item<double>(), scaler->get_scale());
  else
    std::printf("   loss %.6g\n", loss.item<double>());
  if (scaler)
    scaler->scale(loss).backward();
  else
    loss.backward();
  watch.before_update();  // closes this step's gradient counts (a debug::Monitor calls it before each step)
  watch.after_update();
  for (const gs::debug::RangeModuleStats& m : watch.modules()) {
    if (m.param_grads.values == 0) continue;
    std::printf("   %s: parameter gradients as the float16 backward made them (%.1f%% lost to float16's range)\n",
                m.label.c_str(), 100.0 * m.param_grads.lost_share());
    print_histogram(m.param_grads);
  }
  bool fired = false;
  for (const gs::debug::Finding& f : watch.findings())
    if (f.severity != gs::debug::Severity::Info) {
      std::printf("   %s: %s\n", f.check.c_str(), f.title.c_str());
      fired = true;
    }
  if (!fired) std::printf("   M28: no warning\n");
  if (scaler) {
    scaler->unscale_(opt);
    const bool stepped = scaler->step(opt);
    scaler->update();
    std::printf("   %s; your scale is now %g\n",
                stepped ? "step() ran on the unscaled (true) gradients"
                        : "step() was skipped: a gradient overflowed to inf/NaN (the scale is too large)",
                scaler->get_scale());
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  double init_scale = 65536.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--scale" && i + 1 < argc) {
      char* end = nullptr;
      init_scale = std::strtod(argv[++i], &end);
      if (!end || *end || !(init_scale > 0)) {
        std::fprintf(stderr, "lab12_watch: --scale needs a number > 0, got '%s'\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "lab12_watch: unknown argument '%s' (usage: lab12_watch [--scale S])\n", a.c_str());
      return 2;
    }
  }
  gs::manual_seed(7);
  const Tensor x = gs::randn({256, 16});
  const Tensor y = gs::randn({256, 1});
  run("float16 autocast, no loss scaling", nullptr, x, y);
  try {
    lab12::ScalerOptions o;
    o.init_scale = init_scale;
    lab12::LossScaler scaler(o);
    run("float16 autocast, your LossScaler", &scaler, x, y);
  } catch (const gs::Error& e) {
    std::printf("\n== float16 autocast, your LossScaler ==\n   not shown: %s\n", e.what());
  }
  return 0;
}
