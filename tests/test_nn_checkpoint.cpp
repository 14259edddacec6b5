// Tests for nn/checkpoint.h: round trips (values and dtypes identical), the byte
// layout of docs/checkpoint-format.md, atomic saves (an interrupted save leaves the
// previous file intact), and clear errors for truncated, corrupted or mismatched files.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "core/io.h"
#include "core/warning.h"
#include "nn/nn.h"
#include "nn_test_util.h"

namespace nn = gs::nn;
namespace fs = std::filesystem;
using gs::Tensor;
using nntest::vals;

namespace {

// A fresh, empty directory per test case, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("gs_ckpt_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  size_t entries() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(path), fs::directory_iterator()));
  }
};

std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::BatchNorm1d> bn;
  explicit Net(int64_t hidden = 8) : Module("Net") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, hidden));
    bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, 3));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(gs::relu((*bn)((*fc1)(x)))); }
};

// Every parameter and buffer of a and b identical in name, dtype, shape and value.
void check_same_state(const nn::Module& a, const nn::Module& b) {
  auto ea = a.named_parameters(), eb = b.named_parameters();
  for (auto& x : a.named_buffers()) ea.push_back(x);
  for (auto& x : b.named_buffers()) eb.push_back(x);
  REQUIRE(ea.size() == eb.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    CAPTURE(ea[i].first);
    CHECK(ea[i].first == eb[i].first);
    CHECK(gs::equal(ea[i].second, eb[i].second));  // same shape, dtype and values
  }
}

}  // namespace

TEST_CASE("save/load round trip: values, dtypes, buffers; outputs identical") {
  TempDir dir;
  auto a = std::make_shared<Net>();
  for (int i = 0; i < 3; ++i) (*a)(gs::randn({10, 4}));  // move the running statistics
  nn::save(*a, dir.file("model.ckpt"));
  CHECK(dir.entries() == 1);  // no temp file left behind

  auto b = std::make_shared<Net>();
  Tensor opt_handle = b->fc1->weight;  // e.g. held by an optimizer
  b->fc1->weight.set_grad(gs::ones({8, 4}));
  nn::load(*b, dir.file("model.ckpt"));
  check_same_state(*a, *b);
  CHECK(b->bn->num_batches_tracked.item<int64_t>() == 3);
  CHECK(gs::equal(opt_handle, a->fc1->weight));
  CHECK_FALSE(b->fc1->weight.grad().defined());
  CHECK(b->fc1->weight.requires_grad());
  a->eval();
  b->eval();
  Tensor x = gs::randn({5, 4});
  CHECK(gs::equal((*a)(x), (*b)(x)));

  // float64 models round-trip too.
  a->to(gs::kFloat64);
  nn::save(*a, dir.file("model64.ckpt"));
  auto c = std::make_shared<Net>();
  c->to(gs::kFloat64);
  nn::load(*c, dir.file("model64.ckpt"));
  check_same_state(*a, *c);
}

TEST_CASE("save_state/load_state: any named tensors, every dtype, 0-dim and empty") {
  TempDir dir;
  std::map<std::string, Tensor> state{
      {"0.0.exp_avg", gs::randn({3, 2})},
      {"0.0.step", gs::full({}, 17.0, gs::kInt64)},
      {"0.1.mask", gs::tensor({1.0, 0.0, 1.0}) > 0.5},
      {"0.1.exp_avg_sq", gs::randn({2, 2, 2}, gs::kFloat64)},
      {"empty", gs::zeros({0, 4})},
  };
  nn::save_state(state, dir.file("optim.ckpt"));
  auto back = nn::load_state(dir.file("optim.ckpt"));
  REQUIRE(back.size() == state.size());
  for (auto& [name, t] : state) {
    CAPTURE(name);
    REQUIRE(back.count(name));
    CHECK(gs::equal(back[name], t));
    CHECK(back[name].dtype() == t.dtype());
    CHECK(back[name].shape() == t.shape());
  }
}

TEST_CASE("the byte layout matches docs/checkpoint-format.md") {
  TempDir dir;
  nn::write_checkpoint(dir.file("one.ckpt"), {{"w", gs::tensor({1.5, -2.0}, gs::kFloat32)}});
  auto b = read_bytes(dir.file("one.ckpt"));
  auto u64 = [&](size_t at) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(b[at + i]) << (8 * i);
    return v;
  };
  auto u32 = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(b[at + i]) << (8 * i);
    return v;
  };
  // header 32 + name len 4 + "w" 1 + dtype 1 + ndim 1 + dim 8 + nbytes 8 + data 8 + entry checksum 8 + checksum 8
  REQUIRE(b.size() == 32 + 4 + 1 + 1 + 1 + 8 + 8 + 8 + 8 + 8);
  CHECK(std::string(b.begin(), b.begin() + 8) == "GSCKPT01");
  CHECK(u32(8) == 2);          // version
  CHECK(u32(12) == 0);         // reserved
  CHECK(u64(16) == 1);         // entry count
  CHECK(u64(24) == b.size());  // file size
  CHECK(u32(32) == 1);         // name length
  CHECK(b[36] == 'w');
  CHECK(b[37] == 2);    // dtype code: float32
  CHECK(b[38] == 1);    // ndim
  CHECK(u64(39) == 2);  // dim 0
  CHECK(u64(47) == 8);  // data bytes
  float f[2];
  std::memcpy(f, b.data() + 55, 8);
  CHECK(f[0] == 1.5f);
  CHECK(f[1] == -2.0f);
  uint64_t e = 0xcbf29ce484222325ULL ^ 0x3259525452454e53ULL;  // the entry's: its bytes from the name length on
  for (size_t i = 32; i < 63; ++i) e = (e ^ b[i]) * 0x100000001b3ULL;
  CHECK(u64(63) == e);
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 of everything before the checksum
  for (size_t i = 0; i + 8 < b.size(); ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  CHECK(u64(b.size() - 8) == h);
}

TEST_CASE("an interrupted save leaves the previous checkpoint intact") {
  TempDir dir;
  const std::string path = dir.file("model.ckpt");
  auto a = std::make_shared<Net>();
  nn::save(*a, path);
  const auto before = read_bytes(path);

  auto other = std::make_shared<Net>();  // different weights
  for (uint64_t fail_at : {0ull, 10ull, 100ull, 500ull}) {
    CAPTURE(fail_at);
    nn::testing::set_checkpoint_write_failure(fail_at);
    nntest::check_error([&] { nn::save(*other, path); }, {"nn::save", "simulated write failure", ".tmp."});
    nn::testing::set_checkpoint_write_failure(std::nullopt);
    CHECK(read_bytes(path) == before);
    CHECK(dir.entries() == 1);  // the temp file was removed
  }
  auto b = std::make_shared<Net>();
  nn::load(*b, path);
  check_same_state(*a, *b);

  // A directory that does not exist: nothing is written, the error names the path.
  nntest::check_error([&] { nn::save(*a, dir.file("no/such/dir/model.ckpt")); },
                      {"nn::save", "no/such/dir/model.ckpt", "directory exists"});
  // Renaming onto a directory fails after the temp file was written: it is removed.
  fs::create_directories(dir.path / "taken");
  nntest::check_error([&] { nn::save(*a, dir.file("taken")); }, {"nn::save", "cannot move", "unchanged"});
  CHECK(dir.entries() == 2);
}

TEST_CASE("truncated, corrupted and foreign files give clear errors") {
  TempDir dir;
  const std::string path = dir.file("model.ckpt");
  auto a = std::make_shared<Net>();
  nn::save(*a, path);
  const auto good = read_bytes(path);
  auto b = std::make_shared<Net>();
  const Tensor before = b->fc1->weight.clone();

  SUBCASE("truncated") {
    for (size_t keep : {size_t(0), size_t(5), size_t(20), good.size() / 2, good.size() - 1}) {
      CAPTURE(keep);
      write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(keep)));
      nntest::check_error([&] { nn::load(*b, path); }, {"nn::load", path.c_str(), "truncated"});
    }
  }
  SUBCASE("one flipped byte in the data") {
    auto bad = good;
    bad[bad.size() / 2] ^= 0x10;
    write_bytes(path, bad);
    nntest::check_error([&] { nn::load(*b, path); }, {"nn::load", path.c_str(), "corrupted", "checksum mismatch"});
  }
  SUBCASE("a flipped byte in the checksum itself") {
    auto bad = good;
    bad[bad.size() - 1] ^= 0x01;
    write_bytes(path, bad);
    nntest::check_error([&] { nn::load(*b, path); }, {"checksum mismatch"});
  }
  SUBCASE("bytes appended") {
    auto bad = good;
    bad.push_back(0);
    write_bytes(path, bad);
    nntest::check_error([&] { nn::load(*b, path); }, {"corrupted", "header says"});
  }
  SUBCASE("not a checkpoint") {
    write_bytes(path, {'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0});
    nntest::check_error([&] { nn::load(*b, path); }, {"not a gradsleuth checkpoint", "PyTorch"});
    nntest::check_error([&] { nn::load(*b, dir.file("missing.ckpt")); }, {"nn::load", "cannot open", "missing.ckpt"});
  }
  CHECK(gs::equal(b->fc1->weight, before));  // a failed load changes nothing
}

TEST_CASE("mismatched models: shapes, dtypes, missing and unexpected names") {
  TempDir dir;
  const std::string path = dir.file("model.ckpt");
  auto wide = std::make_shared<Net>(16);
  nn::save(*wide, path);

  auto narrow = std::make_shared<Net>(8);
  const Tensor before = narrow->fc2->weight.clone();
  nntest::check_error([&] { nn::load(*narrow, path); },
                      {path.c_str(), "fc1.weight: checkpoint has shape [16, 4], model expects [8, 4]",
                       "bn.running_var: checkpoint has shape [16], model expects [8]",
                       "fc2.weight: checkpoint has shape [3, 16], model expects [3, 8]"});
  CHECK(gs::equal(narrow->fc2->weight, before));  // nothing was half-loaded

  auto f64 = std::make_shared<Net>(16);
  f64->to(gs::kFloat64);
  nntest::check_error([&] { nn::load(*f64, path); },
                      {"fc1.weight: checkpoint has dtype float32, model expects float64", "model.to(gs::kFloat32)"});

  // Missing and unexpected names; strict=false loads what matches.
  nn::Sequential seq{std::make_shared<nn::Linear>(4, 16)};
  nntest::check_error([&] { nn::load(seq, path); },
                      {"missing from the checkpoint: 0.weight, 0.bias",
                       "in the checkpoint but not in the model: fc1.weight", "different architecture"});
  nn::Linear fc1(4, 16);
  nn::write_checkpoint(dir.file("part.ckpt"), {{"weight", wide->fc1->weight}, {"extra", gs::ones({2})}});
  nntest::check_error([&] { nn::load(fc1, dir.file("part.ckpt")); }, {"missing from the checkpoint: bias", "extra"});
  nn::load(fc1, dir.file("part.ckpt"), /*strict=*/false);
  CHECK(gs::equal(fc1.weight, wide->fc1->weight));
}

TEST_CASE("write_checkpoint rejects bad entry lists before touching the disk") {
  TempDir dir;
  nntest::check_error(
      [&] {
        nn::write_checkpoint(dir.file("x"), {{"a", gs::ones({1})}, {"a", gs::ones({1})}});
      },
      {"'a' appears twice"});
  nntest::check_error([&] { nn::write_checkpoint(dir.file("x"), {{"a", Tensor()}}); }, {"'a' is an undefined tensor"});
  nntest::check_error([&] { nn::write_checkpoint(dir.file("x"), {{"", gs::ones({1})}}); }, {"names must be"});
  CHECK(dir.entries() == 0);
}

// ---- hardening: crafted, checksum-valid files --------------------------------------
namespace {
struct RawEntry {
  std::string name;
  uint8_t dtype = 2;  // float32
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
  std::vector<uint8_t> data;
};
template <class T>
void put_le(std::vector<uint8_t>& b, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
}
// A checkpoint with the given entries, a correct file size and a correct FNV-1a checksum.
std::vector<uint8_t> craft(const std::vector<RawEntry>& entries, int64_t size_delta = 0) {
  std::vector<uint8_t> b = {'G', 'S', 'C', 'K', 'P', 'T', '0', '1'};
  put_le<uint32_t>(b, 1);
  put_le<uint32_t>(b, 0);
  put_le<uint64_t>(b, entries.size());
  put_le<uint64_t>(b, 0);  // the file size, patched below
  for (const auto& e : entries) {
    put_le<uint32_t>(b, static_cast<uint32_t>(e.name.size()));
    b.insert(b.end(), e.name.begin(), e.name.end());
    b.push_back(e.dtype);
    b.push_back(static_cast<uint8_t>(e.shape.size()));
    for (int64_t s : e.shape) put_le<int64_t>(b, s);
    put_le<uint64_t>(b, e.nbytes);
    b.insert(b.end(), e.data.begin(), e.data.end());
  }
  const uint64_t size = b.size() + 8 + static_cast<uint64_t>(size_delta);
  for (int i = 0; i < 8; ++i) b[24 + i] = static_cast<uint8_t>(size >> (8 * i));
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint8_t c : b) h = (h ^ c) * 0x100000001b3ULL;
  put_le<uint64_t>(b, h);
  return b;
}
RawEntry f32(const std::string& name, std::vector<int64_t> shape, size_t n) {
  return {name, 2, std::move(shape), 4 * n, std::vector<uint8_t>(4 * n, 0)};
}
}  // namespace

TEST_CASE("crafted checkpoints: the crafting helper itself makes loadable files") {
  TempDir dir;
  write_bytes(dir.file("ok.ckpt"), craft({f32("a", {2, 3}, 6), {"b", 0, {3}, 3, {0, 1, 1}}}));
  auto got = nn::read_checkpoint(dir.file("ok.ckpt"));
  REQUIRE(got.size() == 2);
  CHECK(got[0].second.shape().vec() == std::vector<int64_t>{2, 3});
  CHECK(vals(got[1].second) == nntest::Vec{0, 1, 1});
}

TEST_CASE("crafted checkpoints: sizes that multiply past 2^63 / 2^64 are rejected, naming file and entry") {
  TempDir dir;
  const std::string p = dir.file("huge.ckpt");
  // 2^62 float32 elements (2^64 bytes) recorded as 0 bytes: the product wraps to 0.
  write_bytes(p, craft({{"w", 2, {int64_t{1} << 62}, 0, {}}}));
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"nn::load", p.c_str(), "'w'", "overflows"});
  // Dims whose product overflows int64 itself.
  write_bytes(p, craft({{"w", 2, {int64_t{1} << 32, int64_t{1} << 32}, 0, {}}}));
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"nn::load", p.c_str(), "'w'", "overflows"});
  // A representable but absent size: rejected before allocating (no "out of host memory").
  write_bytes(p, craft({{"w", 2, {int64_t{1} << 48}, uint64_t{1} << 50, {}}}));
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"nn::load", p.c_str(), "'w'", "truncated"});
}

TEST_CASE("crafted checkpoints: empty and duplicate names, bool bytes other than 0/1") {
  TempDir dir;
  const std::string p = dir.file("bad.ckpt");
  write_bytes(p, craft({f32("", {1}, 1)}));
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"nn::load", p.c_str(), "entry 0", "empty name"});
  write_bytes(p, craft({f32("a", {1}, 1), f32("a", {1}, 1)}));
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"nn::load", p.c_str(), "entry 1", "repeats the name 'a'"});
  write_bytes(p, craft({{"mask", 0, {3}, 3, {0, 2, 1}}}));
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"nn::load", p.c_str(), "'mask'", "element 1", "byte 2"});
  write_bytes(p, craft({{"x", 9, {1}, 1, {0}}}));
  nntest::check_error([&] { nn::read_checkpoint(p); }, {p.c_str(), "'x'", "unknown dtype code 9"});
}

TEST_CASE("reads are bounded: /dev/zero, a directory, a file longer than its header") {
  TempDir dir;
  if (fs::exists("/dev/zero"))
    nntest::check_error([&] { nn::read_checkpoint("/dev/zero"); },
                        {"nn::load", "/dev/zero", "not a gradsleuth checkpoint"});
  nn::Linear fc(2, 2);
  nntest::check_error([&] { nn::load(fc, dir.path.string()); },
                      {"nn::load", dir.path.string().c_str(), "is a directory"});
  const std::string p = dir.file("long.ckpt");
  write_bytes(p, craft({f32("a", {1}, 1)}, /*size_delta=*/-4));  // the header says 4 bytes fewer than present
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"corrupted", "header says"});
  // A header promising 2^60 bytes in a small file: truncated, nothing allocated.
  write_bytes(p, craft({f32("a", {1}, 1)}, /*size_delta=*/int64_t{1} << 60));
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"truncated", "header says"});
}

TEST_CASE("a FIFO that never ends is read with a bound") {
  TempDir dir;
  const std::string p = dir.file("fifo");
  REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
  // A writer that sends a valid header then endless zeros (until the reader closes).
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGPIPE, SIG_DFL);
    FILE* f = std::fopen(p.c_str(), "wb");
    if (!f) ::_exit(1);
    auto b = craft({f32("a", {1}, 1)});
    std::fwrite(b.data(), 1, b.size(), f);
    std::vector<uint8_t> zeros(1 << 16, 0);
    for (;;)
      if (std::fwrite(zeros.data(), 1, zeros.size(), f) != zeros.size()) ::_exit(0);
  }
  const std::string err = [&] {
    try {
      nn::read_checkpoint(p);
    } catch (const gs::Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  }();
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  CHECK(err.find("does not end there") != std::string::npos);
}

TEST_CASE("load(strict=false) reports what it loaded and skipped; nothing in common is an error") {
  TempDir dir;
  nn::Linear fc(4, 3);
  const Tensor w = gs::ones({3, 4});
  nn::write_checkpoint(dir.file("part.ckpt"), {{"weight", w}, {"extra", gs::ones({2})}});
  std::vector<gs::Warning> warnings;
  gs::WarningHandlerGuard guard([&](const gs::Warning& x) { warnings.push_back(x); });
  nn::LoadReport r = nn::load(fc, dir.file("part.ckpt"), /*strict=*/false);
  CHECK(r.loaded == std::vector<std::string>{"weight"});
  CHECK(r.missing == std::vector<std::string>{"bias"});
  CHECK(r.unexpected == std::vector<std::string>{"extra"});
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].message.find("loaded 1 tensor(s) and skipped 1 missing") != std::string::npos);
  CHECK(gs::equal(fc.weight, w));

  nn::write_checkpoint(dir.file("other.ckpt"), {{"conv.weight", gs::ones({2})}});
  nntest::check_error([&] { nn::load(fc, dir.file("other.ckpt"), false); },
                      {"nn::load", "other.ckpt", "no entry in common", "Nothing was loaded"});
}

TEST_CASE("kill -9 during saves: the checkpoint survives and the next save removes the stale temp files") {
  TempDir dir;
  const std::string path = dir.file("model.ckpt");
  auto a = std::make_shared<Net>();
  nn::save(*a, path);
  const auto before = read_bytes(path);
  auto other = std::make_shared<Net>();
  // Three saves, each SIGKILLed mid-write in a forked child.
  for (uint64_t kill_at : {10ull, 100ull, 300ull}) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      nn::testing::set_checkpoint_kill_after(kill_at);
      try {
        nn::save(*other, path);
      } catch (...) {
      }
      ::_exit(3);  // not reached: the hook kills the process
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGKILL);
    // The checkpoint and one .tmp.<pid>: each save removed the previous killed save's file.
    CHECK(dir.entries() == 2);
  }
  CHECK(read_bytes(path) == before);
  auto b = std::make_shared<Net>();
  nn::load(*b, path);
  check_same_state(*a, *b);
  // A temp file of a live process (this one's parent: pid 1 or the test runner) is left alone.
  const std::string live = path + ".tmp." + std::to_string(::getppid());
  write_bytes(live, {1, 2, 3});
  nn::save(*other, path);
  CHECK(dir.entries() == 2);  // the new checkpoint and the live process's file
  CHECK(fs::exists(live));
  fs::remove(live);
  CHECK(gs::remove_stale_temp_files(path) == 0);
}

TEST_CASE("crafted checkpoints: an int64 entry relabelled float64 (checksum recomputed) is refused, naming it") {
  TempDir dir;
  const std::string p = dir.file("edited.ckpt");
  // What nn::save writes for an optimizer's step counter and a label tensor ...
  nn::write_checkpoint(p, {{"w", gs::tensor({0.5, -1.25})},
                           {"0.0.step", gs::tensor(std::vector<int64_t>{3, 0, 100, 7}, {4})},
                           {"labels", gs::tensor(std::vector<int64_t>{-1, 2}, {2})}});
  std::vector<uint8_t> b = read_bytes(p);
  REQUIRE(nn::read_checkpoint(p).size() == 3);
  // ... then each int64 entry's dtype byte changed to float64 (3) and the checksum recomputed:
  // shape and byte count still agree with the new dtype (both are 8 bytes per element).
  auto relabel = [&](const std::string& name) {
    std::vector<uint8_t> e = b;
    const auto at = std::search(e.begin(), e.end(), name.begin(), name.end()) - e.begin() + name.size();
    REQUIRE(e[at] == 1);  // int64
    e[at] = 3;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i + 8 < e.size(); ++i) h = (h ^ e[i]) * 0x100000001b3ULL;
    for (int i = 0; i < 8; ++i) e[e.size() - 8 + i] = static_cast<uint8_t>(h >> (8 * i));
    write_bytes(p, e);
  };
  relabel("0.0.step");
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"nn::load", p.c_str(), "'0.0.step'", "float64", "int64 data"});
  relabel("labels");  // negative integers read as float64 are NaN
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"'labels'", "int64 data"});
  // Values from 2^60 up read as ordinary float64 numbers (2^60 is 1.3e-231): the entry checksum refuses them too.
  nn::write_checkpoint(p, {{"big", gs::tensor(std::vector<int64_t>{int64_t{1} << 60, (int64_t{1} << 60) + 5}, {2})}});
  b = read_bytes(p);
  relabel("big");
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"'big'", "entry checksum", "int64 data"});
  // Version 1 files (no entry checksums) still load; there, negative integers relabelled float64
  // (NaNs with a payload) and small ones (subnormals) are refused from the values.
  write_bytes(
      p, craft({{"labels", 3, {2}, 16, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 0, 0, 0}}}));
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"'labels'", "int64 data"});
  write_bytes(p, craft({{"neg", 3, {1}, 8, {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}}));  // -2 alone: a NaN
  nntest::check_error([&] { nn::read_checkpoint(p); }, {"'neg'", "int64 data"});
  // ... while a computed NaN (the quiet NaN) in a version 1 file is data, and loads.
  write_bytes(p, craft({{"nan", 3, {1}, 8, {0, 0, 0, 0, 0, 0, 0xf8, 0x7f}}}));
  CHECK(std::isnan(nn::read_checkpoint(p)[0].second.to_vector<double>()[0]));
  // Real float64 data passes, zeros and a stray subnormal among ordinary numbers included.
  nn::write_checkpoint(
      p, {{"d", gs::tensor({0.0, 4.9e-324, 1.0, -0.0}, gs::kFloat64)}, {"z", gs::zeros({3}, gs::kFloat64)}});
  auto got = nn::read_checkpoint(p);
  CHECK(got[0].second.to_vector<double>()[1] == 4.9e-324);
}

// ---- float16 and bfloat16 ------------------------------------------------------------
TEST_CASE("float16/bfloat16: round trip bit for bit, the layout, model.to, mismatch message") {
  TempDir dir;
  // 65504, the smallest subnormal, -0, inf and NaN: every 16-bit pattern comes back as written.
  const Tensor h = gs::tensor({65504.0, std::ldexp(1.0, -24), -0.0, INFINITY, NAN, 1.5}, {2, 3}, gs::kFloat16);
  const Tensor b = gs::tensor({3e38, std::ldexp(1.0, -130), -1.0, 1.0 / 3}, {4}, gs::kBFloat16);
  nn::write_checkpoint(dir.file("half.ckpt"), {{"h", h}, {"b", b}, {"t", h.t()}});
  auto back = nn::read_checkpoint(dir.file("half.ckpt"));
  REQUIRE(back.size() == 3);
  auto bits = [](const Tensor& t) {
    Tensor c = t.contiguous();
    std::vector<uint8_t> v(static_cast<size_t>(c.nbytes()));
    std::memcpy(v.data(), c.raw_data(), v.size());
    return v;
  };
  CHECK(back[0].second.dtype() == gs::kFloat16);
  CHECK(back[1].second.dtype() == gs::kBFloat16);
  CHECK(back[0].second.shape().vec() == std::vector<int64_t>{2, 3});
  CHECK(bits(back[0].second) == bits(h));
  CHECK(bits(back[1].second) == bits(b));
  CHECK(bits(back[2].second) == bits(h.t()));  // written contiguous from a transposed view

  // Layout: dtype byte 4, two little-endian bytes per element (1.5 is 0x3E00).
  nn::write_checkpoint(dir.file("one.ckpt"), {{"w", gs::tensor({1.5, -2.0}, gs::kFloat16)}});
  auto raw = read_bytes(dir.file("one.ckpt"));
  REQUIRE(raw.size() == 32 + 4 + 1 + 1 + 1 + 8 + 8 + 4 + 8 + 8);
  CHECK(raw[37] == 4);
  CHECK(raw[47] == 4);  // data bytes
  CHECK(raw[55] == 0x00);
  CHECK(raw[56] == 0x3E);
  CHECK(raw[57] == 0x00);
  CHECK(raw[58] == 0xC0);  // -2.0 is 0xC000

  // A model in bfloat16 saves and loads; a float32 model is told which conversion to make.
  auto net = std::make_shared<Net>(8);
  net->to(gs::kBFloat16);
  nn::save(*net, dir.file("bf16.ckpt"));
  auto again = std::make_shared<Net>(8);
  again->to(gs::kBFloat16);
  nn::load(*again, dir.file("bf16.ckpt"));
  CHECK(bits(again->fc1->weight) == bits(net->fc1->weight));
  auto f32model = std::make_shared<Net>(8);
  nntest::check_error([&] { nn::load(*f32model, dir.file("bf16.ckpt")); },
                      {"checkpoint has dtype bfloat16, model expects float32", "model.to(gs::kBFloat16)"});
  // An unknown code names the codes that exist.
  write_bytes(dir.file("bad.ckpt"), craft({{"x", 6, {1}, 2, {0, 0}}}));
  nntest::check_error([&] { nn::read_checkpoint(dir.file("bad.ckpt")); }, {"unknown dtype code 6", "5 bfloat16"});
}

TEST_CASE("a file written before float16 existed (version 1, float32/int64/bool) still loads") {
  TempDir dir;
  std::vector<uint8_t> one(4);
  const float v = 2.5f;
  std::memcpy(one.data(), &v, 4);
  write_bytes(dir.file("old.ckpt"),
              craft({{"w", 2, {1}, 4, one}, {"n", 1, {}, 8, std::vector<uint8_t>(8, 0)}, {"m", 0, {2}, 2, {1, 0}}}));
  auto got = nn::read_checkpoint(dir.file("old.ckpt"));
  REQUIRE(got.size() == 3);
  CHECK(got[0].second.dtype() == gs::kFloat32);
  CHECK(got[0].second.item<float>() == 2.5f);
  CHECK(got[1].second.dtype() == gs::kInt64);
  CHECK(got[2].second.dtype() == gs::kBool);
}
