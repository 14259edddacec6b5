# Precompiled headers for the targets whose files spend a third or more of their compile time parsing
# the same headers (docs/benchmarks.md, "The CLI's build"). -DGRADSLEUTH_PCH=OFF builds without them,
# which also shows a file that forgot one of its own includes.
option(GRADSLEUTH_PCH "Precompile the common headers of nn/, optim/, debug/ and cli/" ON)

# gs_precompile(TARGET HEADER): TARGET's C++ files are compiled with HEADER (cmake/pch_*.h) precompiled.
function(gs_precompile target header)
  if(GRADSLEUTH_PCH)
    target_precompile_headers(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:${PROJECT_SOURCE_DIR}/cmake/${header}>")
  endif()
endfunction()

# ccache caches a file compiled with a precompiled header only with these two sloppiness settings
# (its manual, "Precompiled headers"); without them every such file is compiled again.
if(GRADSLEUTH_PCH AND CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache$")
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros
      ${CMAKE_CXX_COMPILER_LAUNCHER})
endif()
