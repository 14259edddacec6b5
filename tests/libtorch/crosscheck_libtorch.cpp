// Runs every registry op on property-drawn inputs (tests/prop_gen.h) through gradsleuth and through
// libtorch (Debian libtorch-dev, PyTorch 1.13, CPU), in float32, float64, bfloat16 and float16, forward
// and backward, and reports where the two disagree. An op libtorch does not run in a dtype is listed
// as unsupported there, not failed. Optional: built with -DGRADSLEUTH_LIBTORCH_CROSSCHECK=ON when
// CMake finds Torch (docs/dtypes.md, "Cross-checking against libtorch").
//   crosscheck_libtorch [--seed N] [--draws N] [--op NAME] [--json]
// Where the engines differ in a 16-bit dtype or float32, the side off float64 (on the same rounded
// inputs, test_reduced_float's tolerance rule) is named. Exit status: 1 when gradsleuth is off
// float64 somewhere, 0 otherwise, 2 on bad arguments.
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/json.h"
#include "tests/prop_check.h"

namespace {

using TFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&, const proptest::Spec&)>;
using V = std::vector<torch::Tensor>;
using S = proptest::Spec;

// Each registry row written in libtorch, argument for argument (core/op_registry.cpp).
const std::map<std::string, TFn>& torch_rows() {
  static const std::map<std::string, TFn> rows = [] {
    std::map<std::string, TFn> m;
#define U(name, ...) m[name] = [](const V& x, const S&) { return __VA_ARGS__; }
    U("neg", torch::neg(x[0]));
    U("exp", torch::exp(x[0]));
    U("log", torch::log(x[0]));
    U("sqrt", torch::sqrt(x[0]));
    U("abs", torch::abs(x[0]));
    U("sign", torch::sign(x[0]));
    U("relu", torch::relu(x[0]));
    U("sigmoid", torch::sigmoid(x[0]));
    U("tanh", torch::tanh(x[0]));
    U("erf", torch::erf(x[0]));
    U("reciprocal", torch::reciprocal(x[0]));
    U("square", torch::square(x[0]));
    U("log1p", torch::log1p(x[0]));
    U("expm1", torch::expm1(x[0]));
    U("sin", torch::sin(x[0]));
    U("cos", torch::cos(x[0]));
    U("rsqrt", torch::rsqrt(x[0]));
    U("logical_not", torch::logical_not(x[0]));
    U("isnan", torch::isnan(x[0]));
    U("isinf", torch::isinf(x[0]));
    U("isfinite", torch::isfinite(x[0]));
    U("add", torch::add(x[0], x[1]));
    U("sub", torch::sub(x[0], x[1]));
    U("mul", torch::mul(x[0], x[1]));
    U("div", torch::div(x[0], x[1]));
    U("pow", torch::pow(x[0], x[1]));
    U("maximum", torch::maximum(x[0], x[1]));
    U("minimum", torch::minimum(x[0], x[1]));
    U("eq", torch::eq(x[0], x[1]));
    U("ne", torch::ne(x[0], x[1]));
    U("lt", torch::lt(x[0], x[1]));
    U("le", torch::le(x[0], x[1]));
    U("gt", torch::gt(x[0], x[1]));
    U("ge", torch::ge(x[0], x[1]));
    U("logical_and", torch::logical_and(x[0], x[1]));
    U("logical_or", torch::logical_or(x[0], x[1]));
    U("pow_scalar", torch::pow(x[0], 2.5));
    U("clamp", torch::clamp(x[0], -0.5, 0.5));
    U("leaky_relu", torch::leaky_relu(x[0], 0.1));
    U("gelu", torch::gelu(x[0]));
    U("softplus", torch::softplus(x[0]));
    U("where", torch::where(x[0] > 0.0, x[1], x[2]));
    U("masked_fill", x[0].masked_fill(x[1] > 0.0, 2.0));
    U("to_dtype", [&] {
      torch::Tensor r = x[0].to(torch::kFloat32).to(x[0].scalar_type());
      return (r + (x[0] - r).detach()) * 3.0;
    }());
    U("sum", torch::sum(x[0]));
    U("sum_dim", torch::sum(x[0], at::IntArrayRef{0, -1}, true));
    U("mean", torch::mean(x[0], at::IntArrayRef{1}));
    U("amax", torch::amax(x[0], {-1}));
    U("amin", torch::amin(x[0]));
    U("max_dim", std::get<0>(torch::max(x[0], 1)));
    U("min_dim", std::get<0>(torch::min(x[0], 0, true)));
    U("var", torch::var(x[0], at::IntArrayRef{-1}));
    U("std", torch::std(x[0], at::IntArrayRef{0}, false));
    U("softmax", torch::softmax(x[0], -1) * torch::softmax(x[0], 0));
    U("log_softmax", torch::log_softmax(x[0], -1) + torch::log_softmax(x[0], 0));
    U("logsumexp", torch::logsumexp(x[0], {-1}));
    U("argmax", torch::argmax(x[0], 1));
    U("argmin", torch::argmin(x[0]));
    U("matmul", torch::matmul(x[0], x[1]));
    U("linear", torch::linear(x[0], x[1], x[2]));
    U("view", x[0].view({4, 6}));
    U("reshape", x[0].reshape({-1}));
    U("flatten", x[0].flatten(1));
    U("transpose", x[0].transpose(0, 2));
    U("permute", x[0].permute({2, 0, 1}));
    U("narrow", x[0].narrow(1, 1, 2));
    U("slice", x[0].slice(2, 0, 4, 2));
    U("select", x[0].select(0, 1));
    U("expand", x[0].expand({2, 3, 4}));
    U("squeeze", x[0].squeeze());
    U("unsqueeze", x[0].unsqueeze(1));
    U("contiguous", x[0].contiguous());
    U("clone", x[0].clone());
    U("gather", torch::gather(x[0], 1, x[1]));
    U("index_select", torch::index_select(x[0], 0, x[1]));
    U("embedding", torch::embedding(x[0], x[1]));
    U("cat", torch::cat({x[0], x[1]}, 1));
    U("stack", torch::stack({x[0], x[1]}, 0));
    U("split", [&] {
      auto p = torch::split(x[0], 2, 1);
      return p[0] * 2.0 + p[1].sum(at::IntArrayRef{1}, true);
    }());
#undef U
    auto conv = [](const V& x, const S& s) {
      const proptest::Geometry& g = s.geo;
      return torch::conv2d(x[0], x[1], g.bias ? x[2] : torch::Tensor(), {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw},
                           g.groups);
    };
    m["conv2d"] = conv;
    m["conv2d_strided_grouped"] = conv;
    m["max_pool2d"] = [](const V& x, const S& s) {
      const proptest::Geometry& g = s.geo;
      return torch::max_pool2d(x[0], {g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw}, {g.dh, g.dw});
    };
    m["avg_pool2d"] = [](const V& x, const S& s) {
      const proptest::Geometry& g = s.geo;
      return torch::avg_pool2d(x[0], {g.kh, g.kw}, {g.sh, g.sw}, {g.ph, g.pw});
    };
    // The in-place rows differentiate through a clone, as the registry's do.
    auto inplace = [](std::function<void(torch::Tensor&, const V&)> f) {
      return [f](const V& x, const S&) {
        torch::Tensor y = x[0] * 1.0;
        f(y, x);
        return y;
      };
    };
    m["add_"] = inplace([](torch::Tensor& y, const V& x) { y.add_(x[1], 0.5); });
    m["mul_"] = inplace([](torch::Tensor& y, const V& x) { y.mul_(x[1]); });
    m["div_"] = inplace([](torch::Tensor& y, const V& x) { y.div_(x[1]); });
    m["relu_"] = inplace([](torch::Tensor& y, const V&) { y.relu_(); });
    m["clamp_"] = inplace([](torch::Tensor& y, const V&) { y.clamp_(-0.8, 0.8); });
    m["copy_"] = inplace([](torch::Tensor& y, const V& x) { y.copy_(x[1]); });
    m["masked_fill_"] = inplace([](torch::Tensor& y, const V& x) { y.masked_fill_(x[0] > 0.0, 0.0); });
    return m;
  }();
  return rows;
}

torch::ScalarType torch_type(gs::DType t) {
  switch (t) {
    case gs::kFloat16: return torch::kHalf;
    case gs::kBFloat16: return torch::kBFloat16;
    case gs::kFloat32: return torch::kFloat32;
    case gs::kFloat64: return torch::kFloat64;
    case gs::kInt64: return torch::kLong;
    default: return torch::kBool;
  }
}

// A gradsleuth tensor's values in libtorch (contiguous, the same dtype).
torch::Tensor to_torch(const gs::Tensor& t) {
  const auto v = t.to(gs::kFloat64).contiguous().to_vector<double>();
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  torch::Tensor r = torch::from_blob(const_cast<double*>(v.data()), shape, torch::kFloat64).clone();
  return r.to(torch_type(t.dtype()));
}
gs::Tensor from_torch(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kFloat64).contiguous();
  std::vector<double> v(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  gs::Shape s(t.sizes().begin(), t.sizes().end());
  return gs::tensor(v, s, gs::TensorOptions(gs::kFloat64));
}

// compare_rounded's words for the reference, here libtorch's result.
std::string vs_libtorch(std::string d) {
  for (size_t at = d.find("vs float64"); at != std::string::npos; at = d.find("vs float64", at))
    d.replace(at, 10, "vs libtorch");
  return d;
}

struct Outcome {
  std::string status;  // "agree", "disagree", "unsupported", "refused"
  std::string detail;
};

// One case in dtype t through both engines, forward and backward (the same weights).
Outcome run_case(const gs::OpInfo& op, const TFn& tfn, const proptest::Spec& spec, gs::DType t) {
  proptest::Case c = proptest::make(op, spec, t, t);
  gs::tensor_list gx;
  std::vector<torch::Tensor> tx;
  for (const gs::Tensor& x : c.inputs) {
    const bool grad = op.differentiable && x.is_floating_point();
    gx.push_back(grad ? x.detach().requires_grad_(true) : x);
    torch::Tensor y = to_torch(x);
    tx.push_back(grad ? y.requires_grad_(true) : y);
  }
  torch::Tensor tout;
  try {
    tout = tfn(tx, spec);
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    return {"unsupported", what.substr(0, what.find('\n'))};
  }
  gs::Tensor gout;
  try {
    gout = c.fn(gx);
  } catch (const gs::Error& e) {
    return {"refused", e.what()};
  }
  const gs::Tensor twant = from_torch(tout);
  const double k = 4;
  double floor = spec.mode == proptest::Mode::Tiny ? 0.0 : 1.0;
  if (op.category == "reduction" || op.category == "linalg" || op.category == "nn")
    for (const gs::Tensor& x : c.inputs)
      if (x.is_floating_point()) floor = std::max(floor, proptest::max_abs_finite(x));
  if ((op.category == "linalg" || proptest::is_conv(op.name)) && c.inputs.size() >= 2) {
    int64_t longest = 1;
    for (const gs::Tensor& x : c.inputs) longest = std::max(longest, x.numel());
    floor = std::max(floor, proptest::max_abs_finite(c.inputs[0]) * proptest::max_abs_finite(c.inputs[1]) *
                                static_cast<double>(longest));
  }
  const gs::DType cmp = gout.is_floating_point() ? t : gs::kFloat64;
  if (std::string d = proptest::compare_rounded(gout.to(gs::kFloat64), twant, cmp, k, floor); !d.empty())
    return {"disagree", "forward: " + vs_libtorch(d)};
  if (!op.differentiable || !gout.requires_grad()) return {"agree", ""};
  if (gs::sum(gs::isfinite(gout)).item<int64_t>() != gout.numel()) return {"agree", ""};  // overflowed output
  gs::Generator wg(spec.seed);
  gs::Tensor w = gs::rand(gout.shape(), gs::TensorOptions(t), &wg) + 1.0;
  if (spec.mode == proptest::Mode::Huge || spec.mode == proptest::Mode::Spread) w = w * (1.0 / 64);
  try {
    (tout * to_torch(w)).sum().backward();
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    return {"unsupported", "backward: " + what.substr(0, what.find('\n'))};
  }
  gs::sum(gout * w).backward();
  for (size_t i = 0; i < gx.size(); ++i) {
    if (!gx[i].requires_grad()) continue;
    const bool has_g = gx[i].grad().defined(), has_t = tx[i].grad().defined();
    if (!has_g && !has_t) continue;
    gs::Tensor a = has_g ? gx[i].grad() : gs::zeros_like(gx[i]);
    gs::Tensor b = has_t ? from_torch(tx[i].grad()) : gs::zeros(gx[i].shape(), gs::kFloat64);
    if (std::string d = proptest::compare_rounded(a, b, t, 2 * k + 2, floor); !d.empty())
      return {"disagree", "gradient of input " + std::to_string(i) + ": " + vs_libtorch(d)};
  }
  return {"agree", ""};
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1;
  int draws = 8;
  bool json = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--draws" && i + 1 < argc) {
      draws = std::atoi(argv[++i]);
    } else if (a == "--op" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr,
                   "crosscheck_libtorch: unknown argument '%s'\n"
                   "usage: crosscheck_libtorch [--seed N] [--draws N] [--op NAME] [--json]\n",
                   a.c_str());
      return 2;
    }
  }
  if (draws < 1) {
    std::fprintf(stderr, "crosscheck_libtorch: --draws must be at least 1, got %d\n", draws);
    return 2;
  }
  if (!only.empty() && !gs::find_op(only)) {
    std::fprintf(stderr, "crosscheck_libtorch: no registry op named '%s' (gradsleuth ops lists them)\n", only.c_str());
    return 2;
  }
  torch::set_num_threads(1);
  const gs::DType dtypes[] = {gs::kFloat32, gs::kFloat64, gs::kBFloat16, gs::kFloat16};
  struct Row {
    std::string op, dtype, status, at, detail;
    int cases = 0;
  };
  std::vector<Row> rows;
  std::map<std::string, int> count;
  const auto& table = torch_rows();
  const size_t n_ops = gs::op_registry().size();
  size_t done = 0;
  for (const gs::OpInfo& op : gs::op_registry()) {
    ++done;
    if (!only.empty() && op.name != only) continue;
    std::fprintf(stderr, "\r[%zu/%zu] %-24s", done, n_ops, op.name.c_str());  // progress
    auto it = table.find(op.name);
    for (gs::DType t : dtypes) {
      Row row{op.name, gs::dtype_name(t), "agree", "", "", 0};
      if (it == table.end()) {
        row.status = "no libtorch row";
      } else {
        for (const proptest::Spec& s : proptest::draw(op, seed, draws)) {
          Outcome o;
          try {
            o = run_case(op, it->second, s, t);
          } catch (const std::exception& e) {
            o = {"disagree", std::string("threw: ") + e.what()};
          }
          // Who is off: gradsleuth against float64 on the same rounded inputs (test_reduced_float's
          // rule). In float64 itself there is no wider reference.
          if (o.status == "disagree" && t != gs::kFloat64) {
            std::string own;
            try {
              own = proptest::check_case(op, s, t, 4);
            } catch (const std::exception& e) {
              own = e.what();
            }
            o.status = own.empty() ? "libtorch off" : "gradsleuth off";
            if (!own.empty()) o.detail += "; against float64: " + own;
          }
          ++row.cases;
          if (o.status == "agree") continue;
          auto rank = [](const std::string& st) {
            return st == "gradsleuth off" ? 4 : st == "disagree" ? 3 : st == "libtorch off" ? 2 : 1;
          };
          if (row.status == "agree" || rank(o.status) > rank(row.status)) {
            row.status = o.status;
            row.at = proptest::describe(op, s);
            row.detail = o.detail;
          }
        }
      }
      ++count[row.status];
      rows.push_back(row);
    }
  }
  std::fprintf(stderr, "\n");
  if (json) {
    std::string out = "{\"torch\": " + gs::json_str(TORCH_VERSION) + ", \"seed\": " + std::to_string(seed) +
                      ", \"draws\": " + std::to_string(draws);
    for (const char* k :
         {"agree", "gradsleuth off", "libtorch off", "disagree", "unsupported", "refused", "no libtorch row"})
      out += ", " + gs::json_str(k) + ": " + std::to_string(count[k]);
    out += ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out += std::string(i ? ", " : "") + "{\"op\": " + gs::json_str(r.op) + ", \"dtype\": " + gs::json_str(r.dtype) +
             ", \"status\": " + gs::json_str(r.status) + ", \"cases\": " + std::to_string(r.cases);
      if (!r.at.empty()) out += ", \"case\": " + gs::json_str(r.at) + ", \"detail\": " + gs::json_str(r.detail);
      out += "}";
    }
    std::printf("%s]}\n", out.c_str());
  } else {
    for (const Row& r : rows)
      if (r.status != "agree")
        std::printf("%-24s %-9s %-12s [%s] %s\n", r.op.c_str(), r.dtype.c_str(), r.status.c_str(), r.at.c_str(),
                    r.detail.c_str());
    std::printf(
        "libtorch %s, seed %llu, %d draws per op and dtype: %d agree; %d differ with gradsleuth off float64, %d with "
        "libtorch off float64, %d in float64 (no wider reference); %d unsupported in libtorch, %d refused by "
        "gradsleuth (an invalid draw), %d without a libtorch row\n",
        TORCH_VERSION, static_cast<unsigned long long>(seed), draws, count["agree"], count["gradsleuth off"],
        count["libtorch off"], count["disagree"], count["unsupported"], count["refused"], count["no libtorch row"]);
  }
  return count["gradsleuth off"] > 0 ? 1 : 0;
}
