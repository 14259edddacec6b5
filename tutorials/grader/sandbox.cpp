// The write guard of `gradsleuth lab grade-all`: when GS_GRADER_SANDBOX names a folder, a file
// opened for writing, truncated, or changed in mode or owner outside it (or outside /dev) through the
// C library is refused with EACCES and reported ("@write-denied PATH") on grade-all's results channel,
// or on stderr without one; grade-all turns it into the submission's status. It covers the C library's
// calls of the grader and the student's code; the sandbox around the grader (bubblewrap, or Landlock
// and seccomp) also catches raw system calls. Without GS_GRADER_SANDBOX nothing changes.
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "tutorials/grader/grader.h"

namespace {

// The sandbox folder (resolved), or empty when there is none.
const std::string& sandbox() {
  static const std::string dir = [] {
    const char* d = getenv("GS_GRADER_SANDBOX");
    char buf[PATH_MAX];
    return d && *d && realpath(d, buf) ? std::string(buf) : std::string();
  }();
  return dir;
}

// True when `path` (which may not exist yet) lies inside the sandbox or under /dev.
bool allowed(const char* path, int dirfd) {
  if (!path) return true;
  std::string p = path;
  if (p.empty()) return true;
  if (p[0] != '/') {
    char cwd[PATH_MAX];
    if (dirfd != AT_FDCWD) return true;  // relative to an open folder: the kernel's guard decides
    if (!getcwd(cwd, sizeof cwd)) return false;
    p = std::string(cwd) + "/" + p;
  }
  // Resolve the deepest existing parent (the file itself may be new).
  std::string head = p, tail;
  char buf[PATH_MAX];
  while (!realpath(head.c_str(), buf)) {
    const size_t slash = head.find_last_of('/');
    if (slash == std::string::npos || slash == 0) return false;
    tail = head.substr(slash) + tail;
    head = head.substr(0, slash);
  }
  const std::string resolved = std::string(buf) + tail;
  const std::string& box = sandbox();
  auto under = [&](const std::string& dir) {
    return resolved == dir || resolved.compare(0, dir.size() + 1, dir + "/") == 0;
  };
  return under(box) || under("/dev");
}

bool refuse(const char* path, int dirfd) {
  if (sandbox().empty() || allowed(path, dirfd)) return false;
  if (gradsleuth::labs::has_results_channel())
    gradsleuth::labs::write_results_channel("write-denied", path);
  else
    dprintf(2, "@write-denied %s\n", path);
  errno = EACCES;
  return true;
}

bool writes(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)); }
bool writes(const char* mode) { return mode && (strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+')); }

template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  if (writes(flags) && refuse(path, AT_FDCWD)) return -1;
  static auto real = next<int (*)(const char*, int, ...)>("open");
  return real(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  if (writes(flags) && refuse(path, AT_FDCWD)) return -1;
  static auto real = next<int (*)(const char*, int, ...)>("open64");
  return real(path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  if (writes(flags) && refuse(path, dirfd)) return -1;
  static auto real = next<int (*)(int, const char*, int, ...)>("openat");
  return real(dirfd, path, flags, mode);
}

int creat(const char* path, mode_t mode) {
  if (refuse(path, AT_FDCWD)) return -1;
  static auto real = next<int (*)(const char*, mode_t)>("creat");
  return real(path, mode);
}

FILE* fopen(const char* path, const char* mode) {
  if (writes(mode) && refuse(path, AT_FDCWD)) return nullptr;
  static auto real = next<FILE* (*)(const char*, const char*)>("fopen");
  return real(path, mode);
}

FILE* fopen64(const char* path, const char* mode) {
  if (writes(mode) && refuse(path, AT_FDCWD)) return nullptr;
  static auto real = next<FILE* (*)(const char*, const char*)>("fopen64");
  return real(path, mode);
}

int truncate(const char* path, off_t length) noexcept {
  if (refuse(path, AT_FDCWD)) return -1;
  static auto real = next<int (*)(const char*, off_t)>("truncate");
  return real(path, length);
}

int truncate64(const char* path, off64_t length) noexcept {
  if (refuse(path, AT_FDCWD)) return -1;
  static auto real = next<int (*)(const char*, off64_t)>("truncate64");
  return real(path, length);
}

int chmod(const char* path, mode_t mode) noexcept {
  if (refuse(path, AT_FDCWD)) return -1;
  static auto real = next<int (*)(const char*, mode_t)>("chmod");
  return real(path, mode);
}

int fchmodat(int dirfd, const char* path, mode_t mode, int flags) noexcept {
  if (refuse(path, dirfd)) return -1;
  static auto real = next<int (*)(int, const char*, mode_t, int)>("fchmodat");
  return real(dirfd, path, mode, flags);
}

int chown(const char* path, uid_t owner, gid_t group) noexcept {
  if (refuse(path, AT_FDCWD)) return -1;
  static auto real = next<int (*)(const char*, uid_t, gid_t)>("chown");
  return real(path, owner, group);
}

int lchown(const char* path, uid_t owner, gid_t group) noexcept {
  if (refuse(path, AT_FDCWD)) return -1;
  static auto real = next<int (*)(const char*, uid_t, gid_t)>("lchown");
  return real(path, owner, group);
}

}  // extern "C"
