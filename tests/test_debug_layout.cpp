// The debug module's layout as a contributor meets it: every check has one home, a file that holds
// its rule and makes its findings, named by the catalogue and by its docs section; every finding
// kind belongs to a catalogued check.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "debug/evidence/catalogue.h"
#include "debug/evidence/kind.h"

namespace dbg = gradsleuth::debug;

namespace {
std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("every check has one home: a file that names it, named by the catalogue and by its docs section") {
  const std::string docs = read(std::string(GS_SOURCE_DIR) + "/docs/checks.md");
  REQUIRE_FALSE(docs.empty());
  for (const dbg::CheckInfo& c : dbg::all_checks()) {
    CAPTURE(c.id);
    REQUIRE_FALSE(c.home.empty());
    const std::string path = std::string(GS_SOURCE_DIR) + "/" + c.home;
    REQUIRE(std::filesystem::exists(path));
    CHECK(std::regex_search(read(path), std::regex("\\b" + c.id + "\\b")));
    // The docs section "### M7 — ..." names the same home before the next section starts.
    const size_t at = docs.find("### " + c.id + " — ");
    REQUIRE(at != std::string::npos);
    const size_t end = docs.find("\n### ", at + 4);
    const std::string section = docs.substr(at, end == std::string::npos ? std::string::npos : end - at);
    CHECK(section.find("**Home.** `" + c.home + "`") != std::string::npos);
  }
}

TEST_CASE("every finding kind has a JSON name of its own and belongs to a catalogued check") {
  size_t n = 0;
  const dbg::Kind* kinds = dbg::all_kinds(&n);
  REQUIRE(n > 1);
  CHECK(kinds[0] == dbg::Kind::None);
  CHECK(dbg::kind_name(dbg::Kind::None) == "none");
  std::set<std::string_view> names;
  for (size_t i = 1; i < n; ++i) {
    const dbg::Kind k = kinds[i];
    CAPTURE(dbg::kind_name(k));
    CHECK(names.insert(dbg::kind_name(k)).second);  // one name per kind
    CHECK(std::regex_match(std::string(dbg::kind_name(k)), std::regex("[a-z0-9]+(-[a-z0-9]+)*")));
    CHECK(dbg::find_check(dbg::kind_check(k)) != nullptr);
  }
  CHECK(dbg::kind_name(dbg::Kind::GradientVanishing) == "gradient-vanishing");
  CHECK(dbg::kind_check(dbg::Kind::GradientVanishing) == "O1");
}

namespace {
// The debug sources (.h, .cpp) under `dir`, as paths relative to the repository.
std::vector<std::string> debug_sources(const std::string& dir) {
  std::vector<std::string> out;
  const std::filesystem::path root(GS_SOURCE_DIR);
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / dir)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".cpp" || ext == ".h"))
      out.push_back(std::filesystem::relative(e.path(), root).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST_CASE("every finding kind is used only in its check's home (the diagnosis matches kinds, evidence declares them)") {
  // kind.h's list: X(Symbol, "json-name", "check").
  const std::string kinds = read(std::string(GS_SOURCE_DIR) + "/debug/evidence/kind.h");
  std::map<std::string, std::string> check_of;
  const std::regex row(R"re(X\((\w+), "[^"]+", "(\w*)"\))re");
  for (auto it = std::sregex_iterator(kinds.begin(), kinds.end(), row); it != std::sregex_iterator(); ++it)
    check_of[(*it)[1]] = (*it)[2];
  REQUIRE(check_of.size() > 10);
  size_t uses = 0;
  const std::regex use(R"re(Kind::(\w+))re");
  for (const std::string& file : debug_sources("debug")) {
    if (file.rfind("debug/diagnosis/", 0) == 0 || file.rfind("debug/evidence/", 0) == 0) continue;
    const std::string text = read(std::string(GS_SOURCE_DIR) + "/" + file);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), use); it != std::sregex_iterator(); ++it) {
      const std::string sym = (*it)[1];
      if (sym == "None") continue;
      CAPTURE(file);
      CAPTURE(sym);
      REQUIRE(check_of.count(sym) == 1);
      const dbg::CheckInfo* c = dbg::find_check(check_of[sym]);
      REQUIRE(c != nullptr);
      CHECK(c->home == file);
      ++uses;
    }
  }
  CHECK(uses > 20);
}

TEST_CASE("the runner (debug/run/) makes findings of its own checks only (W2, W3, W5)") {
  const std::regex made(R"re((make\(|\.check = )"([A-Z][0-9]+)")re");
  size_t own = 0;
  for (const std::string& file : debug_sources("debug/run")) {
    const std::string text = read(std::string(GS_SOURCE_DIR) + "/" + file);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), made); it != std::sregex_iterator(); ++it) {
      const std::string id = (*it)[2];
      CAPTURE(file);
      CAPTURE(id);
      CHECK((id == "W2" || id == "W3" || id == "W5"));
      ++own;
    }
  }
  CHECK(own > 0);  // the scan sees the runner's own findings
}
