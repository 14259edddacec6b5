# gs_doctest_cases(<target> LABELS <labels> [ENVIRONMENT <VAR=value...>])
# Registers every doctest test case of <target> as its own CTest test, "<target>: <case>",
# by asking the built program for its list (doctest's own doctest_discover_tests, run after
# each build). Used by the CUDA emulator suites, so `ctest -L cuda_emu` counts and reports
# kernels one by one. Exit code 77 means skipped, as for every gradsleuth test.
include_guard(DIRECTORY)  # doctest.cmake sets its script path per directory
find_package(doctest REQUIRED)
include(${doctest_DIR}/doctest.cmake OPTIONAL RESULT_VARIABLE gs_doctest_module)
if(NOT gs_doctest_module)
  include(doctest)
endif()

function(gs_doctest_cases target)
  cmake_parse_arguments(D "" "" "LABELS;ENVIRONMENT" ${ARGN})
  set(props LABELS "${D_LABELS}" SKIP_RETURN_CODE 77 TIMEOUT 600)
  if(D_ENVIRONMENT)
    list(APPEND props ENVIRONMENT "${D_ENVIRONMENT}")
  endif()
  doctest_discover_tests(${target} TEST_PREFIX "${target}: " PROPERTIES ${props})
endfunction()
