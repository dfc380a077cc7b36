# Optional CUDA backend (-DEDGELLM_CUDA=ON; `CMAKE_ARGS="-DEDGELLM_CUDA=ON" pip install .`).
# Included by CMakeLists.txt only when the option is on, so the default build needs no toolkit,
# and before it makes any target (each then starts with these CUDA_ARCHITECTURES); it defines
# the object library edgellm_cuda, which CMakeLists.txt adds to edgellm_core.
#
# EDGELLM_CUDA_ARCHS: the GPU architectures compiled to SASS, plus PTX of the last one so newer
# GPUs can JIT it. The release default covers Turing (sm_75) through Hopper (sm_90); CI passes a
# shorter list ("75;90") to keep the compile check quick.
set(EDGELLM_CUDA_ARCHS "75;80;86;89;90" CACHE STRING "CUDA architectures (SASS for each, PTX for the last)")

if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  # <arch>-real = SASS only; the last one also gets PTX (<arch>-virtual).
  set(_archs "")
  foreach(_a ${EDGELLM_CUDA_ARCHS})
    list(APPEND _archs "${_a}-real")
  endforeach()
  list(GET EDGELLM_CUDA_ARCHS -1 _last)
  list(APPEND _archs "${_last}-virtual")
  set(CMAKE_CUDA_ARCHITECTURES "${_archs}")
endif()

enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

file(GLOB_RECURSE EDGELLM_CUDA_SOURCES CONFIGURE_DEPENDS ${EDGELLM_SRC}/cuda/*.cu ${EDGELLM_SRC}/cuda/*.cpp)
list(FILTER EDGELLM_CUDA_SOURCES EXCLUDE REGEX "/cuda/selftest/")
add_library(edgellm_cuda OBJECT ${EDGELLM_CUDA_SOURCES})
target_include_directories(edgellm_cuda PRIVATE ${EDGELLM_SRC})
target_compile_options(edgellm_cuda PRIVATE
  # #pragma unroll in __host__ __device__ code is unknown to the host compiler.
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall -Xcompiler=-Wno-unused-parameter -Xcompiler=-Wno-unknown-pragmas
                             --Werror=all-warnings>
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
set_target_properties(edgellm_cuda PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_RUNTIME_LIBRARY Static)
message(STATUS "edgellm: CUDA backend on, architectures ${CMAKE_CUDA_ARCHITECTURES}")

# GPU-free self-check (run by .ci/run): the kernels' dequantizers against the CPU reference.
# Self-contained (kernels + quant/ only) so CI can build it without the whole core; it never
# launches a kernel, so one architecture is enough.
file(GLOB EDGELLM_QUANT_SOURCES CONFIGURE_DEPENDS ${EDGELLM_SRC}/quant/*.cpp)
add_executable(edgellm_cuda_selftest ${EDGELLM_SRC}/cuda/selftest/dequant_selftest.cu
               ${EDGELLM_SRC}/cuda/cuda_kernels.cu ${EDGELLM_QUANT_SOURCES} ${EDGELLM_SRC}/common/dtype.cpp)
target_include_directories(edgellm_cuda_selftest PRIVATE ${EDGELLM_SRC})
target_compile_options(edgellm_cuda_selftest PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wno-unknown-pragmas>)
list(GET EDGELLM_CUDA_ARCHS 0 _first)
set_target_properties(edgellm_cuda_selftest PROPERTIES CUDA_ARCHITECTURES "${_first}-real" CUDA_RUNTIME_LIBRARY Static)
target_link_libraries(edgellm_cuda_selftest PRIVATE CUDA::cudart_static Threads::Threads)
