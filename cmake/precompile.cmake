# Precompiled headers for the targets whose files spend a third or more of their compile time parsing
# the same headers (docs/benchmarks.md, "The CLI's build"). -DGRADSLEUTH_PCH=OFF builds without them,
# which also shows a file that forgot one of its own includes.
option(GRADSLEUTH_PCH "Precompile the common headers of core/, nn/, optim/, debug/ and cli/" ON)
# Unity batches for the same targets: a batch's files are compiled as one, so the headers' inline
# functions and templates each file uses are compiled once per batch instead of once per file (the
# measured saving: docs/benchmarks.md, "Unity batches"). -DGRADSLEUTH_UNITY=OFF compiles each file on
# its own (scripts/check_no_pch.sh builds so, test build_no_pch). Names in a file's anonymous
# namespace must not repeat in another file of the same target: a batch would define them twice.
option(GRADSLEUTH_UNITY "Compile the files of core/, nn/, optim/, debug/ and cli/ in unity batches" ON)

# gs_precompile(TARGET HEADER): TARGET's C++ files are compiled with HEADER (cmake/pch_*.h) precompiled,
# except those with compile options of their own (a COMPILE_OPTIONS source property, e.g. another -O
# level): a precompiled header is valid only for the options it was made with (GCC 12 crashed compiling
# an -O3 file with an -O1 header). They are picked out when the directory's CMakeLists.txt is done, so
# options set after this call count too. CMake leaves the same files out of unity batches by itself.
function(gs_precompile target header)
  if(GRADSLEUTH_PCH)
    target_precompile_headers(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:${PROJECT_SOURCE_DIR}/cmake/${header}>")
    cmake_language(EVAL CODE "cmake_language(DEFER CALL gs_skip_pch_with_own_options [[${target}]])")
  endif()
endfunction()
# gs_precompile_reuse(TARGET FROM): TARGET's C++ files use FROM's precompiled header instead of building
# their own (one header compile fewer). FROM must compile with TARGET's options (the same -O level and
# -fPIC: GCC rejects or, worse, miscompiles a header made with others); its definitions are given to
# TARGET too, since GCC uses a header only where the macros it was made with are defined alike, and an
# executable reusing a position-independent library's header compiles with -fPIC (its own default,
# -fpie, does not match the header).
function(gs_precompile_reuse target from)
  if(GRADSLEUTH_PCH)
    target_precompile_headers(${target} REUSE_FROM ${from})
    target_compile_definitions(${target} PRIVATE $<TARGET_PROPERTY:${from},COMPILE_DEFINITIONS>)
    get_target_property(type ${target} TYPE)
    get_target_property(pic ${from} POSITION_INDEPENDENT_CODE)
    if(type STREQUAL "EXECUTABLE" AND pic)
      target_compile_options(${target} PRIVATE -fPIC)
    endif()
    cmake_language(EVAL CODE "cmake_language(DEFER CALL gs_skip_pch_with_own_options [[${target}]])")
  endif()
endfunction()
function(gs_skip_pch_with_own_options target)
  get_target_property(sources ${target} SOURCES)
  foreach(src IN LISTS sources)
    get_source_file_property(options ${src} COMPILE_OPTIONS)
    if(options)
      set_source_files_properties(${src} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()

# gs_unity(TARGET BATCH): TARGET's C++ files are compiled BATCH at a time (GRADSLEUTH_UNITY). A batch
# small enough that a target has a few keeps both cores busy and an edit's rebuild short.
function(gs_unity target batch)
  if(GRADSLEUTH_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${batch})
  endif()
endfunction()

# ccache caches a file compiled with a precompiled header only with these two sloppiness settings
# (its manual, "Precompiled headers"); without them every such file is compiled again.
if(GRADSLEUTH_PCH AND CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache$")
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros
      ${CMAKE_CXX_COMPILER_LAUNCHER})
endif()
