// gradsleuth precision: M30 from the command line. Runs one Fashion-MNIST batch through train's mlp or
// cnn once in a 16-bit setting and once in float32 (debug::compare_precision) and prints every op's
// relative error, worst first, naming the op whose result is furthest from float32.
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/cli.h"
#include "cli/train_models.h"
#include "core/generator.h"
#include "core/json.h"
#include "debug/checks/model/precision.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace gradsleuth::cli {

namespace {

std::string op_json(const debug::OpComparison& c) {
  std::ostringstream js;
  js << "{\"index\":" << c.site.index << ",\"op\":" << json_str(c.site.op) << ",\"module\":" << json_str(c.site.module)
     << ",\"backward\":" << (c.backward ? "true" : "false") << ",\"input\":" << c.input
     << ",\"dtype\":" << json_str(dtype_name(c.dtype)) << ",\"shape\":" << json_str(c.shape)
     << ",\"rel_error\":" << json_num(c.rel_error) << ",\"max_abs_float32\":" << json_num(c.max_abs)
     << ",\"max_abs_low\":" << json_num(c.low_max_abs) << "}";
  return js.str();
}

std::string op_label(const debug::OpComparison& c) {
  std::string s =
      c.backward ? "the gradient the backward of '" + c.site.op + "' produced for its input " + std::to_string(c.input)
                 : "'" + c.site.op + "'";
  if (!c.site.module.empty()) s += " in " + c.site.module;
  if (c.site.index > 0) s += " (op #" + std::to_string(c.site.index) + " of the forward)";
  return s;
}

}  // namespace

int cmd_precision(const std::vector<std::string>& args) {
  Args a("precision", args);
  a.about(
      "M30, the per-op comparison against float32 (docs/checks.md): one batch of Fashion-MNIST training images\n"
      "through train's mlp or cnn, forward and cross-entropy backward, once in the 16-bit setting and once in\n"
      "float32 from the same weights, matched op for op. Prints each op's result and each backward gradient\n"
      "with its relative error ||low - f32|| / ||f32||, worst first, and names the op where the largest error\n"
      "arose (above 0.5, or non-finite in 16 bits only, M30 warns). The model runs in eval mode (the cnn's\n"
      "dropout off), from its seeded initialisation or after --train-steps float32 steps. Exit status 0 either\n"
      "way; 1 on bad input.");
  a.option("model", "mlp|cnn", "train's networks (gradsleuth train --help)", "mlp");
  a.option("dtype", "bf16|fp16", "the 16-bit dtype (bfloat16 or float16)", "bf16");
  a.flag("weights", "the parameters in the 16-bit dtype (the batch cast to it) instead of autocast");
  a.option("batch-size", "B", "images in the batch", "64");
  a.option("batch-index", "I", "which batch of the training images (in file order)", "0");
  a.option("train-steps", "N", "float32 Adam steps (lr 1e-3, batch B) before comparing", "0");
  a.option("loss-scale", "S",
           "multiply the loss by S before backward, as a GradScaler does (the gradients' 16-bit range depends "
           "on it; the relative errors do not)",
           "1");
  a.option("rows", "N", "table rows to print (0: every result)", "15");
  a.option("device", "cpu|cuda", "where both runs execute (cuda: the CUDA backend, on a GPU or its CPU emulator)",
           "cpu");
  a.option("seed", "S", "seeds the initialisation", "1");
  a.option("data-dir", "D", "folder with the IDX files", nn::kFashionMnistDefaultDir);
  a.flag("json", "print one JSON object: the setting, every result in recording order, the worst, M30's finding");
  if (!a.parse()) return 0;

  const std::string model_name = a.get("model");
  auto model = make_train_model(model_name, "precision");
  const DType dt = *parse_precision(a.get("dtype"), "precision", "dtype", false);
  const bool weights = a.has("weights");
  const int64_t batch = a.get_int_in("batch-size", 1, 60000);
  const int64_t index = a.get_int_in("batch-index", 0, 59999);
  const int64_t steps = a.get_int_in("train-steps", 0, 1000000);
  const double loss_scale = a.get_double_in("loss-scale", 0.0, true, 3.4e38, false);
  const auto rows = static_cast<size_t>(a.get_int_in("rows", 0, 1000000));
  const uint64_t seed = a.get_seed("seed");
  const std::string data_dir = a.get_nonempty("data-dir");
  const bool json = a.has("json");
  std::string device_note;
  const Device device = device_option(a, "precision", &device_note);
  set_thread_count(0);

  nn::DatasetPtr train = nn::load_fashion_mnist("train", nn::FashionMnistOptions().data_dir(data_dir));
  nn::DataLoader loader(train, nn::DataLoaderOptions().batch_size(batch));
  GS_CHECK(index < loader.num_batches(), "precision", "--batch-index ", index, " is past the last batch (",
           loader.num_batches() - 1, " at --batch-size ", batch, ")");
  manual_seed(seed);
  model->to(device);
  if (steps > 0) {
    optim::Adam opt(model->parameters(), optim::AdamOptions(1e-3));
    model->train();
    for (int64_t s = 0; s < steps; ++s) {
      const nn::Batch b = loader.batch(0, s % loader.num_batches());
      opt.zero_grad();
      nn::functional::cross_entropy((*model)(b.x.to(device)), b.y.to(device)).backward();
      opt.step();
    }
    for (Tensor& p : model->parameters()) p.set_grad(Tensor());
  }
  model->eval();
  if (weights) model->to(dt);
  const nn::Batch b = loader.batch(0, index);
  const Tensor x = b.x.to(device), y = b.y.to(device);
  debug::LossOf loss = [&y, loss_scale](const Tensor& out) {
    Tensor l = nn::functional::cross_entropy(out, y.to(out.device()));  // compare_precision may run on a copy elsewhere
    return loss_scale == 1.0 ? l : l * loss_scale;
  };
  const debug::PrecisionSetting setting{dt, !weights};
  const debug::PrecisionComparison c = debug::compare_precision(*model, x, loss, setting);
  const std::vector<debug::Finding> findings = debug::precision_findings(c);
  const debug::OpComparison* w = c.worst();

  if (json) {
    std::ostringstream js;
    js << "{\"model\":" << json_str(model_name) << ",\"dtype\":" << json_str(dtype_name(dt))
       << ",\"setting\":" << json_str(weights ? "weights" : "autocast") << ",\"device\":" << json_str(device.str())
       << ",\"batch_size\":" << batch << ",\"batch_index\":" << index << ",\"train_steps\":" << steps
       << ",\"loss_scale\":" << json_num(loss_scale) << ",\"seed\":" << seed
       << ",\"matched\":" << (c.matched ? "true" : "false") << ",\"note\":" << json_str(c.note)
       << ",\"loss_float32\":" << json_num(c.loss_f32) << ",\"loss_low\":" << json_num(c.loss_low)
       << ",\"results\":" << c.ops.size() << ",\"worst\":" << (w ? op_json(*w) : "null") << ",\"ops\":[";
    for (size_t i = 0; i < c.ops.size(); ++i) js << (i ? "," : "") << op_json(c.ops[i]);
    js << "],\"findings\":[";
    for (size_t i = 0; i < findings.size(); ++i) js << (i ? "," : "") << findings[i].json();
    js << "]}";
    std::cout << js.str() << "\n";
    return 0;
  }
  const std::string after = steps ? ", after " + std::to_string(steps) + " float32 steps" : std::string();
  std::printf("precision: %s (%lld parameters) on %s%s, training batch %lld (%lld images)%s: %s %s vs float32\n",
              model_name.c_str(), static_cast<long long>(model->num_parameters()), device.str().c_str(),
              device_note.c_str(), static_cast<long long>(index), static_cast<long long>(batch), after.c_str(),
              weights ? "parameters in" : "autocast", dtype_name(dt));
  std::printf("loss float32 %.6g  loss %s %.6g%s\n", c.loss_f32, dtype_name(dt), c.loss_low,
              loss_scale == 1.0 ? "" : "  (scaled)");
  std::cout << c.str(rows == 0 ? c.ops.size() : rows);
  if (w)
    std::printf("largest error: %s, relative error %s\n", op_label(*w).c_str(), debug::fmt_num(w->rel_error).c_str());
  for (const debug::Finding& f : findings)
    std::printf("[M30 %s] %s\n", f.fires() ? "warning" : "info", f.title.c_str());
  return 0;
}

}  // namespace gradsleuth::cli
