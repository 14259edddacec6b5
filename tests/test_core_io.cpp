// core/io.h: write_file_atomic writes whole files or leaves the old one, and clears the temp
// files that killed writers of the same path left behind.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "core/io.h"
#include "temp_dir.h"

namespace gs = gradsleuth;
namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

size_t regular_files(const fs::path& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

}  // namespace

TEST_CASE("write_file_atomic replaces the file, and a failed write leaves the old one and no temp file") {
  TempDir dir("io");
  const fs::path target = dir.path / "out.json";
  gs::write_file_atomic(target.string(), "{\"a\": 1}\n", "test");
  CHECK(read(target) == "{\"a\": 1}\n");
  gs::write_file_atomic(target.string(), "{\"a\": 2}\n", "test");
  CHECK(read(target) == "{\"a\": 2}\n");

  gs::testing::set_file_write_failure(3);
  try {
    gs::write_file_atomic(target.string(), "{\"a\": 3}\n", "my-command");
    FAIL("expected a gs::Error");
  } catch (const gs::Error& e) {
    CHECK(e.op() == "my-command");
    CHECK(std::string(e.what()).find(target.string()) != std::string::npos);
    CHECK(std::string(e.what()).find("previous file (if any) is unchanged") != std::string::npos);
  }
  gs::testing::set_file_write_failure(std::nullopt);
  CHECK(read(target) == "{\"a\": 2}\n");
  CHECK(regular_files(dir.path) == 1);
}

TEST_CASE("write_file_atomic names the path when it is a directory or its directory is missing") {
  TempDir dir("io");
  try {
    gs::write_file_atomic(dir.path.string(), "x", "test");
    FAIL("expected a gs::Error");
  } catch (const gs::Error& e) {
    CHECK(std::string(e.what()).find("is a directory") != std::string::npos);
  }
  const std::string missing = (dir.path / "missing" / "out.txt").string();
  try {
    gs::write_file_atomic(missing, "x", "test");
    FAIL("expected a gs::Error");
  } catch (const gs::Error& e) {
    CHECK(std::string(e.what()).find(missing) != std::string::npos);
  }
  CHECK_THROWS_AS(gs::write_file_atomic("", "x", "test"), gs::Error);
}

TEST_CASE("write_file_atomic removes temp files left by killed writers of the same path") {
  TempDir dir("io");
  const std::string path = (dir.path / "report.html").string();
  const pid_t pid = ::fork();  // a process that is gone by the time we write
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  const std::string stale = path + ".tmp." + std::to_string(pid);
  std::ofstream(stale) << "half a report";
  const std::string other = (dir.path / ("other.html.tmp." + std::to_string(pid))).string();
  std::ofstream(other) << "another file's temp";
  gs::write_file_atomic(path, "<html></html>\n", "test");
  CHECK(!fs::exists(stale));
  CHECK(fs::exists(other));  // only temp files of the path being written
  CHECK(read(path) == "<html></html>\n");
  CHECK(gs::atomic_temp_path(path) == path + ".tmp." + std::to_string(::getpid()));
}
