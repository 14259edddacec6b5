// The networks of `gradsleuth train` and `gradsleuth precision` (cli/train_models.h).
#include "cli/train_models.h"

namespace gradsleuth::cli {

std::shared_ptr<nn::Sequential> make_train_mlp() {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 128),
                                          std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10));
}

std::shared_ptr<nn::Sequential> make_train_cnn() {
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 32, 3).padding(1)), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(nn::Conv2dOptions(32, 64, 3).padding(1)),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(64 * 7 * 7, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.25),
      std::make_shared<nn::Linear>(128, 10));
}

std::shared_ptr<nn::Sequential> make_train_model(const std::string& name, const std::string& command) {
  GS_CHECK(name == "mlp" || name == "cnn", command, "unknown --model '", name, "': use mlp or cnn");
  return name == "cnn" ? make_train_cnn() : make_train_mlp();
}

std::optional<DType> parse_precision(const std::string& v, const std::string& command, const std::string& option,
                                     bool allow_float32) {
  if (v == "bf16" || v == "bfloat16") return kBFloat16;
  if (v == "fp16" || v == "float16" || v == "half") return kFloat16;
  GS_CHECK(allow_float32 && (v == "float32" || v == "fp32"), command, "unknown --", option, " '", v, "': use ",
           allow_float32 ? "float32, " : "", "bf16 or fp16");
  return std::nullopt;
}

std::string precision_name(std::optional<DType> dt) {
  if (!dt) return "float32";
  return *dt == kBFloat16 ? "bf16" : "fp16";
}

}  // namespace gradsleuth::cli
