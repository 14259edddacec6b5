// W8 memory report: bytes held by parameters, gradients and the activations the
// autograd graph saves for backward, and the peak during forward + backward.
//
//   debug::MemoryReport m = debug::memory_report(*model, [&] { return loss_fn((*model)(x), y); });
//   std::cout << m.str();
//
// How it measures (one forward and one backward of `forward_loss`):
//   1. zero_grad() the model (gradients from earlier steps are freed, as a
//      training step would), read the storage counters (core/storage.h) and
//      reset the peak;
//   2. run forward_loss() with an op observer that keeps a weak reference to
//      the storage of every tensor an op reads or writes, and module hooks that
//      say which module each op ran in;
//   3. when forward_loss returns, a storage still alive that was allocated
//      during the forward is held by the autograd graph (saved for backward):
//      a "saved activation" — unless it is a parameter, a buffer, or the
//      returned loss itself. Alive storages allocated before the forward that
//      ops read (the batch) are listed as inputs;
//   4. the live-bytes counter gives the same total independently: bytes
//      allocated during the forward and still alive = activations + loss +
//      "unseen" (tensors no op reported: made by a factory and kept by the
//      closure, or kept inside an op's backward without passing through an op);
//   5. run backward(), read the peak and list the gradients.
// Bytes are storage bytes: views share their storage and are counted once; a
// row's shape is that of the first tensor seen on the storage.
// The counters are process-wide: run it while no other thread computes.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "debug/evidence/finding.h"
#include "nn/module.h"

namespace gradsleuth::debug {

struct MemoryRow {
  std::string name;    // parameter/buffer path ("0.weight"); for activations the op that made it ("relu")
  std::string module;  // where an activation was made: "0 (Linear)", "(outside modules)"; "" otherwise
  std::string shape;   // "[4, 8]"
  std::string dtype;   // "float32"
  int64_t bytes = 0;
};

struct MemoryReport {
  std::string device;                  // the device type measured: the parameters' ("cpu")
  std::vector<MemoryRow> parameters;   // in named_parameters() order
  std::vector<MemoryRow> buffers;      // running statistics and other buffers
  std::vector<MemoryRow> gradients;    // after the backward, parameters with a gradient
  std::vector<MemoryRow> activations;  // saved for backward, largest first
  std::vector<MemoryRow> inputs;       // tensors from before the forward that it read and that are still alive
  int64_t parameter_bytes = 0;         // unique storages (a shared weight counts once)
  int64_t buffer_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t activation_bytes = 0;
  int64_t input_bytes = 0;
  int64_t loss_bytes = 0;  // the returned loss tensor's storage
  // From the live-bytes counter: bytes allocated by the forward and still held
  // when it returned (= activation_bytes + loss_bytes + unseen_bytes).
  int64_t held_after_forward = 0;
  int64_t unseen_bytes = 0;    // held_after_forward - activation_bytes - loss_bytes
  int64_t baseline_bytes = 0;  // live bytes before the forward (parameters, inputs, everything else alive)
  int64_t peak_bytes = 0;      // highest live bytes during forward + backward
  std::string allocator;       // the device allocator's own line (cuda: cached bytes, cudaMalloc calls), or ""
  int64_t peak_above_baseline() const { return peak_bytes - baseline_bytes; }

  std::string str() const;
  std::string json() const;
};

// Runs forward_loss() and backward once (see above). forward_loss must return a
// one-element loss that requires grad. Afterwards the model's gradients are
// those of this backward.
MemoryReport memory_report(nn::Module& model, const std::function<Tensor()>& forward_loss);

// 1536 -> "1.5 KiB"; below 1 KiB, "123 B".
std::string format_bytes(int64_t bytes);

// W8 over a run: (step, autograd nodes alive right after that optimizer step) for consecutive steps
// (Node::live(); the monitor records it at every step). A healthy loop holds the same graph after
// each step; a count that rose at each of min_steps steps in a row, to min_growth x where it started,
// is a loop that keeps each step's graph (a loss stored without .item(), a hidden state carried over
// without detach()): one warning.
std::vector<Finding> check_graph_retention(const std::vector<std::pair<int64_t, int64_t>>& live, int64_t min_steps = 8,
                                           double min_growth = 2.0);

}  // namespace gradsleuth::debug
