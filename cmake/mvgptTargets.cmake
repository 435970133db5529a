# NOTE [ Where <mvgpt/...> headers are ]
# The framework's layers are top-level folders, each header beside its sources: tensor/ (with the
# small util/ every layer may use), backends/, autograd/ (with the fused ops' units in fused/), nn/.
# The GPT package is mvgpt/: gpt/, text/, dist/ and the umbrella mvgpt.h. Every header is included
# as <mvgpt/<module>/<file>.h>, inside the repository as from the installed package: mvgpt/'s own
# are where that path says (the repository root is on the include path), and for the layers the
# build makes an include tree of links, <build>/include/mvgpt/<module> -> the module's folder. The
# install copies each module's headers to include/mvgpt/<module>/ (cmake/mvgptInstall.cmake).
# module:folder, bottom to top.
set(MVGPT_LAYER_FOLDERS util:tensor/util tensor:tensor backends:backends autograd:autograd fused:autograd/fused nn:nn)
set(MVGPT_INCLUDE_TREE ${PROJECT_BINARY_DIR}/include)
file(MAKE_DIRECTORY ${MVGPT_INCLUDE_TREE}/mvgpt)
foreach(entry ${MVGPT_LAYER_FOLDERS})
  string(REPLACE ":" ";" entry ${entry})
  list(GET entry 0 module)
  list(GET entry 1 folder)
  if(IS_SYMLINK ${MVGPT_INCLUDE_TREE}/mvgpt/${module})
    file(REMOVE ${MVGPT_INCLUDE_TREE}/mvgpt/${module})
  endif()
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${MVGPT_INCLUDE_TREE}/mvgpt/${module} SYMBOLIC)
endforeach()

# mvgpt_add_module(name SOURCES ... DEPS ...): one library per layer, headers addressed as
# <mvgpt/<module>/...> from the repository and from the installed include/ alike.
function(mvgpt_add_module name)
  cmake_parse_arguments(M "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(mvgpt_${name} ${M_SOURCES})
  add_library(mvgpt::${name} ALIAS mvgpt_${name})
  set_target_properties(mvgpt_${name} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(mvgpt_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${MVGPT_INCLUDE_TREE}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(mvgpt_${name} PUBLIC ${M_PUBLIC_DEPS} PRIVATE ${M_PRIVATE_DEPS})
  mvgpt_warnings(mvgpt_${name})
  set_property(GLOBAL APPEND PROPERTY MVGPT_MODULES mvgpt_${name})
endfunction()

# The layers above autograd use the public op API only: including the raw ops' header is an error
# in `target`'s own sources (backends/ops.h).
function(mvgpt_public_ops_only target)
  target_compile_definitions(${target} PRIVATE MVGPT_PUBLIC_OPS_ONLY)
endfunction()

function(mvgpt_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  if(MVGPT_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
endfunction()

# The CUDA settings of a module with .cu sources (backends, fused): MVGPT_CUDA_ARCHITECTURES (by
# default machine code for A100 (sm_80) and H100/H200 (sm_90), plus sm_90 PTX that newer GPUs
# JIT-compile; scripts/gpu-check.sh builds for the GPU it runs on only, "native"); the CUDA runtime.
function(mvgpt_cuda_sources target)
  target_link_libraries(${target} PRIVATE CUDA::cudart)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${MVGPT_CUDA_ARCHITECTURES}"
                                             CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON)
  # Warnings in device code and in the host code nvcc hands to the C++ compiler; errors only with
  # MVGPT_CUDA_WERROR (scripts/gpu-check.sh sets it), so a newer nvcc's new warning cannot break a
  # user's build.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>)
  if(MVGPT_CUDA_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Werror>)
  endif()
endfunction()

# Enables CUDA in the calling directory (a macro: the settings are the directory's): the language,
# the toolkit's targets, and nvcc's C++20 flag, which CMake 3.25 predates (newer CMake knows it).
macro(mvgpt_enable_cuda)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CMake 3.25 predates nvcc's C++20 support: tell it the flag (newer CMake knows it already).
  if(NOT CMAKE_CUDA20_COMPILE_FEATURES)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
    list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
  endif()
endmacro()
