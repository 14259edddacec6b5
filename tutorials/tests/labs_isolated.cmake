# The labs_isolated test: each lab's grader must build from that lab's files only, so a
# syntax error in one lab's code cannot stop another lab from being graded; and the CLI
# (what ./run.sh builds first) compiles nothing from tutorials/. Asks Ninja for every command
# a target's build runs (`ninja -t commands`, its dependencies included) and looks for other
# labs' folders and grade_labM.cpp files in them.
#   cmake -DNINJA=ninja -DBUILD_DIR=build -DLABS=lab1_tensors,... [-DSOLUTION_GRADERS=lab1_grader_solution,...]
#         [-DCLI=gradsleuth_cli] -P labs_isolated.cmake
cmake_minimum_required(VERSION 3.20)  # script mode: the policies of the project (IN_LIST)
string(REPLACE "," ";" labs "${LABS}")
string(REPLACE "," ";" solution_graders "${SOLUTION_GRADERS}")
set(errors "")

function(commands_of target out)
  execute_process(COMMAND ${NINJA} -C ${BUILD_DIR} -t commands ${target} RESULT_VARIABLE rc OUTPUT_VARIABLE text
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "labs_isolated: ninja -t commands ${target} failed: ${err}")
  endif()
  # A unity batch (GRADSLEUTH_UNITY) is compiled as one generated file that #includes its sources:
  # its text is read too, so the files it compiles are seen by name.
  string(REGEX MATCHALL "[^ \t\r\n\"]*/Unity/unity_[0-9]+_[a-z]+\\.[a-z]+" batches "${text}")
  list(REMOVE_DUPLICATES batches)
  foreach(b IN LISTS batches)
    if(NOT IS_ABSOLUTE "${b}")
      set(b "${BUILD_DIR}/${b}")
    endif()
    if(NOT EXISTS "${b}")
      message(FATAL_ERROR "labs_isolated: ${target} compiles the unity batch ${b}, which does not exist: configure again")
    endif()
    file(READ "${b}" sources)
    string(APPEND text "\n${sources}")
  endforeach()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# A macro, so that it appends to `errors` directly.
macro(check_grader target k)
  commands_of(${target} text)
  list(GET labs ${k} own)
  math(EXPR own_n "${k} + 1")
  # The grader must compile its own lab (else the checks below would pass on an empty list).
  foreach(needed "/tutorials/${own}/" "/tutorials/grader/grade_lab${own_n}.cpp")
    string(FIND "${text}" "${needed}" at)
    if(at EQUAL -1)
      set(errors "${errors}\n  ${target} does not compile ${needed}")
    endif()
  endforeach()
  set(m 0)
  foreach(other IN LISTS labs)
    math(EXPR m "${m} + 1")
    if(m EQUAL own_n)
      continue()
    endif()
    foreach(forbidden "/tutorials/${other}/" "/tutorials/grader/grade_lab${m}.cpp")
      string(FIND "${text}" "${forbidden}" at)
      if(NOT at EQUAL -1)
        set(errors "${errors}\n  ${target} (lab ${own_n}) compiles ${forbidden}: an error there would stop it")
      endif()
    endforeach()
  endforeach()
endmacro()

list(LENGTH labs count)
math(EXPR last "${count} - 1")
foreach(k RANGE ${last})
  math(EXPR n "${k} + 1")
  list(GET labs ${k} lab)
  if(SOURCE_DIR AND NOT EXISTS ${SOURCE_DIR}/${lab})  # left out of a released tree
    continue()
  endif()
  check_grader(lab${n}_grader ${k})
  if("lab${n}_grader_solution" IN_LIST solution_graders)
    check_grader(lab${n}_grader_solution ${k})
  endif()
endforeach()

if(CLI)
  commands_of(${CLI} text)
  string(FIND "${text}" "/tutorials/" at)
  if(NOT at EQUAL -1)
    set(errors "${errors}\n  ${CLI} compiles files from tutorials/: the CLI must not link lab code")
  endif()
  string(FIND "${text}" "/cli/main.cpp" at)
  if(at EQUAL -1)
    set(errors "${errors}\n  ${CLI}: ninja listed no command compiling cli/main.cpp")
  endif()
endif()

if(errors)
  message(FATAL_ERROR "labs_isolated:${errors}")
endif()
message(STATUS "labs_isolated: ${count} lab graders build from their own lab's files only")
