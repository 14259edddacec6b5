// A fresh directory under the system's temp dir for one test, removed with its contents
// (permissions restored first) when the test ends.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("gs_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};
