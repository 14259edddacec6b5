// The silent-bug catalog (nn/bug_table.h; docs/catalog.md): bugs that make
// training run while quietly computing the wrong thing. Each one is switched on
// by name, in the component where it lives, and is off by default:
//
//   linear->inject_bug(nn::Bug::B13);              // a layer: reshape where a transpose was meant
//   loss.inject_bug(nn::parse_bug("B03"));         // a loss: sum instead of mean
//   nn::DataLoaderOptions().bug(nn::Bug::B28);     // a loader: batches sorted by class
//   optim::TrainerOptions().bug(nn::Bug::B04);     // a training loop: zero_grad() never called
//
// The buggy code path sits right next to the correct one in the component's
// source (search for "BUG B13"), so a student reading a layer sees both. When
// no bug is on, the cost is one test of a bit.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nn/bug_table.h"

namespace gradsleuth::nn {

// B01, B02, ... in the order of the table; 0 is no bug.
#define GS_BUG_ENUMERATOR(id, ...) id,
enum class Bug : uint16_t { kNone = 0, GS_BUG_TABLE(GS_BUG_ENUMERATOR) };
#undef GS_BUG_ENUMERATOR
#define GS_BUG_COUNT(...) +1
inline constexpr int kNumBugs = 0 GS_BUG_TABLE(GS_BUG_COUNT);
#undef GS_BUG_COUNT

struct BugInfo {
  Bug id;
  std::string code;                    // "B13"
  std::string title;                   // "reshape where a transpose was meant (batch mixing)"
  std::string lives_in;                // where to switch it on: "nn::Linear", "nn::DataLoader", "recipe", ...
  std::vector<std::string> caught_by;  // the intended checks: {"M6"}
  std::vector<std::string> recipes;    // the zoo's models that reproduce it: {"mlp", "cnn"}
};

// Every bug of the table, in order (bug_catalog()[i].id == Bug(i + 1)).
const std::vector<BugInfo>& bug_catalog();
const BugInfo& bug_info(Bug b);
// "B13", "b13" or "13" -> Bug::B13; anything else raises an error listing the valid ids.
Bug parse_bug(std::string_view name);
std::string bug_code(Bug b);  // "B13"
std::string bug_range();      // "B01..B28": the first and last id, for help texts

// A set of bugs: a bit per bug, as many words as the table needs.
class BugSet {
 public:
  BugSet() = default;
  BugSet(std::initializer_list<Bug> bugs) {
    for (Bug b : bugs) add(b);
  }
  bool has(Bug b) const {
    const auto i = static_cast<size_t>(b);
    return i / 64 < words_.size() && ((words_[i / 64] >> (i % 64)) & 1u);
  }
  BugSet& add(Bug b) {
    const auto i = static_cast<size_t>(b);
    if (i / 64 >= words_.size()) words_.resize(i / 64 + 1, 0);
    words_[i / 64] |= uint64_t{1} << (i % 64);
    return *this;
  }
  BugSet& remove(Bug b) {
    const auto i = static_cast<size_t>(b);
    if (i / 64 < words_.size()) words_[i / 64] &= ~(uint64_t{1} << (i % 64));
    return *this;
  }
  bool empty() const;
  std::vector<Bug> list() const;
  std::string str() const;  // "B03, B13" or "none"
  bool operator==(const BugSet& o) const { return list() == o.list(); }

 private:
  std::vector<uint64_t> words_;
};

}  // namespace gradsleuth::nn
