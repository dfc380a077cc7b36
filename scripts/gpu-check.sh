#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU, in one command (< 8 minutes on a 16-core box
# with an sm_75+ GPU): build the CUDA variant with the Python module, run the CUDA tests (every
# kernel against the CPU reference, the golden rule of the real models with all layers — and a
# CPU/GPU split — offloaded), then benchmark pp512 / tg128 with all layers on the GPU against the
# CPU path on SmolLM2-135M, Gemma 3 270M and a synthetic SmolLM2-1.7B-shaped Q4_K_M model.
#
#   scripts/gpu-check.sh [BUILD_DIR]         (default build/gpu)
#
# Env: EDGELLM_CUDA_ARCHS (default: this GPU's arch only, for a fast build), EDGELLM_JOBS,
# GPU_CHECK_REPS (bench repetitions, default 2), GPU_CHECK_SKIP_BENCH=1.
# Models: the test models must be cached (edgellm models fetch smollm2 gemma3 qwen2.5-coder-0.5b);
# the synthetic model is written to ~/.cache/edgellm/synthetic on first use (~1 GB, seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/gpu}
jobs=${EDGELLM_JOBS:-$(nproc)}
reps=${GPU_CHECK_REPS:-2}
t0=$(date +%s)
step() { echo; echo "=== $* ($(( $(date +%s) - t0 )) s)"; }

command -v nvcc >/dev/null || { echo "gpu-check: nvcc not found (install the CUDA toolkit)"; exit 1; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader

archs=${EDGELLM_CUDA_ARCHS:-}
if [ -z "$archs" ] && command -v nvidia-smi >/dev/null; then
  archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
fi
archs=${archs:-"75;80;86;89;90"}

step "build (CUDA archs: $archs) in $dir"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEDGELLM_CUDA=ON -DEDGELLM_CUDA_ARCHS="$archs" \
  -DPython_EXECUTABLE="$(command -v python3)" \
  -Dpybind11_DIR="$(python3 -c 'import pybind11; print(pybind11.get_cmake_dir())')" >/dev/null
cmake --build "$dir" -- -j"$jobs"
"$dir"/edgellm_cuda_selftest | tail -1
export EDGELLM_BUILD_DIR=$dir PYTHONPATH=python
python3 - <<'EOF'
import edgellm._core as c
s = c.cuda_status()
print("cuda_status:", s)
if not s["available"]:
    raise SystemExit("gpu-check: no usable GPU: " + s["reason"])
EOF

step "CUDA tests: kernels vs CPU reference, golden rule offloaded"
python3 -m pytest tests/test_cuda.py -q -ra -x

[ "${GPU_CHECK_SKIP_BENCH:-0}" = 1 ] && { echo "bench skipped"; exit 0; }

step "synthetic SmolLM2-1.7B-shape Q4_K_M"
syn=~/.cache/edgellm/synthetic/smollm2-1.7b-shape-Q4_K_M.gguf
[ -f "$syn" ] || python3 bench/make_synthetic.py --type Q4_K_M

step "bench: pp512 / tg128, CPU vs all layers on the GPU ($reps repetitions)"
out=$(mktemp -d)
for m in smollm2 gemma3 "$syn"; do
  tag=$(basename "$m" .gguf)
  for ngl in 0 -1; do
    python3 -m edgellm bench "$m" -p 512 -n 128 -r "$reps" -o json -ngl "$ngl" > "$out/$tag.$ngl.json"
  done
done

step "done"
python3 - "$out" <<'EOF'
import json, pathlib, sys
rows = {}
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    tag, ngl = f.name[:-5].rsplit(".", 1)
    for r in json.loads(f.read_text()):
        test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        rows.setdefault((tag, test), {})[ngl] = r["avg_ts"]
print(f"{'model':<36} {'test':<6} {'CPU t/s':>10} {'GPU t/s':>10} {'GPU/CPU':>8}")
for (tag, test), v in rows.items():
    cpu, gpu = v.get("0"), v.get("-1")
    ratio = f"{gpu / cpu:.1f}x" if cpu and gpu else "-"
    print(f"{tag:<36} {test:<6} {cpu or 0:>10.1f} {gpu or 0:>10.1f} {ratio:>8}")
EOF
