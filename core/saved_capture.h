// Recording what each op saved for its backward, for pictures of the graph
// (debug::to_dot). Saved tensors live inside each node's backward closure, where
// nothing can list them; while a SavedCapture is active on a thread, every
// SavedTensor made there is described (op, shape, dtype, version) and the
// description is attached to the node recorded next. Off (the default), the cost
// is one thread-local pointer test per saved tensor and per recorded node.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

namespace gradsleuth {

class Node;
class Tensor;

struct SavedInfo {
  std::string saved_by;  // the op that saved it ("mul", "relu")
  Shape shape;
  DType dtype = DType::Float32;
  uint64_t version = 0;    // the storage's version when it was saved
  bool is_output = false;  // the op saved its own result
};

class SavedCapture {
 public:
  SavedCapture();   // active on this thread from here
  ~SavedCapture();  // inactive (the table stays readable until destruction)
  SavedCapture(const SavedCapture&) = delete;
  SavedCapture& operator=(const SavedCapture&) = delete;
  void stop();  // stops recording; what was recorded stays

  // What node `n` saved, or nullptr when it was not recorded under this capture.
  const std::vector<SavedInfo>* saved(const Node* n) const;

  // Called by the autograd (core/autograd.cpp).
  static void on_saved(const Tensor& t, const char* saved_by, bool is_output);
  static void on_node(const std::shared_ptr<Node>& node);

 private:
  std::unordered_map<const Node*, std::pair<std::weak_ptr<Node>, std::vector<SavedInfo>>> table_;
  std::vector<SavedInfo> pending_;
  SavedCapture* prev_ = nullptr;
  bool active_ = false;
};

}  // namespace gradsleuth
