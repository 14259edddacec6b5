// The words O1 and O2 share about vanishing and exploding gradients (debug/checks/optim/optim_checks.cpp
// and norm_history.cpp).
#pragma once

namespace gradsleuth::debug::optim_detail {

inline constexpr const char* kCauseVanishing =
    "likely causes of vanishing gradients: sigmoid/tanh saturation; too many layers "
    "without skip connections; poor weight initialisation; very small learning rate";
inline constexpr const char* kFixVanishing =
    "use ReLU/GELU activations, skip connections, He/Xavier initialisation, batch/layer "
    "normalisation, or fewer layers";
inline constexpr const char* kCauseExploding =
    "likely causes of exploding gradients: learning rate too high; poor initialisation "
    "(weights too large); deep nets without normalisation or clipping; numerical "
    "instability in the loss";
inline constexpr const char* kFixExploding =
    "clip gradients (clip_grad_norm 1.0), lower the learning rate, use a proper "
    "initialisation (M9) and normalisation layers";

}  // namespace gradsleuth::debug::optim_detail
