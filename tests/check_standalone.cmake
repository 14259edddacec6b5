# The repository stands alone: fails when a tracked file (git ls-files) points at
# something a clone does not have: a source document by number instead of by title,
# a specification file or a folder outside the repository.
# Run by CTest (test docs_standalone, label docs):  cmake -DSRC=<repo> -P check_standalone.cmake
# Sources are cited by public title instead (docs/checks.md, "Sources").
if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<repository> -P check_standalone.cmake")
endif()
# The patterns are spelled so that they do not match themselves (this file is searched
# too); the specification file's name is matched case-sensitively, so docs/checks.md,
# the repository's own page, does not count.
set(patterns -e "[Ss][Ee][Ee][Dd][Ss]? 0[0-9][0-9]" -e "[Ss]ources? 0[0-9][0-9]" -e "\\.\\./share[d]"
             -e "[C]HECKS\\.md" -e "seed[s]/")
find_package(Git QUIET)
if(EXISTS "${SRC}/.git")
  if(NOT GIT_FOUND)
    message(FATAL_ERROR "git is not installed (apt-get install git): it lists the tracked files to search")
  endif()
  # git grep searches exactly the tracked files (git ls-files), binary files left out (-I).
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SRC}" grep -n -I -E ${patterns} -- .
                  RESULT_VARIABLE rc OUTPUT_VARIABLE hits ERROR_VARIABLE err)
else()
  # A tree without its history (a release tarball): every file but the build folders.
  execute_process(COMMAND grep -r -n -I -E ${patterns} --exclude-dir=build* --exclude-dir=.git .
                  WORKING_DIRECTORY "${SRC}" RESULT_VARIABLE rc OUTPUT_VARIABLE hits ERROR_VARIABLE err)
endif()
if(rc EQUAL 0)
  message("${hits}")
  message(FATAL_ERROR "the repository must stand alone: the tracked lines above point at files a clone does not "
          "have; state the rule and its thresholds, and cite sources by title (docs/checks.md, Sources)")
elseif(NOT rc EQUAL 1)
  message(FATAL_ERROR "grep failed (${rc}): ${err}")
endif()
message(STATUS "standalone: no tracked file points outside the repository")
