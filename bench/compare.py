#!/usr/bin/env python3
"""edgellm vs the peer (llama-cpp-python) on the same model, threads and token counts, one
after the other in one run, with the same method on both sides (llama-bench's: warm-up, then
per repetition an empty KV cache; pp = random ids in one eval with logits for the last token
only, n_batch 512; tg = single-token evals of random ids, no sampling).

    EDGELLM_BUILD_DIR=build/x PYTHONPATH=python python bench/compare.py smollm2 gemma3 -t 2 -r 3
    python bench/compare.py ~/.cache/edgellm/synthetic/smollm2-1.7b-shape-Q4_0.gguf -p 128 -n 32
    python bench/compare.py smollm2 --batch 1,4,8,16 -o json

Also measured: read bandwidth (each of T threads sums its own 256 MiB array with numpy,
best of 5), and for tg the share of the bandwidth floor reached: a decode step has to read
every weight matrix once, so tg t/s can be at most bandwidth / weight bytes. For a mixture of
experts the weight bytes are the active ones: of each 3-D expert tensor only the
expert_used_count / expert_count share a token selects (edgellm.bench.model_info).

Batched decode (--batch N): edgellm only. llama-cpp-python exposes no multi-sequence API
above the raw llama_batch structs, so the peer's column stays empty.

The peer: --peer-python, else $EDGELLM_PEER_PYTHON, else /opt/peer/venv/bin/python; or
--llama-bench BIN: llama.cpp's own llama-bench binary from the same tree instead (the same
method; -o json). ik_llama.cpp (the fastest CPU fork) beside it: --ik-bench BIN, else
$EDGELLM_IK_BENCH, else /opt/peer/ik/build/bin/llama-bench when it exists; run with `-rtr 1`
(run-time repacking, its fastest CPU path) and the same -t / -p / -n / -r. Build it from
github.com/ikawrakow/ik_llama.cpp with -DGGML_NATIVE=ON (bench/README.md).
"""
import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

from peer import PeerMissing, ensure_edgellm_importable, find_peer_python, run_peer


def read_bandwidth(n_threads: int, mib: int = 256, reps: int = 5) -> float:
    """GB/s of n_threads threads each streaming its own array (numpy releases the GIL)."""
    arrays = [np.ones(mib * (1 << 20) // 8, dtype=np.float64) for _ in range(n_threads)]
    best = 0.0
    for _ in range(reps):
        barrier = threading.Barrier(n_threads + 1)

        def work(a):
            barrier.wait()
            a.sum()

        threads = [threading.Thread(target=work, args=(a,)) for a in arrays]
        for t in threads:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
        best = max(best, n_threads * mib * (1 << 20) / dt / 1e9)
    return best


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


IK_DEFAULT = "/opt/peer/ik/build/bin/llama-bench"


def run_llama_bench(binary: str, path: str, threads: int, n_prompt: int, n_gen: int, reps: int,
                    extra=()) -> dict:
    """llama-bench (llama.cpp's or ik_llama.cpp's) -> {test: {avg_ts, stddev_ts}}."""
    cmd = [binary, "-m", path, "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen),
           "-r", str(reps), "-o", "json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    text = r.stdout[r.stdout.index("["):]
    out = {}
    for e in json.loads(text):
        if e.get("n_prompt", 0) > 0 and e.get("n_gen", 0) == 0:
            out[f"pp{e['n_prompt']}"] = {"avg_ts": e["avg_ts"], "stddev_ts": e["stddev_ts"]}
        elif e.get("n_gen", 0) > 0 and e.get("n_prompt", 0) == 0:
            out[f"tg{e['n_gen']}"] = {"avg_ts": e["avg_ts"], "stddev_ts": e["stddev_ts"]}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="known model names or GGUF paths")
    p.add_argument("-p", "--n-prompt", type=int, default=512)
    p.add_argument("-n", "--n-gen", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-r", "--reps", type=int, default=3)
    p.add_argument("--batch", default="", help="comma-separated stream counts for batched decode (edgellm only)")
    p.add_argument("--peer-python")
    p.add_argument("--no-peer", action="store_true", help="measure edgellm only")
    p.add_argument("--llama-bench", help="llama.cpp's llama-bench binary, instead of llama-cpp-python")
    p.add_argument("--ik-bench", help="ik_llama.cpp's llama-bench binary (run with -rtr 1)")
    p.add_argument("--no-ik", action="store_true", help="leave ik_llama.cpp out")
    p.add_argument("-o", "--output", choices=["md", "json"], default="md")
    a = p.parse_args()
    ensure_edgellm_importable()
    from edgellm.bench.model_info import read_model_info
    from edgellm.bench.throughput import ThroughputBench
    from edgellm.models import resolve

    batches = [int(x) for x in a.batch.split(",") if x.strip()]
    peer_py = None
    ik = None if a.no_ik else (a.ik_bench or os.environ.get("EDGELLM_IK_BENCH")
                               or (IK_DEFAULT if os.path.exists(IK_DEFAULT) else None))
    if not a.no_peer and not a.llama_bench:
        try:
            peer_py = find_peer_python(a.peer_python)
        except PeerMissing as e:
            sys.exit(f"{e}\n(or run with --no-peer)")
    bw = read_bandwidth(a.threads)
    load = os.getloadavg()[0]
    print(f"read bandwidth ({a.threads} threads): {bw:.1f} GB/s; load average {load:.2f}", file=sys.stderr)
    rows = []
    for m in a.models:
        path = str(resolve(m))
        info = read_model_info(path)
        print(f"{info.label}: edgellm ...", file=sys.stderr, flush=True)
        bench = ThroughputBench(path, n_threads=a.threads, max_batch_tokens=512)
        ours = {r.test: r for r in bench.run([a.n_prompt], [a.n_gen], a.reps, batches)}
        backend = bench.backend
        del bench
        gc.collect()
        peer = {}
        if a.llama_bench and not a.no_peer:
            print(f"{info.label}: llama.cpp llama-bench ...", file=sys.stderr, flush=True)
            peer = run_llama_bench(a.llama_bench, path, a.threads, a.n_prompt, a.n_gen, a.reps)
        elif peer_py:
            print(f"{info.label}: peer ...", file=sys.stderr, flush=True)
            res = run_peer(peer_py, "throughput", path, "--threads", a.threads, "--n-prompt", a.n_prompt,
                           "--n-gen", a.n_gen, "--reps", a.reps)
            peer = {r["test"]: r for r in res["results"]}
        ikr = {}
        if ik:
            print(f"{info.label}: ik_llama.cpp llama-bench -rtr 1 ...", file=sys.stderr, flush=True)
            ikr = run_llama_bench(ik, path, a.threads, a.n_prompt, a.n_gen, a.reps, ("-rtr", "1"))
        floor_ts = bw * 1e9 / info.weight_bytes
        for test, r in ours.items():
            pr = peer.get(test)
            row = {"model": info.label, "path": path, "test": test, "threads": a.threads, "backend": backend,
                   "edgellm_ts": r.avg_ts, "edgellm_sd": r.stddev_ts,
                   "peer_ts": pr["avg_ts"] if pr else None, "peer_sd": pr["stddev_ts"] if pr else None,
                   "ratio": r.avg_ts / pr["avg_ts"] if pr else None,
                   "ik_ts": ikr[test]["avg_ts"] if test in ikr else None,
                   "ik_sd": ikr[test]["stddev_ts"] if test in ikr else None,
                   "ik_ratio": r.avg_ts / ikr[test]["avg_ts"] if test in ikr else None,
                   "weight_bytes": info.weight_bytes, "bandwidth_gbs": bw, "load_avg": load}
            if test.startswith("tg") and r.n_seqs == 1:
                row["floor_ts"] = floor_ts
                row["edgellm_floor_pct"] = 100 * r.avg_ts / floor_ts
                row["peer_floor_pct"] = 100 * pr["avg_ts"] / floor_ts if pr else None
                row["ik_floor_pct"] = 100 * ikr[test]["avg_ts"] / floor_ts if test in ikr else None
            rows.append(row)
    if a.output == "json":
        json.dump({"cpu": cpu_model(), "bandwidth_gbs": bw, "rows": rows}, sys.stdout, indent=2)
        print()
        return
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; {a.threads} threads; read bandwidth {bw:.1f} GB/s; "
          f"load average {load:.2f}; {a.reps} reps\n")
    print("| model | test | edgellm t/s | llama.cpp t/s | ratio | ik_llama.cpp t/s | ratio | "
          "edgellm % of bw floor | llama.cpp % | ik % |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        peer = f"{r['peer_ts']:.2f} ± {r['peer_sd']:.2f}" if r["peer_ts"] is not None else "—"
        ratio = f"{r['ratio']:.2f}×" if r["ratio"] is not None else "—"
        ikt = f"{r['ik_ts']:.2f} ± {r['ik_sd']:.2f}" if r["ik_ts"] is not None else "—"
        ikq = f"{r['ik_ratio']:.2f}×" if r["ik_ratio"] is not None else "—"
        ef = f"{r['edgellm_floor_pct']:.0f}%" if "edgellm_floor_pct" in r else ""
        pf = f"{r['peer_floor_pct']:.0f}%" if r.get("peer_floor_pct") is not None else ""
        kf = f"{r['ik_floor_pct']:.0f}%" if r.get("ik_floor_pct") is not None else ""
        print(f"| {r['model']} | {r['test']} | {r['edgellm_ts']:.2f} ± {r['edgellm_sd']:.2f} | {peer} | {ratio} | "
              f"{ikt} | {ikq} | {ef} | {pf} | {kf} |")


if __name__ == "__main__":
    main()
