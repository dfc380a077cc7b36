# Cross-compiling for 64-bit ARM Linux (Raspberry Pi OS 64-bit, Graviton, Ampere) from an x86-64
# host with Debian's cross toolchain:  apt-get install g++-aarch64-linux-gnu qemu-user
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-toolchain.cmake \
#         -DEDGELLM_BUILD_PYTHON=OFF -DEDGELLM_BUILD_TESTS=ON
# The binaries run on the host under qemu-aarch64 -L /usr/aarch64-linux-gnu (scripts/test-aarch64.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(EDGELLM_AARCH64_PREFIX "aarch64-linux-gnu-" CACHE STRING "Cross toolchain prefix")
set(CMAKE_C_COMPILER ${EDGELLM_AARCH64_PREFIX}gcc)
set(CMAKE_CXX_COMPILER ${EDGELLM_AARCH64_PREFIX}g++)

# Debian's multiarch cross sysroot.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Test executables run through qemu when CMake or ctest needs to execute them.
find_program(EDGELLM_QEMU_AARCH64 qemu-aarch64)
if(EDGELLM_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${EDGELLM_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
