#!/usr/bin/env bash
# Run the malformed-GGUF tests against an AddressSanitizer + UBSan build of _core.
#   scripts/asan-malformed.sh [BUILD_DIR]   (default build/asan)
# The interpreter itself is not instrumented, so libasan is preloaded; leak checking is off
# because CPython's allocations at exit are not leaks of ours.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/asan}
scripts/dev-build.sh "$dir" -DEDGELLM_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
EDGELLM_BUILD_DIR="$dir" PYTHONPATH=python \
  LD_PRELOAD="$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  python3 -m pytest tests/test_malformed_gguf.py -q -p no:cacheprovider "${@:2}"
