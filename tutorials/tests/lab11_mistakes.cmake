# The lab11_mistakes test: lab 11 graded with three deliberate mistakes (fixtures/lab11_mistakes.cpp)
# must lose points on each, with feedback that says what is wrong: a correct but naive
# Task 11.1 fails its speed check against the workbench's v1 (and passes every correctness
# check), a Task 11.2 that adds into C without zeroing it reads NaN, and a Task 11.3 that
# stores whole tiles past the row's end is caught by C's guard band.
#   cmake -DGRADER=build/tutorials/lab11_grader_mistakes -P lab11_mistakes.cmake
cmake_minimum_required(VERSION 3.20)
execute_process(COMMAND ${GRADER} check 11 RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "lab11_mistakes: ${GRADER} check 11 exited with ${rc}:\n${text}${err}")
endif()
set(errors "")
function(expect pattern why)
  if(NOT "${text}" MATCHES "${pattern}")
    set(errors "${errors}\n  ${why}: no match for '${pattern}'" PARENT_SCOPE)
  endif()
endfunction()
expect("Task 11\\.1  the loop order: ikj +15/30 +1 of 9 checks failed" "the naive loop: correct, too slow")
expect("matmul_ikj is [0-9.]+x as fast as the workbench's v1 \\(naive ijk\\)[^\n]*below the 2\\.0x"
       "the naive loop: the ratio and the threshold")
expect("Task 11\\.2  cache blocking +0/30" "C not zeroed: every case fails")
expect("C held NaN before the call" "C not zeroed: the hint")
expect("Task 11\\.3  a SIMD register-blocked micro-kernel +[0-9]+/40" "whole tiles: graded")
expect("matmul_simd wrote past C's last element" "whole tiles: the guard band")
expect("lab 11: [0-9]+/100 points" "the summary line")
if(errors)
  message(FATAL_ERROR "lab11_mistakes:${errors}\n--- the grader's report:\n${text}")
endif()
message(STATUS "lab11_mistakes: each mistake lost its points with the right feedback")
