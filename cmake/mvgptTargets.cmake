# mvgpt_add_module(name SOURCES ... DEPS ...): one library per layer, headers addressed as
# <mvgpt/<module>/...> from the repository root and from the installed include/ alike.
function(mvgpt_add_module name)
  cmake_parse_arguments(M "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(mvgpt_${name} ${M_SOURCES})
  add_library(mvgpt::${name} ALIAS mvgpt_${name})
  set_target_properties(mvgpt_${name} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(mvgpt_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(mvgpt_${name} PUBLIC ${M_PUBLIC_DEPS} PRIVATE ${M_PRIVATE_DEPS})
  mvgpt_warnings(mvgpt_${name})
  set_property(GLOBAL APPEND PROPERTY MVGPT_MODULES mvgpt_${name})
endfunction()

function(mvgpt_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  if(MVGPT_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()
