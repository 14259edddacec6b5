// Atomic file writes (io.h): temp file, fsync, rename, fsync of the directory.
#include "core/io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace gradsleuth {

namespace {
std::optional<uint64_t> g_fail_after;  // testing::set_file_write_failure

std::string errno_str() { return std::strerror(errno); }
}  // namespace

namespace testing {
void set_file_write_failure(std::optional<uint64_t> after_bytes) { g_fail_after = after_bytes; }
}  // namespace testing

std::string atomic_temp_path(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

size_t remove_stale_temp_files(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string prefix = p.filename().string() + ".tmp.";
  size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code rm;
    if (fs::remove(it->path(), rm)) ++removed;
  }
  return removed;
}

void fsync_parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_file_atomic(const std::string& path, const std::string& contents, const char* op) {
  GS_CHECK(!path.empty(), op, "the output path is empty");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    GS_FAIL(op, "'", path, "' is a directory; give a file name inside it, such as '", path,
            (path.back() == '/' ? "" : "/"), "report.html'");

  remove_stale_temp_files(path);  // left by writes that were killed
  const std::string tmp = atomic_temp_path(path);
  FILE* f = std::fopen(tmp.c_str(), "wb");
  GS_CHECK(f != nullptr, op, "cannot write '", path, "': creating the temporary file '", tmp, "' failed: ", errno_str(),
           ". Check that the directory exists and is writable. The previous file (if any) is unchanged.");
  auto fail = [&](const std::string& why) {
    std::fclose(f);
    std::remove(tmp.c_str());
    GS_FAIL(op, "cannot write '", path, "': ", why, ". The previous file (if any) is unchanged.");
  };
  size_t n = contents.size();
  if (g_fail_after && *g_fail_after < n) {
    std::fwrite(contents.data(), 1, static_cast<size_t>(*g_fail_after), f);
    fail("simulated write failure after " + std::to_string(*g_fail_after) + " bytes of '" + tmp +
         "' (testing::set_file_write_failure)");
  }
  if (n && std::fwrite(contents.data(), 1, n, f) != n)
    fail("writing '" + tmp + "' failed: " + errno_str() + " (disk full?)");
  if (std::fflush(f) != 0 || ::fsync(::fileno(f)) != 0) fail("flushing '" + tmp + "' to disk failed: " + errno_str());
  if (std::fclose(f) != 0) {
    const std::string err = errno_str();
    std::remove(tmp.c_str());
    GS_FAIL(op, "cannot write '", path, "': closing '", tmp, "' failed: ", err,
            ". The previous file (if any) is unchanged.");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_str();
    std::remove(tmp.c_str());
    GS_FAIL(op, "cannot move '", tmp, "' over '", path, "': ", err, ". The previous file (if any) is unchanged.");
  }
  fsync_parent_dir(path);  // make the rename itself durable
}

}  // namespace gradsleuth
