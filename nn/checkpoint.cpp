// Checkpoint files: the writer (atomic: temp file, fsync, rename) and the reader
// (size, checksum, then entry-by-entry bounds checks). Format: docs/checkpoint-format.md.
#include "nn/checkpoint.h"

#include <algorithm>
#include <mutex>

#include "core/io.h"
#include "core/warning.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>

namespace gradsleuth::nn {

namespace {

constexpr char kMagic[8] = {'G', 'S', 'C', 'K', 'P', 'T', '0', '1'};
constexpr uint32_t kVersion = 2;          // written; version 1 files (no entry checksums) are still read
constexpr uint64_t kEntryCheckBytes = 8;  // version 2: each entry ends with its own checksum
// The entry checksum starts from FNV-1a's basis mixed with "GSENTRY2", so it never equals the file's.
constexpr uint64_t kEntryBasis = 0xcbf29ce484222325ULL ^ 0x3259525452454e53ULL;
constexpr uint64_t kHeaderBytes = 8 + 4 + 4 + 8 + 8;  // magic, version, reserved, count, file size
constexpr uint64_t kChecksumBytes = 8;

std::optional<uint64_t> g_fail_after;  // testing::set_checkpoint_write_failure
std::optional<uint64_t> g_kill_after;  // testing::set_checkpoint_kill_after

// FNV-1a, 64 bit: h = (h xor byte) * prime for every byte.
struct Fnv1a {
  explicit Fnv1a(uint64_t basis = 0xcbf29ce484222325ULL) : h(basis) {}
  uint64_t h;
  void update(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  }
};

std::string errno_str() { return std::strerror(errno); }

// Tensor data as little-endian bytes (a no-op on little-endian hosts).
std::vector<uint8_t> le_bytes(const Tensor& t) {
  Tensor c = t.detach().cpu().contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  std::vector<uint8_t> out(p, p + c.nbytes());
  if constexpr (std::endian::native == std::endian::big) {
    const size_t s = c.element_size();
    for (size_t i = 0; i + s <= out.size(); i += s) std::reverse(out.begin() + i, out.begin() + i + s);
  }
  return out;
}

// Streams bytes into a FILE*, updating the checksum; honours the test fault hook.
class Writer {
 public:
  Writer(FILE* f, std::string tmp) : f_(f), tmp_(std::move(tmp)) {}
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    if (g_kill_after && written_ + n > *g_kill_after) {
      std::fwrite(p, 1, static_cast<size_t>(*g_kill_after - written_), f_);
      std::fflush(f_);
      ::kill(::getpid(), SIGKILL);
    }
    if (g_fail_after && written_ + n > *g_fail_after) {
      const size_t part = static_cast<size_t>(*g_fail_after - written_);
      if (part) std::fwrite(p, 1, part, f_);
      GS_FAIL("nn::save", "simulated write failure after ", *g_fail_after, " bytes of '", tmp_,
              "' (testing::set_checkpoint_write_failure)");
    }
    if (n && std::fwrite(p, 1, n, f_) != n)
      GS_FAIL("nn::save", "writing '", tmp_, "' failed after ", written_, " bytes: ", errno_str(),
              ". Is the disk full?");
    sum_.update(p, n);
    written_ += n;
  }
  template <class T>
  void le(T v) {  // an integer, little-endian
    uint8_t b[sizeof(T)];
    auto u = static_cast<std::make_unsigned_t<T>>(v);
    for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<uint8_t>(u >> (8 * i));
    bytes(b, sizeof(T));
  }
  uint64_t checksum() const { return sum_.h; }
  uint64_t written() const { return written_; }

 private:
  FILE* f_;
  std::string tmp_;
  Fnv1a sum_;
  uint64_t written_ = 0;
};

// Bounds-checked little-endian reads from the file's bytes.
class Reader {
 public:
  Reader(const std::vector<uint8_t>& buf, size_t end, std::string path)
      : buf_(buf), end_(end), path_(std::move(path)) {}
  const uint8_t* take(size_t n, const std::string& what) {
    GS_CHECK(n <= end_ - pos_, "nn::load", "'", path_, "' is truncated or corrupted: reading ", what, " needs ", n,
             " bytes at offset ", pos_, " but the data ends at ", end_);
    const uint8_t* p = buf_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  T le(const std::string& what) {
    const uint8_t* p = take(sizeof(T), what);
    std::make_unsigned_t<T> u = 0;
    for (size_t i = 0; i < sizeof(T); ++i) u |= static_cast<std::make_unsigned_t<T>>(p[i]) << (8 * i);
    return static_cast<T>(u);
  }
  size_t pos() const { return pos_; }

 private:
  const std::vector<uint8_t>& buf_;
  size_t end_;
  size_t pos_ = 0;
  std::string path_;
};

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

}  // namespace

namespace testing {
void set_checkpoint_write_failure(std::optional<uint64_t> after_bytes) { g_fail_after = after_bytes; }
void set_checkpoint_kill_after(std::optional<uint64_t> after_bytes) { g_kill_after = after_bytes; }
}  // namespace testing

// ---- writing ------------------------------------------------------------------------
void write_checkpoint(const std::string& path, const NamedTensors& entries) {
  GS_CHECK(!path.empty(), "nn::save", "the checkpoint path is empty");
  std::set<std::string> seen;
  uint64_t file_size = kHeaderBytes + kChecksumBytes;
  for (const auto& [name, t] : entries) {
    GS_CHECK(!name.empty() && name.size() < (1u << 16), "nn::save", "entry names must be 1..65535 bytes, got '", name,
             "'");
    GS_CHECK(seen.insert(name).second, "nn::save", "the name '", name, "' appears twice; names must be unique");
    GS_CHECK(t.defined(), "nn::save", "'", name, "' is an undefined tensor; nothing to save");
    file_size += 4 + name.size() + 1 + 1 + 8 * static_cast<uint64_t>(t.dim()) + 8 + t.nbytes() + kEntryCheckBytes;
  }

  remove_stale_temp_files(path);  // left by saves that were killed
  const std::string tmp = atomic_temp_path(path);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  GS_CHECK(f != nullptr, "nn::save", "cannot create the temporary file '", tmp, "' for '", path, "': ", errno_str(),
           ". Check that the directory exists and is writable.");
  try {
    Writer w(f, tmp);
    w.bytes(kMagic, sizeof(kMagic));
    w.le<uint32_t>(kVersion);
    w.le<uint32_t>(0);  // reserved
    w.le<uint64_t>(entries.size());
    w.le<uint64_t>(file_size);
    for (const auto& [name, t] : entries) {
      // The entry's bytes (name, dtype, shape, byte count, data) in a buffer, for its own checksum.
      std::vector<uint8_t> e;
      auto put = [&](uint64_t v, int n) {
        for (int i = 0; i < n; ++i) e.push_back(static_cast<uint8_t>(v >> (8 * i)));
      };
      put(name.size(), 4);
      e.insert(e.end(), name.begin(), name.end());
      put(static_cast<uint8_t>(t.dtype()), 1);
      put(static_cast<uint8_t>(t.dim()), 1);
      for (int64_t s : t.shape()) put(static_cast<uint64_t>(s), 8);
      const std::vector<uint8_t> data = le_bytes(t);
      put(data.size(), 8);
      w.bytes(e.data(), e.size());
      w.bytes(data.data(), data.size());
      Fnv1a check(kEntryBasis);
      check.update(e.data(), e.size());
      check.update(data.data(), data.size());
      w.le<uint64_t>(check.h);
    }
    const uint64_t sum = w.checksum();
    w.le<uint64_t>(sum);
    GS_CHECK(w.written() == file_size, "nn::save", "internal error: wrote ", w.written(), " bytes, expected ",
             file_size);
    GS_CHECK(std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0, "nn::save", "flushing '", tmp,
             "' to disk failed: ", errno_str());
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    const std::string err = errno_str();
    std::remove(tmp.c_str());
    GS_FAIL("nn::save", "closing '", tmp, "' failed: ", err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_str();
    std::remove(tmp.c_str());
    GS_FAIL("nn::save", "cannot move '", tmp, "' over '", path, "': ", err,
            ". The previous file (if any) is unchanged.");
  }
  fsync_parent_dir(path);
}

void save(const Module& module, const std::string& path) {
  NamedTensors entries = module.named_parameters();
  for (auto& b : module.named_buffers()) entries.push_back(b);
  write_checkpoint(path, entries);
}

void save_state(const std::map<std::string, Tensor>& state, const std::string& path) {
  write_checkpoint(path, NamedTensors(state.begin(), state.end()));
}

// ---- reading ------------------------------------------------------------------------
namespace {
// Appends up to `n` more bytes of `f` to `buf`, in chunks, so memory grows only with
// bytes actually present (a header promising 2^60 bytes allocates nothing up front).
void read_upto(FILE* f, std::vector<uint8_t>& buf, uint64_t n, const std::string& path) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min(n, kChunk));
    const size_t old = buf.size();
    buf.resize(old + want);
    const size_t got = std::fread(buf.data() + old, 1, want, f);
    buf.resize(old + got);
    if (got < want) {
      GS_CHECK(!std::ferror(f), "nn::load", "reading '", path, "' failed after ", buf.size(), " bytes: ", errno_str());
      return;  // EOF
    }
    n -= got;
  }
}

// int64 and float64 have the same size, so an entry whose dtype byte was changed from one to
// the other still agrees with its shape and byte count. Version 2 files refuse that by each
// entry's own checksum; in version 1 files the values tell: small integers read as float64 are
// subnormal numbers (the bits of 1 are 4.9e-324) and negative ones NaNs with a payload no
// computation makes (-1 is all ones; a computed NaN is the quiet NaN 0x7ff8... or 0xfff8...). A
// float64 entry whose every nonzero element is subnormal, infinite or NaN, with at least one
// subnormal or payload-carrying NaN, is int64 data under an edited dtype. Stops at the first
// ordinary number, so real data costs nothing. (Large int64 values, 2^60 and up, read as
// ordinary floats: only a version 2 file's entry checksum catches those.)
void check_not_relabelled_int64(const uint8_t* data, uint64_t nbytes, const char* op, const std::string& path,
                                const std::string& where) {
  uint64_t int_like = 0;
  for (uint64_t k = 0; k + 8 <= nbytes; k += 8) {
    const uint64_t bits = read_le64(data + k);
    const uint64_t exponent = (bits >> 52) & 0x7ff, mantissa = bits & ((uint64_t{1} << 52) - 1);
    if ((bits << 1) == 0) continue;                  // +-0
    if (exponent != 0 && exponent != 0x7ff) return;  // an ordinary number: real float64 data
    if (exponent == 0 || (mantissa != 0 && mantissa != (uint64_t{1} << 51))) ++int_like;
  }
  GS_CHECK(int_like == 0, op, "'", path, "': ", where,
           " is recorded as float64 but its nonzero elements are all "
           "subnormal or NaN, the bit patterns of integers: the bytes are int64 data under an edited dtype "
           "field (the checksum was recomputed after the edit, or the file was not written by nn::save). "
           "Use the original file.");
}
// The C++ constant of a floating dtype, for the fix a message suggests.
const char* dtype_constant(DType t) {
  switch (t) {
    case DType::Float64: return "gs::kFloat64";
    case DType::Float16: return "gs::kFloat16";
    case DType::BFloat16: return "gs::kBFloat16";
    default: return "gs::kFloat32";
  }
}
}  // namespace

NamedTensors read_checkpoint(const std::string& path) {
  const char* op = "nn::load";
  // Read with a bound: the header first, then exactly the size it records, then one
  // byte more to confirm the end. /dev/zero, a FIFO or a directory never reaches a
  // read that grows without limit.
  struct stat st {};
  const bool have_stat = ::stat(path.c_str(), &st) == 0;
  GS_CHECK(!(have_stat && S_ISDIR(st.st_mode)), op, "'", path,
           "' is a directory, not a checkpoint file; pass the "
           "path of the file nn::save wrote (e.g. run/model.ckpt)");
  FILE* f = std::fopen(path.c_str(), "rb");
  GS_CHECK(f != nullptr, op, "cannot open '", path, "': ", errno_str(),
           errno == EACCES ? " (check the file's permissions)" : "");
  std::unique_ptr<FILE, int (*)(FILE*)> closer(f, &std::fclose);
  const bool regular = have_stat && S_ISREG(st.st_mode);
  std::vector<uint8_t> buf;
  read_upto(f, buf, sizeof(kMagic), path);
  uint64_t size = buf.size();

  GS_CHECK(size >= sizeof(kMagic), op, "'", path, "' is truncated: it has ", size,
           " bytes, fewer than the 8-byte magic \"GSCKPT01\"");
  if (std::memcmp(buf.data(), kMagic, sizeof(kMagic)) != 0) {
    std::string head;
    for (size_t i = 0; i < sizeof(kMagic); ++i)
      head += (buf[i] >= 32 && buf[i] < 127) ? static_cast<char>(buf[i]) : '.';
    GS_FAIL(op, "'", path, "' is not a gradsleuth checkpoint: it starts with \"", head, "\" instead of \"GSCKPT01\"",
            (buf[0] == 'P' && buf[1] == 'K' ? " (a zip archive: PyTorch .pt files cannot be read)" : ""));
  }
  read_upto(f, buf, kHeaderBytes + kChecksumBytes - sizeof(kMagic), path);
  size = buf.size();
  GS_CHECK(size >= kHeaderBytes + kChecksumBytes, op, "'", path, "' is truncated: it has ", size,
           " bytes, fewer than the ", kHeaderBytes + kChecksumBytes, " of an empty checkpoint");
  const uint64_t recorded = read_le64(buf.data() + 24);
  // A regular file's length is known: compare before reading anything more.
  const uint64_t file_bytes = regular ? static_cast<uint64_t>(st.st_size) : 0;
  if (regular && file_bytes < recorded)
    GS_FAIL(op, "'", path, "' is truncated: its header says ", recorded, " bytes but the file has ", file_bytes,
            " (an interrupted copy or download?)");
  if (recorded > size) read_upto(f, buf, recorded - size, path);
  size = buf.size();
  if (size < recorded)
    GS_FAIL(op, "'", path, "' is truncated: its header says ", recorded, " bytes but the file has ", size,
            " (an interrupted copy or download?)");
  uint8_t extra = 0;
  const bool longer = size > recorded || std::fread(&extra, 1, 1, f) == 1;
  GS_CHECK(!longer, op, "'", path, "' is corrupted: its header says ", recorded, " bytes but the file has ",
           regular ? std::to_string(file_bytes) : "more (it does not end there)");
  Reader r(buf, size - kChecksumBytes, path);
  r.take(sizeof(kMagic), "the magic");
  const auto version = r.le<uint32_t>("the version");
  GS_CHECK(version == 1 || version == kVersion, op, "'", path, "' has format version ", version,
           "; this build reads versions 1 and ", kVersion, ". It was written by a different gradsleuth version.");
  r.le<uint32_t>("the reserved field");
  const auto count = r.le<uint64_t>("the entry count");
  r.le<uint64_t>("the file size");
  Fnv1a sum;
  sum.update(buf.data(), size - kChecksumBytes);
  const uint64_t stored = read_le64(buf.data() + size - kChecksumBytes);
  GS_CHECK(sum.h == stored, op, "'", path, "' is corrupted: checksum mismatch (stored ", hex(stored), ", computed ",
           hex(sum.h), "). Some bytes changed after it was written; use another copy.");

  NamedTensors out;
  std::set<std::string> names;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string at = "entry " + std::to_string(i);
    const size_t entry_start = r.pos();
    const auto name_len = r.le<uint32_t>(at + "'s name length");
    const uint8_t* np = r.take(name_len, at + "'s name");
    std::string name(reinterpret_cast<const char*>(np), name_len);
    GS_CHECK(!name.empty(), op, "'", path, "': ", at,
             " has an empty name; every entry needs a unique, non-empty "
             "name (the file was not written by nn::save)");
    GS_CHECK(names.insert(name).second, op, "'", path, "': ", at, " repeats the name '", name,
             "'; names must be unique (the file was not written by nn::save)");
    const std::string where = "'" + name + "'";
    const auto code = r.le<uint8_t>(where + "'s dtype");
    GS_CHECK(code <= static_cast<uint8_t>(DType::BFloat16), op, "'", path, "': ", where, " has unknown dtype code ",
             int(code), " (0 bool, 1 int64, 2 float32, 3 float64, 4 float16, 5 bfloat16)");
    const DType dt = static_cast<DType>(code);
    const auto ndim = r.le<uint8_t>(where + "'s ndim");
    GS_CHECK(ndim <= kMaxDims, op, "'", path, "': ", where, " has ", int(ndim), " dims (at most ", kMaxDims, ")");
    Shape shape;
    for (int d = 0; d < ndim; ++d) {
      const auto s = r.le<int64_t>(where + "'s shape");
      GS_CHECK(s >= 0, op, "'", path, "': ", where, " has a negative size ", s);
      shape.push_back(s);
    }
    const auto nbytes = r.le<uint64_t>(where + "'s byte length");
    uint64_t want = 0;
    try {
      want = static_cast<uint64_t>(checked_nbytes(shape, dtype_size(dt), "size"));
    } catch (const Error& e) {
      GS_FAIL(op, "'", path, "': ", where, " has shape ", shape_str(shape), " whose byte size overflows: ", e.what());
    }
    GS_CHECK(nbytes == want, op, "'", path, "': ", where, " ", dtype_name(dt), shape_str(shape), " should hold ", want,
             " bytes but records ", nbytes);
    const uint8_t* data = r.take(nbytes, where + "'s data");  // the bytes are present: only now allocate
    if (version >= 2) {
      // The entry's own checksum covers its dtype with its bytes: a dtype byte changed and only the
      // file's checksum recomputed (int64 relabelled float64, 8 bytes each) is refused here.
      const size_t entry_end = r.pos();
      const auto stored_check = r.le<uint64_t>(where + "'s entry checksum");
      Fnv1a check(kEntryBasis);
      check.update(buf.data() + entry_start, entry_end - entry_start);
      GS_CHECK(check.h == stored_check, op, "'", path, "': ", where, " (recorded as ", dtype_name(dt), shape_str(shape),
               ") does not match its entry checksum (stored ", hex(stored_check), ", computed ", hex(check.h),
               "): its name, dtype, shape or data changed after nn::save wrote it, and the file's checksum was "
               "recomputed (for example int64 data relabelled float64). Use the original file.");
    }
    if (dt == kBool)
      for (uint64_t k = 0; k < nbytes; ++k)
        GS_CHECK(data[k] <= 1, op, "'", path, "': ", where, " is a bool tensor but element ", k, " holds byte ",
                 int(data[k]), " (bools are stored as 0 or 1)");
    if (dt == kFloat64) check_not_relabelled_int64(data, nbytes, op, path, where);
    Tensor t = empty(shape, dt);
    if (nbytes) std::memcpy(t.raw_data(), data, nbytes);
    if constexpr (std::endian::native == std::endian::big) {
      auto* p = static_cast<uint8_t*>(t.raw_data());
      const size_t s = dtype_size(dt);
      for (size_t k = 0; k + s <= nbytes; k += s) std::reverse(p + k, p + k + s);
    }
    out.emplace_back(std::move(name), t);
  }
  GS_CHECK(r.pos() == size - kChecksumBytes, op, "'", path, "' is corrupted: ", size - kChecksumBytes - r.pos(),
           " unread bytes after the last entry");
  return out;
}

std::map<std::string, Tensor> load_state(const std::string& path) {
  NamedTensors entries = read_checkpoint(path);
  return std::map<std::string, Tensor>(entries.begin(), entries.end());
}

namespace {
std::mutex& loads_mutex() {
  static std::mutex m;
  return m;
}
std::vector<LoadRecord>& loads() {
  static std::vector<LoadRecord> kept;
  return kept;
}
void remember_load(LoadRecord r) {
  std::lock_guard<std::mutex> lock(loads_mutex());
  std::vector<LoadRecord>& kept = loads();
  kept.push_back(std::move(r));
  if (kept.size() > 8) kept.erase(kept.begin());
}
}  // namespace

LoadReport load(Module& module, const std::string& path, bool strict) {
  const char* op = "nn::load";
  NamedTensors file = read_checkpoint(path);
  std::map<std::string, Tensor> from_file(file.begin(), file.end());

  NamedTensors expected = module.named_parameters();
  for (auto& b : module.named_buffers()) expected.push_back(b);
  std::set<std::string> expected_names;
  for (auto& [n, t] : expected) expected_names.insert(n);

  // Collect every difference first, so one error lists them all and nothing is half-loaded.
  std::vector<std::string> missing, unexpected, mismatched;
  for (auto& [name, cur] : expected) {
    auto it = from_file.find(name);
    if (it == from_file.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& v = it->second;
    if (v.shape() != cur.shape())
      mismatched.push_back(name + ": checkpoint has shape " + shape_str(v.shape()) + ", model expects " +
                           shape_str(cur.shape()));
    else if (v.dtype() != cur.dtype())
      mismatched.push_back(name + ": checkpoint has dtype " + dtype_name(v.dtype()) + ", model expects " +
                           dtype_name(cur.dtype()) + " (convert the model with model.to(" + dtype_constant(v.dtype()) +
                           ") before loading)");
  }
  for (auto& [name, t] : file)
    if (!expected_names.count(name)) unexpected.push_back(name);

  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 10; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 10) s += ", ... (" + std::to_string(v.size() - 10) + " more)";
    return s;
  };
  std::string problems;
  for (auto& m : mismatched) problems += "\n  " + m;
  if (strict && !missing.empty()) problems += "\n  missing from the checkpoint: " + list(missing);
  if (strict && !unexpected.empty()) problems += "\n  in the checkpoint but not in the model: " + list(unexpected);
  if (!problems.empty())
    GS_FAIL(op, "'", path, "' does not match the ", module.type_name(), " it is loaded into:", problems,
            (strict && (!missing.empty() || !unexpected.empty())
                 ? "\nWas it saved from a different architecture? (load(module, path, /*strict=*/false) skips "
                   "missing and unexpected names.)"
                 : ""));

  LoadReport report;
  report.missing = missing;
  report.unexpected = unexpected;
  for (auto& [name, cur] : expected)
    if (from_file.count(name)) report.loaded.push_back(name);
  if (!strict && report.loaded.empty() && !(expected.empty() && file.empty()))
    GS_FAIL(op, "'", path, "' has no entry in common with the ", module.type_name(), " (strict=false): the model has ",
            expected.size(), " tensor(s) (", list(missing), "), the file has ", file.size(), " (", list(unexpected),
            "). Nothing was loaded. Is this the right file, or were the names prefixed differently?");
  if (!strict && (!missing.empty() || !unexpected.empty()))
    warn({"", "nn::load('" + path + "')",
          "strict=false loaded " + std::to_string(report.loaded.size()) + " tensor(s) and skipped " +
              std::to_string(missing.size()) + " missing from the checkpoint" +
              (missing.empty() ? std::string() : " (" + list(missing) + ")") + " and " +
              std::to_string(unexpected.size()) + " not in the model" +
              (unexpected.empty() ? std::string() : " (" + list(unexpected) + ")")});

  LoadRecord record{path, {}, {}, {}};
  for (auto& [name, t] : file)
    if (!expected_names.count(name)) record.unexpected.push_back({name, t.shape(), {}});
  for (auto& [name, cur] : expected) {
    auto it = from_file.find(name);
    if (it == from_file.end()) {
      record.missing.push_back({name, cur.shape(), cur.impl_ptr()});
      continue;
    }
    module.set_tensor(name, it->second.to(cur.device()));
    record.tensors.push_back({name, cur.impl_ptr(), load_sample(it->second)});
  }
  remember_load(std::move(record));
  return report;
}

std::vector<double> load_sample(const Tensor& t) {
  const int64_t n = t.numel(), k = std::min<int64_t>(256, n);
  if (k == 0 || !t.is_floating_point()) return {};
  const Tensor flat = t.detach().to(kCPU).to(kFloat64).contiguous().reshape({-1});
  const double* v = flat.data_ptr<double>();
  std::vector<double> out(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) out[static_cast<size_t>(i)] = v[i * n / k];
  return out;
}

std::vector<LoadRecord> load_records() {
  std::lock_guard<std::mutex> lock(loads_mutex());
  return loads();
}

}  // namespace gradsleuth::nn
