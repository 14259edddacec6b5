# Writes OUT, the header that gives `gradsleuth --version` its commit: the checkout's HEAD (12 hex
# digits), or "unknown" outside a git checkout (a release tarball). Run at every build of the CLI;
# the header is rewritten only when the commit changed, so that an unchanged HEAD recompiles nothing.
#   cmake -DSRC=<source dir> -DOUT=<header> -P git_commit.cmake
execute_process(COMMAND git -C "${SRC}" rev-parse --short=12 HEAD OUTPUT_VARIABLE commit
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit unknown)
endif()
set(text "#define GS_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}.tmp" "${text}")
  file(RENAME "${OUT}.tmp" "${OUT}")
endif()
