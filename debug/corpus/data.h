// The data of a corpus program: fixed synthetic tasks (blobs, spirals, 12x12 images, random
// projections) drawn from the program's data seed, split into train, validation and a held-out test
// split, with the data faults of DataSpec applied to the training split as loaded.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "debug/corpus/program.h"

namespace gradsleuth::debug::corpus {

// The splits as loaded, before the program's own pipeline (standardisation, augmentation).
struct LoadedData {
  Tensor x_train, y_train, x_val, y_val, x_test, y_test;  // images: (N, 1, 12, 12); else (N, D)
  std::vector<int64_t> class_counts;                      // multiclass: training examples per class
  double positives = 0.0;                                 // binary: positive training examples
};

LoadedData load_data(const DataSpec& d);

// The task's inputs are images (1 x 12 x 12).
bool is_image(const DataSpec& d);

}  // namespace gradsleuth::debug::corpus
