// The silent-bug catalog (B01-B28; docs/catalog.md): bugs that make
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

namespace gradsleuth::nn {

enum class Bug : uint8_t {
  B01 = 1, B02, B03, B04, B05, B06, B07, B08, B09, B10, B11, B12, B13, B14,
  B15, B16, B17, B18, B19, B20, B21, B22, B23, B24, B25, B26, B27, B28,
};
inline constexpr int kNumBugs = 28;

struct BugInfo {
  Bug id;
  std::string code;                    // "B13"
  std::string title;                   // "reshape where a transpose was meant (batch mixing)"
  std::string lives_in;                // where to switch it on: "nn::Linear", "nn::DataLoader", "recipe", ...
  std::vector<std::string> caught_by;  // the intended checks: {"M6"}
};

// B01 ... B28, in order.
const std::vector<BugInfo>& bug_catalog();
const BugInfo& bug_info(Bug b);
// "B13", "b13" or "13" -> Bug::B13; anything else raises an error listing the valid ids.
Bug parse_bug(std::string_view name);
std::string bug_code(Bug b);  // "B13"

// A set of bugs (a bit per bug).
class BugSet {
 public:
  BugSet() = default;
  BugSet(std::initializer_list<Bug> bugs) {
    for (Bug b : bugs) add(b);
  }
  bool has(Bug b) const { return (bits_ >> static_cast<int>(b)) & 1u; }
  BugSet& add(Bug b) {
    bits_ |= 1u << static_cast<int>(b);
    return *this;
  }
  BugSet& remove(Bug b) {
    bits_ &= ~(1u << static_cast<int>(b));
    return *this;
  }
  bool empty() const { return bits_ == 0; }
  std::vector<Bug> list() const;
  std::string str() const;  // "B03, B13" or "none"
  bool operator==(const BugSet& o) const { return bits_ == o.bits_; }

 private:
  uint32_t bits_ = 0;
};

}  // namespace gradsleuth::nn
