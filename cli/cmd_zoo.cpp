// gradsleuth zoo: trains the clean reference and each catalogued bug on
// Fashion-MNIST with every check attached, and prints the detection matrix
// (docs/catalog.md describes each bug; debug/zoo/zoo.h is the library behind it).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "cli/cli.h"
#include "core/format.h"
#include "core/io.h"
#include "debug/zoo/zoo.h"
#include "optim/progress.h"
#ifdef GS_WITH_DIST_ZOO
#include "debug/zoo/dist_zoo.h"
#include "distributed/process_group.h"
#endif

namespace gradsleuth::cli {

namespace {

// `zoo --distributed`: every rank trains; rank 0 prints the matrix and writes the JSON.
int zoo_distributed(Args& a) {
#ifndef GS_WITH_DIST_ZOO
  GS_CHECK(false, "zoo --distributed", "this gradsleuth was built without distributed/ (data-parallel training)");
  return 1;
#else
  auto& pg = dist::ProcessGroup::world();
  GS_CHECK(pg.world_size() >= 2, "zoo --distributed",
           "the distributed zoo trains data-parallel replicas and needs at least 2 ranks, but this process is alone "
           "(world size 1",
           dist::mpi_available() ? "" : "; this build has no MPI",
           "): run it as\n"
           "  mpirun -np 2 gradsleuth zoo --distributed\n(or more ranks; as root in a container add "
           "--allow-run-as-root or set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)");
  debug::dist_zoo::Options o;
  if (a.has("steps")) o.steps = a.get_int_in("steps", 1, 10000000);
  if (a.has("train-examples")) o.train_examples = a.get_int_in("train-examples", 1, 10000000);
  o.seed = a.get_seed("seed");
  o.data_dir = a.get_nonempty("data-dir");
  GS_CHECK(a.get("model") == "mlp" && a.get("device") == "cpu", "zoo --distributed",
           "the distributed zoo trains the MLP on the CPU: drop --model/--device");
  GS_CHECK(o.train_examples >= o.batch_size * pg.world_size(), "zoo --distributed",
           "--train-examples must be >= ", o.batch_size * pg.world_size(), " (a batch of ", o.batch_size, " per rank)");
  if (a.has("json") && pg.rank() == 0) a.check_writable_file("json");
  std::vector<nn::Bug> bugs;
  for (const std::string& id : a.get_all("bug")) bugs.push_back(nn::parse_bug(id));
  if (bugs.empty()) bugs = debug::dist_zoo::catalog();
  const bool quiet = a.has("quiet") || pg.rank() != 0;
  if (!quiet)
    std::fprintf(stderr, "zoo --distributed: %zu bug%s + clean reference on %d ranks, %lld steps each\n", bugs.size(),
                 bugs.size() == 1 ? "" : "s", pg.world_size(), static_cast<long long>(o.steps));
  auto progress = [quiet](size_t done, size_t total, const std::string& line) {
    if (quiet) return;
    std::fprintf(stderr, "zoo: [%zu/%zu] %s\n", done, total, line.c_str());
    std::fflush(stderr);
  };
  const debug::dist_zoo::Result r = debug::dist_zoo::run(bugs, o, pg, progress);
  if (pg.rank() == 0) {
    std::cout << debug::dist_zoo::matrix(r);
    if (a.has("verbose"))
      for (const debug::zoo::RunResult* v : [&r] {
             std::vector<const debug::zoo::RunResult*> all = {&r.clean};
             for (const auto& b : r.bugs) all.push_back(&b);
             return all;
           }())
        std::cout << "\n---- " << v->id << ": " << v->title << "\n" << v->report.str(true);
    std::cout << std::flush;
    if (a.has("json")) {
      write_file_atomic(a.get("json"), debug::dist_zoo::json(r) + "\n", "zoo --json");
      if (!a.has("quiet")) std::fprintf(stderr, "zoo: wrote %s\n", a.get("json").c_str());
    }
  }
  pg.barrier();
  return 0;
#endif
}

}  // namespace

int cmd_zoo(const std::vector<std::string>& args) {
  Args a("zoo", args);
  a.about(
      "Trains the clean reference model and one variant per selected bug (by default every bug the model reproduces) "
      "on Fashion-MNIST,\n"
      "with every check of the debug module attached (data checks, the pre-training gate, the training monitor,\n"
      "the end-of-run diagnoses), and prints the detection matrix: per bug, the checks meant to catch it, every\n"
      "check that fired, whether an intended one did, and the test accuracy and final loss next to the clean\n"
      "model's (the bug was silent: training ran, the numbers are just worse). The checks that fired on the clean\n"
      "reference are listed too: the goal is none.\n"
      "Budget per variant: --quick 150 steps on 6,000 training images (2,000 test); default 1,000 steps on all\n"
      "60,000 (10,000 test); batch 64, Adam lr 1e-3, one thread (OMP_NUM_THREADS sets more).\n"
      "--jobs J variants train at once, each on its own thread (default: the number of cores divided by the\n"
      "threads of one variant); the results are the same for every J, and --jobs 1 keeps the run on one core.\n"
      "--device cuda trains every variant and runs every check on the CUDA backend (a GPU, or in a build without\n"
      "one its CPU emulator, where a variant costs ~30x the CPU time: use --bug and --steps); the data pipeline and\n"
      "its checks stay on the host, and M13 (gradient check) and M18 (half precision) check a CPU copy of the\n"
      "model, which goes back to the device afterwards.\n"
      "The mixed-precision bugs B35-B40 train in float16 (autocast with a GradScaler, unscale_ then clipping to\n"
      "norm 5) or with bfloat16 parameters (Adam with float32 master weights), on the CPU; --precision trains the\n"
      "clean reference that way (their clean twins).\n"
      "--distributed (under `mpirun -np 2` or more): the data-parallel bugs B29-B34 instead. Every rank trains a\n"
      "replica of the MLP with DistributedDataParallel on its shard (100 steps, batch 64 per rank, 4,000 images,\n"
      "SGD lr 0.02 momentum 0.9), with the data-parallel checks D11 L8 M21 M22 O7 W9 attached; rank 0 prints the\n"
      "matrix. Run alone (world size 1) it refuses and says how to start it.");
  a.option(
      "bug", "ID",
      "a bug to run (" + nn::bug_range() + "); repeat for several (default: every bug the model's recipe reproduces)",
      "", true);
  a.flag("quick", "the small budget (the main job of ./run.sh)");
  a.option("json", "FILE", "also write the results as JSON to FILE (written atomically)");
  a.option("model", "mlp|cnn",
           "the zoo's reference model: mlp = Linear 784-128, BatchNorm, two residual blocks, dropout 0.2, "
           "Linear 128-10 (not train's plain 784-256-128-10 mlp); cnn = train's cnn. Some bugs exist only in the mlp",
           "mlp");
  a.option("steps", "N", "optimizer steps per variant (overrides the budget)");
  a.option("train-examples", "N", "training images per variant (overrides the budget)");
  a.option("seed", "S", "seeds initialisation, shuffling and dropout", "1");
  a.option("device", "cpu|cuda",
           "where the models train and the checks run (cuda: the CUDA backend, on a GPU or its CPU emulator)", "cpu");
  a.option("data-dir", "D", "folder with the Fashion-MNIST IDX files", "/usr/share/datasets/fashion-mnist");
  a.option("precision", "float32|float16|bfloat16",
           "the precision the clean reference and the float32 bugs train in: float16 = autocast with a GradScaler, "
           "bfloat16 = bfloat16 parameters with float32 master weights (B35-B40 always train in their own)",
           "float32");
  a.flag("distributed", "the data-parallel bugs B29-B34, under mpirun -np 2 (or more)");
  a.flag("verbose", "with --distributed: after the matrix, every finding of each variant (info ones too)");
  a.flag("list", "list the bug catalog and exit");
  a.flag("quiet", "no progress lines on stderr");
  a.option("jobs", "J",
           "variants trained at once, each on its own thread (default: the number of cores / OMP_NUM_THREADS, "
           "or the number of cores when it is not set; 1 on --device cuda)");
  if (!a.parse()) return 0;
  // Contradictions, refused before any work (the run options mean nothing to --list).
  for (const char* run_option :
       {"bug", "quick", "json", "model", "steps", "train-examples", "device", "precision", "distributed", "jobs"})
    a.refuse_together("list", run_option, "--list prints the catalog and runs nothing");
  a.refuse_together("distributed", "quick", "the distributed zoo has one budget (100 steps per variant)");
  a.refuse_together("distributed", "jobs", "the distributed zoo trains its variants one at a time, on every rank");
  if (a.has("verbose") && !a.has("distributed"))
    throw std::invalid_argument(
        "--verbose applies to --distributed only (the zoo's matrix already lists every "
        "finding); drop it, or add --distributed (see 'gradsleuth zoo --help')");

  if (a.has("list")) {
    // The title goes last and wraps to the terminal's width.
    const int width = terminal_width();
    auto caught = [](const nn::BugInfo& b) {
      std::string c;
      for (const auto& x : b.caught_by) c += (c.empty() ? "" : ", ") + x;
      return c;
    };
    int where_w = 8, caught_w = 9;
    for (const nn::BugInfo& b : nn::bug_catalog()) {
      where_w = std::max(where_w, static_cast<int>(b.lives_in.size()));
      caught_w = std::max(caught_w, static_cast<int>(caught(b).size()));
    }
    std::cout << wrap_last_column(str_printf("%-4s %-*s %-*s ", "bug", where_w, "lives in", caught_w, "caught by"),
                                  "what", width);
    for (const nn::BugInfo& b : nn::bug_catalog())
      std::cout << wrap_last_column(
          str_printf("%-4s %-*s %-*s ", b.code.c_str(), where_w, b.lives_in.c_str(), caught_w, caught(b).c_str()),
          b.title, width);
    return 0;
  }
  const int threads = set_thread_count();
  if (a.has("distributed")) return zoo_distributed(a);
  debug::zoo::Options o = a.has("quick") ? debug::zoo::Options::quick() : debug::zoo::Options::full();
  if (a.has("steps")) o.steps = a.get_int_in("steps", 1, 10000000);
  if (a.has("train-examples")) o.train_examples = a.get_int_in("train-examples", 1, 10000000);
  o.model = a.get("model");
  o.seed = a.get_seed("seed");
  o.data_dir = a.get_nonempty("data-dir");
  o.precision = a.get("precision");
  if (o.precision != "float32" && o.precision != "float16" && o.precision != "bfloat16")
    throw std::invalid_argument("unknown --precision '" + o.precision + "': use float32, float16 or bfloat16");
  std::string device_note;  // " (CPU emulator of CUDA)" in the emulated build
  o.device = device_option(a, "zoo", &device_note);
  // A variant's ops run on `threads` OpenMP threads: as many variants at once as that leaves cores for.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.jobs = a.has("jobs") ? static_cast<int>(a.get_int_in("jobs", 1, 256)) : std::max(1, cores / std::max(1, threads));
  if (!o.device.is_cpu()) o.jobs = 1;
  if (a.has("json")) a.check_writable_file("json");  // before the run, not after it
  GS_CHECK(o.steps >= 1 && o.train_examples >= o.batch_size, "zoo",
           "--steps must be >= 1 and --train-examples >= ", o.batch_size);
  std::vector<nn::Bug> bugs;
  for (const std::string& id : a.get_all("bug")) bugs.push_back(nn::parse_bug(id));
  if (bugs.empty()) {
    bugs = debug::zoo::catalog_for(o.model);
    // On a device, the float32 bugs only: the mixed-precision recipes train on the CPU.
    if (!o.device.is_cpu())
      std::erase_if(bugs, [](nn::Bug b) {
        return debug::zoo::precision_of(nn::BugSet{b}, debug::zoo::Options()) != "float32";
      });
  }
  debug::zoo::check_recipe(bugs, o.model);  // refused before the plan is printed
  const bool quiet = a.has("quiet");
  if (!quiet)
    std::fprintf(stderr, "zoo: %zu bug%s + clean reference, %lld steps each (%s budget), on %s%s, %d at a time\n",
                 bugs.size(), bugs.size() == 1 ? "" : "s", static_cast<long long>(o.steps),
                 a.has("quick") ? "quick" : "full", o.device.str().c_str(), device_note.c_str(), o.jobs);
  // Progress on stderr: a bar redrawn in place on a terminal, one line per variant otherwise.
  const bool tty = isatty(fileno(stderr));
  const auto t0 = std::chrono::steady_clock::now();
  auto progress = [quiet, tty, t0](const debug::zoo::Progress& p) {
    if (quiet) return;
    const double f = static_cast<double>(p.done) / static_cast<double>(std::max<size_t>(p.total, 1));
    const std::string eta = optim::eta(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), f);
    if (tty) {
      std::string line = p.line.size() > 60 ? p.line.substr(0, p.line.rfind(' ', 57)) + " ..." : p.line;
      std::fprintf(stderr, "\r\033[Kzoo %s %zu/%zu  %s  %s", optim::progress_bar(f, 20).c_str(), p.done, p.total,
                   line.c_str(), p.done == p.total ? "\n" : eta.c_str());
    } else {
      std::fprintf(stderr, "zoo: [%zu/%zu] %s  %s\n", p.done, p.total, p.line.c_str(), eta.c_str());
    }
    std::fflush(stderr);
  };
  debug::zoo::Result r = debug::zoo::run(bugs, o, progress);
  std::cout << debug::zoo::matrix(r);
  if (a.has("json")) {
    write_file_atomic(a.get("json"), debug::zoo::json(r) + "\n", "zoo --json");
    if (!quiet) std::fprintf(stderr, "zoo: wrote %s\n", a.get("json").c_str());
  }
  return 0;
}

}  // namespace gradsleuth::cli
