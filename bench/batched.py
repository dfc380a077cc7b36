#!/usr/bin/env python3
"""Many streams at once: N streams x (P prompt + G generated tokens) through edgellm.LLM, overall
tokens/s against llama.cpp's `llama-batched-bench` on the same model, threads and token counts,
one after the other in one run, with edgellm's preemptions and KV memory (issue 19).

    EDGELLM_BUILD_DIR=build/dev PYTHONPATH=python python bench/batched.py smollm2 gemma3 qwen2.5-coder-0.5b -t 2 -r 3
    python bench/batched.py gemma3 --npp 16 --ntg 8 --npl 4 -r 1          # a smoke test
    python bench/batched.py gemma3 -o json --no-peer

Method, the same on both sides (llama-batched-bench's): each repetition starts from an empty KV
cache (edgellm: fresh random prompts, so the prefix cache cannot help), the N prompts are P
random token ids each, every stream generates exactly G tokens (edgellm: greedy, ignore_eos;
llama-batched-bench: random ids fed back, no sampling), and the figure is
N * (P + G) / wall time of the whole run, prompts included (llama-batched-bench's `S t/s`).
edgellm runs its default engine: chunked prefill mixed with decode under max_batch_tokens 512,
prefix cache on, speculative decoding off (llama-batched-bench does not speculate; --speculative
auto measures it on), KV budget the default for --n-ctx (two full-context sequences' worth)
unless --kv-memory is given. llama-batched-bench gets -c N*(P+G) (its KV holds exactly the run),
-b 2048 -ub 512, and -t like edgellm (one unmeasured run first, as edgellm's warm-up). "preemptions" is the preemptions edgellm's scheduler made in the
measured repetitions: 0 means no stream was ever recomputed.

The peer binary: --peer-bin, else $EDGELLM_PEER_BATCHED_BENCH, else the first of
/opt/peer/llama.cpp/build/bin/llama-batched-bench and build/peer/llama-batched-bench that exists
(bench/README.md says how to build it from the peer's llama.cpp tree).
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from peer import ensure_edgellm_importable

HERE = Path(__file__).resolve().parent
PEER_CANDIDATES = [Path("/opt/peer/llama.cpp/build/bin/llama-batched-bench"),
                   HERE.parent / "build" / "peer" / "llama-batched-bench"]


def find_batched_bench(explicit=None):
    cand = explicit or os.environ.get("EDGELLM_PEER_BATCHED_BENCH")
    if cand:
        if not Path(cand).exists():
            sys.exit(f"llama-batched-bench {cand} not found")
        return str(cand)
    for p in PEER_CANDIDATES:
        if p.exists():
            return str(p)
    return None


def mean_sd(xs):
    return (statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0)


def run_edgellm(path, a):
    from edgellm import LLM, SamplingParams

    kw = dict(n_threads=a.threads, n_ctx=a.n_ctx, max_seqs=a.npl, max_batch_tokens=512,
              speculative=a.speculative)
    if a.kv_memory:
        kw["kv_memory"] = a.kv_memory
    llm = LLM(path, **kw)
    try:
        rng = np.random.default_rng(1234)

        def prompts(n_tokens):
            return [rng.integers(0, llm.n_vocab, n_tokens).tolist() for _ in range(a.npl)]

        def run(n_prompt, n_gen):
            params = SamplingParams(temperature=0.0, max_tokens=n_gen, ignore_eos=True)
            ps = prompts(n_prompt)
            t0 = time.perf_counter()
            outs = llm.generate(ps, params)
            dt = time.perf_counter() - t0
            bad = [len(o.token_ids) for o in outs if len(o.token_ids) != n_gen]
            if bad:
                raise RuntimeError(f"a stream generated {bad[0]} tokens instead of {n_gen}")
            return dt

        run(min(a.npp, 32), min(a.ntg, 8))  # warm-up: threads, page faults of weights and KV
        before = llm.stats()
        speeds = []
        for _ in range(a.reps):
            dt = run(a.npp, a.ntg)
            speeds.append(a.npl * (a.npp + a.ntg) / dt)
        after = llm.stats()
        return {"speeds": speeds, "preemptions": after["preemptions"] - before["preemptions"],
                "kv_bytes_total": after.get("kv_bytes_total"), "kv_bytes_resident": after.get("kv_bytes_resident"),
                "pages_full_total": after["pages_full_total"], "pages_window_total": after["pages_window_total"],
                "n_ctx": llm.n_ctx}
    finally:
        llm.close()


def run_peer(binary, path, a):
    cmd = [binary, "-m", path, "-c", str(a.npl * (a.npp + a.ntg)), "-b", "2048", "-ub", "512",
           "-npp", str(a.npp), "-ntg", str(a.ntg), "-npl", str(a.npl), "-t", str(a.threads),
           "--output-format", "jsonl", *a.peer_args.split()]
    speeds = []
    for rep in range(a.reps + 1):  # the first run warms the page cache and is not counted
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            raise RuntimeError(f"llama-batched-bench failed (exit {r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
        rows = [json.loads(line) for line in (r.stdout + "\n" + r.stderr).splitlines()
                if line.startswith("{") and '"speed"' in line]
        if not rows:
            raise RuntimeError(f"no result line from llama-batched-bench: {' '.join(cmd)}\n{r.stdout[-2000:]}")
        if rep > 0:
            speeds.append(float(rows[-1]["speed"]))
    return {"speeds": speeds, "cmd": " ".join(cmd)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="known model names or GGUF paths")
    p.add_argument("--npp", type=int, default=128, help="prompt tokens per stream")
    p.add_argument("--ntg", type=int, default=128, help="generated tokens per stream")
    p.add_argument("--npl", type=int, default=16, help="streams")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-r", "--reps", type=int, default=3)
    p.add_argument("-c", "--n-ctx", type=int, default=8192, help="edgellm's n_ctx (sizes its default KV budget)")
    p.add_argument("--kv-memory", type=int, default=0, help="edgellm's kv_memory in bytes (0: its default)")
    p.add_argument("--speculative", default="off", choices=["off", "auto", "ngram"])
    p.add_argument("--peer-bin", help="llama-batched-bench binary")
    p.add_argument("--peer-args", default="", help="extra arguments for llama-batched-bench, e.g. '-fa on'")
    p.add_argument("--no-peer", action="store_true", help="measure edgellm only")
    p.add_argument("-o", "--output", choices=["md", "json"], default="md")
    a = p.parse_args()
    if min(a.npp, a.ntg, a.npl, a.reps, a.threads) < 1:
        sys.exit("--npp, --ntg, --npl, --reps and --threads must be >= 1")
    ensure_edgellm_importable()
    from edgellm.bench.model_info import read_model_info
    from edgellm.models import resolve

    peer_bin = None
    if not a.no_peer:
        peer_bin = find_batched_bench(a.peer_bin)
        if not peer_bin:
            sys.exit("llama-batched-bench not found (" + ", ".join(map(str, PEER_CANDIDATES)) +
                     "): build it (bench/README.md), pass --peer-bin, or run with --no-peer")
    load = os.getloadavg()[0]
    rows = []
    for m in a.models:
        path = str(resolve(m))
        info = read_model_info(path)
        print(f"{info.label}: edgellm ...", file=sys.stderr, flush=True)
        ours = run_edgellm(path, a)
        gc.collect()
        peer = None
        if peer_bin:
            print(f"{info.label}: llama-batched-bench ...", file=sys.stderr, flush=True)
            peer = run_peer(peer_bin, path, a)
        e_ts, e_sd = mean_sd(ours["speeds"])
        row = {"model": info.label, "path": path, "threads": a.threads, "npp": a.npp, "ntg": a.ntg, "npl": a.npl,
               "edgellm_ts": e_ts, "edgellm_sd": e_sd, "preemptions": ours["preemptions"],
               "n_ctx": ours["n_ctx"], "kv_bytes_total": ours["kv_bytes_total"],
               "kv_bytes_resident": ours["kv_bytes_resident"], "pages_full_total": ours["pages_full_total"],
               "pages_window_total": ours["pages_window_total"], "speculative": a.speculative, "load_avg": load}
        if peer:
            p_ts, p_sd = mean_sd(peer["speeds"])
            row.update(peer_ts=p_ts, peer_sd=p_sd, ratio=e_ts / p_ts, peer_cmd=peer["cmd"])
        rows.append(row)
    if a.output == "json":
        json.dump({"rows": rows, "reps": a.reps, "load_avg": load}, sys.stdout, indent=2)
        print()
        return
    print(f"{a.npl} streams x ({a.npp} prompt + {a.ntg} generated) tokens, {a.threads} threads, {a.reps} reps; "
          f"load average {load:.2f}; edgellm speculative {a.speculative}\n")
    print("| model | edgellm t/s | llama-batched-bench t/s | ratio | preemptions | KV budget | n_ctx |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        peer = f"{r['peer_ts']:.1f} ± {r['peer_sd']:.1f}" if "peer_ts" in r else "—"
        ratio = f"{r['ratio']:.2f}×" if "ratio" in r else "—"
        kv = f"{r['kv_bytes_total'] / 1e6:.1f} MB" if r["kv_bytes_total"] else "?"
        print(f"| {r['model']} | {r['edgellm_ts']:.1f} ± {r['edgellm_sd']:.1f} | {peer} | {ratio} | "
              f"{r['preemptions']} | {kv} | {r['n_ctx']} |")


if __name__ == "__main__":
    main()
