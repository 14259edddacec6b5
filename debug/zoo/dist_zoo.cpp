// The distributed bug zoo (see dist_zoo.h): the data-parallel recipe on every rank,
// each of B29-B34 switched on where it lives, the data-parallel checks attached.
#include "debug/zoo/dist_zoo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "debug/checks/check_util.h"
#include "debug/checks/dist/dist_checks.h"
#include "debug/evidence/catalogue.h"
#include "distributed/ddp.h"
#include "distributed/sampler.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace gradsleuth::debug::dist_zoo {

using nn::Bug;

namespace {

using detail::pad;
using detail::pct;
using detail::str_list;

using detail::Clock;
using detail::join;
using detail::since;

// Every rank's `mine` (the same length on every rank): [rank][i]. One all_gather of a float64 tensor;
// the indices and fingerprints it carries are exact in float64 (integers below 2^53).
PerRank gather(dist::ProcessGroup& pg, const std::vector<double>& mine) {
  const int64_t n = static_cast<int64_t>(mine.size());
  const int ws = pg.world_size();
  Tensor all = pg.all_gather(tensor(mine, {n}, kFloat64)).contiguous().to(kFloat64);
  GS_CHECK(all.numel() == n * ws, "dist_zoo", "all_gather returned ", all.numel(), " values for ", ws, " ranks of ", n);
  const double* d = all.data_ptr<double>();
  PerRank out(static_cast<size_t>(ws));
  for (int r = 0; r < ws; ++r) out[static_cast<size_t>(r)].assign(d + r * n, d + (r + 1) * n);
  return out;
}

// The same vector on every rank (gathered lengths differ): padded with -1 to the longest.
PerRank gather_ragged(dist::ProcessGroup& pg, std::vector<double> mine) {
  const std::vector<double> sizes = pg.all_gather(static_cast<double>(mine.size()));
  const size_t longest = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));
  mine.resize(longest, -1.0);
  PerRank all = gather(pg, mine);
  for (size_t r = 0; r < all.size(); ++r) all[r].resize(static_cast<size_t>(sizes[r]));
  return all;
}

// DDP may name the parameters it reduced through its own path ("module.1.weight"): the inner names.
std::vector<std::string> inner_names(std::vector<std::string> names) {
  for (auto& n : names)
    if (n.rfind("module.", 0) == 0) n = n.substr(7);
  return names;
}

bool has_dropout(const nn::Module& m) {
  if (m.type_name() == "Dropout" && m.is_training()) return true;
  for (const auto& [name, c] : m.named_children())
    if (has_dropout(*c)) return true;
  return false;
}

// Copies the replica's parameters and buffers into the probe model (the same architecture).
void copy_state(const nn::Module& from, nn::Module& to) {
  NoGradGuard ng;
  auto fp = from.named_parameters(), tp = to.named_parameters();
  auto fb = from.named_buffers(), tb = to.named_buffers();
  GS_CHECK(fp.size() == tp.size() && fb.size() == tb.size(), "dist_zoo", "the probe model does not match the replica");
  for (size_t i = 0; i < fp.size(); ++i) tp[i].second.copy_(fp[i].second);
  for (size_t i = 0; i < fb.size(); ++i) tb[i].second.copy_(fb[i].second);
}

double test_accuracy(nn::Module& model, const Tensor& x, const Tensor& y) {
  NoGradGuard ng;
  const bool was = model.is_training();
  model.eval();
  const double hits = sum(eq(argmax(model(x), 1), y).to(kFloat64)).item<double>();
  model.train(was);
  return hits / static_cast<double>(x.size(0));
}

}  // namespace

const std::vector<std::string>& dist_check_ids() {
  static const std::vector<std::string> ids = {"D11", "L8", "M21", "M22", "O7", "W9"};
  return ids;
}

std::vector<Bug> catalog() {
  std::vector<Bug> out;
  for (const nn::BugInfo& b : nn::bug_catalog())
    if (std::find(b.recipes.begin(), b.recipes.end(), "dist") != b.recipes.end()) out.push_back(b.id);
  return out;
}

zoo::RunResult run_variant(const nn::BugSet& bugs, const Options& o, dist::ProcessGroup& pg) {
  const auto t0 = Clock::now();
  const int rank = pg.rank(), ws = pg.world_size();
  zoo::RunResult r;
  r.id = bugs.empty() ? "clean" : bugs.str();
  r.reference = "clean";
  std::set<std::string> intended;
  for (Bug b : bugs.list())
    for (const auto& c : nn::bug_info(b).caught_by) intended.insert(c);
  r.intended.assign(intended.begin(), intended.end());
  r.title = bugs.empty() ? "clean reference" : "";
  for (Bug b : bugs.list()) r.title += (r.title.empty() ? "" : "; ") + nn::bug_info(b).title;
  Report& rep = r.report;

  // ---- data: the same pipeline on every rank; the sampler splits it -----------------
  auto fm = nn::FashionMnistOptions().data_dir(o.data_dir);
  auto train_full = nn::load_fashion_mnist("train", fm), test_full = nn::load_fashion_mnist("test", fm);
  const int64_t ntr = std::min(o.train_examples, train_full->size()),
                nte = std::min(o.test_examples, test_full->size());
  nn::Normalizer norm(nn::Normalizer::Mode::Global);
  Tensor xtr = train_full->x().narrow(0, 0, ntr), ytr = train_full->y().narrow(0, 0, ntr);
  norm.fit(xtr, "train");
  xtr = norm.transform(xtr);
  const Tensor xte = norm.transform(test_full->x().narrow(0, 0, nte)), yte = test_full->y().narrow(0, 0, nte);
  const auto data = std::make_shared<nn::TensorDataset>(xtr, ytr, "fashion-mnist/train");
  dist::DistributedSamplerOptions so;
  so.seed = o.seed;
  // BUG B31 (in the sampler): it ignores the rank, so every rank reads rank 0's shard.
  if (bugs.has(Bug::B31)) so.bugs = nn::BugSet{Bug::B31};
  dist::DistributedSampler sampler(ntr, rank, ws, so);

  // ---- model: per-rank seed, DDP broadcasts rank 0's weights ------------------------
  zoo::Options zo;
  zo.model = "mlp";
  // BUG B32 (in the recipe): the single-process script's manual_seed(seed) on every rank, so the
  // ranks' dropout masks are identical. Correct: the shared seed for what must agree (the sampler's
  // shuffle) and a per-rank seed for the randomness each rank draws (dist::rank_seed).
  manual_seed(bugs.has(Bug::B32) ? o.seed : dist::rank_seed(o.seed, pg));
  nn::ModulePtr model = zoo::make_model({}, zo, 128);
  // The probe: a second replica, built once, that O7 loads with the replica's state to measure the
  // local gradient of a checked step (built here so its initialisation draws come before training's).
  const Generator before_probe = default_generator();
  nn::ModulePtr probe = zoo::make_model({}, zo, 128);
  default_generator() = before_probe;  // building it draws nothing the run would have drawn

  dist::DDPOptions dopts;
  for (Bug b : {Bug::B29, Bug::B30, Bug::B33})
    if (bugs.has(b)) dopts.bugs = nn::BugSet{b};
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, pg, dopts);
  optim::SGD opt(model->parameters(), optim::SGDOptions(o.lr).momentum(0.9));
  // M21 before training: DDP's construction must have made the replicas equal.
  rep.add(check_params_in_sync(trainable_names(*model), gather(pg, fingerprint_params(*model)), 0));
  nn::CrossEntropyLoss ce;
  const std::vector<std::string> names = trainable_names(*model);
  const bool random_layers = has_dropout(*model);

  DistCheckOptions dco;
  LoggedLossCheck l8(dco);
  std::vector<double> scales, global_losses;
  const int64_t per_rank = sampler.num_samples();
  const int64_t batches = std::max<int64_t>(per_rank / o.batch_size, 1);
  int64_t step = 0;
  for (int64_t epoch = 0; step < o.steps; ++epoch) {
    sampler.set_epoch(epoch);
    const std::vector<int64_t> idx = sampler.indices();
    // D11: the epoch's shards, gathered.
    {
      const PerRank all = gather_ragged(pg, std::vector<double>(idx.begin(), idx.end()));
      std::vector<std::vector<int64_t>> shards;
      for (const auto& v : all) shards.emplace_back(v.begin(), v.end());
      for (Finding f : check_shards(shards, ntr, epoch, dco)) {
        f.step = step + 1;
        rep.add(f);
      }
    }
    for (int64_t b = 0; b < batches && step < o.steps; ++b) {
      ++step;
      const bool checked = step == 1 || (step - 1) % o.check_every == 0;
      std::vector<int64_t> bi(
          idx.begin() + b * o.batch_size,
          idx.begin() + std::min<int64_t>((b + 1) * o.batch_size, static_cast<int64_t>(idx.size())));
      const nn::Batch batch = data->get_batch(bi);
      std::vector<Tensor> averaged;
      if (checked) {
        // M22: would the ranks draw the same random numbers in this step?
        for (Finding f : check_rank_randomness(gather(pg, randomness_fingerprint()), random_layers, step, dco))
          rep.add(f);
        // O7's reference: the local gradient of this step on a copy of the replica with the same random
        // state, averaged over the ranks by an all-reduce of our own. The generator is put back, so the
        // real step draws the same dropout masks as the probe did.
        const Generator saved = default_generator();
        copy_state(*model, *probe);
        probe->train(true);
        for (auto& p : probe->parameters()) p.set_grad(Tensor());
        ce((*probe)(batch.x), batch.y).backward();
        default_generator() = saved;
        for (const auto& [n, p] : probe->named_parameters()) {
          if (!p.requires_grad()) continue;
          Tensor g = p.grad().defined() ? p.grad().detach().clone() : zeros_like(p);
          pg.all_reduce(g, dist::ReduceOp::Sum);
          averaged.push_back(g / static_cast<double>(ws));
        }
      }
      opt.zero_grad();
      Tensor loss = ce((*ddp)(batch.x), batch.y);
      loss.backward();  // DDP all-reduces the gradients here
      const double local = loss.item<double>(), bs = static_cast<double>(batch.x.size(0));
      // The logged loss: the batch-weighted mean of the ranks' losses, all-reduced.
      // BUG B34 (in the recipe's logging): rank 0 prints its own local loss as the step's loss.
      const double global = pg.all_reduce(local * bs, dist::ReduceOp::Sum) / pg.all_reduce(bs, dist::ReduceOp::Sum);
      const double logged = bugs.has(Bug::B34) ? local : global;
      global_losses.push_back(global);
      {
        const std::vector<double> losses = pg.all_gather(local), sizes = pg.all_gather(bs);
        const std::vector<double> logged_all = pg.all_gather(logged);
        l8.record(step, losses, sizes, logged_all[0]);  // what rank 0 prints
      }
      if (checked) {
        GradReduction in;
        in.names = names;
        in.reduced = gather(pg, fingerprint_grads(*model));
        std::vector<Tensor> red;
        for (const auto& [n, p] : model->named_parameters())
          if (p.requires_grad()) red.push_back(p.grad());
        in.scale = reduction_scales(red, averaged);
        in.reduced_names = inner_names(ddp->reduced_parameters());
        in.reduced_names_known = true;
        in.world_size = ws;
        in.step = step;
        rep.add(check_gradient_reduction(in, dco));
        const double s = reduction_scale(in, dco);
        if (std::isfinite(s)) scales.push_back(s);
      }
      opt.step();
      if (checked) rep.add(check_params_in_sync(names, gather(pg, fingerprint_params(*model)), step, dco));
    }
  }
  rep.add(l8.findings());
  rep.add(report_effective_batch(ws, o.batch_size, o.lr, detail::median(scales), dco));
  r.steps = step;
  if (!global_losses.empty()) {
    const size_t k = std::min<size_t>(20, global_losses.size());
    double s = 0.0;
    for (size_t i = global_losses.size() - k; i < global_losses.size(); ++i) s += global_losses[i];
    r.final_loss = s / static_cast<double>(k);
  }
  r.test_accuracy = test_accuracy(*model, xte, yte);
  r.fired = rep.fired_checks();
  for (const auto& c : r.fired) r.caught = r.caught || intended.count(c) > 0;
  r.seconds = since(t0);
  pg.barrier();
  return r;
}

Result run(const std::vector<Bug>& bugs, const Options& o, dist::ProcessGroup& pg,
           const std::function<void(size_t, size_t, const std::string&)>& progress) {
  GS_CHECK(pg.world_size() >= 2, "zoo --distributed",
           "the distributed zoo needs at least 2 ranks, this process is "
           "alone (world size 1): run it as `mpirun -np 2 gradsleuth zoo --distributed` (or more ranks)");
  for (Bug b : bugs) {
    const nn::BugInfo& info = nn::bug_info(b);
    GS_CHECK(std::find(info.recipes.begin(), info.recipes.end(), "dist") != info.recipes.end(), "zoo --distributed",
             "bug ", info.code, " (", info.title, ") is not a data-parallel bug: run it with `gradsleuth zoo --bug ",
             info.code, "`; the distributed zoo reproduces ", nn::bug_info(catalog().front()).code, "-",
             nn::bug_info(catalog().back()).code);
  }
  GS_CHECK(o.steps >= 1 && o.batch_size >= 1 && o.check_every >= 1, "zoo --distributed",
           "steps, batch size and check_every must be >= 1");
  const auto t0 = Clock::now();
  Result res;
  res.options = o;
  res.world_size = pg.world_size();
  const size_t total = bugs.size() + 1;
  auto say = [&](size_t done, const zoo::RunResult& r) {
    if (!progress) return;
    std::ostringstream os;
    os << r.id << ": "
       << (r.id == "clean" ? (r.fired.empty() ? "silent" : "NOT silent")
           : r.caught      ? "caught"
                           : "MISSED")
       << (r.fired.empty() ? " (no check fired)" : " (fired: " + join(r.fired) + ")") << ", " << fmt_num(r.seconds)
       << " s";
    progress(done, total, os.str());
  };
  res.clean = run_variant({}, o, pg);
  say(1, res.clean);
  for (Bug b : bugs) {
    res.bugs.push_back(run_variant(nn::BugSet{b}, o, pg));
    say(res.bugs.size() + 1, res.bugs.back());
  }
  res.seconds = since(t0);
  return res;
}

namespace {
// Only the data-parallel checks' findings: the others are not attached here.
std::string run_json(const zoo::RunResult& b, bool bug) {
  std::ostringstream os;
  os << "{";
  if (bug)
    os << "\"id\":" << json_str(b.id) << ",\"title\":" << json_str(b.title) << ",\"intended\":" << str_list(b.intended)
       << ",";
  os << "\"fired\":" << str_list(b.fired);
  if (bug) os << ",\"caught\":" << (b.caught ? "true" : "false");
  os << ",\"test_accuracy\":" << json_num(b.test_accuracy) << ",\"final_loss\":" << json_num(b.final_loss)
     << ",\"seconds\":" << json_num(b.seconds) << ",\"steps\":" << b.steps << ",\"lead\":" << b.report.lead_json()
     << ",\"findings\":" << b.report.json() << "}";
  return os.str();
}
}  // namespace

std::string matrix(const Result& r) {
  std::ostringstream os;
  os << "Distributed detection matrix: " << r.bugs.size() << " bug" << (r.bugs.size() == 1 ? "" : "s") << " on "
     << r.world_size << " ranks, " << r.options.steps << " steps each, batch " << r.options.batch_size
     << " per rank on " << r.options.train_examples << " training images (test: " << r.options.test_examples
     << " images), model mlp, SGD lr " << fmt_num(r.options.lr) << " momentum 0.9\n\n";
  os << pad("bug", 5) << pad("intended", 10) << pad("caught", 7) << pad("test acc (ref)", 21) << pad("loss", 8)
     << "fired\n";
  int caught = 0;
  for (const zoo::RunResult& b : r.bugs) {
    caught += b.caught ? 1 : 0;
    os << pad(b.id, 5) << pad(join(b.intended, ","), 10) << pad(b.caught ? "yes" : "NO", 7)
       << pad(pct(b.test_accuracy) + " (" + pct(r.clean.test_accuracy) + ")", 21)
       << pad(detail::decimals3(b.final_loss), 8) << (b.fired.empty() ? "-" : join(b.fired, " ")) << "\n";
    os << "     " << b.title << "\n";
  }
  os << "\ntest acc (ref): rank 0's replica on the test images, and in brackets the clean reference's\n";
  os << "\nchecks (id name; gradsleuth checks --list):\n ";
  std::string line;
  for (size_t i = 0; i < dist_check_ids().size(); ++i)
    line += " " + check_label(dist_check_ids()[i]) + (i + 1 < dist_check_ids().size() ? ";" : "");
  os << line << "\n";
  std::vector<std::string> labels;
  for (const auto& c : r.clean.fired) labels.push_back(check_label(c));
  os << "\nclean reference: test accuracy " << pct(r.clean.test_accuracy) << ", final loss "
     << detail::decimals3(r.clean.final_loss) << ", checks fired: " << (labels.empty() ? "none" : join(labels)) << "\n";
  os << caught << "/" << r.bugs.size() << " bugs caught by their intended checks; " << detail::decimals3(r.seconds)
     << " s\n";
  return os.str();
}

std::string json(const Result& r) {
  std::ostringstream os;
  os << "{\"options\":{\"steps\":" << r.options.steps << ",\"train_examples\":" << r.options.train_examples
     << ",\"test_examples\":" << r.options.test_examples << ",\"batch_size\":" << r.options.batch_size
     << ",\"lr\":" << json_num(r.options.lr) << ",\"seed\":" << r.options.seed << ",\"world_size\":" << r.world_size
     << "},\"clean\":" << run_json(r.clean, false) << ",\"bugs\":[";
  int caught = 0;
  for (size_t i = 0; i < r.bugs.size(); ++i) {
    os << (i ? "," : "") << run_json(r.bugs[i], true);
    caught += r.bugs[i].caught ? 1 : 0;
  }
  os << "],\"caught\":" << caught << ",\"seconds\":" << json_num(r.seconds) << "}";
  return os.str();
}

}  // namespace gradsleuth::debug::dist_zoo
