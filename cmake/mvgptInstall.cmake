# Install the modules as an exported package: find_package(mvgpt) gives mvgpt::tensor ... mvgpt::model
# and mvgpt::dist.
include(CMakePackageConfigHelpers)
# mvgpt::mvgpt: every module the umbrella header <mvgpt/mvgpt.h> includes.
add_library(mvgpt_mvgpt INTERFACE)
add_library(mvgpt::mvgpt ALIAS mvgpt_mvgpt)
set_target_properties(mvgpt_mvgpt PROPERTIES EXPORT_NAME mvgpt)
target_link_libraries(mvgpt_mvgpt INTERFACE mvgpt::model)
get_property(modules GLOBAL PROPERTY MVGPT_MODULES)
list(APPEND modules mvgpt_mvgpt)
install(TARGETS ${modules} EXPORT mvgptTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The headers keep their include paths: <mvgpt/tensor/tensor.h> from the layers' folders (a module
# nested in another's folder, util and fused, under its own name), <mvgpt/gpt/model.h> and the
# umbrella <mvgpt/mvgpt.h> from mvgpt/. Internal headers stay out: the raw ops (no gradient: one
# public op API, autograd/ops.h), what the op files and the fused units share, the slow references.
set(mvgpt_internal_headers
  REGEX "/backends/ops\\.h$" EXCLUDE
  REGEX "/backends/ops_internal\\.h$" EXCLUDE
  REGEX "/backends/reference\\.h$" EXCLUDE
  REGEX "/backends/fused_checks\\.h$" EXCLUDE
  REGEX "/autograd/op_impl\\.h$" EXCLUDE
  REGEX "/fused/unit\\.h$" EXCLUDE
  REGEX "/fused/rope_row_cpu\\.h$" EXCLUDE  # the CPU's row rotation, shared by rope's and attention's kernels
  REGEX "/text/pre_tokenizer\\.h$" EXCLUDE  # the tokenizer's internal headers, shared by its job files
  REGEX "/text/tokenizer_impl\\.h$" EXCLUDE)
foreach(entry ${MVGPT_LAYER_FOLDERS})
  string(REPLACE ":" ";" entry ${entry})
  list(GET entry 0 module)
  list(GET entry 1 folder)
  # A module nested in this one's folder is installed as a module of its own, not under this one.
  # (A PATTERN matches the end of any path, the folder being installed included: so only here.)
  set(nested "")
  if(module STREQUAL "tensor")
    set(nested PATTERN "util" EXCLUDE)
  elseif(module STREQUAL "autograd")
    set(nested PATTERN "fused" EXCLUDE)
  endif()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mvgpt/${module}
    FILES_MATCHING PATTERN "*.h" ${nested} ${mvgpt_internal_headers})
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/mvgpt/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mvgpt
  FILES_MATCHING PATTERN "*.h" ${mvgpt_internal_headers})
install(EXPORT mvgptTargets NAMESPACE mvgpt:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mvgpt)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mvgptConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mvgptConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mvgpt)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mvgptConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mvgptConfig.cmake ${PROJECT_BINARY_DIR}/mvgptConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mvgpt)
