// The networks `gradsleuth train` and `gradsleuth precision` build, and the --precision names they share.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "nn/nn.h"

namespace gradsleuth::cli {

// x (B, 1, 28, 28) -> flatten (B, 784) -> 256 -> 128 -> 10 logits.
std::shared_ptr<nn::Sequential> make_train_mlp();
// x (B, 1, 28, 28) -> conv 32 3x3 pad 1 + ReLU -> pool 2 -> conv 64 3x3 pad 1 + ReLU -> pool 2
//                  -> flatten (B, 3136) -> fc 128 + ReLU + dropout 0.25 -> 10 logits.
std::shared_ptr<nn::Sequential> make_train_cnn();
// "mlp" or "cnn" (anything else: an error naming `command` and the two names).
std::shared_ptr<nn::Sequential> make_train_model(const std::string& name, const std::string& command);

// --precision / --dtype: "float32" (nullopt: no 16 bits), "bf16" (kBFloat16) or "fp16" (kFloat16); the
// long names bfloat16/float16 are accepted too. Anything else: an error naming `command` and `option`.
std::optional<DType> parse_precision(const std::string& value, const std::string& command, const std::string& option,
                                     bool allow_float32 = true);
// "bf16" / "fp16" / "float32": the name the JSON summaries report.
std::string precision_name(std::optional<DType> dt);

}  // namespace gradsleuth::cli
