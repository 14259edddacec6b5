// Fashion-MNIST (Xiao et al., 2017): 70,000 28x28 greyscale images of clothes
// in 10 classes, read from the IDX files of Debian's dataset-fashion-mnist.
//
//   auto train = nn::load_fashion_mnist("train");  // x (1, 28, 28) float32 in [0, 1], y int64 in 0..9
//   auto test  = nn::load_fashion_mnist("test");
//
// The IDX format (http://yann.lecun.com/exdb/mnist/): a big-endian header
//   bytes 0-1: 0, 0   byte 2: element type (0x08 = unsigned byte)   byte 3: number of dims
//   then one uint32 per dim, then the elements in row-major order.
// Images are "idx3" (N, 28, 28); labels "idx1" (N). Files may be gzipped.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/data.h"

namespace gradsleuth::nn {

// Where Debian's package puts the files.
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

// The ten class names, by label.
const std::vector<std::string>& fashion_mnist_classes();

struct FashionMnistOptions {
  std::string data_dir_ = kFashionMnistDefaultDir;
  bool raw_ = false;  // keep pixel values 0..255 (still float32) instead of scaling to [0, 1]
  FashionMnistOptions data_dir(std::string d) const {
    auto o = *this;
    o.data_dir_ = std::move(d);
    return o;
  }
  FashionMnistOptions raw(bool r) const {
    auto o = *this;
    o.raw_ = r;
    return o;
  }
};

// A split of Fashion-MNIST: x (N, 1, 28, 28) float32, y (N) int64.
class FashionMnist : public TensorDataset {
 public:
  FashionMnist(Tensor images, Tensor labels, std::string split)
      : TensorDataset(std::move(images), std::move(labels), "fashion-mnist/" + split), split_(std::move(split)) {}
  const std::string& split() const { return split_; }
  const std::vector<std::string>& classes() const { return fashion_mnist_classes(); }

 private:
  std::string split_;
};

// Loads "train" (60,000) or "test" (10,000). Reads <dir>/train-images-idx3-ubyte
// (.gz or not) and its labels; a missing file raises an error saying how to
// install the dataset, a malformed one an error naming the file and the fault.
// Decoded files are cached for the life of the process: a second load is free.
std::shared_ptr<FashionMnist> load_fashion_mnist(const std::string& split, const FashionMnistOptions& opts = {});

// ---- the IDX reader, exposed for tests and other IDX datasets ----------------
struct IdxArray {
  std::vector<int64_t> dims;  // e.g. {N, 28, 28}
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};
// Reads an unsigned-byte IDX file, gzipped or raw, and checks it: the magic
// number, `expected_dims` dims (0 = any), and that the file holds every element.
// Limits (a header beyond them is corrupted): the first dim (the example count)
// <= kIdxMaxCount, every other dim <= kIdxMaxSize, the body <= kIdxMaxBytes. The
// body is read with a bound (the declared size, then EOF), so an endless file
// (/dev/zero, a pipe) is rejected instead of read until memory runs out.
inline constexpr int64_t kIdxMaxCount = int64_t{1} << 31;  // examples
inline constexpr int64_t kIdxMaxSize = int64_t{1} << 16;   // rows, cols, ...
inline constexpr int64_t kIdxMaxBytes = int64_t{1} << 40;  // 1 TiB
IdxArray read_idx(const std::string& path, int expected_dims = 0);

// Images (N, rows, cols) + labels (N) from two IDX files, checked to agree
// (the headers are compared before either body is read).
// Returns x (N, 1, rows, cols) float32 (scaled to [0, 1] unless raw) and y (N) int64.
std::pair<Tensor, Tensor> read_idx_images_labels(const std::string& images_path, const std::string& labels_path,
                                                 bool raw = false, int64_t num_classes = 10);

}  // namespace gradsleuth::nn
