// Fashion-MNIST and the IDX file reader (see fashion_mnist.h).
#include "nn/fashion_mnist.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>

#if GS_HAVE_ZLIB
#include <zlib.h>
#endif

#include "core/format.h"

namespace gradsleuth::nn {

namespace fs = std::filesystem;

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

namespace {

// A file read in bounded chunks, decompressed when it is gzipped (zlib's gzread
// passes raw files through unchanged, so one path serves both). Nothing is read
// past what the caller asks for, so /dev/zero or an endless stream cannot exhaust memory.
class ByteSource {
 public:
  explicit ByteSource(const std::string& path) : path_(path) {
    std::error_code ec;
    GS_CHECK(!fs::is_directory(path, ec), "read_idx", path, " is a directory, not an IDX file");
#if GS_HAVE_ZLIB
    f_ = gzopen(path.c_str(), "rb");
#else
    f_ = std::fopen(path.c_str(), "rb");
#endif
    GS_CHECK(f_ != nullptr, "read_idx", "cannot open ", path);
  }
  ~ByteSource() {
#if GS_HAVE_ZLIB
    gzclose(f_);
#else
    std::fclose(f_);
#endif
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Appends up to n bytes to out (fewer only at the end of the file).
  void read(std::vector<uint8_t>& out, uint64_t n) {
    constexpr uint64_t kChunk = 1 << 16;
    while (n > 0) {
      const size_t want = static_cast<size_t>(std::min(n, kChunk));
      const size_t old = out.size();
      out.resize(old + want);
      const size_t got = read_some(out.data() + old, want);
      out.resize(old + got);
      if (got == 0) return;
      n -= got;
    }
  }
  bool at_end() {
    uint8_t b;
    return read_some(&b, 1) == 0;
  }

 private:
  size_t read_some(uint8_t* dst, size_t n) {
#if GS_HAVE_ZLIB
    const int got = gzread(f_, dst, static_cast<unsigned>(n));
    int code = 0;
    const char* msg = gzerror(f_, &code);
    if (got < 0 || (code != Z_OK && code != Z_BUF_ERROR) || (got == 0 && code == Z_BUF_ERROR))
      GS_FAIL("read_idx", path_, ": cannot decompress: ", msg, " (is the .gz file damaged or truncated?)");
    return static_cast<size_t>(got);
#else
    const size_t got = std::fread(dst, 1, n, f_);
    GS_CHECK(got == n || !std::ferror(f_), "read_idx", "reading ", path_, " failed");
    if (first_ && got >= 2 && dst[0] == 0x1f && dst[1] == 0x8b)
      GS_FAIL("read_idx", path_,
              " is gzipped but gradsleuth was built without zlib: gunzip it, or install "
              "zlib1g-dev and rebuild");
    first_ = false;
    return got;
#endif
  }

  std::string path_;
#if GS_HAVE_ZLIB
  gzFile f_ = nullptr;
#else
  std::FILE* f_ = nullptr;
  bool first_ = true;
#endif
};

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

namespace {

// The header of an IDX file: magic, dims (each bounded), and the checked body size.
struct IdxHeader {
  std::vector<int64_t> dims;
  uint64_t count = 0;  // body bytes
  std::string dims_str;
};

IdxHeader read_idx_header(ByteSource& src, const std::string& path, int expected_dims) {
  std::vector<uint8_t> bytes;
  src.read(bytes, 4);
  GS_CHECK(bytes.size() >= 4, "read_idx", path, " is not an IDX file: it holds only ", bytes.size(),
           " bytes, fewer than the 4-byte magic number");
  // Magic: 0, 0, type, ndims. We read only unsigned bytes (type 0x08).
  const uint32_t magic = big_endian_u32(bytes.data());
  const int ndims = bytes[3];
  const std::string hex = str_printf("0x%08X", magic);
  GS_CHECK(bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08 && ndims >= 1, "read_idx", path,
           " has a bad magic number ", hex, ": an unsigned-byte IDX file starts with 0x0000080N (N = number of dims)",
           (bytes[0] == 0x1f && bytes[1] == 0x8b ? "; this looks like a gzip file that was not decompressed" : ""));
  if (expected_dims > 0)
    GS_CHECK(ndims == expected_dims, "read_idx", path, " has ", ndims, " dims (magic ", hex, ") but ", expected_dims,
             " were expected (images are idx3, labels idx1)");
  GS_CHECK(ndims <= kMaxDims - 1, "read_idx", path, " has ", ndims, " dims (magic ", hex, "); at most ", kMaxDims - 1,
           " are supported");
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  src.read(bytes, header - 4);
  GS_CHECK(bytes.size() >= header, "read_idx", path, " is truncated: its header needs ", header,
           " bytes but the file holds ", bytes.size());
  IdxHeader h;
  int64_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    h.dims.push_back(big_endian_u32(bytes.data() + 4 + 4 * d));
    if (d) h.dims_str += 'x';
    h.dims_str += std::to_string(h.dims.back());
  }
  for (int d = 0; d < ndims; ++d) {
    const int64_t limit = d == 0 ? kIdxMaxCount : kIdxMaxSize;
    GS_CHECK(h.dims[d] <= limit, "read_idx", path, " declares dims ", h.dims_str, ": dim ", d, " (", h.dims[d],
             ") is larger than the reader accepts (", limit, d == 0 ? " examples" : " per dimension",
             "); the header is corrupted or this is not an IDX dataset");
    GS_CHECK(!__builtin_mul_overflow(count, h.dims[d], &count) && count <= kIdxMaxBytes, "read_idx", path,
             " declares dims ", h.dims_str, " whose product exceeds the reader's limit of ", kIdxMaxBytes,
             " bytes; the header is corrupted");
  }
  h.count = static_cast<uint64_t>(count);
  return h;
}

// The body, read with a bound (the declared size, then EOF).
std::vector<uint8_t> read_idx_body(ByteSource& src, const IdxHeader& h, const std::string& path) {
  std::vector<uint8_t> data;
  src.read(data, h.count);
  GS_CHECK(data.size() == h.count, "read_idx", path, " is truncated: its header promises ", h.dims_str, " = ", h.count,
           " bytes of data but only ", data.size(), " follow");
  GS_CHECK(src.at_end(), "read_idx", path, " has unexpected bytes after the ", h.dims_str,
           " data its header describes");
  return data;
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_dims) {
  ByteSource src(path);
  IdxHeader h = read_idx_header(src, path, expected_dims);
  IdxArray a;
  a.data = read_idx_body(src, h, path);
  a.dims = std::move(h.dims);
  return a;
}

std::pair<Tensor, Tensor> read_idx_images_labels(const std::string& images_path, const std::string& labels_path,
                                                 bool raw, int64_t num_classes) {
  // Both headers first: the counts must agree before either body is read.
  ByteSource im_src(images_path), lb_src(labels_path);
  IdxHeader im = read_idx_header(im_src, images_path, 3);
  IdxHeader lb = read_idx_header(lb_src, labels_path, 1);
  const int64_t n = im.dims[0], rows = im.dims[1], cols = im.dims[2];
  GS_CHECK(n == lb.dims[0], "fashion_mnist", "the images and labels disagree on the number of examples: ", images_path,
           " holds ", n, " images but ", labels_path, " holds ", lb.dims[0], " labels");
  const std::vector<uint8_t> im_data = read_idx_body(im_src, im, images_path);
  const std::vector<uint8_t> lb_data = read_idx_body(lb_src, lb, labels_path);
  Tensor x = empty({n, 1, rows, cols}, kFloat32);
  float* px = x.data_ptr<float>();
  const float scale = raw ? 1.0f : 1.0f / 255.0f;
  for (size_t i = 0; i < im_data.size(); ++i) px[i] = static_cast<float>(im_data[i]) * scale;
  Tensor y = empty({n}, kInt64);
  int64_t* py = y.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    py[i] = lb_data[static_cast<size_t>(i)];
    GS_CHECK(py[i] < num_classes, "fashion_mnist", labels_path, ": label ", py[i], " of example ", i, " is outside 0..",
             num_classes - 1);
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
  for (const auto& [path, base] :
       {std::pair{images, prefix + "-images-idx3-ubyte"}, std::pair{labels, prefix + "-labels-idx1-ubyte"}}) {
    GS_CHECK(!path.empty(), "fashion_mnist", "cannot find ", base, " (or ", base, ".gz) in ", dir,
             ". Install the dataset with `apt-get install dataset-fashion-mnist` (it goes to ", kFashionMnistDefaultDir,
             "), or pass --data-dir DIR pointing at a folder that holds the IDX files.");
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
