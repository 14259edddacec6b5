// Tests for nn/module.h with real layers: parameter paths, a shared layer listed
// once, train/eval propagation, freezing, set_tensor, to(float64), hooks,
// summary() and repr().
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "nn/nn.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
using gs::Tensor;
using nntest::vals;

namespace {

// A small model written the way a student would: named members registered as children.
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Sequential> body;
  Net() : Module("Net") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 8));
    body = register_module(
        "body", std::make_shared<nn::Sequential>(std::make_shared<nn::BatchNorm1d>(8), std::make_shared<nn::ReLU>(),
                                                 std::make_shared<nn::Dropout>(0.5)));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 3));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)((*body)((*fc1)(x))); }
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::vector<std::string> out;
  for (auto& [n, t] : v) out.push_back(n);
  return out;
}

}  // namespace

TEST_CASE("named_parameters and named_buffers: dotted paths in registration order") {
  auto net = std::make_shared<Net>();
  CHECK(names(net->named_parameters()) ==
        std::vector<std::string>{"fc1.weight", "fc1.bias", "body.0.weight", "body.0.bias", "fc2.weight", "fc2.bias"});
  CHECK(names(net->named_buffers()) ==
        std::vector<std::string>{"body.0.running_mean", "body.0.running_var", "body.0.num_batches_tracked"});
  CHECK(net->num_parameters() == 4 * 8 + 8 + 8 + 8 + 8 * 3 + 3);
  std::vector<std::string> mods;
  for (auto& [p, m] : net->named_modules()) mods.push_back(p + ":" + m->type_name());
  CHECK(mods == std::vector<std::string>{":Net", "fc1:Linear", "body:Sequential", "body.0:BatchNorm1d", "body.1:ReLU",
                                         "body.2:Dropout", "fc2:Linear"});
}

TEST_CASE("a layer used twice is listed once") {
  auto fc = std::make_shared<nn::Linear>(3, 3);
  nn::Sequential seq{fc, std::make_shared<nn::Tanh>(), fc};
  CHECK(names(seq.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias"});
  CHECK(seq.num_parameters() == 12);
  // Its gradient collects both uses.
  fc->to(gs::kFloat64);
  Tensor x = gs::randn({2, 3}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return seq(x); }, (std::vector<std::pair<std::string, Tensor>>{{"w", fc->weight}, {"x", x}}));
}

TEST_CASE("train()/eval() reach every descendant") {
  auto net = std::make_shared<Net>();
  net->eval();
  for (auto& [p, m] : net->named_modules()) CHECK_FALSE(m->is_training());
  // Eval: dropout off, BatchNorm on running statistics -> deterministic output.
  Tensor x = gs::randn({5, 4});
  CHECK(gs::equal((*net)(x), (*net)(x)));
  net->train();
  for (auto& [p, m] : net->named_modules()) CHECK(m->is_training());
}

TEST_CASE("freezing with requires_grad_(false)") {
  auto net = std::make_shared<Net>();
  net->fc1->requires_grad_(false);
  CHECK(net->num_parameters(true) == net->num_parameters() - (4 * 8 + 8));
  (*net)(gs::randn({6, 4})).sum().backward();
  CHECK_FALSE(net->fc1->weight.grad().defined());
  CHECK(net->fc2->weight.grad().defined());
  CHECK(net->body->at<nn::BatchNorm1d>(0)->weight.grad().defined());
  net->zero_grad();
  CHECK_FALSE(net->fc2->weight.grad().defined());
  net->requires_grad_(true);
  CHECK(net->num_parameters(true) == net->num_parameters());
}

TEST_CASE("set_tensor replaces a value for every handle") {
  auto net = std::make_shared<Net>();
  Tensor handle = net->named_parameters()[0].second;  // fc1.weight, e.g. an optimizer's copy
  net->set_tensor("fc1.weight", gs::ones({8, 4}));
  CHECK(vals(handle) == nntest::Vec(32, 1.0));
  CHECK(vals(net->fc1->weight) == nntest::Vec(32, 1.0));
  CHECK(net->fc1->weight.requires_grad());
  net->set_tensor("body.0.running_mean", gs::full({8}, 3.0));
  CHECK(vals(net->body->at<nn::BatchNorm1d>(0)->running_mean) == nntest::Vec(8, 3.0));
  nntest::check_error([&] { net->set_tensor("fc3.weight", gs::ones({1})); }, {"Net", "fc3"});
  nntest::check_error([&] { net->set_tensor("fc1.scale", gs::ones({1})); }, {"Linear", "scale"});
}

TEST_CASE("to(float64) converts parameters and floating buffers, not counters") {
  auto net = std::make_shared<Net>();
  net->to(gs::kFloat64);
  for (auto& [n, p] : net->named_parameters()) CHECK(p.dtype() == gs::kFloat64);
  auto bn = net->body->at<nn::BatchNorm1d>(0);
  CHECK(bn->running_mean.dtype() == gs::kFloat64);
  CHECK(bn->running_var.dtype() == gs::kFloat64);
  CHECK(bn->num_batches_tracked.dtype() == gs::kInt64);
  Tensor y = (*net)(gs::randn({4, 4}, gs::kFloat64));
  CHECK(y.dtype() == gs::kFloat64);
  CHECK(bn->num_batches_tracked.item<int64_t>() == 1);
}

TEST_CASE("forward hooks: pre and post fire around forward, and can be removed") {
  nn::Linear fc(3, 2);
  std::vector<std::string> log;
  size_t pre = fc.register_forward_pre_hook(
      [&](nn::Module&, const Tensor& in) { log.push_back("pre" + gs::shape_str(in.shape())); });
  size_t post = fc.register_forward_hook([&](nn::Module& m, const Tensor&, const Tensor& out) {
    log.push_back(m.type_name() + gs::shape_str(out.shape()));
  });
  fc(gs::randn({4, 3}));
  CHECK(log == std::vector<std::string>{"pre[4, 3]", "Linear[4, 2]"});
  fc.remove_forward_hook(pre);
  fc.remove_forward_hook(post);
  fc(gs::randn({4, 3}));
  CHECK(log.size() == 2);
}

TEST_CASE("summary() lists every module's output shape and parameter count; repr() the tree") {
  auto net = std::make_shared<Net>();
  const std::string s = net->summary(gs::randn({16, 4}));
  CHECK(s.find("input [16, 4] float32") != std::string::npos);
  CHECK(s.find("fc1 (Linear)") != std::string::npos);
  CHECK(s.find("[16, 8]") != std::string::npos);
  CHECK(s.find("[16, 3]") != std::string::npos);
  CHECK(s.find("40") != std::string::npos);  // fc1: 32 + 8 parameters
  CHECK(s.find("27") != std::string::npos);  // fc2: 24 + 3
  CHECK(s.find("total parameters: 83 (trainable 83)") != std::string::npos);
  CHECK(net->repr() ==
        "Net(\n"
        "  (fc1): Linear(in_features=4, out_features=8, bias=true)\n"
        "  (body): Sequential(\n"
        "    (0): BatchNorm1d(8, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)\n"
        "    (1): ReLU()\n"
        "    (2): Dropout(p=0.5)\n"
        "  )\n"
        "  (fc2): Linear(in_features=8, out_features=3, bias=true)\n"
        ")");
}

TEST_CASE("a whole model trains: loss goes down on a small problem") {
  gs::manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 16), std::make_shared<nn::Tanh>(),
                                                std::make_shared<nn::Linear>(16, 2));
  Tensor x = gs::randn({64, 2});
  Tensor y = (x.select(1, 0) * x.select(1, 1) > 0.0).to(gs::kInt64);  // XOR-like quadrants
  nn::CrossEntropyLoss ce;
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    model->zero_grad();
    Tensor loss = ce((*model)(x), y);
    loss.backward();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    gs::NoGradGuard ng;
    for (auto& p : model->parameters()) p.sub_(p.grad(), 0.5);
  }
  CHECK(first == doctest::Approx(std::log(2.0)).epsilon(0.2));
  CHECK(last < 0.3 * first);
}
