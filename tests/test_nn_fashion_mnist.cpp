// Tests for nn/fashion_mnist: the IDX reader on small files this test writes
// itself (raw and gzipped, valid and broken in each way a download can be),
// the missing-dataset message, and the loader's shapes, scaling and cache.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#if GS_HAVE_ZLIB
#include <zlib.h>
#endif

#include "core/ops.h"
#include "fashion_mnist_required.h"
#include "nn/fashion_mnist.h"

namespace nn = gs::nn;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

// A fresh folder per test case under the system temp dir.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag) {
    path = fs::temp_directory_path() / ("gs_idx_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

void put_u32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// An unsigned-byte IDX file: magic 0x0000080N, dims, then the data.
Bytes idx(const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_u32(b, d);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}
// n images rows x cols whose pixel (i, r, c) is (i * 7 + r * cols + c) % 256, and labels i % 10.
Bytes images(uint32_t n, uint32_t rows, uint32_t cols) {
  Bytes d;
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < rows * cols; ++p) d.push_back(static_cast<uint8_t>((i * 7 + p) % 256));
  return idx({n, rows, cols}, d);
}
Bytes labels(uint32_t n) {
  Bytes d;
  for (uint32_t i = 0; i < n; ++i) d.push_back(static_cast<uint8_t>(i % 10));
  return idx({n}, d);
}

void write_raw(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void write_gz(const std::string& path, const Bytes& b) {
#if GS_HAVE_ZLIB
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, b.data(), static_cast<unsigned>(b.size()));
  gzclose(f);
#else
  (void)path;
  (void)b;
#endif
}

}  // namespace

TEST_CASE("read_idx: a valid raw file") {
  TempDir dir("raw");
  write_raw(dir / "im", images(3, 4, 5));
  nn::IdxArray a = nn::read_idx(dir / "im", 3);
  CHECK(a.dims == std::vector<int64_t>{3, 4, 5});
  CHECK(a.data.size() == 60);
  CHECK(a.data[20 + 1] == 8);  // image 1, pixel 1: 7 + 1
}

#if GS_HAVE_ZLIB
TEST_CASE("read_idx: a gzipped file reads the same as the raw one") {
  TempDir dir("gz");
  write_raw(dir / "im", images(3, 4, 5));
  write_gz(dir / "im.gz", images(3, 4, 5));
  CHECK(nn::read_idx(dir / "im.gz").data == nn::read_idx(dir / "im").data);
  // A gzip file cut short is an error, not a crash or silent short data.
  std::ifstream in(dir / "im.gz", std::ios::binary);
  Bytes gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_gz(dir / "big.gz", images(50, 28, 28));
  std::ifstream in2(dir / "big.gz", std::ios::binary);
  Bytes big((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
  write_raw(dir / "cut.gz", Bytes(big.begin(), big.begin() + static_cast<long>(big.size() / 2)));
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "cut.gz"), doctest::Contains("cut.gz"), gs::Error);
}
#endif

TEST_CASE("read_idx: bad magic, truncated data, wrong rank, empty file") {
  TempDir dir("bad");
  Bytes b = images(2, 4, 4);
  b[2] = 0x0D;  // float type: not an unsigned-byte file
  write_raw(dir / "magic", b);
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "magic"), doctest::Contains("bad magic number 0x00000D03"), gs::Error);
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "magic"), doctest::Contains((dir / "magic").c_str()), gs::Error);

  Bytes t = images(10, 28, 28);
  t.resize(t.size() - 100);
  write_raw(dir / "trunc", t);
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "trunc"), doctest::Contains("is truncated"), gs::Error);
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "trunc"), doctest::Contains("10x28x28 = 7840 bytes"), gs::Error);

  Bytes h = images(10, 28, 28);
  h.resize(9);  // inside the header
  write_raw(dir / "header", h);
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "header"), doctest::Contains("header needs 16 bytes"), gs::Error);

  write_raw(dir / "labels", labels(5));
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "labels", 3), doctest::Contains("has 1 dims"), gs::Error);

  write_raw(dir / "empty", {});
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "empty"), doctest::Contains("not an IDX file"), gs::Error);

  Bytes extra = labels(5);
  extra.push_back(1);
  write_raw(dir / "extra", extra);
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "extra"), doctest::Contains("unexpected bytes"), gs::Error);

  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "nope"), doctest::Contains("cannot open"), gs::Error);
}

TEST_CASE("read_idx_images_labels: count mismatch and label range") {
  TempDir dir("pair");
  write_raw(dir / "im", images(6, 2, 2));
  write_raw(dir / "lb5", labels(5));
  CHECK_THROWS_WITH_AS(nn::read_idx_images_labels(dir / "im", dir / "lb5"), doctest::Contains("holds 6 images but"),
                       gs::Error);
  Bytes bad = labels(6);
  bad.back() = 12;
  write_raw(dir / "lbbad", bad);
  CHECK_THROWS_WITH_AS(nn::read_idx_images_labels(dir / "im", dir / "lbbad"), doctest::Contains("label 12"), gs::Error);
  write_raw(dir / "lb6", labels(6));
  auto [x, y] = nn::read_idx_images_labels(dir / "im", dir / "lb6");
  CHECK(x.shape() == gs::Shape{6, 1, 2, 2});
  CHECK(x.dtype() == gs::kFloat32);
  CHECK(y.dtype() == gs::kInt64);
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4, 5});
  CHECK(x[1].flatten().to_vector<float>()[0] == doctest::Approx(7.0 / 255.0));
  auto [xr, yr] = nn::read_idx_images_labels(dir / "im", dir / "lb6", /*raw=*/true);
  CHECK(xr[1].flatten().to_vector<float>()[0] == 7.0f);
}

TEST_CASE("load_fashion_mnist: from --data-dir, gz and raw mixed; missing files name the package") {
  TempDir dir("fm");
  // gz images, raw labels: the loader takes either spelling of each file.
#if GS_HAVE_ZLIB
  write_gz(dir / "t10k-images-idx3-ubyte.gz", images(12, 28, 28));
#else
  write_raw(dir / "t10k-images-idx3-ubyte", images(12, 28, 28));
#endif
  write_raw(dir / "t10k-labels-idx1-ubyte", labels(12));
  auto test = nn::load_fashion_mnist("test", nn::FashionMnistOptions().data_dir(dir.path.string()));
  CHECK(test->size() == 12);
  CHECK(test->x().shape() == gs::Shape{12, 1, 28, 28});
  CHECK(test->x().max().item<double>() <= 1.0);
  CHECK(test->name() == "fashion-mnist/test");
  CHECK(test->classes().size() == 10);
  CHECK(test->classes()[9] == "Ankle boot");
  auto raw = nn::load_fashion_mnist("test", nn::FashionMnistOptions().data_dir(dir.path.string()).raw(true));
  CHECK(raw->x().max().item<double>() > 200.0);
  // Loaded twice: the cache hands back the same decoded storage.
  auto again = nn::load_fashion_mnist("test", nn::FashionMnistOptions().data_dir(dir.path.string()));
  CHECK(again->x().storage() == test->x().storage());

  // The train split is missing from this folder.
  try {
    nn::load_fashion_mnist("train", nn::FashionMnistOptions().data_dir(dir.path.string()));
    FAIL("expected an error");
  } catch (const gs::Error& e) {
    const std::string m = e.what();
    CHECK(m.find("train-images-idx3-ubyte") != std::string::npos);
    CHECK(m.find("apt-get install dataset-fashion-mnist") != std::string::npos);
    CHECK(m.find("--data-dir") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(nn::load_fashion_mnist("val"), doctest::Contains("unknown split"), gs::Error);

  // Images and labels that disagree: the error names both files.
  TempDir bad("fm_bad");
  write_raw(bad / "t10k-images-idx3-ubyte", images(12, 28, 28));
  write_raw(bad / "t10k-labels-idx1-ubyte", labels(11));
  CHECK_THROWS_WITH_AS(nn::load_fashion_mnist("test", nn::FashionMnistOptions().data_dir(bad.path.string())),
                       doctest::Contains("t10k-labels-idx1-ubyte holds 11 labels"), gs::Error);
}

TEST_CASE("load_fashion_mnist: the real dataset (scripts/setup.sh installs it)") {
  testdata::require_fashion_mnist();
  auto test = nn::load_fashion_mnist("test");
  CHECK(test->size() == 10000);
  CHECK(test->x().shape() == gs::Shape{10000, 1, 28, 28});
  CHECK(test->y().min().item<int64_t>() == 0);
  CHECK(test->y().max().item<int64_t>() == 9);
  // 1,000 of each class in the test split.
  CHECK(gs::eq(test->y(), gs::full({10000}, 3, gs::kInt64)).to(gs::kInt64).sum().item<int64_t>() == 1000);
}

// ---- hardening: crafted headers, endless files ----------------------------------------
TEST_CASE("read_idx: dims whose product passes 2^64 are rejected, not wrapped to 0 bytes") {
  TempDir dir("huge");
  // 4194304 x 2097152 x 2097152 = 2^64: the old size_t product wrapped to 0 and accepted no data.
  write_raw(dir / "im", idx({4194304u, 2097152u, 2097152u}, {}));
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "im", 3), doctest::Contains((dir / "im").c_str()), gs::Error);
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "im", 3), doctest::Contains("larger than the reader accepts"), gs::Error);
  // Each dim within its bound but the product over the byte limit.
  write_raw(dir / "im2", idx({1u << 30, 1u << 16, 1u << 16}, {}));
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "im2", 3), doctest::Contains("exceeds the reader's limit"), gs::Error);
  // A plausible header with no body: truncated, before anything large is allocated.
  write_raw(dir / "im3", idx({1u << 20, 28, 28}, {}));
  CHECK_THROWS_WITH_AS(nn::read_idx(dir / "im3", 3), doctest::Contains("is truncated"), gs::Error);
}

TEST_CASE("read_idx: /dev/zero, a directory and an endless FIFO are rejected") {
  TempDir dir("endless");
  if (fs::exists("/dev/zero"))
    CHECK_THROWS_WITH_AS(nn::read_idx("/dev/zero"), doctest::Contains("bad magic number 0x00000000"), gs::Error);
  CHECK_THROWS_WITH_AS(nn::read_idx(dir.path.string()), doctest::Contains("is a directory"), gs::Error);
  // A valid 2-label header followed by endless zeros: the reader stops after the declared size + 1 byte.
  const std::string fifo = dir / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    FILE* f = std::fopen(fifo.c_str(), "wb");
    if (!f) ::_exit(1);
    const Bytes b = idx({2}, {1, 2});
    std::fwrite(b.data(), 1, b.size(), f);
    const Bytes zeros(1 << 16, 0);
    for (;;)
      if (std::fwrite(zeros.data(), 1, zeros.size(), f) != zeros.size()) ::_exit(0);
  }
  std::string err = "<no error>";
  try {
    nn::read_idx(fifo, 1);
  } catch (const gs::Error& e) {
    err = e.what();
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  CHECK(err.find("unexpected bytes") != std::string::npos);
}

TEST_CASE("read_idx_images_labels: counts are compared before the bodies are read") {
  TempDir dir("order");
  // Images claim 1000 examples but hold none; labels hold 5. The mismatch is reported, not the truncation.
  write_raw(dir / "im", idx({1000, 28, 28}, {}));
  write_raw(dir / "lb", labels(5));
  CHECK_THROWS_WITH_AS(nn::read_idx_images_labels(dir / "im", dir / "lb"), doctest::Contains("holds 1000 images but"),
                       gs::Error);
}
