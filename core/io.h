// Files written atomically: a temporary file beside the target, fsync, rename over it, so a
// reader sees the old file or the new one, never half of one (reports, JSON, checkpoints).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace gradsleuth {

// Writes `contents` to `path` atomically. On failure the previous file (if any) is unchanged
// and gradsleuth::Error, from `op` (the caller's name), names the path and the reason.
void write_file_atomic(const std::string& path, const std::string& contents, const char* op);

// An atomic write goes to `<path>.tmp.<pid>` and is renamed over `path`. A process killed
// mid-write (kill -9, power loss) leaves its temp file behind; every atomic write of `path`
// (write_file_atomic, nn::save) first removes the `<path>.tmp.<pid>` files whose process no
// longer exists. Returns how many were removed. (A pid is checked with kill(pid, 0) in this
// pid namespace: keep one writer namespace per directory.)
std::string atomic_temp_path(const std::string& path);
size_t remove_stale_temp_files(const std::string& path);
// fsync of the directory holding `path`, so that a rename into it is durable (best effort).
void fsync_parent_dir(const std::string& path);

namespace testing {
// Test hook: when set, the next write_file_atomic calls fail with a gradsleuth::Error after
// writing this many bytes of the temporary file (std::nullopt: off).
void set_file_write_failure(std::optional<uint64_t> after_bytes);
}  // namespace testing

}  // namespace gradsleuth
