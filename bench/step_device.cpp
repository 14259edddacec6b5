// bench_step_device: one training step (zero_grad, forward, cross-entropy, backward, SGD step) of
// the models bench_train_step times, on the CPU or the CUDA backend, timed without Google
// Benchmark so that it builds wherever the library does (the lent GPU machine has no
// libbenchmark). bench/peer_train_step.py --device cuda times the same steps in PyTorch.
//
//   bench_step_device [--device cpu|cuda] [--threads N] [--min-time S] [--only TEXT] [--json]
//                     [--autocast bf16|fp16]
//   (--only: the cases whose name contains TEXT, e.g. mlp/64; --autocast: the forward and the loss
//   under gs::autocast in that dtype, the fp16 step with an optim::GradScaler, as PyTorch's
//   torch.autocast + GradScaler step that peer_train_step.py --autocast times)
//
// Each step ends with the device synchronised (the loss is read back to the host, as a training
// loop that logs its loss does), so the time is the step's wall time, launches and all. Per case:
// 10 warm-up steps (allocator caches, cuBLAS handles), then blocks of steps until --min-time
// seconds have passed, at least 5 blocks; the median block's time per step is reported.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/models.h"
#include "core/autocast.h"
#include "core/backend.h"
#include "core/generator.h"
#include "nn/nn.h"
#include "optim/optim.h"
#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(GS_WITH_CUDA_BACKEND)
#include "cuda/cuda.h"
#endif

namespace {

namespace nn = gs::nn;
namespace optim = gs::optim;

struct Result {
  std::string name;
  double us_per_step;
  long steps;
};

// autocast: kFloat32 for none, else the 16-bit dtype the forward runs under.
Result time_case(const std::string& name, std::shared_ptr<nn::Module> (*make)(), int64_t batch, gs::Device device,
                 double min_time, gs::DType autocast) {
  using clock = std::chrono::steady_clock;
  gs::manual_seed(0);
  auto model = make();
  model->to(device);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01));
  gs::Tensor x = gs::rand({batch, 1, 28, 28}).to(device);  // (B, 1, 28, 28)
  gs::Tensor y = gs::randint(0, 10, {batch}).to(device);   // (B) int64
  optim::GradScaler scaler;
  const bool mixed = autocast != gs::kFloat32, scaled = autocast == gs::kFloat16;
  auto step = [&] {
    opt.zero_grad();
    gs::Tensor loss;
    {
      auto ac = gs::autocast(mixed ? autocast : gs::kBFloat16, mixed);
      loss = nn::functional::cross_entropy((*model)(x), y);
    }
    if (scaled) {
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    } else {
      loss.backward();
      opt.step();
    }
    return loss.item<float>();  // reads the loss back: the device is synchronised
  };
  for (int i = 0; i < 10; ++i) step();
  // Steps per block: about a tenth of min_time, from one timed step.
  auto t0 = clock::now();
  step();
  const double one = std::chrono::duration<double>(clock::now() - t0).count();
  const long per_block = std::max(1L, static_cast<long>(min_time / 10 / std::max(one, 1e-7)));
  std::vector<double> blocks;
  double total = 0;
  while (blocks.size() < 5 || total < min_time) {
    auto b0 = clock::now();
    for (long i = 0; i < per_block; ++i) step();
    const double s = std::chrono::duration<double>(clock::now() - b0).count();
    blocks.push_back(s / per_block);
    total += s;
  }
  std::sort(blocks.begin(), blocks.end());
  return {name, blocks[blocks.size() / 2] * 1e6, per_block * static_cast<long>(blocks.size())};
}

int usage(const char* why) {
  std::fprintf(stderr,
               "bench_step_device: %s\nusage: bench_step_device [--device cpu|cuda] [--threads N] [--min-time S] "
               "[--only TEXT] [--json] [--autocast bf16|fp16]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  int threads = 1;
  double min_time = 1.0;
  bool json = false;
  std::string only, autocast_name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* opt) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_step_device: %s needs a value\n", opt);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--device")
      device_name = value("--device");
    else if (a == "--threads")
      threads = std::atoi(value("--threads"));
    else if (a == "--min-time")
      min_time = std::atof(value("--min-time"));
    else if (a == "--json")
      json = true;
    else if (a == "--only")
      only = value("--only");
    else if (a == "--autocast")
      autocast_name = value("--autocast");
    else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: bench_step_device [--device cpu|cuda] [--threads N] [--min-time S] [--only TEXT] [--json]\n"
          "                         [--autocast bf16|fp16]\n"
          "Times one training step (SGD) of an MLP 784-256-10 and a CNN, median of >= 5 blocks.\n"
          "--autocast: forward and loss under gs::autocast (fp16 with an optim::GradScaler).\n");
      return 0;
    } else
      return usage(("unknown option '" + a + "'").c_str());
  }
  if (threads < 1 || threads > 1024) return usage("--threads must be in [1, 1024]");
  if (!(min_time > 0 && min_time <= 60)) return usage("--min-time must be in (0, 60] seconds");
  gs::DType autocast = gs::kFloat32;
  if (autocast_name == "bf16")
    autocast = gs::kBFloat16;
  else if (autocast_name == "fp16")
    autocast = gs::kFloat16;
  else if (!autocast_name.empty())
    return usage(("unknown --autocast '" + autocast_name + "': use bf16 or fp16").c_str());
  const std::string suffix = autocast_name.empty() ? "" : "/" + autocast_name;
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#else
  if (threads != 1)
    std::fprintf(stderr, "bench_step_device: built without OpenMP: --threads %d runs one thread\n", threads);
#endif
  gs::Device device = gs::kCPU;
  if (device_name == "cuda") {
#if defined(GS_WITH_CUDA_BACKEND)
    if (!gradsleuth::cuda::init()) {
      std::fprintf(stderr, "bench_step_device: --device cuda: the CUDA backend is not available (%s)\n",
                   gradsleuth::cuda::unavailable_reason().c_str());
      return 77;
    }
    if (gradsleuth::cuda::is_emulated())
      std::fprintf(stderr, "bench_step_device: note: the CUDA backend is the CPU emulator; times are not a GPU's\n");
    device = gs::kCUDA;
#else
    std::fprintf(stderr, "bench_step_device: built without the CUDA backend; use --device cpu\n");
    return 77;
#endif
  } else if (device_name != "cpu") {
    return usage(("unknown --device '" + device_name + "': use cpu or cuda").c_str());
  }
  struct Case {
    const char* name;
    std::shared_ptr<nn::Module> (*make)();
    int64_t batch;
  };
  const Case cases[] = {{"train_step/mlp/64", gs_bench::mlp2, 64},
                        {"train_step/mlp/256", gs_bench::mlp2, 256},
                        {"train_step/mlp/4096", gs_bench::mlp2, 4096},
                        {"train_step/cnn/64", gs_bench::cnn, 64},
                        {"train_step/cnn/512", gs_bench::cnn, 512}};
  bool any = false;
  for (const Case& c : cases) {
    if (!only.empty() && std::string(c.name).find(only) == std::string::npos) continue;
    any = true;
    const Result r = time_case(c.name + suffix, c.make, c.batch, device, min_time, autocast);
    if (json)
      std::printf("{\"name\":\"%s\",\"device\":\"%s\",\"threads\":%d,\"us_per_step\":%.2f,\"steps\":%ld}\n",
                  r.name.c_str(), device_name.c_str(), threads, r.us_per_step, r.steps);
    else
      std::printf("%-22s %-5s %3d threads  %10.1f us/step  (%ld steps)\n", r.name.c_str(), device_name.c_str(), threads,
                  r.us_per_step, r.steps);
    std::fflush(stdout);
  }
  if (!any)
    return usage(("--only '" + only + "' matches no case (train_step/mlp/64, /256, /4096, cnn/64, /512)").c_str());
  return 0;
}
