// Checkpoints: a module's parameters and buffers (or an optimizer's state) in one
// binary file, written atomically and verified by a checksum when read back.
//
//   nn::save(*model, "run/model.ckpt");                 // every parameter and buffer, by dotted name
//   nn::load(*model, "run/model.ckpt");                 // same names, shapes and dtypes, or a gs::Error
//   nn::save_state(opt.state_dict(), "run/optim.ckpt"); // optim::Optimizer's map API
//   opt.load_state_dict(nn::load_state("run/optim.ckpt"));
//
// The file format ("GSCKPT01", little-endian, FNV-1a 64 checksum) is in
// docs/checkpoint-format.md. A save writes `path.tmp.<pid>`, flushes it to disk
// and renames it over `path`: a crash or error mid-save leaves the old file intact
// (temp files left by killed saves are removed first: core/io.h).
// Reading is bounded (the header's size, then EOF) and every entry is validated
// (unique non-empty names, checked sizes, bools 0/1) before anything is allocated.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace gradsleuth::nn {

// Named tensors in file order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Saves module.named_parameters() then module.named_buffers() (a shared parameter once,
// under its first path).
void save(const Module& module, const std::string& path);

// Loads into `module` through Module::set_tensor (every handle to a parameter sees the
// new value; gradients are cleared). Everything is checked before anything is written,
// so a failed load leaves the module unchanged. Errors name the file and what differs:
// missing or unexpected names (strict only), shape or dtype mismatches, e.g.
//   "fc1.weight: checkpoint has shape [256, 784], model expects [128, 784]".
//
// strict=false skips names the model or the file lacks, and says so: the returned
// report lists what was loaded and skipped, a warning (gs::warn) names the skipped
// entries, and a file with no name in common with the model is an error (loading
// nothing silently is never what was meant).
struct LoadReport {
  std::vector<std::string> loaded;      // set from the file
  std::vector<std::string> missing;     // in the model, not in the file (kept as they were)
  std::vector<std::string> unexpected;  // in the file, not in the model (ignored)
};
LoadReport load(Module& module, const std::string& path, bool strict = true);

// An optimizer's state_dict (or any name -> tensor map).
void save_state(const std::map<std::string, Tensor>& state, const std::string& path);
std::map<std::string, Tensor> load_state(const std::string& path);

// The lower level: write/read any list of uniquely named, defined tensors (CPU copies
// are written; read tensors are contiguous CPU tensors without requires_grad).
void write_checkpoint(const std::string& path, const NamedTensors& entries);
NamedTensors read_checkpoint(const std::string& path);

// What nn::load wrote, for the debug module (M9 tells weights loaded and then re-initialised before
// training): per load, the file and, for each tensor written, its name, the module tensor it went into
// (its TensorImpl, which set_tensor keeps; expired once the model is gone) and up to 256 of the values
// loaded, at the positions load_sample reads; a strict=false load's skipped names and shapes too. The
// last 8 loads are kept, oldest first.
struct LoadedTensor {
  std::string name;
  std::weak_ptr<TensorImpl> into;
  std::vector<double> sample;
};
// A tensor a strict=false load skipped: the model's (`into`: the tensor left as it was) or the file's.
struct SkippedTensor {
  std::string name;
  Shape shape;
  std::weak_ptr<TensorImpl> into;
};
struct LoadRecord {
  std::string path;
  std::vector<LoadedTensor> tensors;
  std::vector<SkippedTensor> missing;     // in the model, not in the file (kept as they were)
  std::vector<SkippedTensor> unexpected;  // in the file, not in the model (ignored)
};
std::vector<LoadRecord> load_records();
// Up to 256 values of `t` spread evenly over it (as float64), at the same positions for the same shape.
std::vector<double> load_sample(const Tensor& t);

namespace testing {
// Test hook: when set, the next saves fail with a gs::Error after writing this many
// bytes of the temporary file (simulating a full disk or a crash mid-save).
void set_checkpoint_write_failure(std::optional<uint64_t> after_bytes);
// Test hook: the process SIGKILLs itself after writing this many bytes of the temp
// file (a real kill -9 mid-save; used from a forked child).
void set_checkpoint_kill_after(std::optional<uint64_t> after_bytes);
}  // namespace testing

}  // namespace gradsleuth::nn
