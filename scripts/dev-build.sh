#!/usr/bin/env bash
# Incremental development build: C++ core, the Python module and the C++ tests in one folder.
#   scripts/dev-build.sh [BUILD_DIR] [extra cmake args...]
# Then: EDGELLM_BUILD_DIR=BUILD_DIR PYTHONPATH=python python -m pytest tests
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/dev}
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDGELLM_BUILD_TESTS=ON \
    -DPython_EXECUTABLE="$(command -v python3)" \
    -Dpybind11_DIR="$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')" "$@" >/dev/null
fi
cmake --build "$dir" -- -j"${EDGELLM_JOBS:-2}"
