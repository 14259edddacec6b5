// Loader fuzzing: deterministic mutations of valid checkpoint and IDX files
// (truncations, bit flips, huge and zero size fields, random byte runs), with the
// checkpoint's file size and checksum recomputed so that the entry parser itself
// is exercised. Every mutated file must either load or raise a gs::Error naming
// the file: never another exception, a crash, a hang, or (under ASan/UBSan, where
// ./test.sh --sanitize runs the long mode) a memory or UB report.
//   GS_FUZZ_LONG=1  ten times the random mutations (set by ./test.sh --sanitize)
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/ops.h"
#include "nn/checkpoint.h"
#include "nn/fashion_mnist.h"
#include "temp_dir.h"

namespace nn = gs::nn;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_all(const std::string& p, const Bytes& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// A small deterministic PRNG (SplitMix64): the mutations are the same on every run.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
};

int rounds() {
  const char* e = std::getenv("GS_FUZZ_LONG");
  return e && *e && *e != '0' ? 10 : 1;
}

void put_le(Bytes& b, size_t at, uint64_t v, int width) {
  for (int i = 0; i < width && at + i < b.size(); ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get_le(const Bytes& b, size_t at, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v |= static_cast<uint64_t>(b[at + i]) << (8 * i);
  return v;
}

// Recomputes the checkpoint's file size field and FNV-1a checksum (when the file is long enough).
Bytes fix_checkpoint(Bytes b) {
  if (b.size() < 40) return b;
  put_le(b, 24, b.size(), 8);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i + 8 < b.size(); ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  put_le(b, b.size() - 8, h, 8);
  return b;
}

// Offsets and widths of every size-like field of a valid checkpoint.
struct Field {
  size_t at;
  int width;
};
std::vector<Field> checkpoint_fields(const Bytes& b) {
  std::vector<Field> f = {{16, 8}, {24, 8}};
  const uint64_t count = get_le(b, 16, 8);
  size_t p = 32;
  for (uint64_t i = 0; i < count; ++i) {
    f.push_back({p, 4});
    const size_t name_len = get_le(b, p, 4);
    p += 4 + name_len;
    f.push_back({p, 1});      // dtype
    f.push_back({p + 1, 1});  // ndim
    const size_t ndim = b[p + 1];
    p += 2;
    for (size_t d = 0; d < ndim; ++d, p += 8) f.push_back({p, 8});
    f.push_back({p, 8});  // nbytes
    p += 8 + get_le(b, p, 8);
    p += 8;  // the entry's checksum (format version 2)
  }
  return f;
}

const std::vector<uint64_t> kExtremes = {
    0,          1,          2,          7,          255,   65535,     0x7fffffffULL,        0xffffffffULL,
    1ULL << 32, 1ULL << 40, 1ULL << 62, 1ULL << 63, ~0ULL, ~0ULL - 1, 0x4000000000000001ULL};

// Loads `path`; true when it loaded, false on a gs::Error that names the file. Anything else fails the test.
template <class F>
bool must_load_or_explain(const std::string& path, F&& load, const std::string& what) {
  try {
    load();
    return true;
  } catch (const gs::Error& e) {
    const std::string msg = e.what();
    INFO(what << ": " << msg);
    CHECK(msg.find(path) != std::string::npos);
    return false;
  } catch (const std::exception& e) {
    FAIL_CHECK(what << ": a non-gs::Error exception escaped: " << e.what());
    return false;
  }
}

}  // namespace

TEST_CASE("fuzz: mutated checkpoints load or raise a gs::Error naming the file") {
  TempDir dir("fuzz");
  const std::string good_path = (dir.path / "good.ckpt").string();
  nn::write_checkpoint(good_path, {{"w", gs::arange(6).reshape({2, 3}).to(gs::kFloat32)},
                                   {"step", gs::tensor(std::vector<int64_t>{3, 4}, {2})},
                                   {"mask", gs::tensor({1, 0, 1}).to(gs::kBool)},
                                   {"s", gs::scalar_tensor(2.5, gs::kFloat64)},
                                   {"empty", gs::zeros({0, 4})}});
  const Bytes good = read_all(good_path);
  const std::string path = (dir.path / "m.ckpt").string();
  auto load = [&] {
    auto entries = nn::read_checkpoint(path);
    for (auto& [name, t] : entries) {  // whatever loads must be self-consistent
      CHECK(!name.empty());
      CHECK(t.nbytes() == static_cast<size_t>(t.numel()) * t.element_size());
    }
  };
  int loaded = 0, rejected = 0;
  auto attempt = [&](const Bytes& b, const std::string& what) {
    write_all(path, b);
    (must_load_or_explain(path, load, what) ? loaded : rejected)++;
  };

  // 1. Every truncation, raw and with the size and checksum recomputed.
  for (size_t keep = 0; keep < good.size(); ++keep) {
    Bytes t(good.begin(), good.begin() + static_cast<long>(keep));
    attempt(t, "truncated to " + std::to_string(keep));
    attempt(fix_checkpoint(t), "truncated to " + std::to_string(keep) + ", checksum fixed");
  }
  // 2. Every bit of every byte flipped, with the checksum recomputed (the parser sees it).
  for (size_t i = 0; i < good.size() - 8; ++i)
    for (int bit = 0; bit < 8; ++bit) {
      Bytes m = good;
      m[i] ^= static_cast<uint8_t>(1u << bit);
      attempt(fix_checkpoint(m), "bit " + std::to_string(bit) + " of byte " + std::to_string(i));
    }
  // 3. Every size-like field set to extreme values (huge, zero, wrapping products).
  for (const Field& f : checkpoint_fields(good))
    for (uint64_t v : kExtremes) {
      Bytes m = good;
      put_le(m, f.at, v, f.width);
      attempt(fix_checkpoint(m), "field at " + std::to_string(f.at) + " = " + std::to_string(v));
      attempt(m, "field at " + std::to_string(f.at) + " = " + std::to_string(v) + ", checksum stale");
    }
  // 4. Random runs of random bytes, random insertions and deletions.
  Rng rng{0x5eedf00d};
  for (int i = 0; i < 1500 * rounds(); ++i) {
    Bytes m = good;
    const size_t at = rng.below(m.size());
    switch (rng.below(3)) {
      case 0:
        for (size_t k = 0, n = 1 + rng.below(16); k < n && at + k < m.size(); ++k)
          m[at + k] = static_cast<uint8_t>(rng.next());
        break;
      case 1: m.insert(m.begin() + static_cast<long>(at), 1 + rng.below(12), static_cast<uint8_t>(rng.next())); break;
      default:
        m.erase(m.begin() + static_cast<long>(at),
                m.begin() + static_cast<long>(std::min(m.size(), at + 1 + rng.below(12))));
    }
    attempt(fix_checkpoint(m), "random mutation " + std::to_string(i));
  }
  MESSAGE("checkpoint fuzz: " << loaded << " loaded, " << rejected << " rejected");
  CHECK(rejected > 0);
  CHECK(loaded > 0);  // some flips (in data bytes) leave a valid file
}

TEST_CASE("fuzz: mutated IDX files load or raise a gs::Error naming the file") {
  TempDir dir("fuzz");
  // 3 images of 4x5 and the matching labels.
  Bytes images = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5};
  for (int i = 0; i < 60; ++i) images.push_back(static_cast<uint8_t>(i * 7));
  const Bytes labels = {0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 9};
  const std::string ip = (dir.path / "im").string(), lp = (dir.path / "lb").string();
  int loaded = 0, rejected = 0;
  auto attempt = [&](const Bytes& im, const Bytes& lb, const std::string& what) {
    write_all(ip, im);
    write_all(lp, lb);
    const bool ok = must_load_or_explain(
        ip, [&] { (void)nn::read_idx(ip); }, what);
    if (ok) {
      try {
        auto [x, y] = nn::read_idx_images_labels(ip, lp);
        CHECK(x.size(0) == y.size(0));
      } catch (const gs::Error&) {  // counts disagree, a bad label: fine, as long as it is a gs::Error
      }
    }
    (ok ? loaded : rejected)++;
  };
  for (size_t keep = 0; keep <= images.size(); ++keep)
    attempt(Bytes(images.begin(), images.begin() + static_cast<long>(keep)), labels,
            "truncated to " + std::to_string(keep));
  for (size_t i = 0; i < images.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      Bytes m = images;
      m[i] ^= static_cast<uint8_t>(1u << bit);
      attempt(m, labels, "bit " + std::to_string(bit) + " of byte " + std::to_string(i));
    }
  for (size_t d = 0; d < 3; ++d)
    for (uint64_t v : kExtremes) {
      Bytes m = images;
      for (int k = 0; k < 4; ++k) m[4 + 4 * d + k] = static_cast<uint8_t>(v >> (24 - 8 * k));  // big-endian u32
      attempt(m, labels, "dim " + std::to_string(d) + " = " + std::to_string(static_cast<uint32_t>(v)));
    }
  Rng rng{0x1d8f};
  for (int i = 0; i < 500 * rounds(); ++i) {
    Bytes m = images;
    const size_t at = rng.below(16);  // mostly the header
    for (size_t k = 0, n = 1 + rng.below(4); k < n && at + k < m.size(); ++k)
      m[at + k] = static_cast<uint8_t>(rng.next());
    attempt(m, labels, "random header mutation " + std::to_string(i));
  }
  MESSAGE("IDX fuzz: " << loaded << " loaded, " << rejected << " rejected");
  CHECK(rejected > 0);
  CHECK(loaded > 0);
}
