# The lab12_mistakes test: lab 12 graded with four deliberate mistakes, made from the reference
# solution by lab12_precision/solution/make_mistakes.cmake. Each task must lose points, with
# feedback that says what is wrong: float16 ties rounded away from zero, a bfloat16 NaN that comes
# out as inf, a loss scaler that steps on NaN gradients, and softmax under autocast in 16 bits.
#   cmake -DGRADER=build/tutorials/lab12_grader_mistakes -P lab12_mistakes.cmake
cmake_minimum_required(VERSION 3.20)
include(${CMAKE_CURRENT_LIST_DIR}/mistakes_common.cmake)
gs_mistakes_grade(12)
expect("Task 12\\.1  float16 by hand +([0-9]|[12][0-9])/30" "ties away from zero: points lost")
expect("halfway between two values\\): round to the one whose last mantissa bit is 0" "ties: the hint")
expect("Task 12\\.2  bfloat16 by hand +([0-9]|1[0-4])/15" "NaN to inf: points lost")
expect("a NaN came out as inf: test for NaN before rounding" "NaN to inf: the hint")
expect("Task 12\\.3  a dynamic loss scaler +([0-9]|[123][0-9])/40" "NaN gradients stepped on: points lost")
expect("step\\(\\): at step [0-9]+ \\(NaN in a gradient\\) it returned true, expected false" "NaN gradients: the step and the kind")
expect("Task 12\\.4  the autocast policy +([0-9]|1[0-4])/15" "softmax in 16 bits: points lost")
expect("'softmax' is range- or accumulation-sensitive: it runs in float32" "softmax: the hint")
expect("lab 12: [0-9]+/100 points" "the summary line")
gs_mistakes_done(12 "each mistake lost its points with the right feedback")
