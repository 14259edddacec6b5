// Dropout: in training mode zeroes each element with probability p and scales
// the survivors by 1/(1-p), so the expected output equals the input; in eval
// mode it is the identity. Forgetting model.eval() keeps the noise on (bug B05).
#pragma once
#include <string>

#include "nn/module.h"

namespace gradsleuth::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;  // x (...) -> (...)
  std::string extra_repr() const override;   // "p=0.5"
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace gradsleuth::nn
