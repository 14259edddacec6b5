// Dead-ReLU (M7) and saturation (M8) statistics (debug/checks/model/activation_stats.h).
#include <doctest/doctest.h>

#include "core/autograd.h"
#include "debug/checks/model/activation_stats.h"
#include "debug_test_util.h"
#include "optim/optim.h"

using namespace dtest;

TEST_CASE("M7: a large negative bias kills the units at initialisation; a clean MLP keeps them") {
  XY d = blobs(16, 3, 6);
  auto clean = mlp(6, 16, 3);
  dbg::DeadReluTracker t;
  t.attach(*clean);
  REQUIRE(t.layers().size() == 4);  // fc1's ReLU, one per residual block, the last ReLU
  t.begin_pass();
  (*clean)(d.x);
  t.end_pass();
  CHECK(t.findings().empty());
  CHECK(t.layers()[0].pass_dead < 0.7);

  auto bad = mlp(6, 16, 3);
  (*bad)[1]->inject_bug(nn::Bug::B18);
  dbg::DeadReluTracker tb;
  tb.attach(*bad);
  tb.begin_pass();
  (*bad)(d.x);
  tb.end_pass();
  auto fs = tb.findings();
  REQUIRE(find(fs, "M7") != nullptr);
  CHECK(fs[0].module == "2 (ReLU)");
  CHECK(evidence(fs[0], "dead fraction over the pass") >= 0.9);
  CHECK(fs[0].title.find("since initialisation") != std::string::npos);
}

TEST_CASE("M7: units that die during training are reported as such, with the step") {
  XY d = blobs(16, 3, 6);
  auto m = mlp(6, 16, 3);
  dbg::DeadReluTracker t;
  t.attach(*m);
  t.set_step(1);
  (*m)(d.x);  // healthy at initialisation
  {
    gs::NoGradGuard ng;
    std::dynamic_pointer_cast<nn::Linear>((*m)[1])->bias.fill_(-50.0);  // a huge update pushed them down
  }
  t.set_step(7);
  t.begin_pass();
  (*m)(d.x);
  t.end_pass();
  auto fs = t.findings();
  REQUIRE(find(fs, "M7") != nullptr);
  CHECK(fs[0].title.find("during training") != std::string::npos);
  CHECK(evidence(fs[0], "first step at the threshold") == 7);
  CHECK(evidence(fs[0], "dead fraction at initialisation (first batch)") < 0.7);
}

TEST_CASE("M7 over a whole dataset pass through a loader") {
  auto data = nn::make_blobs(32, 3, 6, 1.0, 4);
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(16));
  auto bad = mlp(6, 16, 3);
  (*bad)[1]->inject_bug(nn::Bug::B18);
  CHECK(find(dbg::dead_relu_pass(*bad, loader), "M7") != nullptr);
  CHECK(dbg::dead_relu_pass(*mlp(6, 16, 3), loader).empty());
  CHECK(bad->is_training());
  // Alone, the pass cannot tell when the units died; given what a monitor saw at the first step, it says.
  const dbg::Finding* unknown = find(dbg::dead_relu_pass(*bad, loader), "M7");
  REQUIRE(unknown != nullptr);
  CHECK(unknown->kind == dbg::Kind::DeadUnits);
  const std::string layer = unknown->module;
  const std::vector<dbg::Finding> died = dbg::dead_relu_pass(*bad, loader, -1, {}, {{layer, 0.05}});
  REQUIRE(find(died, "M7") != nullptr);
  CHECK(find(died, "M7")->kind == dbg::Kind::DiedInTraining);
  CHECK(find(died, "M7")->title.find("(they died during training)") != std::string::npos);
  const std::vector<dbg::Finding> born = dbg::dead_relu_pass(*bad, loader, -1, {}, {{layer, 0.9}});
  CHECK(find(born, "M7")->title.find("(dead since initialisation)") != std::string::npos);
}

TEST_CASE("M8: a sigmoid stack with weights far too large saturates; a Xavier-initialised one does not") {
  XY d = blobs(16, 3, 6);
  auto stack = [](double weight_std) {
    gs::manual_seed(2);
    auto s = std::make_shared<nn::Sequential>();
    int64_t in = 6;
    for (int i = 0; i < 4; ++i) {
      auto fc = std::make_shared<nn::Linear>(in, 32);
      if (weight_std > 0) fc->weight.normal_(0.0, weight_std);
      s->push_back(fc).push_back(std::make_shared<nn::Sigmoid>());
      in = 32;
    }
    return s;
  };
  auto clean = stack(0.0);
  dbg::SaturationTracker t;
  t.attach(*clean);
  REQUIRE(t.layers().size() == 4);
  (*clean)(d.x);
  CHECK(t.findings().empty());

  auto big = stack(3.0);
  dbg::SaturationTracker tb;
  tb.attach(*big);
  (*big)(d.x);
  auto fs = tb.findings();
  REQUIRE(find(fs, "M8") != nullptr);
  CHECK(evidence(fs[0], "saturated fraction (mean over batches)") > 0.5);
  CHECK(fs[0].module.find("Sigmoid") != std::string::npos);
}
