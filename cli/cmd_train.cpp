// gradsleuth train: trains an MLP or a small CNN on Fashion-MNIST with the
// library's Trainer, and reports test accuracy (docs/training.md has the
// measured numbers and the commands that produced them).
//
// Dimension letters: B = batch, C = channels, H/W = 28x28 pixels, K = 10 classes.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/cli.h"
#include "cli/train_models.h"
#include "core/autocast.h"
#include "core/generator.h"
#include "core/io.h"
#include "core/json.h"
#include "debug/run/monitor.h"
#include "distributed/dist.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace gradsleuth::cli {

namespace {

// A loss scale, shortest first: 65536, 0.5, 1e-06 (the fewest digits that read back as the same double).
std::string scale_str(double v) {
  char buf[40];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// Defaults per model: what reached the goals in docs/training.md. The CNN's recipe is
// chosen for time to accuracy: a higher peak lr reached by a short warm-up
// and annealed to 0 step by step, with label smoothing, gets more out of fewer epochs.
struct Defaults {
  int epochs;
  int batch_size;
  double lr;
  const char* schedule;
  double label_smoothing;
};
Defaults defaults_for(const std::string& model) {
  return model == "cnn" ? Defaults{6, 64, 2e-3, "warmup-cosine", 0.1} : Defaults{10, 64, 1e-3, "cosine", 0.0};
}

}  // namespace

int cmd_train(const std::vector<std::string>& args) {
  Args a("train", args);
  a.about(
      "Trains a model on Fashion-MNIST (60,000 training images, 10,000 test images) and reports its test\n"
      "accuracy. The data comes from Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).\n"
      "Honest splits: a seeded validation split is held out of the training images (--val-fraction, 10%\n"
      "by default); everything reported during training is measured on it, and the test set is evaluated\n"
      "once, after the last epoch.\n"
      "Defaults: mlp (784-256-128-10): 10 epochs, Adam lr 1e-3, cosine schedule; cnn (2 conv blocks + fc 128):\n"
      "6 epochs, Adam lr 2e-3, warmup-cosine, label smoothing 0.1; both batch 64, one thread.\n"
      "The same --seed gives the same run, loss for loss.\n"
      "Data-parallel: under mpirun -np N each process trains on its shard of every batch (--batch-size is per\n"
      "process: a global batch of N*B) with gradients averaged across processes; rank 0 alone prints and writes\n"
      "--run-dir, and every loss shown is the mean over the processes (docs/distributed.md).\n"
      "Mixed precision (--precision bf16|fp16; docs/dtypes.md, \"Autocast\"): the forward and the loss run under\n"
      "autocast (matmuls and convolutions in 16 bits, reductions and the loss in float32), the parameters stay\n"
      "float32 (or 16-bit with float32 master copies: --master-weights); fp16 scales the loss with a GradScaler\n"
      "(its scale at every update goes to --run-dir/scale.csv). The validation and test sets are evaluated under\n"
      "the same autocast. A 16-bit run attaches the training monitor and ends with the precision checks' findings:\n"
      "M28 (values out of the 16-bit range), M29 (the first op out of range), M30 (the op furthest from float32\n"
      "on one batch) and O10 (the loss scaler) (--no-precision-checks: none; under mpirun they are not run).");
  a.option("model", "mlp|cnn",
           "the network to train: mlp = Linear 784-256-128-10 with ReLU (not the zoo's mlp of doctor/zoo/graph); "
           "cnn = two 3x3 convs (32, 64) with pooling, fc 128, dropout 0.25 (the zoo's cnn)",
           "mlp");
  a.option("epochs", "N", "passes over the training data (default: per model)");
  a.option("batch-size", "B", "examples per step, per process under mpirun (default: 64)");
  a.option("lr", "X", "learning rate (default: adam 1e-3 for the mlp, 2e-3 for the cnn; sgd 0.05)");
  a.option("optimizer", "sgd|adam", "adam, or sgd with momentum 0.9", "adam");
  a.option("schedule", "cosine|warmup-cosine|none",
           "cosine: the lr decays to 0 over the run, stepped per epoch; warmup-cosine: rises linearly from a\n"
           "tenth over the first half epoch, then decays to 0 step by step (default: per model)");
  a.option("label-smoothing", "X", "the training loss's label smoothing, in [0, 1) (default: per model)");
  a.option("device", "cpu|cuda", "where the model trains (cuda: the CUDA backend, on a GPU or its CPU emulator)",
           "cpu");
  a.option("threads", "N", "CPU threads for the engine (default: OMP_NUM_THREADS if set, else 1)");
  a.option("seed", "S", "seeds the initialisation, shuffling and dropout (per process under mpirun)", "1");
  a.option("run-dir", "DIR",
           "write steps.csv, epochs.jsonl and summary.json here (a folder holding an earlier run's is "
           "refused unless --overwrite)");
  a.flag("overwrite", "with --run-dir: replace the files of an earlier run in DIR");
  a.option("data-dir", "D", "folder with the IDX files", nn::kFashionMnistDefaultDir);
  a.option("limit-train", "N", "train on the first N images only (quick runs)");
  a.option("limit-test", "N", "evaluate on the first N test images only");
  a.option("val-fraction", "F", "share of the training images held out for validation, in [0, 0.5] (0: none)", "0.1");
  a.option("precision", "float32|bf16|fp16",
           "float32, or mixed precision: autocast to bfloat16, or to float16 with a GradScaler", "float32");
  a.flag("master-weights",
         "with bf16|fp16: store the parameters in 16 bits, the optimizer stepping float32 master copies "
         "(Optimizer::set_master_weights)");
  a.option("loss-scale", "S", "with fp16: the GradScaler's initial scale, > 0 (default 65536 = 2^16)");
  a.flag("no-precision-checks", "with bf16|fp16: no training monitor, no M28/M29/M30/O10 findings (bare speed)");
  a.option("check-every", "N",
           "with bf16|fp16: the monitor's sampled steps (M28's and M29's measures, the other per-step checks) "
           "are step 1 and every N-th step",
           "100");
  a.flag("quiet", "no progress on stderr");
  a.flag("json", "end with one JSON line: model, epochs, test_accuracy, test_loss, seconds, ...");
  if (!a.parse()) return 0;

  const std::string model_name = a.get("model");
  GS_CHECK(model_name == "mlp" || model_name == "cnn", "train", "unknown --model '", model_name, "': use mlp or cnn");
  const std::string opt_name = a.get("optimizer");
  GS_CHECK(opt_name == "adam" || opt_name == "sgd", "train", "unknown --optimizer '", opt_name, "': use adam or sgd");
  const Defaults d = defaults_for(model_name);
  // Every option is range-checked here, before any data is read or any step is taken.
  const int epochs = a.has("epochs") ? static_cast<int>(a.get_int_in("epochs", 1, 1000000)) : d.epochs;
  const int batch = a.has("batch-size") ? static_cast<int>(a.get_int_in("batch-size", 1, 1 << 24)) : d.batch_size;
  const double lr = a.has("lr") ? a.get_double_in("lr", 0.0, true, 10.0, false) : (opt_name == "sgd" ? 0.05 : d.lr);
  const uint64_t seed = a.get_seed("seed");
  const int threads = a.has("threads") ? static_cast<int>(a.get_int_in("threads", 1, 1024)) : 0;
  const int64_t limit_train = a.has("limit-train") ? a.get_int_in("limit-train", 1, INT64_MAX) : 0;
  const int64_t limit_test = a.has("limit-test") ? a.get_int_in("limit-test", 1, INT64_MAX) : 0;
  const double val_fraction = a.get_double_in("val-fraction", 0.0, false, 0.5, false);
  const std::string data_dir = a.get_nonempty("data-dir");
  if (a.has("run-dir")) {
    a.check_writable_dir("run-dir");
    // An earlier run's files are results: replacing them takes --overwrite (checked before any work).
    std::string existing;
    for (const char* f : {"steps.csv", "epochs.jsonl", "summary.json"})
      if (std::filesystem::exists(std::filesystem::path(a.get("run-dir")) / f))
        existing += (existing.empty() ? "" : ", ") + std::string(f);
    GS_CHECK(existing.empty() || a.has("overwrite"), "train", "--run-dir '", a.get("run-dir"),
             "' holds an earlier run (", existing, "); pass --overwrite to replace it, or choose another folder");
  } else {
    GS_CHECK(!a.has("overwrite"), "train", "--overwrite applies to --run-dir only; drop it, or add --run-dir DIR");
  }
  const std::string schedule = a.has("schedule") ? a.get("schedule") : std::string(d.schedule);
  GS_CHECK(schedule == "cosine" || schedule == "warmup-cosine" || schedule == "none", "train", "unknown --schedule '",
           schedule, "': use cosine, warmup-cosine or none");
  const double label_smoothing =
      a.has("label-smoothing") ? a.get_double_in("label-smoothing", 0.0, false, 1.0, true) : d.label_smoothing;
  const std::optional<DType> precision = parse_precision(a.get("precision"), "train", "precision");
  GS_CHECK(precision || !a.has("master-weights"), "train",
           "--master-weights needs 16-bit parameters: add --precision bf16 or --precision fp16");
  GS_CHECK(precision == kFloat16 || !a.has("loss-scale"), "train",
           "--loss-scale applies to --precision fp16 (a loss scaler); bfloat16 has float32's range and needs none");
  GS_CHECK(precision || !a.has("no-precision-checks"), "train",
           "--no-precision-checks applies to --precision bf16|fp16 only; drop it");
  GS_CHECK(precision || !a.has("check-every"), "train", "--check-every applies to --precision bf16|fp16 only; drop it");
  GS_CHECK(!a.has("no-precision-checks") || !a.has("check-every"), "train",
           "--check-every sets the precision checks' sampling, which --no-precision-checks turns off; keep one");
  const int64_t check_every = a.get_int_in("check-every", 1, 1000000000);
  const double loss_scale = a.has("loss-scale") ? a.get_double_in("loss-scale", 0.0, true, 3.4e38, false) : 65536.0;
  const bool master_weights = a.has("master-weights");
  const bool json = a.has("json");
  std::string device_note;  // " (CPU emulator of CUDA)" in the header line of the emulated build
  const Device device = device_option(a, "train", &device_note);
  // Before any tensor op: the engine reads the thread count once.
  set_thread_count(threads);
  // Under mpirun: N processes, each training on its shard (a world of 1 otherwise, unchanged).
  dist::ProcessGroup& pg = dist::ProcessGroup::world();
  const int world = pg.world_size();
  const bool main_rank = pg.is_main();
  const auto t0 = std::chrono::steady_clock::now();

  // Data.
  auto fm = nn::FashionMnistOptions().data_dir(data_dir);
  nn::DatasetPtr train = nn::load_fashion_mnist("train", fm), test = nn::load_fashion_mnist("test", fm);
  if (limit_train) train = nn::take(train, limit_train);
  if (limit_test) test = nn::take(test, limit_test);
  // The validation split comes out of the training images (seeded by --seed), never out of
  // the test set: choosing epochs or a learning rate by test accuracy is leakage.
  nn::DatasetPtr val;
  if (val_fraction > 0.0) {
    auto [tr, va] = nn::train_val_split(train, val_fraction, seed);
    GS_CHECK(tr->size() > 0 && va->size() > 0, "train", "--val-fraction ", val_fraction, " of ", train->size(),
             " training images leaves an empty split; use more images (--limit-train) or --val-fraction 0");
    train = tr;
    val = va;
  }
  auto train_opts = nn::DataLoaderOptions().batch_size(batch).shuffle(true).seed(seed);
  // Each rank reads every world-th row of the single-process shuffle (distributed/sampler.h), so step k
  // of N ranks at batch B sees exactly the rows of step k of one process at batch N*B.
  if (world > 1)
    train_opts = train_opts.sampler(std::make_shared<dist::DistributedSampler>(
        train->size(), pg.rank(), world, dist::DistributedSamplerOptions{.shuffle = true, .seed = seed}));
  nn::DataLoader train_loader(train, train_opts);
  std::unique_ptr<nn::DataLoader> val_loader;
  if (val) val_loader = std::make_unique<nn::DataLoader>(val, nn::DataLoaderOptions().batch_size(500));
  nn::DataLoader test_loader(test, nn::DataLoaderOptions().batch_size(500));

  // Model and optimizer (initialisation draws from the seeded global generator).
  manual_seed(seed);
  std::shared_ptr<nn::Sequential> model = make_train_model(model_name, "train");
  // Master weights: the parameters themselves in 16 bits (autocast still casts each batch to them).
  if (master_weights) model->to(*precision);
  // The module the Trainer runs: the model, or DDP around it (rank 0's weights broadcast, gradients
  // averaged during backward). Dropout then draws from a per-rank stream: the same masks on every
  // rank would make N ranks drop the same units (bug B32).
  std::shared_ptr<nn::Module> trained = model;
  if (world > 1) {
    model->to(device);  // before wrapping: DDP makes its gradient buckets where the parameters are
    trained = std::make_shared<dist::DistributedDataParallel>(model, pg);
    manual_seed(dist::rank_seed(seed, pg));
  }
  std::unique_ptr<optim::Optimizer> opt;
  if (opt_name == "adam")
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions(lr));
  else
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions(lr).momentum(0.9));
  if (master_weights) opt->set_master_weights(true);
  // float16's range needs the loss scaled; bfloat16 has float32's.
  std::unique_ptr<optim::GradScaler> scaler;
  if (precision == kFloat16)
    scaler = std::make_unique<optim::GradScaler>(optim::GradScalerOptions().init_scale(loss_scale));
  if (!json && main_rank) {
    std::cout << "train: " << model_name << " (" << model->num_parameters() << " parameters), " << train->size()
              << " training / " << (val ? val->size() : 0) << " validation / " << test->size() << " test images, "
              << epochs << " epochs, batch " << batch << ", " << opt_name << " lr " << lr << ", seed " << seed
              << ", on " << device.str() << device_note;
    if (world > 1) std::cout << ", " << world << " processes (global batch " << batch * world << ")";
    if (precision)
      std::cout << ", mixed precision " << dtype_name(*precision) << " (autocast"
                << (master_weights ? ", 16-bit parameters with float32 master weights" : ", float32 parameters")
                << (scaler ? ", loss scale " + scale_str(loss_scale) : std::string()) << ")";
    std::cout << "\n";
    std::cout.flush();
  }

  optim::TrainerOptions to;
  to.device(device)
      .epochs(epochs)
      .run_dir(main_rank ? a.get("run-dir") : "")
      .progress(a.has("quiet") || !main_rank ? optim::Progress::Off : optim::Progress::Auto);
  to.scheduler_per_step(schedule == "warmup-cosine");
  if (world > 1) to.reduce_mean([&pg](double v) { return pg.all_reduce(v, dist::ReduceOp::Avg); }).processes(world);
  if (precision) to.autocast(*precision);
  if (scaler) to.grad_scaler(scaler.get());
  optim::Trainer trainer(*trained, *opt, to);
  // The Trainer's loss (training and validation); the test loss stays plain. A module, so that the
  // monitor of a 16-bit run hears its inputs.
  nn::CrossEntropyLoss loss_module(nn::CrossEntropyLossOptions().label_smoothing(label_smoothing));
  const bool checks = precision && !a.has("no-precision-checks") && world == 1;
  if (label_smoothing > 0.0 || checks)
    trainer.set_loss([&loss_module](const Tensor& out, const Tensor& y) { return loss_module(out, y); });
  // The loss scaler's trace: its scale after every update and the steps it skipped (O10's record).
  struct ScaleRow {
    int64_t update, step;
    double before, after;
    bool skipped;
  };
  std::vector<ScaleRow> scale_trace;
  int64_t steps_done = 0;
  if (scaler)
    scaler->add_update_hook([&](const optim::GradScaler&, const optim::ScalerUpdate& u) {
      scale_trace.push_back({u.index, steps_done + 1, u.scale_before, u.scale_after, u.found_inf});
    });
  // M28, M29, M30 and O10 (and the monitor's other checks, which this command does not print).
  std::unique_ptr<debug::Monitor> monitor;
  if (checks) {
    debug::MonitorOptions mo;
    mo.every = check_every;
    monitor = std::make_unique<debug::Monitor>(*model, *opt, &loss_module, mo);
    monitor->attach(trainer);
    if (scaler) monitor->watch(*scaler);
  }
  std::unique_ptr<optim::LRScheduler> sched;
  if (schedule == "cosine") {
    sched = std::make_unique<optim::CosineAnnealingLR>(*opt, epochs);
  } else if (schedule == "warmup-cosine") {
    const int64_t steps = static_cast<int64_t>(epochs) * train_loader.num_batches();
    const int64_t warmup = std::min<int64_t>(steps / 2, std::max<int64_t>(1, train_loader.num_batches() / 2));
    sched = std::make_unique<optim::LinearWarmup>(*opt, warmup, 0.1,
                                                  std::make_unique<optim::CosineAnnealingLR>(*opt, steps - warmup));
  }
  trainer.set_scheduler(sched.get());
  // A non-finite loss ends the run at that step: exit status 1, naming the step.
  int64_t bad_step = 0, bad_epoch = 0;
  double bad_loss = 0.0;
  trainer.on_step([&](const optim::StepInfo& s) {
    steps_done = s.step;
    if (bad_step == 0 && !std::isfinite(s.loss)) {
      bad_step = s.step;
      bad_epoch = s.epoch;
      bad_loss = s.loss;
      trainer.request_stop();
    }
  });
  optim::FitResult r = trainer.fit(train_loader, val_loader.get());
  // The precision checks' end of run: M30 on one batch of validation (or training) images.
  std::vector<debug::Finding> precision_findings;
  if (monitor) {
    nn::DataLoader sample(nn::take(val ? val : train, 64), nn::DataLoaderOptions().batch_size(64));
    const nn::Batch b = sample.batch(0, 0);
    monitor->finish(b.x.to(device), b.y.to(device));
    for (const debug::Finding& f : monitor->report().findings())
      if (f.check == "M28" || f.check == "M29" || f.check == "M30" || f.check == "O10") precision_findings.push_back(f);
  }
  // The test set, once, after training (under the training's autocast).
  optim::EvalResult test_result;
  {
    auto ac = autocast(precision.value_or(kBFloat16), precision.has_value());
    test_result = optim::evaluate(*model, test_loader);
  }
  int64_t skipped = 0;
  for (const ScaleRow& row : scale_trace) skipped += row.skipped ? 1 : 0;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double train_seconds = 0.0;
  for (const auto& e : r.epochs) train_seconds += e.seconds;
  const optim::EpochInfo last = r.last();
  const double ex_s =
      static_cast<double>(train->size()) * static_cast<double>(r.epochs.size()) / std::max(train_seconds, 1e-9);

  std::ostringstream js;
  js << "{\"model\":" << json_str(model_name) << ",\"optimizer\":" << json_str(opt_name) << ",\"epochs\":" << epochs
     << ",\"batch_size\":" << batch << ",\"lr\":" << json_num(lr) << ",\"schedule\":" << json_str(schedule)
     << ",\"label_smoothing\":" << json_num(label_smoothing) << ",\"seed\":" << seed
     << ",\"device\":" << json_str(device.str()) << ",\"processes\":" << world
     << ",\"precision\":" << json_str(precision_name(precision))
     << ",\"master_weights\":" << (master_weights ? "true" : "false");
  // The loss scaler (fp16): its initial and final scale, updates and the steps it skipped.
  if (scaler)
    js << ",\"loss_scale\":{\"initial\":" << scale_str(loss_scale) << ",\"final\":" << scale_str(scaler->get_scale())
       << ",\"updates\":" << scale_trace.size() << ",\"skipped_steps\":" << skipped << "}";
  else
    js << ",\"loss_scale\":null";
  if (precision) {
    js << ",\"check_every\":";
    if (monitor)
      js << check_every;
    else
      js << "null";
    js << ",\"precision_checks\":";
    if (!monitor) {
      js << "null";
    } else {
      js << "[";
      for (size_t i = 0; i < precision_findings.size(); ++i) js << (i ? "," : "") << precision_findings[i].json();
      js << "]";
    }
  }
  // Under mpirun: the seconds rank 0's backward passes waited for the gradient all-reduce.
  if (auto* ddp = dynamic_cast<dist::DistributedDataParallel*>(trained.get()))
    js << ",\"allreduce_wait_seconds\":" << json_num(ddp->wait_seconds());
  js << ",\"val_fraction\":" << json_num(val_fraction) << ",\"train_examples\":" << train->size()
     << ",\"val_examples\":" << (val ? val->size() : 0) << ",\"test_examples\":" << test->size()
     << ",\"train_loss\":" << json_num(last.train_loss) << ",\"train_accuracy\":" << json_num(last.train_accuracy)
     << ",\"val_loss\":" << json_num(last.val_loss) << ",\"val_accuracy\":" << json_num(last.val_accuracy)
     << ",\"test_loss\":" << json_num(test_result.loss) << ",\"test_accuracy\":" << json_num(test_result.accuracy)
     << ",\"steps\":" << r.steps << ",\"seconds\":" << json_num(seconds)
     << ",\"train_seconds\":" << json_num(train_seconds) << ",\"examples_per_second\":" << json_num(ex_s) << "}";
  if (!main_rank) return bad_step ? 1 : 0;  // rank 0 reports (every rank saw the same global losses)
  if (!a.get("run-dir").empty()) {
    write_file_atomic((std::filesystem::path(a.get("run-dir")) / "summary.json").string(), js.str() + "\n",
                      "train --run-dir");
    if (scaler) {
      std::ostringstream csv;
      csv << "update,step,scale_before,scale_after,skipped\n";
      for (const ScaleRow& row : scale_trace)
        csv << row.update << "," << row.step << "," << scale_str(row.before) << "," << scale_str(row.after) << ","
            << (row.skipped ? 1 : 0) << "\n";
      write_file_atomic((std::filesystem::path(a.get("run-dir")) / "scale.csv").string(), csv.str(), "train --run-dir");
    }
  }
  if (json) {
    std::cout << js.str() << "\n";
  } else {
    if (val) std::printf("val accuracy %.4f  val loss %.4f  (last epoch)\n", last.val_accuracy, last.val_loss);
    std::printf("test accuracy %.4f  test loss %.4f  train loss %.4f  %.1f s (%.0f examples/s)\n", test_result.accuracy,
                test_result.loss, last.train_loss, seconds, ex_s);
    if (scaler) {
      std::string which;
      int shown = 0;
      for (const ScaleRow& row : scale_trace)
        if (row.skipped && shown++ < 8) which += (which.empty() ? "" : ", ") + std::to_string(row.step);
      if (skipped > 8) which += ", ...";
      std::printf("loss scale %s -> %s over %zu updates; %lld step%s skipped (inf/NaN gradients)%s%s\n",
                  scale_str(loss_scale).c_str(), scale_str(scaler->get_scale()).c_str(), scale_trace.size(),
                  static_cast<long long>(skipped), skipped == 1 ? "" : "s", which.empty() ? "" : ": steps ",
                  which.c_str());
    }
    if (precision && !monitor)
      std::printf("precision checks: not run (%s)\n",
                  world > 1 ? "under mpirun: the monitor's extra forwards and backwards would run collectives on one "
                              "rank; run them in one process"
                            : "--no-precision-checks");
    if (monitor) {
      std::printf("precision checks (M28 range, M29 first op out of range, M30 op vs float32, O10 loss scaler):\n");
      if (precision_findings.empty()) std::printf("  no finding\n");
      // One line each (the evidence is in --json and --run-dir's summary.json).
      for (const debug::Finding& f : precision_findings) {
        std::printf("  [%s %s] %s\n", f.check.c_str(), f.fires() ? "warning" : "info", f.title.c_str());
        if (f.fires() && !f.fix.empty()) std::printf("      fix: %s\n", f.fix.c_str());
      }
    }
  }
  if (bad_step) {
    std::cerr << "gradsleuth train: error: the training loss became non-finite (" << bad_loss << ") at step "
              << bad_step << " (epoch " << bad_epoch << "); training stopped there. Lower --lr (now " << lr
              << ") or check the data.\n";
    return 1;
  }
  return 0;
}

}  // namespace gradsleuth::cli
