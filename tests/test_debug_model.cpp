// The model checks (debug/checks/model/model_checks.h): each fires on the bug it is for and
// stays silent on a clean model.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "debug/checks/model/model_checks.h"
#include "debug_test_util.h"
#include "optim/optim.h"

using namespace dtest;

namespace {
nn::ModulePtr at(const std::shared_ptr<nn::Sequential>& s, size_t i) { return (*s)[i]; }
Tensor ce(const Tensor& out, const Tensor& y) { return nn::functional::cross_entropy(out, y); }
}  // namespace

TEST_CASE("M1: the shape trace lists every module's output shape and parameter count") {
  auto m = mlp(12, 8, 3);
  XY d = blobs(4, 3, 12);
  dbg::ShapeTrace t = dbg::shape_trace(*m, d.x);
  REQUIRE(t.rows.size() == m->named_modules().size());
  CHECK(t.rows[0].path == "(model)");
  CHECK(t.rows[0].output_shape == "[12, 3]");
  CHECK(t.rows[2].type == "Linear");
  CHECK(t.rows[2].output_shape == "[12, 8]");
  CHECK(t.rows[2].parameters == 12 * 8 + 8);
  CHECK(t.total_parameters == m->num_parameters());
  const dbg::Finding f = t.finding();
  CHECK(f.check == "M1");
  CHECK_FALSE(f.fires());
  CHECK(f.cause.find("[12, 8]") != std::string::npos);
}

TEST_CASE("M3: a ReLU after the final layer is found by structure and by the logits; clean is silent") {
  XY d = blobs(8, 3, 6);
  auto clean = mlp(6, 8, 3);
  clean->eval();
  CHECK_FALSE(fires(dbg::check_final_activation(*clean, (*clean)(d.x))));

  auto bad = mlp(6, 8, 3);
  bad->push_back(std::make_shared<nn::ReLU>());  // bug B10
  bad->eval();
  auto fs = dbg::check_final_activation(*bad, (*bad)(d.x));
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].check == "M3");
  CHECK(fs[0].module == "9 (ReLU)");
  CHECK(evidence(fs[1], "min logit") >= 0.0);
  // A last layer initialised at zero: every logit exactly 0, the same for every example. No ReLU
  // clipped them (its zeros fall on different logits for different examples): not M3's.
  auto zeroed = mlp(6, 8, 3);
  {
    gs::NoGradGuard ng;
    for (Tensor p : at(zeroed, 8)->parameters()) p.detach().zero_();
  }
  zeroed->eval();
  const Tensor zero_logits = (*zeroed)(d.x);
  REQUIRE(gs::amax(gs::abs(zero_logits)).item<double>() == 0.0);
  CHECK_FALSE(fires(dbg::check_final_activation(*zeroed, zero_logits)));
  // The same zeros behind a ReLU are still the ReLU's, by structure.
  zeroed->push_back(std::make_shared<nn::ReLU>());
  CHECK(fires(dbg::check_final_activation(*zeroed, (*zeroed)(d.x))));
  // Probabilities (double softmax) are L2's business, not M3's data rule.
  auto soft = mlp(6, 8, 3);
  soft->push_back(std::make_shared<nn::Softmax>(1));
  soft->eval();
  CHECK_FALSE(fires(dbg::check_final_activation(*soft, (*soft)(d.x))));
  // A Sigmoid before BCELoss gives the probabilities that loss expects; before anything else it is
  // an activation too many.
  auto sig = mlp(6, 8, 1);
  sig->push_back(std::make_shared<nn::Sigmoid>());
  CHECK_FALSE(fires(dbg::check_final_activation(*sig, Tensor(), {}, "BCELoss")));
  CHECK(fires(dbg::check_final_activation(*sig, Tensor(), {}, "MSELoss")));
  CHECK(fires(dbg::check_final_activation(*sig, Tensor())));
}

TEST_CASE("M3 on a regression: an activation bounding targets that lie inside its range is on purpose") {
  auto sig = mlp(6, 8, 1);
  sig->push_back(std::make_shared<nn::Sigmoid>());
  // A target scaled into [0, 1] (a bounded quantity): the Sigmoid is the model's range.
  const Tensor scaled = gs::tensor(std::vector<float>{0.05f, 0.3f, 0.62f, 0.97f}, {4, 1});
  CHECK_FALSE(fires(dbg::check_final_activation(*sig, Tensor(), {}, "MSELoss", scaled)));
  CHECK_FALSE(fires(dbg::check_final_activation(*sig, Tensor(), {}, "", scaled)));
  // Targets up to 7.5: the Sigmoid cannot reach them, and the warning names the range.
  const Tensor wide = gs::tensor(std::vector<float>{0.9f, 2.5f, 5.1f, 7.5f}, {4, 1});
  auto fs = dbg::check_final_activation(*sig, Tensor(), {}, "MSELoss", wide);
  REQUIRE(fires(fs));
  CHECK(fs[0].kind == dbg::Kind::OutputOutOfRange);
  CHECK(evidence(fs[0], "largest target") == doctest::Approx(7.5));
  // 0/1 targets are labels: a loss function on them after a Sigmoid may well take logits.
  const Tensor labels = gs::tensor(std::vector<float>{0, 1, 1, 0}, {4, 1});
  CHECK(fires(dbg::check_final_activation(*sig, Tensor(), {}, "", labels)));
  // A loss that takes logits keeps the warning whatever the targets.
  CHECK(fires(dbg::check_final_activation(*sig, Tensor(), {}, "BCEWithLogitsLoss", scaled)));
  // A ReLU on counts is a non-negative regression; on targets below 0 it cannot reach them.
  auto relu = mlp(6, 8, 1);
  relu->push_back(std::make_shared<nn::ReLU>());
  CHECK_FALSE(fires(dbg::check_final_activation(*relu, Tensor(), {}, "MSELoss",
                                                gs::tensor(std::vector<float>{0, 3, 12, 1}, {4, 1}))));
  fs = dbg::check_final_activation(*relu, Tensor(), {}, "MSELoss",
                                   gs::tensor(std::vector<float>{-2, 3, 1, 0.5f}, {4, 1}));
  REQUIRE(fires(fs));
  CHECK(fs[0].kind == dbg::Kind::OutputOutOfRange);
}

TEST_CASE("M4: one layer instance used twice, and one tensor under two names; clean is silent") {
  CHECK_FALSE(fires(dbg::check_shared_weights(*mlp(6, 8, 3))));
  auto fc = std::make_shared<nn::Linear>(8, 8);
  auto reuse = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), fc,
                                                std::make_shared<nn::ReLU>(), fc);  // bug B11
  auto fs = dbg::check_shared_weights(*reuse);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].title.find("2 and 4") != std::string::npos);
  CHECK(evidence(fs[0], "shared parameters") == 8 * 8 + 8);

  struct Tied : nn::Module {
    Tied() : Module("Tied") {
      a = register_module("a", std::make_shared<nn::Linear>(3, 3));
      b = register_module("b", std::make_shared<nn::Linear>(3, 3));
      b->register_parameter("tied", a->weight);
    }
    std::shared_ptr<nn::Linear> a, b;
  };
  auto tied = std::make_shared<Tied>();
  auto ts = dbg::check_shared_weights(*tied);
  REQUIRE(ts.size() == 1);
  CHECK(ts[0].parameter == "a.weight");
  CHECK(ts[0].title.find("b.tied") != std::string::npos);
}

TEST_CASE("M5: a detach inside the model leaves the earlier layers without gradient") {
  XY d = blobs(8, 3, 6);
  auto clean = mlp(6, 8, 3);
  ce((*clean)(d.x), d.y).backward();
  CHECK_FALSE(fires(dbg::check_gradient_flow(*clean)));

  auto bad = mlp(6, 8, 3);
  at(bad, 8)->inject_bug(nn::Bug::B12);  // the head detaches its input
  ce((*bad)(d.x), d.y).backward();
  auto fs = dbg::check_gradient_flow(*bad);
  REQUIRE(find(fs, "M5") != nullptr);
  CHECK(fs[0].parameter == "1.weight");
  CHECK(evidence(fs[0], "parameters without gradient") == 8);       // fc1 w,b; bn w,b; two blocks x (w,b)
  for (const auto& f : fs) CHECK(f.parameter.rfind("8.", 0) != 0);  // the head itself still learns
}

TEST_CASE("M6: batch mixing by reshape-for-transpose and by a softmax over the batch; BatchNorm is only info") {
  XY d = blobs(4, 3, 6);
  auto clean = mlp(6, 8, 3);
  auto fs = dbg::batch_mixing_test(*clean, d.x);
  CHECK_FALSE(fires(fs));
  const dbg::Finding* info = find(fs, "M6", dbg::Severity::Info);
  REQUIRE(info != nullptr);
  CHECK(info->severity == dbg::Severity::Info);
  CHECK(info->title.find("BatchNorm") != std::string::npos);
  CHECK(clean->is_training());  // modes restored

  auto b13 = mlp(6, 8, 3);
  at(b13, 1)->inject_bug(nn::Bug::B13);
  auto f13 = dbg::batch_mixing_test(*b13, d.x);
  const dbg::Finding* e = find(f13, "M6", dbg::Severity::Error);
  REQUIRE(e != nullptr);
  CHECK(evidence(*e, "coupled rows") >= 1);

  auto b14 = mlp(6, 8, 3);
  auto head = std::make_shared<nn::LogSoftmax>(1);
  head->inject_bug(nn::Bug::B14);
  b14->push_back(head);
  CHECK(find(dbg::batch_mixing_test(*b14, d.x), "M6", dbg::Severity::Error) != nullptr);
}

namespace {
// A per-token tagger over (B, T) token ids whose forward returns its logits flattened to one row per token:
// batch-major ([B, T, C] viewed as [B*T, C]), time-major ([T, B, C] viewed as [T*B, C]), or batch-major with a
// softmax over the flattened rows (dim 0), which mixes every token of the batch.
struct FlatTagger : nn::Module {
  enum class Layout { BatchMajor, TimeMajor, SoftmaxOverRows } layout;
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(20, 8));
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(8, 4));
  explicit FlatTagger(Layout l) : Module("FlatTagger"), layout(l) {}
  Tensor forward(const Tensor& ids) override {
    const int64_t B = ids.size(0), T = ids.size(1);
    Tensor z = (*fc)((*emb)(ids));  // (B, T, 4)
    if (layout == Layout::TimeMajor) return z.transpose(0, 1).contiguous().reshape({T * B, 4});
    z = z.reshape({B * T, 4});
    return layout == Layout::SoftmaxOverRows ? z.log_softmax(0) : z;
  }
};
}  // namespace

TEST_CASE("M6: a per-token output flattened to B*T rows is tested with its rows grouped per example") {
  gs::Generator gen(7);
  const Tensor ids = gs::randint(1, 20, {6, 5}, gs::kInt64, &gen);
  for (auto layout : {FlatTagger::Layout::BatchMajor, FlatTagger::Layout::TimeMajor}) {
    auto clean = std::make_shared<FlatTagger>(layout);
    const auto fs = dbg::batch_mixing_test(*clean, ids);
    CHECK_FALSE(fires(fs));
    for (const auto& f : fs) CHECK(f.title.find("cannot run") == std::string::npos);  // it ran
  }
  auto mixing = std::make_shared<FlatTagger>(FlatTagger::Layout::SoftmaxOverRows);
  const auto fm = dbg::batch_mixing_test(*mixing, ids);
  const dbg::Finding* e = find(fm, "M6", dbg::Severity::Error);
  REQUIRE(e != nullptr);
  CHECK(evidence(*e, "output rows per example") == 5);
  CHECK(evidence(*e, "coupled rows") == 5);

  // Float inputs (B, T, F) through a gradient: the same grouping.
  struct FloatTagger : nn::Module {
    bool mix;
    std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(3, 4));
    explicit FloatTagger(bool m) : Module("FloatTagger"), mix(m) {}
    Tensor forward(const Tensor& x) override {
      Tensor z = (*fc)(x).reshape({x.size(0) * x.size(1), 4});
      return mix ? z - z.mean({0}, true) : z;
    }
  };
  const Tensor x = gs::randn({6, 5, 3}, {}, &gen);
  auto fine = std::make_shared<FloatTagger>(false), centred = std::make_shared<FloatTagger>(true);
  CHECK_FALSE(fires(dbg::batch_mixing_test(*fine, x)));
  CHECK(find(dbg::batch_mixing_test(*centred, x), "M6", dbg::Severity::Error) != nullptr);
}

namespace {
// A next-token model over token ids (B, T): an embedding, then each position's logits from its own step and,
// with `look`, a second step: the one before (causal) or the one after (a leak).
struct StepModel : nn::Module {
  enum class Look { None, Past, Future } look;
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(12, 8));
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(8, 12));
  explicit StepModel(Look l) : Module("StepModel"), look(l) {}
  Tensor forward(const Tensor& x) override {
    const Tensor e = (*emb)(x);  // (B, T, 8)
    const int64_t T = x.size(1);
    const Tensor zero = e.narrow(1, 0, 1) * 0.0;
    Tensor other = e * 0.0;
    if (look == Look::Past) other = gs::cat({zero, e.narrow(1, 0, T - 1)}, 1);
    if (look == Look::Future) other = gs::cat({e.narrow(1, 1, T - 1), zero}, 1);
    return (*head)(e + other).permute({0, 2, 1});  // (B, 12, T), as cross-entropy over positions takes it
  }
};
}  // namespace

TEST_CASE("M6 across time: a next-token model that reads the next step errs; a causal one and a tagger do not") {
  gs::Generator gen(3);
  const Tensor seq = gs::randint(0, 12, {8, 11}, gs::kInt64, &gen);
  const Tensor x = seq.narrow(1, 0, 10).contiguous(), y = seq.narrow(1, 1, 10).contiguous();
  auto leak_ptr = std::make_shared<StepModel>(StepModel::Look::Future);
  auto causal = std::make_shared<StepModel>(StepModel::Look::Past),
       own = std::make_shared<StepModel>(StepModel::Look::None);
  StepModel& leak = *leak_ptr;
  CHECK(dbg::future_leak_test(*causal, x, y).empty());
  CHECK(dbg::future_leak_test(*own, x, y).empty());
  const auto fs = dbg::future_leak_test(leak, x, y);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].is("M6", dbg::Kind::SeesFuture));
  CHECK(fs[0].severity == dbg::Severity::Error);
  CHECK(evidence(fs[0], "targets that copy the next step's input (y[:, t] == x[:, t + 1])") == 1.0);
  CHECK(evidence(fs[0], "largest change of an output before the changed step / their largest value") > 1e-3);
  // Padded targets (ignore_index -100 after each sequence's end) still make next-step prediction.
  Tensor padded = y.clone();
  padded.narrow(1, 7, 3).fill_(-100);
  CHECK(dbg::future_leak_test(leak, x, padded).size() == 1);
  // Targets that are no shifted copy of the inputs (a tagger's labels): not judged, whatever the model reads.
  const Tensor tags = gs::randint(0, 12, {8, 10}, gs::kInt64, &gen);
  CHECK(dbg::future_leak_test(leak, x, tags).empty());
  // The parameters and the mode are left as they were.
  leak.train();
  const Tensor w = leak.head->weight.detach().clone();
  (void)dbg::future_leak_test(leak, x, y);
  CHECK(leak.is_training());
  CHECK(gs::allclose(leak.head->weight.detach(), w));
}

TEST_CASE(
    "M3 by the loss's optimum: a log-rate Poisson loss wants negative outputs for counts of 0; a rate one does not") {
  // A Poisson negative log-likelihood on the log of the rate (PyTorch's log_input=true), and on the rate itself.
  const auto log_rate = [](const Tensor& in, const Tensor& y) { return mean(exp(in) - y * in); };
  const auto rate = [](const Tensor& in, const Tensor& y) { return mean(in - y * log(in + 1e-8)); };
  const auto squared = [](const Tensor& in, const Tensor& y) { return mean(square(in - y)); };
  std::vector<float> counts;
  for (int i = 0; i < 40; ++i) counts.push_back(static_cast<float>(i % 8 == 0 ? 0 : 1 + i % 5));  // 5 zeros
  const Tensor y = gs::tensor(counts, {40, 1}), out = gs::ones({40, 1});
  const dbg::LossOptimum a = dbg::probe_loss_optimum(log_rate, out, y);
  CHECK(a.rows == 40);
  CHECK(a.below_zero == 5);  // a count of 0: exp(z) falls towards z = -inf; a count of 1 is lowest at 0
  CHECK(a.target == 0.0);
  CHECK(a.loss_there < a.loss_at_zero);
  CHECK(dbg::probe_loss_optimum(rate, out, y).below_zero == 0);            // log of a negative rate: NaN, not lower
  CHECK(dbg::probe_loss_optimum(squared, out, y).below_zero == 0);         // targets >= 0
  CHECK(dbg::probe_loss_optimum(squared, out, y - 2.0).below_zero == 12);  // the 0s and 1s shifted below 0
  // The rate form written with a guard (0 x log at a count of 0): rate - 0 falls without end below 0, a domain
  // the rate leaves out; not counted.
  const auto guarded = [](const Tensor& in, const Tensor& t) {
    return mean(in - gs::where(gt(t, 0.0), t * log(abs(in) + 1e-8), t * 0.0));
  };
  CHECK(dbg::probe_loss_optimum(guarded, out, y).below_zero == 0);
  // Several outputs per row, or no floating target: not probed.
  CHECK(dbg::probe_loss_optimum(squared, gs::ones({40, 2}), gs::zeros({40, 2})).rows == 0);
}

TEST_CASE("M9: weights drawn from N(0, 1) are flagged; the defaults are not") {
  CHECK_FALSE(fires(dbg::check_initialisation(*mlp(64, 32, 10))));
  auto bad = mlp(64, 32, 10);
  at(bad, 1)->inject_bug(nn::Bug::B16);
  auto fs = dbg::check_initialisation(*bad);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].parameter == "1.weight");
  CHECK(evidence(fs[0], "weight std") == doctest::Approx(1.0).epsilon(0.1));
  CHECK(evidence(fs[0], "fan_in") == 64);
}

TEST_CASE("M10: frozen parameters in the optimizer (the head's warned, a body's said), a frozen head, and parameters missing from the optimizer") {
  auto clean = mlp(6, 8, 3);
  gs::optim::Adam opt(clean->parameters());
  auto fs = dbg::check_trainable(*clean, &opt);
  CHECK_FALSE(fires(fs));
  CHECK(find(fs, "M10", dbg::Severity::Info)->evidence[0].value == clean->num_parameters());

  auto bad = mlp(6, 8, 3);
  gs::optim::Adam opt2(bad->parameters());
  at(bad, 8)->requires_grad_(false);  // bug B15: the head frozen instead of the backbone
  auto fb = dbg::check_trainable(*bad, &opt2);
  int warnings = 0;
  for (const auto& f : fb) warnings += f.fires();
  CHECK(warnings == 2);  // frozen parameters held by the optimizer + a frozen output layer
  CHECK(fb[1].parameter == "8.weight");

  // The body frozen under a head that trains, the optimizer over every layer (feature extraction, or
  // layers unfrozen later): said, not warned.
  auto body = mlp(6, 8, 3);
  gs::optim::Adam opt4(body->parameters());
  at(body, 1)->requires_grad_(false);
  auto fbody = dbg::check_trainable(*body, &opt4);
  CHECK_FALSE(fires(fbody));
  bool said = false;
  for (const auto& f : fbody) said = said || (f.kind == dbg::Kind::FrozenInOptimizer && f.parameter == "1.weight");
  CHECK(said);
  bool bug_kind = false;
  for (const auto& f : fb) bug_kind = bug_kind || (f.kind == dbg::Kind::FrozenInOptimizer && f.fires());
  CHECK(bug_kind);

  auto late = mlp(6, 8, 3);
  gs::optim::Adam opt3({late->parameters()[0]});
  auto fl = dbg::check_trainable(*late, &opt3);
  REQUIRE(find(fl, "M10") != nullptr);
  CHECK(find(fl, "M10")->title.find("in no optimizer group") != std::string::npos);
}

TEST_CASE("M11: float64 inputs into a float32 model, and mixed parameter dtypes") {
  auto m = mlp(6, 8, 3);
  XY d = blobs(4, 3, 6);
  CHECK_FALSE(fires(dbg::check_devices_dtypes(*m, d.x)));
  auto fs = dbg::check_devices_dtypes(*m, d.x.to(gs::kFloat64));  // bug B27
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].title.find("float64") != std::string::npos);
  CHECK(evidence(fs[0], "input bytes per value") == 8);
  at(m, 8)->to(gs::kFloat64);
  CHECK(find(dbg::check_devices_dtypes(*m), "M11") != nullptr);
}

TEST_CASE("M11: a float32 loader batch beside bfloat16 parameters is left to the first forward's input") {
  auto m = mlp(6, 8, 3);
  m->to(gs::kBFloat16);
  XY d = blobs(4, 3, 6);
  // The gate's loader batch: a loop that converts each batch (x.to(kBFloat16)) is correct code.
  CHECK_FALSE(fires(dbg::check_devices_dtypes(*m, d.x, /*loader_batch=*/true)));
  // The input the model really got (the run check's first forward): float32 into bfloat16 warns.
  auto fs = dbg::check_devices_dtypes(*m, d.x);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].title.find("bfloat16") != std::string::npos);
  CHECK_FALSE(fires(dbg::check_devices_dtypes(*m, d.x.to(gs::kBFloat16))));
  // float64 data stays judged in the gate too.
  CHECK(fires(dbg::check_devices_dtypes(*m, d.x.to(gs::kFloat64), true)));
}

TEST_CASE("M13: gradcheck_module catches a Linear with a wrong backward and passes correct layers") {
  XY d = blobs(2, 3, 6);
  auto fc = std::make_shared<nn::Linear>(6, 4);
  CHECK(dbg::gradcheck_module(*fc, d.x).empty());
  CHECK(fc->weight.dtype() == gs::kFloat32);  // converted back
  fc->inject_bug(nn::Bug::B22);
  auto fs = dbg::gradcheck_module(*fc, d.x, "fc");
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].check == "M13");
  CHECK(fs[0].parameter == "fc.weight");
  CHECK(fs[0].severity == dbg::Severity::Error);
  CHECK(evidence(fs[0], "worst relative error") > 1e-3);

  // Every layer of a model, each with the input it sees (BatchNorm in eval, residual blocks, ...).
  auto clean = mlp(6, 8, 3);
  CHECK(dbg::gradcheck_layers(*clean, d.x).empty());
  auto bad = mlp(40, 32, 3);
  at(bad, 1)->inject_bug(nn::Bug::B22);  // 1280 weights: checked by random projections
  XY d40 = blobs(2, 3, 40);
  auto fb = dbg::gradcheck_layers(*bad, d40.x);
  REQUIRE(fb.size() == 1);
  CHECK(fb[0].parameter == "1.weight");
  CHECK(fb[0].title.find("projections") != std::string::npos);
}

namespace {
// Ordinal regression with cumulative logits: one score, K - 1 = 4 ordered cut points (the first free,
// then softplus steps), logit_k = s - t_k for P(y > k), under binary cross-entropy.
struct OrdinalNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 32));
  std::shared_ptr<nn::Linear> score = register_module("score", std::make_shared<nn::Linear>(32, 1));
  Tensor first = register_parameter("first_cut", gs::full({1}, -1.5));
  Tensor steps = register_parameter("cut_steps", gs::full({3}, 0.5));  // softplus(0.5): about 1 apart
  OrdinalNet() : Module("OrdinalNet") {}
  Tensor forward(const Tensor& x) override {
    const Tensor inc = gs::softplus(steps);
    std::vector<Tensor> t{first};
    for (int64_t k = 0; k < 3; ++k) t.push_back(t.back() + inc.slice(0, k, k + 1));
    return (*score)(gs::relu((*fc1)(x))) - gs::cat(t, 0).unsqueeze(0);
  }
};
}  // namespace

TEST_CASE(
    "M14: an ordinal model whose cut points must move far overfits at 10x the rate (info); dead units still warn") {
  gs::manual_seed(11);
  const Tensor x = gs::randn({32, 8});
  const Tensor latent = gs::matmul(x, gs::randn({8, 1})).squeeze(1) + 0.5 * gs::randn({32});
  const Tensor grade =
      gs::sum(gs::gt(latent.unsqueeze(1), gs::tensor({-2.5, -0.5, 1.0, 3.0}).unsqueeze(0)).to(gs::kInt64), {1});
  const Tensor y = gs::gt(grade.unsqueeze(1), gs::arange(0, 4, 1, gs::kInt64).unsqueeze(0)).to(gs::kFloat32);
  nn::BCEWithLogitsLoss bce;
  const dbg::LossFunction loss = [&](const Tensor& out, const Tensor& t) { return bce(out, t); };
  auto model = std::make_shared<OrdinalNet>();
  const std::vector<dbg::Finding> fs = dbg::overfit_one_batch(*model, x, y, loss);
  REQUIRE(fs.size() == 1);
  CHECK_MESSAGE(fs[0].severity == dbg::Severity::Info, fs[0].str());
  CHECK(evidence(fs[0], "final loss at 10x the learning rate") < 0.05);
  CHECK(fs[0].title.find("10x the test's learning rate") != std::string::npos);
}

TEST_CASE("M14: a clean model overfits one batch; a model with dead first-layer units cannot") {
  XY d = blobs(6, 3, 6);
  auto clean = mlp(6, 16, 3);
  const Tensor w0 = clean->parameters()[0].clone();
  auto fs = dbg::overfit_one_batch(*clean, d.x, d.y, ce);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Info);
  CHECK(evidence(fs[0], "final loss") < 0.05 * std::log(3.0));  // 3 classes: the line is 0.05 x log C
  CHECK(gs::equal(clean->parameters()[0], w0));  // restored

  auto dead = mlp(6, 16, 3);
  at(dead, 1)->inject_bug(nn::Bug::B18);
  auto fd = dbg::overfit_one_batch(*dead, d.x, d.y, ce);
  REQUIRE(find(fd, "M14") != nullptr);
  CHECK(evidence(fd[0], "final accuracy") < 1.0);
}

// M14's probe of the loss's floor reads the model's outputs once more after the parameters and
// buffers are restored: that forward runs in eval mode, so BatchNorm's running statistics stay as
// they were and no train-mode warning (M2) reaches the user for a probe the user did not write.
TEST_CASE("M14 on a batch it cannot fit leaves BatchNorm's running statistics and the modes as they were") {
  XY d = blobs(6, 3, 6);
  // The same inputs under two labels: no model fits them, so the floor probe runs, and M14 judges
  // the fit against what any model can reach on them.
  Tensor x = gs::cat({d.x, d.x}, 0);
  std::vector<int64_t> other = d.y.to_vector<int64_t>();
  for (int64_t& c : other) c = (c + 1) % 3;
  Tensor y = gs::cat({d.y, gs::tensor(other, {static_cast<int64_t>(other.size())})}, 0);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(6, 16));
  auto bn = std::make_shared<nn::BatchNorm1d>(16);
  model->push_back(bn);
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Dropout>(0.3));
  model->push_back(std::make_shared<nn::Linear>(16, 3));
  model->train();
  const Tensor mean0 = bn->buffers()[0].clone();
  int warnings = 0;
  gs::WarningHandlerGuard guard([&](const gs::Warning&) { ++warnings; });
  auto fs = dbg::overfit_one_batch(*model, x, y, ce);
  const dbg::Finding* m14 = find(fs, "M14", dbg::Severity::Info);
  REQUIRE(m14 != nullptr);
  // It fits them as far as any model can: half the batch right, the loss at their labels' entropy.
  CHECK(evidence(*m14, "best accuracy any model reaches on the batch") == doctest::Approx(0.5));
  CHECK(evidence(*m14, "least cross-entropy any model reaches (their labels' entropy)") ==
        doctest::Approx(std::log(2.0)));
  CHECK(m14->severity == dbg::Severity::Info);
  CHECK(gs::equal(bn->buffers()[0], mean0));
  CHECK(warnings == 0);
  CHECK(model->is_training());
  CHECK(bn->is_training());
}

TEST_CASE("M15: real inputs beat zeroed inputs; labels unrelated to the inputs do not") {
  XY d = blobs(40, 3, 6, 5, 0.5);
  std::vector<std::pair<Tensor, Tensor>> train;
  for (int i = 0; i < 3; ++i) train.emplace_back(d.x.narrow(0, 24 * i, 24), d.y.narrow(0, 24 * i, 24));
  std::pair<Tensor, Tensor> held{d.x.narrow(0, 72, 48), d.y.narrow(0, 72, 48)};
  auto m = mlp(6, 16, 3);
  auto fs = dbg::input_independent_baseline(*m, train, held, ce);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Info);

  // Labels shuffled away from their inputs (as bug B07 does).
  gs::Generator g(9);
  Tensor shuffled = d.y.index_select(0, gs::randperm(d.y.size(0), &g));
  std::vector<std::pair<Tensor, Tensor>> bad;
  for (int i = 0; i < 3; ++i) bad.emplace_back(d.x.narrow(0, 24 * i, 24), shuffled.narrow(0, 24 * i, 24));
  auto fb = dbg::input_independent_baseline(*m, bad, {d.x.narrow(0, 72, 48), shuffled.narrow(0, 72, 48)}, ce);
  REQUIRE(find(fb, "M15") != nullptr);
}

namespace {
// Token ids (B, 16): a class token (1-9, class (token - 1) % 3) first, then 2-7 random tokens, then the
// pad id 0 to the end (`padded`), or random tokens to the end. The model embeds the tokens and reads
// one position: the last (a recurrent model's final state, here without the recurrence) or the first.
struct ReadsOnePosition : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(10, 8));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(8, 3));
  bool last;
  explicit ReadsOnePosition(bool last_) : Module("ReadsOnePosition"), last(last_) {}
  Tensor forward(const Tensor& ids) override { return (*out)((*emb)(ids).select(1, last ? ids.size(1) - 1 : 0)); }
};
std::pair<Tensor, Tensor> tokens(int64_t n, bool padded, uint64_t seed) {
  std::mt19937 g(static_cast<unsigned>(seed));
  std::vector<int64_t> ids(static_cast<size_t>(n * 16)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t first = 1 + static_cast<int64_t>(g() % 9), len = 3 + static_cast<int64_t>(g() % 6);
    y[static_cast<size_t>(i)] = (first - 1) % 3;
    for (int64_t t = 0; t < 16; ++t)
      ids[static_cast<size_t>(i * 16 + t)] =
          t == 0 ? first : (t < len || !padded ? 1 + static_cast<int64_t>(g() % 9) : 0);
  }
  return {gs::tensor(ids, {n, 16}), gs::tensor(y, {n})};
}
}  // namespace

TEST_CASE("M15 on right-padded sequences: a model reading the last position reads the padding and is told so") {
  for (const bool padded : {true, false}) {
    CAPTURE(padded);
    std::vector<std::pair<Tensor, Tensor>> train;
    for (int i = 0; i < 4; ++i) train.push_back(tokens(32, padded, 10 + i));
    const auto held = tokens(64, padded, 20);
    gs::manual_seed(3);
    auto last = std::make_shared<ReadsOnePosition>(true);
    const auto fs = dbg::input_independent_baseline(*last, train, held, ce);
    const dbg::Finding* f = find(fs, "M15");
    REQUIRE(f != nullptr);
    CHECK(has(f->title, "the sequences end in padding (0 on the last") == padded);
    if (padded) CHECK(has(f->fix, "gather at length - 1"));
    gs::manual_seed(3);
    auto first = std::make_shared<ReadsOnePosition>(false);
    CHECK(find(dbg::input_independent_baseline(*first, train, held, ce), "M15") == nullptr);
  }
}

namespace {
// Reads each sequence at its last token (length - 1, lengths counted from the ids that are not the pad
// id 0), as a recurrent classifier gathers its final state: a row of nothing but padding has no last
// token, and the gather raises an error.
struct ReadsLastToken : nn::Module {
  std::shared_ptr<nn::Embedding> emb = register_module("emb", std::make_shared<nn::Embedding>(10, 8));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(8, 3));
  ReadsLastToken() : Module("ReadsLastToken") {}
  Tensor forward(const Tensor& ids) override {
    const Tensor last = gs::sub(gs::ne(ids, 0).to(gs::kInt64).sum({1}, true), 1);  // (B, 1)
    const Tensor at = last.unsqueeze(2).expand({ids.size(0), 1, 8}).contiguous();
    return (*out)(gs::gather((*emb)(ids), 1, at).squeeze(1));
  }
};
}  // namespace

TEST_CASE("M15: a model that raises an error on inputs of zeros (all padding) is not judged, and no error is") {
  std::vector<std::pair<Tensor, Tensor>> train;
  for (int i = 0; i < 4; ++i) train.push_back(tokens(32, true, 30 + i));
  const auto held = tokens(64, true, 40);
  gs::manual_seed(3);
  auto model = std::make_shared<ReadsLastToken>();
  CHECK_THROWS(model->forward(gs::zeros({2, 16}, gs::TensorOptions(gs::kInt64))));
  const auto fs = dbg::input_independent_baseline(*model, train, held, ce);
  CHECK(find(fs, "M15") == nullptr);
  const dbg::Finding* f = find(fs, "M15", dbg::Severity::Info);
  REQUIRE(f != nullptr);
  CHECK(has(f->title, "not judged: with zeroed inputs the model raises an error"));
  // The model's weights are those it came with: the failed run's steps were taken back.
  gs::manual_seed(3);
  auto fresh = std::make_shared<ReadsLastToken>();
  const auto a = model->parameters(), b = fresh->parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(gs::equal(a[i], b[i]));
}

TEST_CASE("M16: a wider MLP fits spirals better; a model with a 1-unit bottleneck does not gain") {
  auto sp = nn::make_spirals(40, 3, 0.1, 2);
  std::vector<std::pair<Tensor, Tensor>> train{{sp->x(), sp->y()}};
  dbg::ModelCheckOptions o;
  o.baseline_steps = 150;
  o.baseline_lr = 1e-2;
  auto wide = [](int64_t w) -> nn::ModulePtr {
    gs::manual_seed(4);
    return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, w), std::make_shared<nn::ReLU>(),
                                            std::make_shared<nn::Linear>(w, w), std::make_shared<nn::ReLU>(),
                                            std::make_shared<nn::Linear>(w, 3));
  };
  auto fs = dbg::capacity_check(wide, 2, 64, train, ce, o);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].severity == dbg::Severity::Info);

  // A factory that ignores its width argument (the "larger" model is the same one).
  auto ignores_width = [&wide](int64_t) { return wide(8); };
  auto fb = dbg::capacity_check(ignores_width, 2, 64, train, ce, o);
  REQUIRE(find(fb, "M16") != nullptr);
}

TEST_CASE("M17: BatchNorm whose running statistics were never updated, or that has none") {
  XY d = blobs(8, 3, 6);
  auto clean = mlp(6, 8, 3);
  (*clean)(d.x);  // one training-mode forward updates the statistics
  CHECK(dbg::check_batchnorm_stats(*clean).empty());

  auto b23 = mlp(6, 8, 3);
  at(b23, 3)->inject_bug(nn::Bug::B23);
  (*b23)(d.x);
  auto fs = dbg::check_batchnorm_stats(*b23);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].module == "3 (BatchNorm1d)");
  CHECK(evidence(fs[0], "num_batches_tracked") == 0);

  auto none = std::make_shared<nn::Sequential>(
      std::make_shared<nn::BatchNorm1d>(nn::BatchNormOptions(6).track_running_stats(false)));
  auto fn = dbg::check_batchnorm_stats(*none);
  REQUIRE(fn.size() == 1);
  CHECK(fn[0].title.find("without running statistics") != std::string::npos);
}

TEST_CASE("a snapshot's restore is seen by autocast: the restored weights, not the trained ones' kept copy") {
  gs::manual_seed(4);
  auto m = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(12, 8), std::make_shared<nn::ReLU>(),
                                            std::make_shared<nn::Linear>(8, 3));
  XY d = blobs(16, 3, 12);
  const auto forward = [&] {
    auto ac = gs::autocast(gs::kBFloat16);
    return (*m)(d.x);
  };
  const Tensor before = forward().detach().clone();
  dbg::ParamSnapshot snap(*m);
  gs::optim::SGD opt(m->parameters(), gs::optim::SGDOptions(0.5));
  for (int i = 0; i < 3; ++i) {  // the steps round the new values into autocast's kept copies
    opt.zero_grad();
    ce(forward(), d.y).backward();
    opt.step();
  }
  CHECK_FALSE(gs::equal(forward(), before));
  snap.restore();
  CHECK(gs::equal(forward(), before));
}
