// W8 memory report: the storage byte counters (current, peak, allocations) and
// memory_report() against numbers worked out by hand for small models.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/workflow/memory.h"
#include "json_mini.h"
#include "nn/nn.h"

namespace nn = gs::nn;
namespace dbg = gs::debug;
using gs::Tensor;

namespace {

const dbg::MemoryRow* find_row(const std::vector<dbg::MemoryRow>& rows, const std::string& name,
                               const std::string& module = "") {
  for (const auto& r : rows)
    if (r.name == name && (module.empty() || r.module == module)) return &r;
  return nullptr;
}

// One float64 parameter (4, 5) and no layers: the forward is written in the test.
struct Holder : nn::Module {
  Tensor p;
  Holder() : Module("Holder") { p = register_parameter("p", gs::full({4, 5}, 0.1, gs::kFloat64)); }
};

}  // namespace

TEST_CASE("the storage counters follow allocations, frees and the peak") {
  const gs::MemoryStats s0 = gs::memory_stats();
  constexpr int64_t kBig = int64_t(1) << 20;  // elements
  {
    Tensor big = gs::empty({kBig});  // float32: 4 MiB
    const gs::MemoryStats s1 = gs::memory_stats();
    CHECK(s1.current_bytes - s0.current_bytes == 4 * kBig);
    CHECK(s1.allocations - s0.allocations == 1);
    CHECK(s1.peak_bytes >= s1.current_bytes);
    Tensor view = big.view({1024, 1024}).t();  // views share the storage: no bytes
    CHECK(gs::memory_stats().current_bytes == s1.current_bytes);
    CHECK(big.storage()->serial() == s0.allocations);  // the serial number is the allocation count before it
  }
  CHECK(gs::memory_stats().current_bytes == s0.current_bytes);  // freed

  // The peak: reset to the current bytes, then a large temporary moves it and
  // stays there after the temporary is gone.
  gs::reset_peak_memory();
  const gs::MemoryStats r0 = gs::memory_stats();
  CHECK(r0.peak_bytes == r0.current_bytes);
  { Tensor tmp = gs::zeros({kBig}, gs::kFloat64); }  // 8 MiB, freed at once
  const gs::MemoryStats r1 = gs::memory_stats();
  CHECK(r1.current_bytes == r0.current_bytes);
  CHECK(r1.peak_bytes - r0.current_bytes == 8 * kBig);
  gs::reset_peak_memory(gs::DeviceType::CPU);
  CHECK(gs::memory_stats().peak_bytes == r0.current_bytes);
}

TEST_CASE("memory report of Linear(8,4) -> ReLU -> Linear(4,2) matches the bytes worked out by hand") {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 4), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(4, 2));
  gs::Generator g(5);
  const Tensor x = gs::randn({3, 8}, gs::kFloat32, &g);  // B = 3, made before the forward
  const dbg::MemoryReport m = dbg::memory_report(*model, [&] { return (*model)(x).pow(2.0).mean(); });

  // Parameters, float32: 0.weight (4, 8) = 128 B, 0.bias 16 B, 2.weight (2, 4) 32 B, 2.bias 8 B.
  REQUIRE(m.parameters.size() == 4);
  CHECK(m.parameters[0].name == "0.weight");
  CHECK(m.parameters[0].shape == "[4, 8]");
  CHECK(m.parameters[0].bytes == 128);
  CHECK(m.parameters[1].bytes == 16);
  CHECK(m.parameters[2].bytes == 32);
  CHECK(m.parameters[3].bytes == 8);
  CHECK(m.parameter_bytes == 184);
  // One backward gives every parameter a gradient of its own size.
  REQUIRE(m.gradients.size() == 4);
  CHECK(m.gradients[0].bytes == 128);
  CHECK(m.gradient_bytes == 184);

  // Saved for backward (B = 3):
  //   h1 = x W1^T + b1 (3, 4) = 48 B   saved by relu (its input)
  //   r  = relu(h1)    (3, 4) = 48 B   saved by the second matmul (it needs r for dW2)
  //   o  = r W2^T + b2 (3, 2) = 24 B   saved by pow (its input)
  // Not saved: the matmul products before the bias adds (add needs no inputs),
  // W^T (a view of a parameter), the scalar 2.0, the loss (returned, 4 B).
  CHECK(m.activation_bytes == 48 + 48 + 24);
  REQUIRE(m.activations.size() == 3);
  const auto* h1 = find_row(m.activations, "add", "0 (Linear)");
  const auto* r = find_row(m.activations, "relu", "1 (ReLU)");
  const auto* o = find_row(m.activations, "add", "2 (Linear)");
  REQUIRE(h1);
  REQUIRE(r);
  REQUIRE(o);
  CHECK(h1->bytes == 48);
  CHECK(h1->shape == "[3, 4]");
  CHECK(r->bytes == 48);
  CHECK(o->bytes == 24);
  CHECK(o->shape == "[3, 2]");
  // x is saved too (the first matmul needs it for dW1), but it was the caller's.
  REQUIRE(m.inputs.size() == 1);
  CHECK(m.input_bytes == 3 * 8 * 4);
  CHECK(m.loss_bytes == 4);
  // The counter agrees: everything the forward left alive is accounted for.
  CHECK(m.held_after_forward == 120 + 4);
  CHECK(m.unseen_bytes == 0);
  // The peak covers at least the activations plus the gradients being built.
  CHECK(m.peak_above_baseline() >= m.held_after_forward);
  CHECK(m.peak_above_baseline() >= m.gradient_bytes);
  CHECK(m.peak_above_baseline() < 64 * 1024);

  const std::string s = m.str();
  CHECK(s.find("memory report (cpu") == 0);
  CHECK(s.find("0.weight") != std::string::npos);
  CHECK(s.find("saved activations") != std::string::npos);
  json_mini::Value v = json_mini::parse(m.json());
  CHECK(v.get("activation_bytes")->num == 120);
  CHECK(v.get("parameters")->arr.size() == 4);
  CHECK(v.get("activations")->arr.size() == 3);
}

TEST_CASE("an op that saves its own output is counted once, and a tensor no op saw shows as unseen") {
  auto h = std::make_shared<Holder>();
  Tensor kept;
  const dbg::MemoryReport m = dbg::memory_report(*h, [&] {
    kept = gs::zeros({1000});  // made by a factory and kept by the closure: no op reports it
    // t = exp(p) saves t (its output); log(t) saves t again (its input): one storage.
    return h->p.exp().log().sum();
  });
  CHECK(m.parameter_bytes == 4 * 5 * 8);
  REQUIRE(m.activations.size() == 1);
  CHECK(m.activations[0].name == "exp");
  CHECK(m.activations[0].module == "(outside modules)");
  CHECK(m.activation_bytes == 160);  // float64 (4, 5)
  CHECK(m.loss_bytes == 8);
  CHECK(m.unseen_bytes == 4000);
  CHECK(m.held_after_forward == 160 + 8 + 4000);
  CHECK(m.gradient_bytes == 160);
}

TEST_CASE("a bigger batch holds proportionally more activations; the peak grows with it") {
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 4), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(4, 2));
  auto run = [&](int64_t B) {
    gs::Generator g(6);
    const Tensor x = gs::randn({B, 8}, gs::kFloat32, &g);
    return dbg::memory_report(*model, [&] { return (*model)(x).pow(2.0).mean(); });
  };
  const dbg::MemoryReport a = run(3), b = run(300);
  CHECK(a.activation_bytes == 120);
  CHECK(b.activation_bytes == 100 * 120);  // 40 B per example
  CHECK(b.peak_above_baseline() > a.peak_above_baseline());
  CHECK(b.gradient_bytes == a.gradient_bytes);  // gradients do not depend on the batch
}

TEST_CASE("memory_report explains a loss it cannot measure") {
  auto model = std::make_shared<nn::Linear>(8, 4);
  const Tensor x = gs::zeros({2, 8});
  try {
    dbg::memory_report(*model, [&] {
      gs::NoGradGuard ng;
      return (*model)(x).sum();
    });
    FAIL("expected a gs::Error");
  } catch (const gs::Error& e) {
    CHECK(std::string(e.what()).find("does not require grad") != std::string::npos);
  }
  try {
    dbg::memory_report(*model, [&] { return (*model)(x); });
    FAIL("expected a gs::Error");
  } catch (const gs::Error& e) {
    CHECK(std::string(e.what()).find("one-element loss") != std::string::npos);
  }
}

TEST_CASE("format_bytes") {
  CHECK(dbg::format_bytes(0) == "0 B");
  CHECK(dbg::format_bytes(1023) == "1023 B");
  CHECK(dbg::format_bytes(1536) == "1.5 KiB");
  CHECK(dbg::format_bytes(int64_t(3) << 20) == "3.0 MiB");
}
