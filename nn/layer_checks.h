// Input checks shared by the layers (internal to nn/): each failure names the
// layer, what it expected, what it got, and a likely fix.
#pragma once
#include <string>

#include "core/tensor.h"

namespace gradsleuth::nn::detail {

using gradsleuth::detail::str_cat;

// `who` is the layer as it prints, e.g. "Linear(in_features=784, out_features=256, bias=true)".
inline void check_input(const Tensor& x, const std::string& who, bool floating = true) {
  GS_CHECK(x.defined(), who, "the input tensor is undefined (default-constructed); pass a real tensor");
  if (floating)
    GS_CHECK(x.is_floating_point(), who, "expects a floating-point input, got ", x.str(),
             ". Convert it with x.to(gs::kFloat32) (and scale raw 0..255 pixels to [0, 1]).");
}

// The module's repr header: "Type(extra)".
inline std::string layer_name(const std::string& type, const std::string& extra) { return type + "(" + extra + ")"; }

}  // namespace gradsleuth::nn::detail
