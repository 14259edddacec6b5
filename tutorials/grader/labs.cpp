// The lab this grader grades. Each lab has its own grader executable (labN_grader,
// tutorials/CMakeLists.txt), which compiles this file with GS_LAB_NUMBER=N and links
// only grade_labN.cpp and lab N's code: a lab that does not compile stops only its own
// grader. Adding lab N: write grade_labN.cpp with make_labN(), declare it in labs.h
// and add its folder to GS_LABS (tutorials/README.md).
#include "tutorials/grader/labs.h"

#ifndef GS_LAB_NUMBER
#error "grader/labs.cpp is compiled once per lab with GS_LAB_NUMBER=N (tutorials/CMakeLists.txt)"
#endif

#define GS_MAKE_LAB_(n) make_lab##n
#define GS_MAKE_LAB(n) GS_MAKE_LAB_(n)

namespace gradsleuth::labs {

const std::vector<Lab>& all_labs() {
  static const std::vector<Lab> labs = [] {
    Lab lab = GS_MAKE_LAB(GS_LAB_NUMBER)();
    GS_CHECK(lab.number == GS_LAB_NUMBER, "lab", "grader/grade_lab", GS_LAB_NUMBER, ".cpp makes lab ", lab.number,
             ": a lab's number is its place in GS_LABS (tutorials/CMakeLists.txt)");
    return std::vector<Lab>{std::move(lab)};
  }();
  return labs;
}

}  // namespace gradsleuth::labs
