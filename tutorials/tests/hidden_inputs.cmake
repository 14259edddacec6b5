# The hidden_inputs test: a lab 1 "solution" that answers Task 1.1 from a table of the
# public inputs (fixtures/lab1_special_cased.cpp) gets full points with the public input seed
# and loses them with a secret one (--seed, or GS_GRADER_SEED); with the secret seed the
# feedback names the input's kind and the wrong result but not the values, unless --show-hidden.
#   cmake -DCHEAT=build/tutorials/lab1_grader_special_cased [-DSOLUTION=.../lab1_grader_solution] -P hidden_inputs.cmake
cmake_minimum_required(VERSION 3.20)
set(errors "")
function(grade out)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "hidden_inputs: ${ARGN} exited with ${rc}:\n${text}${err}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
function(expect text pattern why)
  if(NOT "${text}" MATCHES "${pattern}")
    set(errors "${errors}\n  ${why}: no match for '${pattern}' in:\n${text}" PARENT_SCOPE)
  endif()
endfunction()
function(expect_not text literal why)
  string(FIND "${text}" "${literal}" at)
  if(NOT at EQUAL -1)
    set(errors "${errors}\n  ${why}: '${literal}' found in:\n${text}" PARENT_SCOPE)
  endif()
endfunction()

grade(public ${CHEAT} check 1 --task 1)
expect("${public}" "Task 1\\.1  row-major strides +10/10" "the public inputs: the table of answers passes")

grade(secret ${CHEAT} check 1 --task 1 --seed 7)
expect("${secret}" "Task 1\\.1  row-major strides +[0-9]/10" "a secret seed: the table of answers fails")
expect("${secret}" "\\(the instructor's input\\)" "a secret seed: the failed case says it was the instructor's input")
expect("${secret}" "strides: wrong on the instructor's input of this kind \\(its values are hidden\\)"
       "a secret seed: the feedback names what was wrong")
expect_not("${secret}" "expected [" "a secret seed: the values are hidden")

grade(env ${CMAKE_COMMAND} -E env GS_GRADER_SEED=7 ${CHEAT} check 1 --task 1)
if(NOT env STREQUAL secret)
  set(errors "${errors}\n  GS_GRADER_SEED=7 and --seed 7 graded differently:\n${env}\n---\n${secret}")
endif()

grade(shown ${CHEAT} check 1 --task 1 --seed 7 --show-hidden)
expect("${shown}" "strides: expected \\[[0-9, ]+\\], got \\[" "--show-hidden: the values are printed")

grade(other ${CHEAT} check 1 --task 1 --seed 8 --show-hidden)
if(other STREQUAL shown)
  set(errors "${errors}\n  seeds 7 and 8 drew the same inputs")
endif()

if(SOLUTION)
  grade(sol ${SOLUTION} check 1 --seed 7 --expect full)
  expect("${sol}" "lab 1: 100/100 points" "the reference solution under a secret seed")
endif()

if(errors)
  message(FATAL_ERROR "hidden_inputs:${errors}")
endif()
message(STATUS "hidden_inputs: the special-cased Task 1.1 passes on the public inputs only")
