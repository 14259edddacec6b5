// The data of a corpus program (debug/corpus/data.h): the generators, the splits and the data faults.
#include "debug/corpus/data.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace gradsleuth::debug::corpus {
namespace {

using Rng = std::mt19937_64;

// One split on the host: rows of features, and the label (multiclass/binary) or targets.
struct Rows {
  int64_t dim = 0;
  std::vector<std::vector<float>> x;
  std::vector<int64_t> label;              // multiclass, binary: the class
  std::vector<std::vector<float>> target;  // binary (1), multilabel (K), regression (1)
  size_t size() const { return x.size(); }
  void push(const Rows& from, size_t i) {
    x.push_back(from.x[i]);
    label.push_back(from.label[i]);
    target.push_back(from.target[i]);
  }
};

double normal(Rng& g) { return std::normal_distribution<double>(0.0, 1.0)(g); }
double unit_uniform(Rng& g) { return std::uniform_real_distribution<double>(0.0, 1.0)(g); }

bool classifies(Task t) { return t == Task::Multiclass || t == Task::Binary; }

// ---- the generators ---------------------------------------------------------------------------

// The task's fixed structure (class centres, templates, projections), drawn from the data seed.
struct World {
  std::vector<std::vector<double>> centres;     // blobs: per class; images: per class template (144)
  std::vector<std::vector<double>> directions;  // planes: per label / target component
  std::vector<double> offsets;
};

World make_world(const DataSpec& d) {
  Rng g(d.seed * 7919 + 13);
  World w;
  const int64_t D = is_image(d) ? 144 : d.features;
  const int64_t C = std::max<int64_t>(d.classes, 2);
  if (d.generator == "blobs") {
    const double s = 6.0 / std::sqrt(2.0 * static_cast<double>(D));  // centres ~6 apart
    for (int64_t c = 0; c < C; ++c) {
      std::vector<double> m(D);
      for (auto& v : m) v = s * normal(g);
      w.centres.push_back(m);
    }
    if (d.hard_class > 0 && d.hard_class < C) {
      std::vector<double> dir(D);
      double n = 0;
      for (auto& v : dir) {
        v = normal(g);
        n += v * v;
      }
      for (int64_t k = 0; k < D; ++k) w.centres[d.hard_class][k] = w.centres[0][k] + 2.2 * dir[k] / std::sqrt(n);
    }
  } else if (d.generator == "images") {
    for (int64_t c = 0; c < C; ++c) {  // three gaussian bumps per class
      std::vector<double> t(144, 0.0);
      for (int b = 0; b < 3; ++b) {
        const double cy = 2 + 8 * unit_uniform(g), cx = 2 + 8 * unit_uniform(g), a = normal(g) > 0 ? 1.0 : -1.0;
        for (int y = 0; y < 12; ++y)
          for (int x = 0; x < 12; ++x)
            t[y * 12 + x] += a * std::exp(-((y - cy) * (y - cy) + (x - cx) * (x - cx)) / 4.0);
      }
      w.centres.push_back(t);
    }
  } else if (d.generator == "planes") {
    for (int64_t k = 0; k < std::max<int64_t>(d.classes, 1); ++k) {
      std::vector<double> dir(D);
      for (auto& v : dir) v = normal(g) / std::sqrt(static_cast<double>(D));
      w.directions.push_back(dir);
      w.offsets.push_back(0.5 * normal(g));
    }
  }
  return w;
}

// One example of class c (or of the planes task, where c is unused).
void draw(const DataSpec& d, const World& w, int64_t c, Rng& g, Rows& out) {
  const int64_t D = is_image(d) ? 144 : d.features;
  std::vector<double> x(D);
  if (d.generator == "blobs") {
    for (int64_t k = 0; k < D; ++k) x[k] = w.centres[c][k] + d.spread * normal(g) / std::sqrt(2.0);
  } else if (d.generator == "spirals") {
    const double t = unit_uniform(g), turns = 0.75, C = static_cast<double>(d.classes);
    const double a = t * turns * 2 * M_PI + 2 * M_PI * c / C + 0.15 * normal(g);
    x[0] = t * std::cos(a);
    x[1] = t * std::sin(a);
    for (int64_t k = 2; k < D; ++k) x[k] = 0.3 * normal(g);
  } else if (d.generator == "images") {
    const int dy = static_cast<int>(unit_uniform(g) * 3) - 1, dx = static_cast<int>(unit_uniform(g) * 3) - 1;
    for (int y = 0; y < 12; ++y)
      for (int xx = 0; xx < 12; ++xx) {
        const int sy = std::clamp(y - dy, 0, 11), sx = std::clamp(xx - dx, 0, 11);
        x[y * 12 + xx] = w.centres[c][sy * 12 + sx] + d.spread * 0.25 * normal(g);
      }
  } else {  // planes
    for (auto& v : x) v = normal(g);
  }
  std::vector<float> xf(D), target;
  for (int64_t k = 0; k < D; ++k) xf[k] = static_cast<float>(x[k] * d.raw_scale + d.raw_offset);
  int64_t label = c;
  if (d.generator == "planes") {
    if (d.task == Task::Regression) {
      double y = 0;
      for (size_t j = 0; j < w.directions.size(); ++j) {
        double p = 0;
        for (int64_t k = 0; k < D; ++k) p += w.directions[j][k] * x[k];
        y += std::sin(1.5 * p + w.offsets[j]);
      }
      target = {static_cast<float>(y / std::sqrt(static_cast<double>(w.directions.size())) + 0.1 * normal(g))};
      label = 0;
    } else {
      for (size_t j = 0; j < w.directions.size(); ++j) {
        double p = w.offsets[j];
        for (int64_t k = 0; k < D; ++k) p += w.directions[j][k] * x[k];
        if (d.task == Task::Binary) p += 0.4 * (x[0] * x[0] - 1.0);
        bool on = p > 0;
        if (unit_uniform(g) < d.label_noise) on = !on;
        target.push_back(on ? 1.0f : 0.0f);
      }
      label = target.empty() ? 0 : static_cast<int64_t>(target[0]);
    }
  } else {
    if (d.task == Task::Binary) {
      if (unit_uniform(g) < d.label_noise) label = 1 - label;
      target = {static_cast<float>(label)};
    }
  }
  out.x.push_back(std::move(xf));
  out.label.push_back(label);
  out.target.push_back(std::move(target));
}

// n examples, classes in turn, each class keeping its imbalance share.
Rows make_split(const DataSpec& d, const World& w, int64_t n, Rng& g) {
  Rows r;
  r.dim = is_image(d) ? 144 : d.features;
  const int64_t C = d.generator == "planes" ? 1 : std::max<int64_t>(d.task == Task::Binary ? 2 : d.classes, 1);
  std::vector<double> share(C, 1.0);
  if (C > 1 && d.imbalance > 1.0)
    for (int64_t c = 0; c < C; ++c) share[c] = std::pow(d.imbalance, -static_cast<double>(c) / (C - 1));
  const double total = std::accumulate(share.begin(), share.end(), 0.0);
  for (int64_t c = 0; c < C; ++c) {
    const auto k = static_cast<int64_t>(std::llround(static_cast<double>(n) * share[c] / total));
    for (int64_t i = 0; i < k; ++i) draw(d, w, c, g, r);
  }
  // a fixed shuffle, so splits are not sorted by class
  std::vector<size_t> order(r.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), g);
  Rows s;
  s.dim = r.dim;
  for (size_t i : order) s.push(r, i);
  return s;
}

// ---- the data faults ----------------------------------------------------------------------------

int64_t other_class(int64_t c, int64_t C, Rng& g) {
  const auto k = static_cast<int64_t>(unit_uniform(g) * static_cast<double>(C - 1));
  return (c + 1 + std::min(k, C - 2)) % C;
}

void change_label(const DataSpec& d, Rows& r, size_t i, Rng& g, const Rows& pool) {
  if (d.task == Task::Multiclass) {
    r.label[i] = other_class(r.label[i], d.classes, g);
  } else if (d.task == Task::Binary) {
    r.label[i] = 1 - r.label[i];
    r.target[i] = {static_cast<float>(r.label[i])};
  } else if (d.task == Task::Multilabel) {
    for (auto& t : r.target[i]) t = 1.0f - t;
  } else {
    r.target[i] = pool.target[static_cast<size_t>(unit_uniform(g) * static_cast<double>(pool.size())) % pool.size()];
  }
}

std::vector<double> feature_std(const Rows& r) {
  std::vector<double> m(r.dim, 0.0), s(r.dim, 0.0);
  for (const auto& x : r.x)
    for (int64_t k = 0; k < r.dim; ++k) m[k] += x[k];
  for (auto& v : m) v /= static_cast<double>(std::max<size_t>(r.size(), 1));
  for (const auto& x : r.x)
    for (int64_t k = 0; k < r.dim; ++k) s[k] += (x[k] - m[k]) * (x[k] - m[k]);
  for (auto& v : s) v = std::sqrt(v / static_cast<double>(std::max<size_t>(r.size(), 1)));
  return s;
}

void apply_data_faults(const DataSpec& d, Rows& train, Rows& val, const Rows& test, Rng& g) {
  const int64_t C = d.task == Task::Binary ? 2 : d.classes;
  if (d.fault_remove > 0) {
    Rows kept;
    kept.dim = train.dim;
    for (size_t i = 0; i < train.size(); ++i)
      if (unit_uniform(g) >= d.fault_remove) kept.push(train, i);
    train = kept;
  }
  if (d.fault_unbalance > 0 && classifies(d.task)) {
    Rows kept;
    kept.dim = train.dim;
    for (size_t i = 0; i < train.size(); ++i) {
      const double drop = d.fault_unbalance * static_cast<double>(train.label[i]) / static_cast<double>(C - 1);
      if (unit_uniform(g) >= drop) kept.push(train, i);
    }
    train = kept;
  }
  if (d.fault_label_change > 0)
    for (size_t i = 0; i < train.size(); ++i)
      if (unit_uniform(g) < d.fault_label_change) change_label(d, train, i, g, train);
  if (d.fault_overlap > 0) {
    const size_t n = train.size();
    for (size_t i = 0; i < n; ++i)
      if (unit_uniform(g) < d.fault_overlap) {
        train.push(train, i);
        change_label(d, train, train.size() - 1, g, train);
      }
  }
  if (d.fault_noise > 0) {
    const std::vector<double> sd = feature_std(train);
    for (auto& x : train.x)
      for (int64_t k = 0; k < train.dim; ++k) x[k] += static_cast<float>(d.fault_noise * sd[k] * normal(g));
  }
  if (d.fault_leak > 0) {  // validation rows copied into train: val no longer measures generalisation
    for (size_t i = 0; i < val.size(); ++i)
      if (unit_uniform(g) < d.fault_leak) train.push(val, i);
    std::vector<size_t> order(train.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), g);
    Rows s;
    s.dim = train.dim;
    for (size_t i : order) s.push(train, i);
    train = s;
  }
  (void)test;
}

// ---- host rows to tensors -----------------------------------------------------------------------

Tensor x_tensor(const DataSpec& d, const Rows& r) {
  std::vector<float> v;
  v.reserve(r.size() * r.dim);
  for (const auto& x : r.x) v.insert(v.end(), x.begin(), x.end());
  if (is_image(d)) return tensor(v, {static_cast<int64_t>(r.size()), 1, 12, 12});
  return tensor(v, {static_cast<int64_t>(r.size()), r.dim});
}

Tensor y_tensor(const DataSpec& d, const Rows& r) {
  const auto n = static_cast<int64_t>(r.size());
  if (d.task == Task::Multiclass) return tensor(r.label, {n});
  std::vector<float> v;
  for (const auto& t : r.target) v.insert(v.end(), t.begin(), t.end());
  return tensor(v, {n, n ? static_cast<int64_t>(v.size()) / n : 1});
}

}  // namespace

bool is_image(const DataSpec& d) { return d.generator == "images"; }

LoadedData load_data(const DataSpec& d) {
  const World world = make_world(d);
  Rng g(d.seed);
  Rows train = make_split(d, world, d.train, g);
  Rows val = make_split(d, world, d.val, g);
  const Rows test = make_split(d, world, d.test, g);
  Rng fault_rng(d.seed * 31 + 5);
  apply_data_faults(d, train, val, test, fault_rng);
  LoadedData out;
  out.x_train = x_tensor(d, train);
  out.y_train = y_tensor(d, train);
  out.x_val = x_tensor(d, val);
  out.y_val = y_tensor(d, val);
  out.x_test = x_tensor(d, test);
  out.y_test = y_tensor(d, test);
  if (d.task == Task::Multiclass) {
    out.class_counts.assign(static_cast<size_t>(d.classes), 0);
    for (int64_t c : train.label) out.class_counts[static_cast<size_t>(c)] += 1;
  }
  for (const auto& t : train.target) out.positives += t.empty() ? 0.0 : t[0];
  return out;
}

}  // namespace gradsleuth::debug::corpus
