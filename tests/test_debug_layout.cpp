// The debug module's layout as a contributor meets it: every check has one home, a file that holds
// its rule and makes its findings, named by the catalogue and by its docs section; every finding
// kind belongs to a catalogued check.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

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
