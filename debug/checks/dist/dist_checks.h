// The data-parallel checks D11, L8, M21, M22, O7 and W9 (docs/checks.md): the
// silent bugs of training one model on N processes ("ranks") that each read a
// shard of the data and average their gradients (docs/distributed.md).
//
// Each check judges numbers gathered from every rank; it does not talk to MPI
// itself, so this file (and gradsleuth_debug) needs no MPI. The gathering —
// one all_gather of a few doubles per rank — is the caller's: the distributed
// zoo (debug/zoo/dist_zoo.h) does it with dist::ProcessGroup, and a test can hand
// in the values of simulated ranks.
//
//   // every rank, after backward and the all-reduce of a checked step:
//   std::vector<double> mine = debug::fingerprint_grads(model);        // 2 doubles per parameter
//   auto all = pg.all_gather(...);                                     // [rank][...]
//   report.add(debug::check_gradient_reduction(in));                   // O7
//   // after the optimizer step:
//   report.add(debug::check_params_in_sync(names, gathered, step));    // M21
//
// A fingerprint of a tensor is its sum and its sum of squares accumulated in
// float64: two ranks whose tensors are bitwise equal give bitwise equal
// fingerprints, and DDP keeps the replicas bitwise equal (every rank applies
// the same averaged gradient to the same weights in the same order), so the
// tolerance of M21 and O7 is exactly 0 by default.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "debug/evidence/finding.h"
#include "nn/module.h"

namespace gradsleuth::debug {

// Values gathered from every rank: per_rank[r] is rank r's vector (all the same length).
using PerRank = std::vector<std::vector<double>>;

struct DistCheckOptions {
  // ---- D11 shards ----
  // A DistributedSampler pads its epoch to a multiple of the world size by repeating up to
  // world_size - 1 indices (drop_last off), or drops up to world_size - 1 (drop_last on): that many
  // indices read twice or never are expected; more warn.
  // ---- L8 logged loss ----
  // |logged - global| / max(|global|, 1e-12) above this at a compared step is a mismatch. The
  // global loss is the batch-size-weighted mean of the ranks' losses, computed in float64; a logger
  // that all-reduces the float32 loss and divides differs from it by float32 rounding (~1e-7).
  double loss_tolerance = 1e-4;
  // ---- M21 parameters in sync, O7 gradients reduced ----
  // A parameter (or reduced gradient) differs across ranks when a fingerprint value differs from
  // rank 0's by more than sync_tolerance x max(|rank 0's value|, 1). DDP is bitwise: 0.
  double sync_tolerance = 0.0;
  // ---- O7 averaged, not summed ----
  // The reduced gradient over the average of the ranks' local gradients (the scale s, per
  // parameter, from the projection <g_reduced, g_avg> / <g_avg, g_avg>): |s - 1| above this warns;
  // |s - N| below scale_tolerance x N names it summed. Averaged: s = 1 up to float32 rounding.
  double scale_tolerance = 0.05;
  // ---- M22 randomness ----
  // Nothing to set: two ranks whose generators would draw the same next words draw the same
  // dropout masks.
};

// ---- fingerprints (each rank computes its own, then the caller gathers them) ---------

// Sum and sum of squares in float64 of each tensor, in order: 2 values per tensor. An undefined
// tensor (a parameter without a gradient) gives (0, -1), which no real tensor gives.
std::vector<double> fingerprint(const std::vector<Tensor>& tensors);
// The fingerprints of the model's trainable parameters (or their gradients), in registration order,
// and their names in the same order.
std::vector<double> fingerprint_params(const nn::Module& model);
std::vector<double> fingerprint_grads(const nn::Module& model);
std::vector<std::string> trainable_names(const nn::Module& model);
// Per tensor pair: <reduced, averaged> / <averaged, averaged> in float64 (the factor the applied
// gradient carries against the average of the ranks' local gradients; NaN when a tensor is undefined
// or the average is all zeros). O7's GradReduction::scale.
std::vector<double> reduction_scales(const std::vector<Tensor>& reduced, const std::vector<Tensor>& averaged);
// The next four 32-bit words the calling thread's default generator (the one nn::Dropout and the
// random ops draw from) would produce, read from a copy: the generator is not advanced.
std::vector<double> randomness_fingerprint();

// ---- D11 data shards disjoint and complete ------------------------------------------

// indices[r]: the dataset indices rank r reads in one epoch. Warns when more indices than the
// sampler's padding (world_size - 1) are read by two ranks, or by none; an info finding with the
// per-rank counts otherwise.
std::vector<Finding> check_shards(const std::vector<std::vector<int64_t>>& indices, int64_t dataset_size,
                                  int64_t epoch = -1, const DistCheckOptions& opts = {});

// ---- L8 the logged loss is the global one -------------------------------------------

// record() once per compared step, on the rank that logs, with every rank's local loss and batch
// size (gathered) and the value the training loop logged as the loss of the step.
class LoggedLossCheck {
 public:
  explicit LoggedLossCheck(DistCheckOptions opts = {}) : o_(opts) {}
  void record(int64_t step, const std::vector<double>& rank_losses, const std::vector<double>& rank_batch_sizes,
              double logged);
  // A warning when the logged loss is not the global mean at some compared step (naming it one
  // rank's loss, or the mean divided by the world size, when it is); an info finding with the
  // ranks' loss spread otherwise.
  std::vector<Finding> findings() const;
  int64_t steps() const { return static_cast<int64_t>(rows_.size()); }

 private:
  struct Row {
    int64_t step;
    std::vector<double> losses;
    double global, logged;
  };
  DistCheckOptions o_;
  std::vector<Row> rows_;
};

// ---- M21 parameters identical across ranks -------------------------------------------

// names[p]: the trainable parameters; per_rank[r]: rank r's fingerprint_params (2 per parameter).
// An error naming the parameters whose fingerprints differ across ranks; nothing when all agree.
// step 0 means before the first optimizer step (right after the wrapper was built): then only the
// start can be to blame; later, most parameters apart points at the start, a few at the reduction.
std::vector<Finding> check_params_in_sync(const std::vector<std::string>& names, const PerRank& per_rank,
                                          int64_t step = -1, const DistCheckOptions& opts = {});

// ---- M22 per-rank randomness ---------------------------------------------------------

// per_rank[r]: rank r's randomness_fingerprint at the same point of the step. A warning naming the
// ranks that would draw identical random numbers when the model has random layers (dropout in
// training mode: `random_layers`), an info finding when it has none (nothing to draw).
std::vector<Finding> check_rank_randomness(const PerRank& per_rank, bool random_layers, int64_t step = -1,
                                           const DistCheckOptions& opts = {});

// ---- O7 every gradient reduced and averaged ------------------------------------------

struct GradReduction {
  std::vector<std::string> names;  // trainable parameters, registration order
  PerRank reduced;                 // [rank]: fingerprint_grads after the all-reduce (2 per parameter)
  // Per parameter, on this rank: <g_reduced, g_avg> / <g_avg, g_avg>, where g_avg is the average over
  // the ranks of the local gradients of the same step (NaN when it was not measured).
  std::vector<double> scale;
  std::vector<std::string> reduced_names;  // what DDP says it reduced (empty: not known)
  bool reduced_names_known = false;
  int world_size = 1;
  int64_t step = -1;
};
// An error naming the gradients that differ across ranks after the reduction (never reduced), a
// warning when the reduced gradients are N x the average (summed) or another multiple of it, and
// a warning naming trainable parameters DDP did not register for the reduction. Nothing when
// every gradient is identical across ranks and equal to the average.
std::vector<Finding> check_gradient_reduction(const GradReduction& in, const DistCheckOptions& opts = {});
// The median of in.scale over the parameters that were reduced (identical across ranks): the measured
// factor between the applied gradient and the averaged one, for W9. NaN when none was measured.
double reduction_scale(const GradReduction& in, const DistCheckOptions& opts = {});

// ---- W9 effective batch size and learning rate ---------------------------------------

// An info finding: the effective batch world_size x per_rank_batch and the learning rate; a
// warning when the measured reduction scale (O7's, NaN when not measured) is ~world_size > 1:
// the gradient is summed, so the effective learning rate is lr x world_size.
std::vector<Finding> report_effective_batch(int world_size, int64_t per_rank_batch, double lr, double reduction_scale,
                                            const DistCheckOptions& opts = {});

}  // namespace gradsleuth::debug
