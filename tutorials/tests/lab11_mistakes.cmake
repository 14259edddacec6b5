# The lab11_mistakes test: lab 11 graded with three deliberate mistakes (fixtures/lab11_mistakes.cpp)
# must lose points on each, with feedback that says what is wrong: a correct but naive
# Task 11.1 fails its speed check against the workbench's v1 (and passes every correctness
# check), a Task 11.2 that adds into C without zeroing it reads NaN, and a Task 11.3 that
# stores whole tiles past the row's end is caught by C's guard band.
#   cmake -DGRADER=build/tutorials/lab11_grader_mistakes -P lab11_mistakes.cmake
cmake_minimum_required(VERSION 3.20)
include(${CMAKE_CURRENT_LIST_DIR}/mistakes_common.cmake)
gs_mistakes_grade(11)
expect("Task 11\\.1  the loop order: ikj +15/30 +1 of 9 checks failed" "the naive loop: correct, too slow")
expect("matmul_ikj is [0-9.]+x as fast as the workbench's v1 \\(naive ijk\\)[^\n]*below the 2\\.0x"
       "the naive loop: the ratio and the threshold")
expect("Task 11\\.2  cache blocking +0/30" "C not zeroed: every case fails")
expect("C held NaN before the call" "C not zeroed: the hint")
expect("Task 11\\.3  a SIMD register-blocked micro-kernel +[0-9]+/40" "whole tiles: graded")
expect("matmul_simd wrote past C's last element" "whole tiles: the guard band")
expect("lab 11: [0-9]+/100 points" "the summary line")
gs_mistakes_done(11 "each mistake lost its points with the right feedback")
