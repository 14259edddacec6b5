// The grader of lab 8 (data bugs). The answer keys are written here: alignment
// by exact image comparison (a std::map from the image's values to its labels),
// standardisation with nn::Normalizer fitted on the training split, the pixel
// rule, counts and recalls by loops, and batch purity by loops over every batch.
// The debug module's data checks (D3, D4, D5, D8, D10) run next to the
// student's code to show that both agree; one task trains a classifier on an
// imbalanced Fashion-MNIST subset with the student's class weights.
//
// Dimension letters: N = examples, B = batch, C = classes, D... = features.
#include "tutorials/grader/grader.h"
#include "tutorials/grader/labs.h"
#include "tutorials/lab8_data/lab8.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "core/generator.h"
#include "debug/checks/data/data_checks.h"
#include "nn/nn.h"
#include "optim/sgd.h"

namespace gradsleuth::labs {

namespace {

// Task 8.4's imbalanced subset and its goal. Of the first 8,000 training images, every
// class is kept whole except bags (class 8), of which only the first 20 stay (~40x fewer).
// Unweighted, the reference never predicts "bag" (recall 0); with the class weights its
// bag recall is about 0.80.
constexpr int64_t kImbalancedFrom = 8000;
constexpr int64_t kMinority = 8;  // "Bag"
constexpr int64_t kMinorityKept = 20;
constexpr int64_t kTestImages = 2000;
constexpr int kEpochs = 3;
constexpr double kMinRecall = 0.6;
constexpr double kMinAccuracy = 0.65;

nn::DatasetPtr fashion(const std::string& split, int64_t n, bool raw = false) {
  try {
    return nn::take(nn::load_fashion_mnist(split, nn::FashionMnistOptions().raw(raw)), n);
  } catch (const Error& e) {
    throw Skip(std::string("Fashion-MNIST could not be loaded: ") + e.what());
  }
}

// ---- Task 8.1's key: exact image comparison -----------------------------------------------
lab8::AlignmentCounts key_alignment(const nn::Dataset& reference, const nn::DataLoader& loader) {
  std::map<std::vector<float>, std::set<int64_t>> labels_of;
  auto rows = [](const Tensor& x) {
    const Tensor c = x.to(kFloat32).contiguous();
    const int64_t n = c.size(0), f = n ? c.numel() / n : 0;
    const std::vector<float> v = c.to_vector<float>();
    std::vector<std::vector<float>> out;
    for (int64_t r = 0; r < n; ++r) out.emplace_back(v.begin() + r * f, v.begin() + (r + 1) * f);
    return out;
  };
  const nn::Batch all = reference.all();
  const auto xs = rows(all.x);
  const auto ys = all.y.to_vector<int64_t>();
  for (size_t i = 0; i < xs.size(); ++i) labels_of[xs[i]].insert(ys[i]);
  lab8::AlignmentCounts c;
  for (int64_t i = 0; i < loader.num_batches(); ++i) {
    const nn::Batch b = loader.batch(loader.epoch(), i);
    const auto bx = rows(b.x);
    const auto by = b.y.to_vector<int64_t>();
    for (size_t r = 0; r < bx.size(); ++r) {
      ++c.checked;
      const auto it = labels_of.find(bx[r]);
      if (it == labels_of.end())
        ++c.unknown;
      else if (!it->second.count(by[r]))
        ++c.misaligned;
    }
  }
  return c;
}

std::string counts_str(const lab8::AlignmentCounts& c) {
  return "checked " + std::to_string(c.checked) + ", unknown " + std::to_string(c.unknown) + ", misaligned " +
         std::to_string(c.misaligned);
}

void require_counts(const Check& c, const lab8::AlignmentCounts& got, const lab8::AlignmentCounts& want) {
  c.require(got.checked == want.checked && got.unknown == want.unknown && got.misaligned == want.misaligned,
            "expected " + counts_str(want) + ", got " + counts_str(got));
}

// A dataset that transforms its inputs (x * 2): its images never occur in the raw data.
class Doubled : public nn::Dataset {
 public:
  explicit Doubled(nn::DatasetPtr base) : base_(std::move(base)) {}
  int64_t size() const override { return base_->size(); }
  nn::Example get(int64_t i) const override {
    nn::Example e = base_->get(i);
    e.x = e.x * 2.0;
    return e;
  }
  std::string name() const override { return "doubled"; }

 private:
  nn::DatasetPtr base_;
};

// ---- Task 8.4 --------------------------------------------------------------------------
// Trains the grader's MLP on `data` (weights: per-class loss weights, or undefined);
// returns the bag recall and the accuracy on `test`.
std::pair<double, double> train_and_measure(const nn::DatasetPtr& data, const nn::DatasetPtr& test, const Tensor& w) {
  manual_seed(1);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 64),
                                                std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(64, 10));
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1));
  nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(64).shuffle(true).seed(11));
  nn::CrossEntropyLossOptions o;
  if (w.defined()) o.weight(w);
  for (int e = 0; e < kEpochs; ++e)
    for (const nn::Batch& b : loader) {
      opt.zero_grad();
      Tensor loss = nn::functional::cross_entropy((*model)(b.x), b.y, o);
      loss.backward();
      opt.step();
    }
  NoGradGuard no_grad;
  const nn::Batch t = test->all();
  const std::vector<int64_t> p = (*model)(t.x).argmax(1).to_vector<int64_t>(), y = t.y.to_vector<int64_t>();
  double hit = 0, n = 0, right = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    right += p[i] == y[i];
    if (y[i] == kMinority) n += 1, hit += p[i] == kMinority;
  }
  return {n > 0 ? hit / n : 0.0, right / static_cast<double>(y.size())};
}

// ---- Task 8.5's keys ------------------------------------------------------------------
std::vector<std::vector<int64_t>> key_batches(const nn::DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t i = 0; i < loader.num_batches(); ++i)
    out.push_back(loader.batch(loader.epoch(), i).y.to_vector<int64_t>());
  return out;
}

double key_single(const nn::DataLoader& loader) {
  const auto bs = key_batches(loader);
  double single = 0;
  for (const auto& b : bs) {
    bool same = true;
    for (int64_t c : b) same = same && c == b[0];
    single += same ? 1 : 0;
  }
  return bs.empty() ? 0.0 : single / static_cast<double>(bs.size());
}

double key_expected(const nn::DataLoader& loader) {
  const auto bs = key_batches(loader);
  std::map<int64_t, double> freq;
  double total = 0;
  for (const auto& b : bs)
    for (int64_t c : b) freq[c] += 1, total += 1;
  double e = 0;
  for (const auto& b : bs)
    for (const auto& [c, n] : freq) e += std::pow(n / total, static_cast<double>(b.size()));
  return bs.empty() ? 0.0 : e / static_cast<double>(bs.size());
}

// A dataset of labels only: x (N, 1) = the row number, y = the labels given.
nn::DatasetPtr labelled(const std::vector<int64_t>& y) {
  std::vector<double> x;
  for (size_t i = 0; i < y.size(); ++i) x.push_back(static_cast<double>(i));
  return std::make_shared<nn::TensorDataset>(tensor(x, {static_cast<int64_t>(y.size()), 1}),
                                             tensor(y, {static_cast<int64_t>(y.size())}), "labels");
}

}  // namespace

Lab make_lab8() {
  Lab lab;
  lab.number = 8;
  lab.dir = "lab8_data";
  lab.title = "Data bugs: misalignment, leakage, normalisation, class imbalance";
  lab.starter = "tutorials/lab8_data/lab8.cpp";

  // ---- Task 8.1 ------------------------------------------------------------------------
  auto align_case = [](const std::string& name, std::function<nn::DatasetPtr()> make_ref,
                       std::function<nn::DatasetPtr(const nn::DatasetPtr&)> make_loaded, nn::DataLoaderOptions opts,
                       const std::string& what, int debug_d4) -> Case {
    return {name, [=](Check& c) {
              const nn::DatasetPtr ref = make_ref();
              const nn::DatasetPtr loaded = make_loaded(ref);
              nn::DataLoader loader(loaded, opts);
              loader.set_epoch(2);
              c.input(what + "; the loader at epoch 2 (" + std::to_string(loader.num_batches()) + " batches)");
              const lab8::AlignmentCounts want = key_alignment(*ref, loader);
              const lab8::AlignmentCounts got = lab8::count_misaligned(*ref, loader);
              c.require_eq(loader.epoch(), 2,
                           "loader.epoch() after count_misaligned (read batches with loader.batch(loader.epoch(), i); "
                           "a range-for starts an epoch)");
              require_counts(c, got, want);
              if (debug_d4 >= 0) {  // what D4 (debug::check_alignment) says about the same loader
                bool error = false;
                for (const auto& f : debug::check_alignment(*ref, loader))
                  if (f.severity == debug::Severity::Error) error = true;
                c.note("yours: " + counts_str(got) +
                       "; D4 (debug::check_alignment): " + (error ? "error, misaligned" : "no misalignment"));
                c.require(error == (debug_d4 == 1), "internal: D4 disagrees with the expected verdict");
              }
            }};
  };
  auto blobs = [] { return nn::DatasetPtr(nn::make_blobs(30, 4, 3, 1.0, 81)); };
  auto same = [](const nn::DatasetPtr& d) { return d; };
  lab.tasks.push_back(
      {1,
       "are inputs and labels aligned?",
       20,
       "lab8::count_misaligned()",
       {align_case("a clean shuffled loader: nothing misaligned", blobs, same,
                   nn::DataLoaderOptions().batch_size(16).shuffle(true).seed(3),
                   "reference: nn::make_blobs(30 per class, 4 classes, 3-D); the loader reads the same data", 0),
        align_case("inputs shuffled without their labels (bug B07)", blobs, same,
                   nn::DataLoaderOptions().batch_size(16).shuffle(true).seed(3).bug(nn::Bug::B07),
                   "reference: nn::make_blobs(30, 4, 3); the loader has bug B07", 1),
        align_case(
            "a duplicated image with two labels is aligned under either",
            [] {
              Tensor x = randn_seeded({12, 3}, 82),
                     y = tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, {12});
              x[9].copy_(x[5]);  // rows 5 (label 2) and 9 (label 0) hold the same image
              return nn::DatasetPtr(std::make_shared<nn::TensorDataset>(x, y, "dups"));
            },
            same, nn::DataLoaderOptions().batch_size(4).shuffle(true).seed(3),
            "reference: 12 random 3-D points, rows 5 and 9 the same image with labels 2 and 0; a clean loader", -1),
        align_case(
            "transformed inputs (x * 2) are unknown, not misaligned", blobs,
            [](const nn::DatasetPtr& d) { return nn::DatasetPtr(std::make_shared<Doubled>(d)); },
            nn::DataLoaderOptions().batch_size(16).shuffle(true).seed(3),
            "reference: nn::make_blobs(30, 4, 3); the loader reads x * 2", -1),
        align_case(
            "Fashion-MNIST with bug B07", [] { return fashion("train", 2000); }, same,
            nn::DataLoaderOptions().batch_size(64).shuffle(true).seed(3).bug(nn::Bug::B07),
            "reference: the first 2000 Fashion-MNIST training images; the loader has bug B07", 1)}});

  // ---- Task 8.2 ------------------------------------------------------------------------
  auto fit_case = [](const std::string& name, Shape shape) -> Case {
    return {name, [=](Check& c) {
              Generator gen(83);
              const Tensor x = randn(shape, kFloat32, &gen) * 3.0 + 7.0;
              c.input("x " + x.str() + " = 3 N(0, 1) + 7; answer key nn::Normalizer().fit(x)");
              nn::Normalizer key;
              key.fit(x, "train");
              const lab8::Standardiser s = lab8::fit_standardiser(x);
              c.require_close(s.mean, key.mean(), "mean", 1e-5, 1e-5);
              c.require_close(s.std, key.std(), "std (population: divide by N, not N - 1)", 1e-5, 1e-5);
            }};
  };
  auto splits = [] {
    Generator gen(84);
    lab8::Splits s;
    s.train = randn({60, 4}, kFloat32, &gen) * 2.0 + 1.0;
    s.val = randn({20, 4}, kFloat32, &gen) * 2.0 + 1.0;
    s.test = randn({20, 4}, kFloat32, &gen) * 2.0 + 1.0;
    return s;
  };
  lab.tasks.push_back(
      {2,
       "standardise with training statistics only",
       20,
       "lab8::fit_standardiser(), lab8::standardise(), lab8::standardise_splits()",
       {fit_case("per feature over N: (50, 3)", {50, 3}),
        fit_case("features of any shape: (40, 2, 3)", {40, 2, 3}),
        {"standardise: (x - mean) / max(std, eps); a constant feature stays finite",
         [](Check& c) {
           const Tensor x = tensor({1, 5, 2, 2, 5, 4, 3, 5, 6}, {3, 3});  // feature 1 is constant
           c.input("x " + values_str(x) + " (feature 1 is constant, std 0)");
           nn::Normalizer key;
           key.fit(x, "train");
           const lab8::Standardiser s = lab8::fit_standardiser(x);
           c.require_close(lab8::standardise(s, x), key.transform(x), "standardise(x)", 1e-5, 1e-5);
         }},
        {"standardise_splits: every split with the training statistics",
         [=](Check& c) {
           const lab8::Splits raw = splits();
           c.input(
               "train (60, 4), val (20, 4), test (20, 4), all 2 N(0, 1) + 1; answer key nn::Normalizer fitted on "
               "train");
           nn::Normalizer key;
           key.fit(raw.train, "train");
           const lab8::Splits got = lab8::standardise_splits(raw);
           c.require_close(got.train, key.transform(raw.train), "train", 1e-5, 1e-5);
           c.require_close(got.val, key.transform(raw.val), "val", 1e-5, 1e-5);
           c.require_close(got.test, key.transform(raw.test), "test", 1e-5, 1e-5);
         }},
        {"the test split never enters: changing it changes only its own output",
         [=](Check& c) {
           const lab8::Splits raw = splits();
           lab8::Splits shifted = raw;
           shifted.test = raw.test * 10.0 + 50.0;
           c.input("the splits above, then again with test * 10 + 50");
           const lab8::Splits a = lab8::standardise_splits(raw), b = lab8::standardise_splits(shifted);
           for (const lab8::Splits* r : {&a, &b}) {
             c.require_tensor(r->train, raw.train.shape(), "train");
             c.require_tensor(r->val, raw.val.shape(), "val");
           }
           c.require(allclose(a.train, b.train, 0.0, 0.0) && allclose(a.val, b.val, 0.0, 0.0),
                     "the standardised train/val changed when only the test split changed: test statistics leaked "
                     "into the normaliser (bug B06). Fit on raw.train only");
           c.require_tensor(b.test, raw.test.shape(), "test");
           const double m = b.test.mean().item<double>();
           c.require(m > 5.0, "the shifted test split's standardised mean is " + fixed(m, 3) +
                                  ": it was standardised with its own statistics. A real test set is transformed with "
                                  "the training mean and std, so its shift stays visible");
         }},
        {"Fashion-MNIST per pixel: D10 (debug::check_split_consistency) is silent", [](Check& c) {
           const nn::DatasetPtr tr = fashion("train", 5000), te = fashion("test", 500);
           lab8::Splits raw{tr->all().x, te->all().x.narrow(0, 0, 250), te->all().x.narrow(0, 250, 250)};
           c.input("train: the first 5000 training images, val / test: the first 500 test images; per-pixel");
           nn::Normalizer key;
           key.fit(raw.train, "train");
           const lab8::Splits got = lab8::standardise_splits(raw);
           c.require_close(got.train, key.transform(raw.train), "train", 1e-4, 1e-4);
           c.require_close(got.test, key.transform(raw.test), "test", 1e-4, 1e-4);
           int fired = 0;
           for (const auto& f : debug::check_split_consistency(got.train, got.test, "test"))
             if (f.fires()) ++fired;
           c.note("train mean " + fixed(got.train.mean().item<double>(), 4) + ", test mean " +
                  fixed(got.test.mean().item<double>(), 4) + "; D10: " + (fired ? "warns" : "silent"));
           c.require(fired == 0, "D10 warns: train and test no longer look alike after standardisation");
         }}}});

  // ---- Task 8.3 ------------------------------------------------------------------------
  auto raw_case = [](const std::string& name, std::function<Tensor()> make, bool want,
                     const std::string& what) -> Case {
    return {name, [=](Check& c) {
              const Tensor x = make();
              c.input(what + ": " + x.str() + (x.numel() <= 12 ? " = " + values_str(x) : std::string()));
              const bool got = lab8::looks_like_raw_pixels(x);
              c.require(got == want, std::string("looks_like_raw_pixels: expected ") + (want ? "true" : "false") +
                                         ", got " + (got ? "true" : "false"));
              const Tensor s = lab8::scale_pixels(x);
              c.require_close(s, want ? x.to(kFloat32) / 255.0 : x, "scale_pixels(x)", 1e-6, 1e-7);
            }};
  };
  lab.tasks.push_back(
      {3,
       "raw 0..255 pixels",
       10,
       "lab8::looks_like_raw_pixels(), lab8::scale_pixels()",
       {{"raw Fashion-MNIST: detected, and scaled exactly like the loader does",
         [](Check& c) {
           const Tensor raw = fashion("test", 300, true)->all().x, scaled = fashion("test", 300)->all().x;
           c.input("the first 300 test images loaded with raw(true) (0..255) and without (0..1)");
           c.require(lab8::looks_like_raw_pixels(raw), "looks_like_raw_pixels(raw images) is false");
           c.require(!lab8::looks_like_raw_pixels(scaled), "looks_like_raw_pixels(scaled images) is true");
           c.require_close(lab8::scale_pixels(raw), scaled, "scale_pixels(raw)", 0.0, 1e-7);
           c.require_close(lab8::scale_pixels(scaled), scaled, "scale_pixels(scaled) (must not scale twice)", 0.0, 0.0);
           bool d5_raw = false, d5_scaled = false;
           for (const auto& f : debug::check_normalisation(raw)) d5_raw = d5_raw || f.fires();
           for (const auto& f : debug::check_normalisation(scaled)) d5_scaled = d5_scaled || f.fires();
           c.note(std::string("D5 (debug::check_normalisation): raw ") + (d5_raw ? "warns" : "silent") + ", scaled " +
                  (d5_scaled ? "warns" : "silent"));
         }},
        raw_case(
            "standardised data (negative values) is not raw",
            [] {
              return randn_seeded({20, 5}, 85);
            },
            false, "N(0, 1) values"),
        raw_case(
            "a {0, 1} mask is not raw",
            [] {
              return tensor({0, 1, 1, 0, 1, 0}, {2, 3});
            },
            false, "whole numbers with maximum 1"),
        raw_case(
            "whole numbers up to 255, NaN ignored",
            [] {
              return tensor({0, 17, 255, NAN, 3, 128}, {2, 3});
            },
            true, "0..255 with one NaN"),
        raw_case(
            "values above 255 are not pixels",
            [] {
              return tensor({0, 300, 12, 5}, {2, 2});
            },
            false, "whole numbers up to 300"),
        raw_case(
            "fractional values are not raw",
            [] {
              return tensor({0.5, 200, 12, 5}, {2, 2});
            },
            false, "one value 0.5")}});

  // ---- Task 8.4 ------------------------------------------------------------------------
  lab.tasks.push_back(
      {4,
       "class imbalance: counts, weights, recall",
       30,
       "lab8::class_counts(), lab8::imbalance_ratio(), lab8::class_weights(), lab8::per_class_recall()",
       {{"class_counts, with an empty class and a bad label",
         [](Check& c) {
           const Tensor y = tensor(std::vector<int64_t>{0, 2, 2, 4, 0, 2}, {6});
           c.input("y " + values_str(y) + ", 5 classes (1 and 3 empty)");
           const std::vector<int64_t> got = lab8::class_counts(y, 5), want = {2, 0, 3, 0, 1};
           c.require(got == want,
                     "class_counts: expected [2, 0, 3, 0, 1], got " + std::to_string(got.size()) + " counts" +
                         (got.size() == 5 ? " [" + std::to_string(got[0]) + ", " + std::to_string(got[1]) + ", " +
                                                std::to_string(got[2]) + ", " + std::to_string(got[3]) + ", " +
                                                std::to_string(got[4]) + "]"
                                          : std::string()));
           c.require_throws(
               [] {
                 lab8::class_counts(tensor(std::vector<int64_t>{0, 5}, {2}), 5);
               },
               "class_counts with a label 5 for 5 classes");
           c.require_throws(
               [] {
                 lab8::class_counts(tensor(std::vector<int64_t>{-1, 0}, {2}), 5);
               },
               "class_counts with a label -1");
         }},
        {"imbalance_ratio",
         [](Check& c) {
           c.input("counts [10, 5, 20]; [3, 0, 4]");
           c.require_near(lab8::imbalance_ratio({10, 5, 20}), 4.0, 1e-12, "imbalance_ratio([10, 5, 20])");
           const double r = lab8::imbalance_ratio({3, 0, 4});
           c.require(std::isinf(r) && r > 0,
                     "imbalance_ratio([3, 0, 4]): expected inf (an empty class), got " + num(r));
         }},
        {"class_weights: N / (C n_c), 0 for an empty class",
         [](Check& c) {
           c.input("counts [90, 10, 0, 20]");
           const Tensor got = lab8::class_weights({90, 10, 0, 20});
           c.require_close(got, tensor({120.0 / 360, 120.0 / 40, 0.0, 120.0 / 80}, {4}), "class_weights", 1e-6, 1e-7);
           c.require(got.dtype() == kFloat32, "class_weights must be float32 (the loss's dtype), got " + got.str());
         }},
        {"per_class_recall",
         [](Check& c) {
           const Tensor p = tensor(std::vector<int64_t>{0, 1, 1, 2, 2, 2, 0}, {7});
           const Tensor y = tensor(std::vector<int64_t>{0, 1, 2, 2, 2, 0, 0}, {7});
           c.input("predicted " + values_str(p) + ", y " + values_str(y) + ", 4 classes (3 has no example)");
           const std::vector<double> got = lab8::per_class_recall(p, y, 4);
           c.require_eq(static_cast<int64_t>(got.size()), 4, "the number of recalls");
           const std::vector<double> want = {2.0 / 3, 1.0, 2.0 / 3};
           for (int k = 0; k < 3; ++k) c.require_near(got[k], want[k], 1e-12, "recall of class " + std::to_string(k));
           c.require(std::isnan(got[3]), "recall of class 3 (no example): expected NaN, got " + num(got[3]));
         }},
        {"imbalance_ratio agrees with D3 (debug::check_label_distribution)",
         [](Check& c) {
           const nn::DatasetPtr full = fashion("train", kImbalancedFrom);
           const std::vector<int64_t> y = full->all().y.to_vector<int64_t>();
           std::vector<int64_t> keep, labels;
           int64_t kept = 0;
           for (int64_t i = 0; i < kImbalancedFrom; ++i)
             if (y[i] != kMinority || kept++ < kMinorityKept) keep.push_back(i), labels.push_back(y[i]);
           const Tensor yl = tensor(labels, {static_cast<int64_t>(labels.size())});
           c.input("the labels of the imbalanced subset of the last check (" + std::to_string(labels.size()) + ")");
           const double got = lab8::imbalance_ratio(lab8::class_counts(yl, 10));
           double d3 = NAN;
           for (const auto& f : debug::check_label_distribution(yl, 10))
             for (const auto& e : f.evidence)
               if (e.name.rfind("imbalance ratio", 0) == 0) d3 = e.value;
           c.note("imbalance ratio: yours " + fixed(got, 2) + ", D3's " + fixed(d3, 2));
           c.require_near(got, d3, 1e-9 * d3, "imbalance_ratio vs D3's");
         }},
        {"class weights restore the recall of a rare class on Fashion-MNIST",
         [](Check& c) {
           const nn::DatasetPtr full = fashion("train", kImbalancedFrom), test = fashion("test", kTestImages);
           const std::vector<int64_t> y = full->all().y.to_vector<int64_t>();
           std::vector<int64_t> keep, labels;
           int64_t kept = 0;
           for (int64_t i = 0; i < kImbalancedFrom; ++i)
             if (y[i] != kMinority || kept++ < kMinorityKept) keep.push_back(i), labels.push_back(y[i]);
           auto data = std::make_shared<nn::Subset>(full, keep, "fashion-mnist/imbalanced");
           c.input("the first " + std::to_string(kImbalancedFrom) + " training images with only " +
                   std::to_string(kMinorityKept) + " bags (class 8) kept; MLP 784-64-10, " + std::to_string(kEpochs) +
                   " epochs of SGD lr 0.1, batch 64, cross-entropy weighted with class_weights(class_counts(y, 10)); "
                   "the first " +
                   std::to_string(kTestImages) + " test images");
           const Tensor w =
               lab8::class_weights(lab8::class_counts(tensor(labels, {static_cast<int64_t>(labels.size())}), 10));
           c.require_tensor(w, {10}, "class_weights");
           const auto t0 = std::chrono::steady_clock::now();
           const auto [r0, a0] = train_and_measure(data, test, Tensor());
           const auto [r1, a1] = train_and_measure(data, test, w.to(kFloat32));
           const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
           c.note("bag recall: unweighted " + fixed(r0, 3) + ", weighted " + fixed(r1, 3) +
                  " (goal >= " + fixed(kMinRecall, 2) + "); accuracy: " + fixed(a0, 3) + ", " + fixed(a1, 3) +
                  " (goal >= " + fixed(kMinAccuracy, 2) + "); " + fixed(seconds, 1) + " s");
           c.require(r1 >= kMinRecall, "with your class weights the bag recall is " + fixed(r1, 3) + " (unweighted " +
                                           fixed(r0, 3) + "), the goal is >= " + fixed(kMinRecall, 2));
           c.require(a1 >= kMinAccuracy, "with your class weights the accuracy fell to " + fixed(a1, 3) +
                                             ", the goal is >= " + fixed(kMinAccuracy, 2));
         },
         3}}});

  // ---- Task 8.5 ------------------------------------------------------------------------
  auto sorted_case = [](const std::string& name, std::function<nn::DatasetPtr()> make, nn::DataLoaderOptions opts,
                        bool want_sorted, const std::string& what) -> Case {
    return {name, [=](Check& c) {
              const nn::DatasetPtr d = make();
              nn::DataLoader loader(d, opts);
              loader.set_epoch(1);
              c.input(what + " (" + std::to_string(loader.num_batches()) + " batches, epoch 1)");
              const double want_s = key_single(loader), want_e = key_expected(loader);
              c.require_near(lab8::single_class_fraction(loader), want_s, 1e-12, "single_class_fraction");
              c.require_near(lab8::expected_single_class_fraction(loader), want_e, 1e-9 * std::max(1.0, want_e),
                             "expected_single_class_fraction");
              const bool got = lab8::batches_look_sorted(loader);
              c.require(got == want_sorted, std::string("batches_look_sorted: expected ") +
                                                (want_sorted ? "true" : "false") + ", got " + (got ? "true" : "false") +
                                                " (single-class fraction " + num(want_s) + ", expected by chance " +
                                                num(want_e) + ")");
              c.require_eq(loader.epoch(), 1, "loader.epoch() afterwards (use loader.batch, not a range-for)");
              bool d8 = false;
              for (const auto& f : debug::check_batch_diversity(loader)) d8 = d8 || f.fires();
              c.note("single-class batches " + fixed(want_s, 3) + " (by chance " + fixed(want_e, 4) + "); D8 " +
                     (d8 ? "warns" : "is silent"));
            }};
  };
  lab.tasks.push_back(
      {5,
       "batches sorted by class",
       20,
       "lab8::single_class_fraction(), lab8::expected_single_class_fraction(), lab8::batches_look_sorted()",
       {sorted_case(
            "sorted by class, no shuffling (bug B28)", [] { return nn::DatasetPtr(nn::make_blobs(40, 3, 2, 1.0, 86)); },
            nn::DataLoaderOptions().batch_size(10).bug(nn::Bug::B28), true,
            "nn::make_blobs(40 per class, 3 classes), batch 10, bug B28"),
        sorted_case(
            "shuffled", [] { return nn::DatasetPtr(nn::make_blobs(40, 3, 2, 1.0, 86)); },
            nn::DataLoaderOptions().batch_size(10).shuffle(true).seed(4), false,
            "nn::make_blobs(40, 3), batch 10, shuffled"),
        sorted_case(
            "batches of one hold one class by chance", [] { return nn::DatasetPtr(nn::make_blobs(5, 3, 2, 1.0, 87)); },
            nn::DataLoaderOptions().batch_size(1).shuffle(true), false, "15 points, batch 1"),
        sorted_case(
            "a single class: every batch is pure, and that is expected",
            [] { return labelled(std::vector<int64_t>(24, 3)); }, nn::DataLoaderOptions().batch_size(6), false,
            "24 examples all of class 3, batch 6"),
        sorted_case(
            "every batch counts: Fashion-MNIST with bug B28, 47 batches and a short last one",
            [] { return fashion("train", 3000); }, nn::DataLoaderOptions().batch_size(64).bug(nn::Bug::B28), true,
            "the first 3000 training images, batch 64, bug B28"),
        sorted_case(
            "Fashion-MNIST as stored, without shuffling, is not sorted", [] { return fashion("train", 3000); },
            nn::DataLoaderOptions().batch_size(64), false, "the first 3000 training images, batch 64, no shuffle")}});
  return lab;
}

}  // namespace gradsleuth::labs
