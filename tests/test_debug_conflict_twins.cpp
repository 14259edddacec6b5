// Near copies with the other label (D12): a training-only transform that turns one class into another
// and keeps the label (a horizontal flip of a LEFT arrow is a RIGHT arrow) beside the same flip that
// swaps the label with the input; and the training pipelines that blur every class or relabel nothing
// (pixel noise, a flip of clothes, Fashion-MNIST's own shirts and T-shirts), on which D12 must say
// nothing.
#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <vector>

#include <gradsleuth.h>

#include "debug_test_util.h"
#include "diagnosis_test_util.h"
#include "fashion_mnist_required.h"
#include "nn/fashion_mnist.h"

using namespace gradsleuth;

namespace {

constexpr int64_t kSide = 12;
enum Glyph : int64_t { kLeft, kRight, kUp, kDown, kBox, kGlyphs };

// One glyph of class `cls` on a kSide x kSide canvas with pixel noise: an arrow (drawn pointing right,
// then mirrored or transposed into its direction) or a box.
std::vector<float> glyph(int64_t cls, std::mt19937& rng) {
  std::vector<float> img(kSide * kSide, 0.0f);
  std::uniform_int_distribution<int> row(3, 8), start(0, 2), len(6, 8), head(2, 3);
  auto put = [&](int r, int c) {
    if (r >= 0 && r < kSide && c >= 0 && c < kSide) img[static_cast<size_t>(r * kSide + c)] = 1.0f;
  };
  if (cls == kBox) {
    const int r0 = row(rng) - 2, c0 = start(rng) + 2, w = head(rng) + 3;
    for (int k = 0; k <= w; ++k) {
      put(r0, c0 + k), put(r0 + w, c0 + k), put(r0 + k, c0), put(r0 + k, c0 + w);
    }
  } else {
    const int r = row(rng), c0 = start(rng), c1 = std::min<int>(c0 + len(rng), kSide - 1), h = head(rng);
    std::vector<std::pair<int, int>> px;
    for (int c = c0; c <= c1; ++c) px.push_back({r, c});
    for (int k = 1; k <= h; ++k) px.push_back({r - k, c1 - k}), px.push_back({r + k, c1 - k});
    for (auto [rr, cc] : px) {
      if (cls == kRight) put(rr, cc);
      if (cls == kLeft) put(rr, kSide - 1 - cc);
      if (cls == kUp) put(kSide - 1 - cc, rr);
      if (cls == kDown) put(cc, rr);
    }
  }
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (float& p : img) p = std::clamp(p + noise(rng), 0.0f, 1.0f);
  return img;
}

std::shared_ptr<nn::TensorDataset> glyphs(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t cls = static_cast<int64_t>(rng() % kGlyphs);
    const std::vector<float> img = glyph(cls, rng);
    xs.insert(xs.end(), img.begin(), img.end());
    ys.push_back(cls);
  }
  return std::make_shared<nn::TensorDataset>(tensor(xs, {n, 1, kSide, kSide}), tensor(ys, {n}), "glyphs");
}

// The training pipeline's augmentation: each read mirrors the image left to right with probability
// 1/2. `swap_labels` (the clean twin) turns LEFT into RIGHT and back with it; without it (the bug)
// the label stays.
class Flipped : public nn::Dataset {
 public:
  Flipped(nn::DatasetPtr base, bool swap_labels) : base_(std::move(base)), swap_(swap_labels), rng_(5) {
    std::vector<int64_t> rev(kSide);
    for (int64_t i = 0; i < kSide; ++i) rev[static_cast<size_t>(i)] = kSide - 1 - i;
    reversed_ = tensor(rev, {kSide});
  }
  int64_t size() const override { return base_->size(); }
  std::string name() const override { return base_->name() + "+flip"; }
  nn::Example get(int64_t index) const override {
    nn::Example e = base_->get(index);
    if (std::bernoulli_distribution(0.5)(rng_)) {
      e.x = index_select(e.x, 2, reversed_);
      const int64_t y = e.y.item<int64_t>();
      if (swap_ && (y == kLeft || y == kRight)) e.y = scalar_tensor(y == kLeft ? kRight : kLeft, kInt64);
    }
    return e;
  }

 private:
  nn::DatasetPtr base_;
  bool swap_;
  mutable std::mt19937 rng_;
  Tensor reversed_;
};

const debug::Finding* near_copies(const std::vector<debug::Finding>& fs) {
  for (const debug::Finding& f : fs)
    if (f.fires() && f.check == "D12") return &f;
  return nullptr;
}

}  // namespace

TEST_CASE(
    "a flip that keeps LEFT and RIGHT labels: D12 leads, naming the two classes; the flip that swaps them: clean") {
  for (const bool bug : {true, false}) {
    CAPTURE(bug);
    manual_seed(2);
    auto train = std::make_shared<Flipped>(glyphs(1500, 11), /*swap_labels=*/!bug);
    nn::DataLoader train_loader(train, nn::DataLoaderOptions().batch_size(50).shuffle(true).seed(3));
    nn::DataLoader val_loader(glyphs(500, 22), nn::DataLoaderOptions().batch_size(250));
    auto model = std::make_shared<nn::Sequential>(
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(kSide * kSide, 64), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(64, kGlyphs));
    nn::CrossEntropyLoss ce;
    optim::Adam opt(model->parameters(), optim::AdamOptions(5e-3));
    debug::DiagnoseOptions o;
    o.epochs = 12;
    o.num_classes = kGlyphs;
    const debug::RunReport r = debug::diagnose(*model, ce, opt, train_loader, &val_loader, nullptr, o);
    if (bug) {
      const debug::Finding* f = near_copies(r.findings.findings());
      REQUIRE_MESSAGE(f != nullptr, r.str(true));
      CHECK(f->severity == debug::Severity::Warning);
      CHECK(f->title.find("classes 0 and 1") != std::string::npos);
      CHECK(dtest::ev(*f, "their agreement above chance (kappa), train") < 0.2);
      CHECK(dtest::ev(*f, "their agreement above chance, validation") > 0.6);
      dtest::expect_lead(r, "D12", "conflicting-labels");
    } else {
      dtest::expect_clean(r);
    }
  }
}

TEST_CASE("D12 near copies on Fashion-MNIST: silent on its own look-alike classes and on transforms that keep labels") {
  testdata::require_fashion_mnist();
  const nn::Batch tr = nn::take(nn::load_fashion_mnist("train"), 2000)->all();
  const nn::Batch te = nn::take(nn::load_fashion_mnist("test"), 2000)->all();
  // Shirts, T-shirts and pullovers are each other's neighbours in both splits alike.
  CHECK(debug::check_neighbour_conflicts(tr.x, tr.y, te.x, te.y).empty());
  // Every training image mirrored: clothes keep their class.
  std::vector<int64_t> rev(28);
  for (int64_t i = 0; i < 28; ++i) rev[static_cast<size_t>(i)] = 27 - i;
  CHECK(debug::check_neighbour_conflicts(index_select(tr.x, 3, tensor(rev, {28})), tr.y, te.x, te.y).empty());
  // Heavy pixel noise on the training images only: single pairs fall to chance, but every class with them.
  manual_seed(1);
  for (const double sd : {0.3, 0.7, 1.0}) {
    CAPTURE(sd);
    CHECK(debug::check_neighbour_conflicts(tr.x + randn(tr.x.shape()) * sd, tr.y, te.x, te.y).empty());
  }

  // Half of the training rows of sneakers (7) and ankle boots (9) carry the other's label: the pair
  // the test images tell apart is scrambled in train, the other classes are not.
  std::vector<int64_t> y = tr.y.to_vector<int64_t>();
  int64_t k = 0;
  for (int64_t& v : y)
    if ((v == 7 || v == 9) && k++ % 2 == 0) v = 16 - v;
  const std::vector<debug::Finding> fs =
      debug::check_neighbour_conflicts(tr.x, tensor(y, {static_cast<int64_t>(y.size())}), te.x, te.y, "test");
  const debug::Finding* f = near_copies(fs);
  REQUIRE(f != nullptr);
  CHECK(f->title.find("classes 7 and 9") != std::string::npos);
  CHECK(f->title.find("test rows") != std::string::npos);
  CHECK(dtest::ev(*f, "their agreement above chance (kappa), train") < 0.2);
  CHECK(dtest::ev(*f, "the other classes' agreement, train") >
        0.75 * dtest::ev(*f, "the other classes' agreement, test"));

  // The same scramble with the label 9 rare in training (10 rows, a long-tailed split): the pair's
  // agreement beside so rare a class is noise, and it is not judged.
  std::vector<int64_t> keep;
  int64_t boots = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i)
    if (y[static_cast<size_t>(i)] != 9 || boots++ < 10) keep.push_back(i);
  const Tensor rows = tensor(keep, {static_cast<int64_t>(keep.size())});
  CHECK(near_copies(debug::check_neighbour_conflicts(index_select(tr.x, 0, rows),
                                                     index_select(tensor(y, {static_cast<int64_t>(y.size())}), 0, rows),
                                                     te.x, te.y)) == nullptr);

  // Float targets of ten values (a regression, not classes): nothing to judge.
  CHECK(debug::check_neighbour_conflicts(tr.x, tr.y.to(kFloat32), te.x, te.y).empty());
}
