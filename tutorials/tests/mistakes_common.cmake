# What the labN_mistakes tests share: grade a lab with its grader built on a mistaken solution,
# expect() patterns in the report, and fail with every missed pattern and the whole report.
#   include(mistakes_common.cmake); gs_mistakes_grade(N); expect(...)...; gs_mistakes_done(N "what held")
function(gs_mistakes_grade lab)
  execute_process(COMMAND ${GRADER} check ${lab} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "lab${lab}_mistakes: ${GRADER} check ${lab} exited with ${rc}:\n${out}${err}")
  endif()
  set(text "${out}" PARENT_SCOPE)
  set(errors "" PARENT_SCOPE)
endfunction()

function(expect pattern why)
  if(NOT "${text}" MATCHES "${pattern}")
    set(errors "${errors}\n  ${why}: no match for '${pattern}'" PARENT_SCOPE)
  endif()
endfunction()

function(gs_mistakes_done lab what)
  if(errors)
    message(FATAL_ERROR "lab${lab}_mistakes:${errors}\n--- the grader's report:\n${text}")
  endif()
  message(STATUS "lab${lab}_mistakes: ${what}")
endfunction()
