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
# The headers keep their repository paths: <mvgpt/tensor/tensor.h>, and the umbrella <mvgpt/mvgpt.h>.
# Internal headers stay out: the raw ops (no gradient: one public op API, autograd/ops.h), what the
# op files and the fused units share, and the slow references.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/mvgpt/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mvgpt
  FILES_MATCHING PATTERN "*.h"
  REGEX "/backends/ops\\.h$" EXCLUDE
  REGEX "/backends/ops_internal\\.h$" EXCLUDE
  REGEX "/backends/reference\\.h$" EXCLUDE
  REGEX "/backends/fused_checks\\.h$" EXCLUDE
  REGEX "/autograd/op_impl\\.h$" EXCLUDE
  REGEX "/fused/unit\\.h$" EXCLUDE
  REGEX "/text/pre_tokenizer\\.h$" EXCLUDE  # the tokenizer's internal headers, shared by its job files
  REGEX "/text/tokenizer_impl\\.h$" EXCLUDE)
install(EXPORT mvgptTargets NAMESPACE mvgpt:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mvgpt)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mvgptConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mvgptConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mvgpt)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mvgptConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mvgptConfig.cmake ${PROJECT_BINARY_DIR}/mvgptConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mvgpt)
