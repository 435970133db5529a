# Install the modules as an exported package: find_package(mvgpt) gives mvgpt::tensor ... mvgpt::model
# and mvgpt::dist.
include(CMakePackageConfigHelpers)
get_property(modules GLOBAL PROPERTY MVGPT_MODULES)
install(TARGETS ${modules} EXPORT mvgptTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir util tensor backends autograd nn mvgpt dist)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mvgpt/${dir}
    FILES_MATCHING PATTERN "*.h"
    PATTERN "op_impl.h" EXCLUDE)  # autograd's internal prelude for its op files, not an API
endforeach()
install(EXPORT mvgptTargets NAMESPACE mvgpt:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mvgpt)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mvgptConfig.cmake.in
  ${PROJECT_BINARY_DIR}/mvgptConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mvgpt)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mvgptConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mvgptConfig.cmake ${PROJECT_BINARY_DIR}/mvgptConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/mvgpt)
