// Lab 4 reference solution (built only with -DGRADSLEUTH_LAB_SOLUTIONS=ON).
// Broadcasting and in-place bugs; see ../README.md.
#include "tutorials/lab4_broadcasting/lab4.h"

#include <string>

#include "core/autograd.h"
#include "core/ops.h"
#include "debug/checks/model/anomaly.h"
#include "nn/loss.h"
#include "optim/sgd.h"

namespace gradsleuth::lab4 {

namespace {
// Given (the same as in the starter).
std::string text_between(const std::string& s, const std::string& before, const std::string& after) {
  const size_t a = s.find(before);
  if (a == std::string::npos) return "";
  const size_t from = a + before.size();
  const size_t b = s.find(after, from);
  return b == std::string::npos ? "" : s.substr(from, b - from);
}
}  // namespace

// Task 4.1
std::vector<std::optional<Shape>> predicted_shapes() {
  return {
      Shape{64, 64},         // 1. (64, 1) against (64) = (1, 64): every prediction minus every target
      std::nullopt,          // 2. (32, 10) against (32): 10 and 32 are aligned, and differ
      Shape{32, 10},         // 3. keepdim: (32, 1) stretches along the columns, as meant
      Shape{10, 10},         // 4. runs: column j loses the mean of row j (wrong, without a word)
      std::nullopt,          // 5. (3) is aligned with the last dim, 32
      Shape{16, 3, 32, 32},  // 6. (3, 1, 1) lines up with the channel dim
      Shape{4, 5, 3},        // 7. (4, 1, 3) and (1, 5, 1)
      Shape{8},              // 8. a 0-dim tensor broadcasts to anything
  };
}

// Task 4.1
Stretch stretch(const Shape& a, const Shape& b) {
  Stretch s;
  s.result = broadcast_shapes(a, b, "lab4::stretch");  // throws, naming both shapes
  const int64_t n = numel_of(s.result), na = numel_of(a), nb = numel_of(b);
  s.a_stretched = n > na;
  s.b_stretched = n > nb;
  s.suspicious = s.a_stretched && s.b_stretched;  // then both hold more than one element, too
  return s;
}

// Task 4.2
Tensor safe_mse(const Tensor& pred, const Tensor& target) {
  if (pred.shape() != target.shape()) {
    std::string to;
    try {
      to = "they would broadcast to " + shape_str(broadcast_shapes(pred.shape(), target.shape(), "lab4::safe_mse")) +
           " and compare every prediction with every target";
    } catch (const Error&) {
      to = "they do not even broadcast";
    }
    std::string fix = "give both the same shape";
    if (pred.dim() == target.dim() + 1 && pred.size(-1) == 1)
      fix = "use target.unsqueeze(" + std::to_string(target.dim()) + ") (or pred.squeeze(-1))";
    else if (target.dim() == pred.dim() + 1 && target.size(-1) == 1)
      fix = "use target.squeeze(-1) (or pred.unsqueeze(" + std::to_string(pred.dim()) + "))";
    GS_FAIL("lab4::safe_mse", "prediction ", shape_str(pred.shape()), " and target ", shape_str(target.shape()),
            " have different shapes: ", to, ". Fix: ", fix, ".");
  }
  Tensor d = pred - target;
  return (d * d).mean();
}

// Task 4.3
BroadcastReport locate_broadcast(nn::Module& model, const std::function<void()>& run) {
  debug::BroadcastDetector det(debug::BroadcastMode::Warn);
  det.attach(model);
  {
    auto on = det.enable();  // listens while `on` lives
    run();
  }
  det.detach();
  BroadcastReport r;
  const auto& fs = det.findings();
  r.count = static_cast<int64_t>(fs.size());
  r.found = !fs.empty();
  if (r.found) {
    r.op = fs.front().op;
    r.module = fs.front().module;
    r.shape = fs.front().shape;
    r.message = fs.front().str();
  }
  return r;
}

// Given (the same as in the starter).
std::vector<double> train_regression_buggy(nn::Module& model, const Tensor& x, const Tensor& y, int steps, double lr) {
  nn::MSELoss loss_fn(nn::MSELossOptions().allow_broadcast(true));
  optim::SGD opt(model.parameters(), optim::SGDOptions(lr));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor pred = model(x);          // (N, 1)
    Tensor loss = loss_fn(pred, y);  // y (N)
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// Task 4.4: the target gets the prediction's shape (N, 1), and MSELoss keeps refusing mismatches.
std::vector<double> train_regression(nn::Module& model, const Tensor& x, const Tensor& y, int steps, double lr) {
  const int64_t n = x.size(0);
  GS_CHECK((y.dim() == 1 && y.size(0) == n) || (y.dim() == 2 && y.size(0) == n && y.size(1) == 1),
           "lab4::train_regression", "expects targets (", n, ") or (", n, ", 1) for inputs ", shape_str(x.shape()),
           ", got ", shape_str(y.shape()));
  const Tensor target = y.reshape({n, 1});  // (N, 1), whichever of the two it was
  nn::MSELoss loss_fn;
  optim::SGD opt(model.parameters(), optim::SGDOptions(lr));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = loss_fn(model(x), target);  // (N, 1) against (N, 1)
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// Task 4.5
InplaceReport read_inplace_error(const std::string& message) {
  InplaceReport r;
  if (message.find("modified by an in-place operation") == std::string::npos) return r;
  r.found = true;
  r.tensor = text_between(message, "The ", " tensor was saved");
  r.saved_by = text_between(message, "saved by '", "'");
  r.modified_by = text_between(message, "modified by '", "'");
  const std::string saved = text_between(message, "' at version ", " ");
  const std::string now = text_between(message, "is now at version ", ";");
  if (!saved.empty()) r.saved_version = std::stoll(saved);
  if (!now.empty()) r.version_now = std::stoll(now);
  return r;
}

// Given (the same as in the starter).
ResidualMLP::ResidualMLP(int64_t features) : Module("lab4.ResidualMLP") {
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(features, features));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(features, features));
}

Tensor ResidualMLPInplace::forward(const Tensor& x) {
  Tensor h = (*fc1)(x);
  h.relu_();
  h = (*fc2)(h);
  Tensor out = x;
  out.add_(h);
  out.relu_();
  return out;
}

// Task 4.6: a new tensor for the sum; x stays as the caller (and fc1's saved copy) knows it.
// The relu_ on fc1's fresh output may stay in place: no op saved that tensor.
Tensor ResidualMLP::forward(const Tensor& x) {
  Tensor h = (*fc1)(x);  // (B, D)
  h.relu_();
  return relu(x + (*fc2)(h));  // (B, D)
}

}  // namespace gradsleuth::lab4
