# The repository stands alone: fails when a tracked file (git ls-files) names a
# seed document ("seed 000"), the old checks file or a path outside the repository.
# Run by CTest (test docs_standalone, label docs):  cmake -DSRC=<repo> -P check_standalone.cmake
# Sources are cited by public title instead (docs/checks.md, "Sources").
if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<repository> -P check_standalone.cmake")
endif()
find_package(Git QUIET)
if(NOT GIT_FOUND OR NOT EXISTS "${SRC}/.git")
  message(STATUS "SKIPPED: not a git checkout (or no git): nothing to list")
  return()
endif()
# git grep searches exactly the tracked files (git ls-files), binary files left out (-I).
# "CHECKS.md" is matched case-sensitively: docs/checks.md is the repository's own page.
execute_process(
  COMMAND "${GIT_EXECUTABLE}" -C "${SRC}" grep -n -I -E
          -e "[Ss][Ee][Ee][Dd][Ss]? 0[0-9][0-9]"
          -e "[Ss]ources? 0[0-9][0-9]"
          -e "\\.\\./shared"
          -e "CHECKS\\.md"
          -e "seeds/"
          -- . ":(exclude)tests/check_standalone.cmake" ":(exclude)tests/test_standalone.cpp"
  RESULT_VARIABLE rc OUTPUT_VARIABLE hits ERROR_VARIABLE err)
if(rc EQUAL 0)
  message("${hits}")
  message(FATAL_ERROR "the repository must stand alone: these tracked lines point at seed documents, "
          "CHECKS.md or ../shared; state the rule and cite sources by title (docs/checks.md, Sources); the lines are above")
elseif(NOT rc EQUAL 1)
  message(FATAL_ERROR "git grep failed (${rc}): ${err}")
endif()
message(STATUS "standalone: no tracked file names a seed document, CHECKS.md or ../shared")
