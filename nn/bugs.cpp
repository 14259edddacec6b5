// The silent-bug catalog's entries, generated from nn/bug_table.h (see bugs.h and
// docs/catalog.md).
#include "nn/bugs.h"

#include <cctype>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace gradsleuth::nn {

namespace {

std::vector<std::string> words(const char* s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

const std::vector<BugInfo>& bug_catalog() {
#define GS_BUG_ROW(id, title, lives_in, checks, recipes) \
  BugInfo{Bug::id, #id, title, lives_in, words(checks), words(recipes)},
  static const std::vector<BugInfo> table = {GS_BUG_TABLE(GS_BUG_ROW)};
#undef GS_BUG_ROW
  return table;
}

const BugInfo& bug_info(Bug b) {
  const auto i = static_cast<size_t>(b);
  GS_CHECK(i >= 1 && i <= bug_catalog().size(), "bug_info", "no bug with number ", i, " (the catalog has ", bug_range(),
           ")");
  return bug_catalog()[i - 1];
}

std::string bug_code(Bug b) { return bug_info(b).code; }

std::string bug_range() { return bug_catalog().front().code + ".." + bug_catalog().back().code; }

Bug parse_bug(std::string_view name) {
  std::string_view digits = name;
  if (!digits.empty() && (digits[0] == 'B' || digits[0] == 'b')) digits.remove_prefix(1);
  bool ok = !digits.empty() && digits.size() <= 4;
  for (char c : digits) ok = ok && std::isdigit(static_cast<unsigned char>(c));
  const int n = ok ? std::atoi(std::string(digits).c_str()) : 0;
  GS_CHECK(n >= 1 && n <= kNumBugs, "parse_bug", "unknown bug '", std::string(name), "': the catalog has ", bug_range(),
           " (gradsleuth zoo --list, docs/catalog.md)");
  return static_cast<Bug>(n);
}

bool BugSet::empty() const {
  for (uint64_t w : words_)
    if (w != 0) return false;
  return true;
}

std::vector<Bug> BugSet::list() const {
  std::vector<Bug> out;
  for (size_t w = 0; w < words_.size(); ++w)
    for (size_t bit = 0; bit < 64; ++bit)
      if ((words_[w] >> bit) & 1u) out.push_back(static_cast<Bug>(w * 64 + bit));
  return out;
}

std::string BugSet::str() const {
  std::string s;
  for (Bug b : list()) s += (s.empty() ? "" : ", ") + bug_code(b);
  return s.empty() ? "none" : s;
}

}  // namespace gradsleuth::nn
