// Fashion-MNIST and the IDX file reader (see fashion_mnist.h).
#include "nn/fashion_mnist.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>

#if GS_HAVE_ZLIB
#include <zlib.h>
#endif

namespace gradsleuth::nn {

namespace fs = std::filesystem;

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

namespace {

// The whole file, decompressed when it is gzipped (zlib's gzread passes raw
// files through unchanged, so one path serves both).
std::vector<uint8_t> read_bytes(const std::string& path) {
  std::vector<uint8_t> out;
#if GS_HAVE_ZLIB
  gzFile f = gzopen(path.c_str(), "rb");
  GS_CHECK(f != nullptr, "read_idx", "cannot open ", path);
  uint8_t buf[1 << 16];
  for (;;) {
    int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      std::string msg = gzerror(f, &code);
      gzclose(f);
      GS_FAIL("read_idx", path, ": cannot decompress: ", msg, " (is the .gz file damaged or truncated?)");
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  int code = 0;
  const char* msg = gzerror(f, &code);
  std::string err = code != Z_OK ? std::string(msg) : "";
  gzclose(f);
  GS_CHECK(err.empty(), "read_idx", path, ": cannot decompress: ", err,
           " (is the .gz file damaged or truncated?)");
#else
  std::FILE* f = std::fopen(path.c_str(), "rb");
  GS_CHECK(f != nullptr, "read_idx", "cannot open ", path);
  uint8_t buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  GS_CHECK(!(out.size() >= 2 && out[0] == 0x1f && out[1] == 0x8b), "read_idx", path,
           " is gzipped but gradsleuth was built without zlib: gunzip it, or install zlib1g-dev and rebuild");
#endif
  return out;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// <dir>/<base> or <dir>/<base>.gz, whichever exists ("" if neither).
std::string find_file(const std::string& dir, const std::string& base) {
  for (const char* ext : {"", ".gz"}) {
    fs::path p = fs::path(dir) / (base + ext);
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_dims) {
  std::vector<uint8_t> bytes = read_bytes(path);
  GS_CHECK(bytes.size() >= 4, "read_idx", path, " is not an IDX file: it holds only ", bytes.size(),
           " bytes, fewer than the 4-byte magic number");
  // Magic: 0, 0, type, ndims. We read only unsigned bytes (type 0x08).
  const uint32_t magic = big_endian_u32(bytes.data());
  const int ndims = bytes[3];
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08X", magic);
  GS_CHECK(bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08 && ndims >= 1, "read_idx", path,
           " has a bad magic number ", hex, ": an unsigned-byte IDX file starts with 0x0000080N (N = number of dims)",
           (bytes[0] == 0x1f && bytes[1] == 0x8b ? "; this looks like a gzip file that was not decompressed" : ""));
  if (expected_dims > 0)
    GS_CHECK(ndims == expected_dims, "read_idx", path, " has ", ndims, " dims (magic ", hex, ") but ",
             expected_dims, " were expected (images are idx3, labels idx1)");
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  GS_CHECK(bytes.size() >= header, "read_idx", path, " is truncated: its header needs ", header,
           " bytes but the file holds ", bytes.size());
  IdxArray a;
  size_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    a.dims.push_back(big_endian_u32(bytes.data() + 4 + 4 * d));
    count *= static_cast<size_t>(a.dims.back());
  }
  std::string dims_str;
  for (size_t d = 0; d < a.dims.size(); ++d) dims_str += (d ? "x" : "") + std::to_string(a.dims[d]);
  GS_CHECK(bytes.size() - header >= count, "read_idx", path, " is truncated: its header promises ", dims_str,
           " = ", count, " bytes of data but only ", bytes.size() - header, " follow");
  GS_CHECK(bytes.size() - header == count, "read_idx", path, " has ", bytes.size() - header - count,
           " unexpected bytes after the ", dims_str, " data its header describes");
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

std::pair<Tensor, Tensor> read_idx_images_labels(const std::string& images_path, const std::string& labels_path,
                                                 bool raw, int64_t num_classes) {
  IdxArray im = read_idx(images_path, 3);
  IdxArray lb = read_idx(labels_path, 1);
  const int64_t n = im.dims[0], rows = im.dims[1], cols = im.dims[2];
  GS_CHECK(n == lb.dims[0], "fashion_mnist", "the images and labels disagree on the number of examples: ",
           images_path, " holds ", n, " images but ", labels_path, " holds ", lb.dims[0], " labels");
  Tensor x = empty({n, 1, rows, cols}, kFloat32);
  float* px = x.data_ptr<float>();
  const float scale = raw ? 1.0f : 1.0f / 255.0f;
  for (size_t i = 0; i < im.data.size(); ++i) px[i] = static_cast<float>(im.data[i]) * scale;
  Tensor y = empty({n}, kInt64);
  int64_t* py = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    py[i] = lb.data[static_cast<size_t>(i)];
    GS_CHECK(py[i] < num_classes, "fashion_mnist", labels_path, ": label ", py[i], " of example ", i,
             " is outside 0..", num_classes - 1);
  }
  return {x, y};
}

std::shared_ptr<FashionMnist> load_fashion_mnist(const std::string& split, const FashionMnistOptions& opts) {
  GS_CHECK(split == "train" || split == "test", "fashion_mnist", "unknown split '", split,
           "': use \"train\" (60,000 images) or \"test\" (10,000)");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string dir = opts.data_dir_.empty() ? kFashionMnistDefaultDir : opts.data_dir_;
  const std::string images = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels = find_file(dir, prefix + "-labels-idx1-ubyte");
  for (const auto& [path, base] : {std::pair{images, prefix + "-images-idx3-ubyte"},
                                   std::pair{labels, prefix + "-labels-idx1-ubyte"}}) {
    GS_CHECK(!path.empty(), "fashion_mnist", "cannot find ", base, " (or ", base, ".gz) in ", dir,
             ". Install the dataset with `apt-get install dataset-fashion-mnist` (it goes to ",
             kFashionMnistDefaultDir, "), or pass --data-dir DIR pointing at a folder that holds the IDX files.");
  }

  // The cache: decoding 60,000 gzipped images takes a moment, so each file pair
  // is decoded once per process (keyed by path, size and modification time).
  // Never destroyed: its tensors must not outlive the CPU backend's static at exit.
  static std::mutex mu;
  static auto* cache = new std::map<std::string, std::pair<Tensor, Tensor>>();
  auto stamp = [](const std::string& p) {
    std::error_code ec;
    auto t = fs::last_write_time(p, ec).time_since_epoch().count();
    return p + ":" + std::to_string(fs::file_size(p, ec)) + ":" + std::to_string(t);
  };
  const std::string key = stamp(images) + "|" + stamp(labels) + (opts.raw_ ? "|raw" : "|scaled");
  std::pair<Tensor, Tensor> xy;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it == cache->end()) it = cache->emplace(key, read_idx_images_labels(images, labels, opts.raw_)).first;
    xy = it->second;
  }
  return std::make_shared<FashionMnist>(xy.first, xy.second, split);
}

}  // namespace gradsleuth::nn
