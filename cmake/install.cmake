# Install rules and the CMake package, so that an outside project can do
#   find_package(gradsleuth REQUIRED)
#   target_link_libraries(app PRIVATE gradsleuth::gradsleuth)   # or gradsleuth::core, ...
# after `cmake --install build --prefix P` (and CMAKE_PREFIX_PATH=P).
#
# Layout under the prefix:
#   include/gradsleuth/gradsleuth.h, include/gradsleuth/core/*.h, ...   (include dir: include/gradsleuth)
#   lib/libgradsleuth_core.a ...
#   lib/cmake/gradsleuth/gradsleuth{Config,ConfigVersion,Targets}.cmake
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

# Libraries: exported as gradsleuth::core, gradsleuth::nn, ... and the umbrella
# gradsleuth::gradsleuth. gradsleuth_flags is build-only ($<BUILD_INTERFACE:...>)
# and is deliberately not exported.
set(GS_EXPORTED_TARGETS gradsleuth_core)
set_target_properties(gradsleuth_core PROPERTIES EXPORT_NAME core)
set(GS_INSTALL_CUDA OFF)
foreach(lib nn optim debug cuda)
  if(TARGET gradsleuth_${lib})
    set_target_properties(gradsleuth_${lib} PROPERTIES EXPORT_NAME ${lib})
    list(APPEND GS_EXPORTED_TARGETS gradsleuth_${lib})
    if(lib STREQUAL "cuda")
      set(GS_INSTALL_CUDA ON)
    endif()
  endif()
endforeach()
set_target_properties(gradsleuth PROPERTIES EXPORT_NAME gradsleuth)
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

# The command-line tool.
if(TARGET gradsleuth_cli)
  install(TARGETS gradsleuth_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# Package config + version files. The config must find every outside target that
# the exported link interfaces name. Since the libraries are static, even PRIVATE
# dependencies appear there (as $<LINK_ONLY:...>), so scan what each exported
# target links: Threads::Threads always; OpenMP::OpenMP_CXX (core, when OpenMP was
# found); ZLIB::ZLIB (nn, when zlib was found); CUDA::* (the CUDA backend); and
# Eigen3::Eigen (core, header-only: the config falls back to an empty target).
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
    elseif(gs_lib MATCHES "CUDA::")
      set(GS_INSTALL_CUDA ON)
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
