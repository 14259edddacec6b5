// Tests for nn/container.h: Sequential (construction forms, names "0", "1", ...,
// hooks on every layer), Residual and ResidualBlock.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "nn/activation.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/linear.h"
#include "nn/normalization.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
using gs::Tensor;
using nntest::vals;
using Params = std::vector<std::pair<std::string, Tensor>>;

TEST_CASE("Sequential: three ways to build it, PyTorch-style names") {
  auto a = std::make_shared<nn::Linear>(4, 8);
  auto r = std::make_shared<nn::ReLU>();
  auto b = std::make_shared<nn::Linear>(8, 2);

  auto s1 = std::make_shared<nn::Sequential>(a, r, b);
  nn::Sequential s2{a, r, b};
  nn::Sequential s3;
  s3.push_back(a).push_back(r).push_back(b);
  for (nn::Sequential* s : {s1.get(), &s2, &s3}) {
    REQUIRE(s->size() == 3);
    auto names = s->named_parameters();
    REQUIRE(names.size() == 4);
    CHECK(names[0].first == "0.weight");
    CHECK(names[1].first == "0.bias");
    CHECK(names[2].first == "2.weight");
    CHECK(names[3].first == "2.bias");
    CHECK(s->named_children()[1].first == "1");
  }
  CHECK(s1->at<nn::Linear>(2) == b);
  CHECK(s1->at<nn::Linear>(1) == nullptr);
  nntest::check_error([&] { (*s1)[3]; }, {"Sequential", "index 3", "3 layers"});
  nntest::check_error([&] { s3.push_back(nullptr); }, {"Sequential", "null"});

  Tensor x = gs::randn({5, 4});
  nntest::check_close((*s1)(x), vals((*b)(gs::relu((*a)(x)))), 1e-6);
  CHECK(s1->repr() ==
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=8, bias=true)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=8, out_features=2, bias=true)\n"
        ")");
}

TEST_CASE("Sequential: every layer's forward hooks fire, in order") {
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 3), std::make_shared<nn::Tanh>());
  std::vector<std::string> seen;
  for (auto& [path, m] : net->named_modules())
    m->register_forward_hook([&seen, p = path](nn::Module& self, const Tensor&, const Tensor& out) {
      seen.push_back((p.empty() ? "(root)" : p) + ":" + self.type_name() + gs::shape_str(out.shape()));
    });
  (*net)(gs::randn({2, 3}));
  CHECK(seen == std::vector<std::string>{"0:Linear[2, 3]", "1:Tanh[2, 3]", "(root):Sequential[2, 3]"});
}

TEST_CASE("Residual: x + inner(x), gradients, shape error") {
  auto inner = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 3), std::make_shared<nn::Tanh>());
  nn::Residual res(inner);
  CHECK(res.named_parameters()[0].first == "inner.0.weight");
  Tensor x = gs::randn({4, 3});
  nntest::check_close(res(x), vals(x + (*inner)(x)), 1e-6);

  res.to(gs::kFloat64);
  auto fc = inner->at<nn::Linear>(0);
  Tensor xd = gs::randn({4, 3}, gs::kFloat64).requires_grad_();
  GS_CHECK_GRADS([&] { return res(xd); }, (Params{{"w", fc->weight}, {"b", fc->bias}, {"x", xd}}));

  nn::Residual bad(std::make_shared<nn::Linear>(3, 1));
  nntest::check_error([&] { bad(gs::randn({4, 3})); }, {"Residual", "(Linear)", "[4, 3]", "[4, 1]", "same shape"});
}

TEST_CASE("ResidualBlock: conv-bn-relu-conv-bn + skip + relu") {
  nn::ResidualBlock block(2);
  CHECK(block.extra_repr() == "channels=2");
  std::vector<std::string> names;
  for (auto& [n, p] : block.named_parameters()) names.push_back(n);
  CHECK(names ==
        std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "conv2.weight", "bn2.weight", "bn2.bias"});
  CHECK(block.named_buffers().size() == 6);
  Tensor x = gs::randn({2, 2, 5, 5});
  Tensor y = block(x);
  CHECK(y.shape() == x.shape());
  CHECK(gs::amin(y).item<double>() >= 0.0);

  // The same computation spelled out with the block's own children (eval: fixed statistics).
  block.eval();
  auto kids = block.named_children();
  auto& conv1 = *kids[0].second;
  auto& bn1 = *kids[1].second;
  auto& conv2 = *kids[2].second;
  auto& bn2 = *kids[3].second;
  nntest::check_close(block(x), vals(gs::relu(x + bn2(conv2(gs::relu(bn1(conv1(x))))))), 1e-6);

  block.train();
  block.to(gs::kFloat64);
  Tensor xd = gs::randn({2, 2, 3, 3}, gs::kFloat64).requires_grad_();
  Params wrt{{"x", xd}};
  for (auto& p : block.named_parameters()) wrt.push_back(p);
  GS_CHECK_GRADS([&] { return block(xd); }, wrt);
}
