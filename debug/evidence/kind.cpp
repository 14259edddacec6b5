// Finding kinds (see kind.h): their JSON names and the check that emits each.
#include "debug/evidence/kind.h"

#include <iterator>

namespace gradsleuth::debug {

namespace {
struct KindRow {
  Kind kind;
  std::string_view name, check;
};
constexpr KindRow kRows[] = {
#define GS_KIND_ROW(sym, name, check) {Kind::sym, name, check},
    GS_FINDING_KINDS(GS_KIND_ROW)
#undef GS_KIND_ROW
};
constexpr Kind kKinds[] = {
#define GS_KIND_VALUE(sym, name, check) Kind::sym,
    GS_FINDING_KINDS(GS_KIND_VALUE)
#undef GS_KIND_VALUE
};
}  // namespace

std::string_view kind_name(Kind k) {
  const auto i = static_cast<size_t>(k);
  return i < std::size(kRows) ? kRows[i].name : std::string_view("none");
}

std::string_view kind_check(Kind k) {
  const auto i = static_cast<size_t>(k);
  return i < std::size(kRows) ? kRows[i].check : std::string_view();
}

const Kind* all_kinds(size_t* count) {
  *count = std::size(kKinds);
  return kKinds;
}

}  // namespace gradsleuth::debug
