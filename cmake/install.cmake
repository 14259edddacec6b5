# Install rules and the CMake package, so that an outside project can do
#   find_package(gradsleuth REQUIRED)                       # or ... REQUIRED COMPONENTS cuda
#   target_link_libraries(app PRIVATE gradsleuth::gradsleuth)   # or gradsleuth::core, ...
# after `cmake --install build --prefix P` (and CMAKE_PREFIX_PATH=P).
#
# What is installed is what was built: `./run.sh` builds the libraries below (the CLI links them
# all), so `cmake --install build --prefix P` works right after it.
#   the package     gradsleuth::core, nn, optim, debug and the umbrella gradsleuth::gradsleuth:
#                   required (the install stops with the command that builds them when they are not)
#   part "dist"     gradsleuth::dist (distributed/, with MPI when it was found): installed when built
#   part "cuda"     gradsleuth::cuda (the nvcc build of cuda/): installed when built (the target
#                   gradsleuth_cuda; ./run.sh builds it only on a machine with a GPU)
#   bin/gradsleuth  the CLI, when built
# A part that was not built is left out, with a line saying how to add it; the package's config
# then reports the component as not found (find_package(gradsleuth COMPONENTS cuda) fails with
# that reason; OPTIONAL_COMPONENTS sets gradsleuth_cuda_FOUND to FALSE).
#
# Layout under the prefix:
#   include/gradsleuth/gradsleuth.h, include/gradsleuth/core/*.h, ...   (include dir: include/gradsleuth)
#   lib/libgradsleuth_core.a ...
#   lib/cmake/gradsleuth/gradsleuth{Config,ConfigVersion,Targets}.cmake
#   lib/cmake/gradsleuth/gradsleuth-{cuda,dist}-targets.cmake           (the parts that were built)
#   bin/gradsleuth                                                        (the CLI, when built)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

option(GRADSLEUTH_INSTALL "Generate gradsleuth's install rules and CMake package" ON)
if(NOT GRADSLEUTH_INSTALL)
  return()
endif()

set(GS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gradsleuth)
# Must match the $<INSTALL_INTERFACE:include/gradsleuth> of the library targets.
set(GS_INSTALL_INCLUDEDIR include/gradsleuth)

# The package's libraries: exported as gradsleuth::core, gradsleuth::nn, ... and the umbrella
# gradsleuth::gradsleuth. gradsleuth_flags is build-only ($<BUILD_INTERFACE:...>) and is
# deliberately not exported.
set(GS_EXPORTED_TARGETS gradsleuth_core)
set_target_properties(gradsleuth_core PROPERTIES EXPORT_NAME core)
foreach(lib nn optim debug)
  if(TARGET gradsleuth_${lib})
    set_target_properties(gradsleuth_${lib} PROPERTIES EXPORT_NAME ${lib})
    list(APPEND GS_EXPORTED_TARGETS gradsleuth_${lib})
  endif()
endforeach()
set_target_properties(gradsleuth PROPERTIES EXPORT_NAME gradsleuth)

# Before anything is copied: the package's libraries must have been built.
set(gs_missing_code "")
foreach(target IN LISTS GS_EXPORTED_TARGETS)
  string(APPEND gs_missing_code
    "if(NOT EXISTS \"$<TARGET_FILE:${target}>\")\n  list(APPEND gs_missing ${target})\nendif()\n")
endforeach()
list(GET GS_EXPORTED_TARGETS -1 gs_last_lib)
install(CODE "set(gs_missing \"\")\n${gs_missing_code}
if(gs_missing)
  message(FATAL_ERROR \"gradsleuth: not built yet: \${gs_missing}. Build them first: ./run.sh --help \"
    \"(or cmake --build ${PROJECT_BINARY_DIR} --target ${gs_last_lib}), then install again.\")
endif()")

list(APPEND GS_EXPORTED_TARGETS gradsleuth)
install(TARGETS ${GS_EXPORTED_TARGETS}
  EXPORT gradsleuthTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT gradsleuthTargets
  NAMESPACE gradsleuth::
  FILE gradsleuthTargets.cmake
  DESTINATION ${GS_INSTALL_CMAKEDIR})

# The optional parts. gs_install_part(PART TARGETS t... HEADERS dir BUILD_HINT target): the part's
# libraries (OPTIONAL: no error when not built) and its export file; at install time, when its
# first library was not built, the export file is removed again (it would name a missing library)
# and a line says how to add the part.
set(GS_INSTALL_PARTS "")
function(gs_install_part part)
  cmake_parse_arguments(P "" "HEADERS" "TARGETS" ${ARGN})
  list(GET P_TARGETS 0 main)
  install(TARGETS ${P_TARGETS}
    EXPORT gradsleuth-${part}-targets
    OPTIONAL
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT gradsleuth-${part}-targets
    NAMESPACE gradsleuth::
    DESTINATION ${GS_INSTALL_CMAKEDIR})
  file(GLOB headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${P_HEADERS}/*.h)
  install(FILES ${headers} DESTINATION ${GS_INSTALL_INCLUDEDIR}/${P_HEADERS})
  install(CODE "
set(gs_part_dir \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${GS_INSTALL_CMAKEDIR}\")
if(NOT EXISTS \"$<TARGET_FILE:${main}>\")
  file(GLOB gs_part_files \"\${gs_part_dir}/gradsleuth-${part}-targets*.cmake\")
  if(gs_part_files)
    file(REMOVE \${gs_part_files})
  endif()
  message(STATUS \"gradsleuth: part '${part}' (${main}) was not built: installed without it. \"
    \"To add it: cmake --build ${PROJECT_BINARY_DIR} --target ${main}, then install again.\")
endif()")
  set(GS_INSTALL_PARTS ${GS_INSTALL_PARTS} ${part} PARENT_SCOPE)
endfunction()

# Outside packages a part's link interface names (static libraries list even PRIVATE ones).
set(GS_INSTALL_DIST_MPI OFF)
set(GS_INSTALL_DIST_CUDA OFF)
if(TARGET gradsleuth_dist)
  set(gs_dist_targets gradsleuth_dist)
  if(GS_DIST_WITH_NCCL)  # gradsleuth_dist links its NCCL half (configured with a GPU)
    list(APPEND gs_dist_targets gradsleuth_dist_nccl)
    set(GS_INSTALL_DIST_CUDA ON)
  endif()
  set(GS_INSTALL_DIST_MPI ${GS_DIST_MPI})
  gs_install_part(dist TARGETS ${gs_dist_targets} HEADERS distributed)
endif()
if(TARGET gradsleuth_cuda)
  set_target_properties(gradsleuth_cuda PROPERTIES EXPORT_NAME cuda)
  gs_install_part(cuda TARGETS gradsleuth_cuda HEADERS cuda)
endif()

# Headers: every *.h under core/ nn/ optim/ debug/, keeping its path relative to
# the repo root, plus the umbrella header. CONFIGURE_DEPENDS re-runs the glob at
# build time, so a header added later is picked up without a manual re-configure.
file(GLOB_RECURSE GS_PUBLIC_HEADERS CONFIGURE_DEPENDS
  RELATIVE ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/core/*.h
  ${PROJECT_SOURCE_DIR}/nn/*.h
  ${PROJECT_SOURCE_DIR}/optim/*.h
  ${PROJECT_SOURCE_DIR}/debug/*.h)
foreach(header IN LISTS GS_PUBLIC_HEADERS)
  get_filename_component(header_dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${GS_INSTALL_INCLUDEDIR}/${header_dir})
endforeach()
file(GLOB GS_UMBRELLA_HEADER CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/gradsleuth.h)
if(GS_UMBRELLA_HEADER)
  install(FILES ${GS_UMBRELLA_HEADER} DESTINATION ${GS_INSTALL_INCLUDEDIR})
endif()

# The command-line tool, when it was built.
if(TARGET gradsleuth_cli)
  install(TARGETS gradsleuth_cli OPTIONAL RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# Package config + version files. The config must find every outside target that
# the exported link interfaces name. Since the libraries are static, even PRIVATE
# dependencies appear there (as $<LINK_ONLY:...>), so scan what each exported
# target links: Threads::Threads always; OpenMP::OpenMP_CXX (core, when OpenMP was
# found); ZLIB::ZLIB (nn, when zlib was found); and Eigen3::Eigen (core,
# header-only: the config falls back to an empty target). The parts' own
# dependencies (MPI, CUDAToolkit) are looked for only when the part was installed.
set(GS_INSTALL_OPENMP OFF)
set(GS_INSTALL_ZLIB OFF)
foreach(target IN LISTS GS_EXPORTED_TARGETS)
  get_target_property(gs_libs ${target} LINK_LIBRARIES)
  get_target_property(gs_ilibs ${target} INTERFACE_LINK_LIBRARIES)
  foreach(gs_lib IN LISTS gs_libs gs_ilibs)
    if(gs_lib MATCHES "OpenMP::")
      set(GS_INSTALL_OPENMP ON)
    elseif(gs_lib MATCHES "ZLIB::")
      set(GS_INSTALL_ZLIB ON)
    endif()
  endforeach()
endforeach()

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/gradsleuthConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gradsleuthConfig.cmake
  INSTALL_DESTINATION ${GS_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/gradsleuthConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/gradsleuthConfig.cmake
  ${PROJECT_BINARY_DIR}/gradsleuthConfigVersion.cmake
  DESTINATION ${GS_INSTALL_CMAKEDIR})
