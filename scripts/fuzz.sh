#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/, clang, -fsanitize=fuzzer,address,undefined) and runs
# each for SECONDS (default 20), after replaying its regressions (fuzz/regressions/<target>/).
# Targets `convert` and `images` are Python (fuzz/fuzz_convert.py: `edgellm convert`'s readers;
# fuzz/fuzz_images.py: vision's image decoding and preprocessing) under atheris, installed with
# pip when missing, else the harness's own seeded mutation loop; they need the edgellm package
# importable (installed, or build/dev + python/ of this checkout).
# Exits non-zero on any crash, sanitizer report, leak, timeout or out-of-memory; the input
# lands in BUILD/artifacts/<target>/. Prints executions and coverage per target.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (targets: gguf tokenizer_bpe tokenizer_spm gbnf
#                                               regex json_schema json_value grammar_automaton
#                                               convert images; default all)
# Env: EDGELLM_FUZZ_BUILD (default build/fuzz), EDGELLM_FUZZ_RUNS=N (stop each target after N
# executions instead of SECONDS), EDGELLM_FUZZ_ARGS (extra libFuzzer flags), EDGELLM_MODELS
# (the real models whose vocabularies the tokenizer targets use; without them those targets
# are skipped, or fail under EDGELLM_REQUIRE_MODELS=1), EDGELLM_JOBS, EDGELLM_PYTHON (the
# interpreter of targets convert and images, default python3; without the package it is skipped, or fails
# under CI=true).
# Needs clang with libFuzzer; installs clang with apt-get when missing and we are root or have
# password-less sudo (CI). Work corpora are kept in BUILD/corpus/<target> between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
build=${EDGELLM_FUZZ_BUILD:-build/fuzz}
jobs=${EDGELLM_JOBS:-2}
cpp_targets=(gguf tokenizer_bpe tokenizer_spm gbnf regex json_schema json_value grammar_automaton)
py_targets=(convert images)
all_targets=("${cpp_targets[@]}" "${py_targets[@]}")
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "[fuzz] unknown target '$t' (one of: ${all_targets[*]})" >&2; exit 2; }
done

say() { echo "[fuzz] $*"; }
need_cpp=0
for t in "${targets[@]}"; do [[ " ${py_targets[*]} " == *" $t "* ]] || need_cpp=1; done

# ---- clang (C++ targets) ---------------------------------------------------------------------
start=$(date +%s)
if [ "$need_cpp" = 1 ]; then
find_clang() {
  if [ -n "${CXX:-}" ] && "$CXX" --version 2>/dev/null | grep -q clang; then echo "$CXX"; return; fi
  local c
  for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    command -v "$c" >/dev/null 2>&1 && { echo "$c"; return; }
  done
}
# libFuzzer and the sanitizer runtimes ship apart from the compiler on Debian (clang-N without
# its recommends has no libclang_rt.fuzzer): probe a link, install what is missing.
links_fuzzer() {
  local dir; dir=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$dir/p.cpp"
  "$1" -fsanitize=fuzzer,address,undefined "$dir/p.cpp" -o "$dir/p" >/dev/null 2>&1
  local rc=$?; rm -rf "$dir"; return $rc
}
cxx=$(find_clang || true)
if [ -z "$cxx" ] || ! links_fuzzer "$cxx"; then
  sudo=""
  [ "$(id -u)" = 0 ] || { sudo -n true 2>/dev/null && sudo="sudo -n"; }
  if { [ "$(id -u)" = 0 ] || [ -n "$sudo" ]; } && command -v apt-get >/dev/null; then
    pkgs=(clang)
    if [ -n "$cxx" ]; then
      major=$("$cxx" --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+' | head -1)
      pkgs+=("libclang-rt-$major-dev")
    else
      pkgs+=(libclang-rt-dev)
    fi
    say "installing ${pkgs[*]}"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null \
      || $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null || true
    cxx=$(find_clang || true)
  fi
  { [ -n "$cxx" ] && links_fuzzer "$cxx"; } || {
    echo "[fuzz] FAIL: needs clang++ with libFuzzer and the sanitizer runtimes (apt-get install clang libclang-rt-dev)" >&2; exit 1; }
fi
cc=${cxx/clang++/clang}

# ---- build -----------------------------------------------------------------------------------
if [ ! -f "$build/build.ninja" ]; then
  launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_C_COMPILER="$cc" -DEDGELLM_FUZZ=ON -DEDGELLM_BUILD_PYTHON=OFF "${launcher[@]}" >/dev/null
fi
set +e
cmake --build "$build" --target fuzz_all -- -j"$jobs" 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\] (Building|Linking)|Re-checking globbed'
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || { echo "[fuzz] FAIL: build failed (exit $rc)" >&2; exit 1; }
say "built ${#cpp_targets[@]} harnesses in $build ($(( $(date +%s) - start )) s, $cxx)"
fi  # need_cpp

# ---- vocabularies for the tokenizer targets --------------------------------------------------
export EDGELLM_FUZZ_VOCAB_DIR="$PWD/$build/vocab"
need_vocab=0
for t in "${targets[@]}"; do [[ $t == tokenizer_* ]] && need_vocab=1; done
if [ "$need_vocab" = 1 ] && ! python3 fuzz/make_vocab.py "$EDGELLM_FUZZ_VOCAB_DIR"; then
  if [ "${EDGELLM_REQUIRE_MODELS:-0}" = 1 ]; then
    echo "[fuzz] FAIL: the tokenizer targets need the real models (EDGELLM_REQUIRE_MODELS=1)" >&2
    exit 1
  fi
  say "SKIP tokenizer targets: real models not found"
  kept=()
  for t in "${targets[@]}"; do [[ $t == tokenizer_* ]] || kept+=("$t"); done
  targets=("${kept[@]}")
fi

# ---- run -------------------------------------------------------------------------------------
dict_for() {
  case $1 in
    gguf) echo fuzz/dict/gguf.dict ;;
    tokenizer_*) echo fuzz/dict/tokenizer.dict ;;
    gbnf|grammar_automaton) echo fuzz/dict/gbnf.dict ;;
    regex) echo fuzz/dict/regex.dict ;;
    json_schema|json_value) echo fuzz/dict/json.dict ;;
  esac
}

# ---- the Python targets: edgellm convert's readers, vision's image decoding ------------------------
py=${EDGELLM_PYTHON:-python3}
python_env_ok() {  # the edgellm package with its extension: installed, or this checkout's build/dev
  "$py" -c "import edgellm._core" >/dev/null 2>&1 && return 0
  [ -d build/dev ] || return 1
  export EDGELLM_BUILD_DIR=${EDGELLM_BUILD_DIR:-$PWD/build/dev} PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  "$py" -c "import edgellm._core" >/dev/null 2>&1
}
run_python() {  # TARGET (fuzz/fuzz_TARGET.py): the same verdicts as the C++ targets: regressions first, then SECONDS or RUNS
  local t=$1 t0 rc=0
  local art="$build/artifacts/$t" work="$build/corpus/$t" log="$build/fuzz-$t.log"
  mkdir -p "$art" "$work"
  t0=$(date +%s)
  if ! python_env_ok; then
    if [ "${CI:-}" = true ]; then
      say "FAIL $t: the edgellm package is not importable"; failures=$((failures + 1))
      summary+=("$(printf '%-18s %12s %8s %8s  %s' "$t" - - - "NO PACKAGE")")
    else
      say "SKIP $t: the edgellm package is not importable (pip install ., or build/dev)"
    fi
    return
  fi
  "$py" -c "import atheris" >/dev/null 2>&1 || "$py" -m pip install -q atheris >/dev/null 2>&1 \
    || say "$t: atheris not installable; the harness's seeded mutation loop runs instead"
  if [ -d "fuzz/regressions/$t" ] && ! "$py" "fuzz/fuzz_$t.py" --artifacts "$art" "fuzz/regressions/$t" >"$log" 2>&1; then
    say "FAIL $t: a regression input fails again:"; tail -30 "$log" | sed 's/^/    /'
    failures=$((failures + 1))
    summary+=("$(printf '%-18s %12s %8s %8s  %s' "$t" - - - "REGRESSION FAILS")")
    return
  fi
  local limit=(--seconds "$secs")
  [ -n "${EDGELLM_FUZZ_RUNS:-}" ] && limit=(--runs "$EDGELLM_FUZZ_RUNS")
  set +e
  "$py" "fuzz/fuzz_$t.py" "${limit[@]}" --work "$work" --artifacts "$art" >"$log" 2>&1
  rc=$?
  set -e
  record "$t" "$rc" "$log" "$art" "$t0" 'FINDING|Error|Exceeded|Traceback|File "'
}

# record TARGET RC LOG ARTIFACTS T0 PATTERN: a run's summary line from libFuzzer's statistics
# (executions, cov, ft), and on a finding the log's lines matching PATTERN
record() {
  local t=$1 rc=$2 log=$3 art=$4 t0=$5 pattern=$6 done_line execs cov ft verdict
  done_line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1 || true)
  execs=$(grep -oE '^stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$' || true)
  [ -n "$execs" ] || execs=$(echo "$done_line" | grep -oE '^#[0-9]+' | tr -d '#' || echo "?")
  cov=$(echo "$done_line" | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+' || echo "?")
  ft=$(echo "$done_line" | grep -oE 'ft: [0-9]+' | grep -oE '[0-9]+' || echo "?")
  if [ "$rc" -eq 0 ]; then
    verdict="ok"
  else
    verdict="FINDING (exit $rc): $(ls -t "$art" | head -1 | sed "s|^|$art/|")"
    failures=$((failures + 1))
    say "FAIL $t (exit $rc):"
    { grep -E "$pattern" "$log" || true; } | head -40 | sed 's/^/    /'
  fi
  summary+=("$(printf '%-18s %12s %8s %8s  %s' "$t" "${execs:-?}" "$cov" "$ft" "$verdict ($(( $(date +%s) - t0 )) s)")")
}

failures=0
summary=()
for t in "${targets[@]}"; do
  if [[ " ${py_targets[*]} " == *" $t "* ]]; then run_python "$t"; continue; fi
  bin="$build/fuzz/fuzz_$t"
  work="$build/corpus/$t"
  art="$build/artifacts/$t"
  mkdir -p "$work" "$art"
  # Regressions: every saved finding must now run clean.
  regs=()
  if [ -d "fuzz/regressions/$t" ]; then
    while IFS= read -r -d '' f; do regs+=("$f"); done < <(find "fuzz/regressions/$t" -type f ! -name '*.md' -print0 | sort -z)
  fi
  if [ ${#regs[@]} -gt 0 ]; then
    log=$(mktemp)
    if ! "$bin" -timeout=20 -rss_limit_mb=2048 "${regs[@]}" >"$log" 2>&1; then
      say "FAIL $t: a regression input fails again:"
      tail -30 "$log" | sed 's/^/    /'
      failures=$((failures + 1))
      rm -f "$log"
      summary+=("$(printf '%-18s %12s %8s %8s  %s' "$t" - - - "REGRESSION FAILS")")
      continue
    fi
    rm -f "$log"
  fi
  limit=(-max_total_time="$secs")
  [ -n "${EDGELLM_FUZZ_RUNS:-}" ] && limit=(-runs="$EDGELLM_FUZZ_RUNS")
  log="$build/fuzz-$t.log"
  t0=$(date +%s)
  set +e
  # shellcheck disable=SC2086
  "$bin" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$art/" -dict="$(dict_for "$t")" ${EDGELLM_FUZZ_ARGS:-} \
    "$work" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  set -e
  record "$t" "$rc" "$log" "$art" "$t0" 'ERROR|SUMMARY|FUZZ_CHECK|runtime error|does not|#[0-9]+ 0x'
done

echo
printf '%-18s %12s %8s %8s  %s\n' target executions cov ft result
for line in "${summary[@]}"; do echo "$line"; done
if [ "$failures" -ne 0 ]; then
  echo "[fuzz] FAIL: $failures target(s) with findings (inputs under $build/artifacts/; logs $build/fuzz-*.log)"
  exit 1
fi
say "PASS: ${#targets[@]} targets, no findings ($(( $(date +%s) - start )) s)"
