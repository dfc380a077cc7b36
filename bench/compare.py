#!/usr/bin/env python3
"""edgellm vs the peer (llama-cpp-python) on the same model, threads and token counts, one
after the other in one run, with the same method on both sides (llama-bench's: warm-up, then
per repetition an empty KV cache; pp = random ids in one eval with logits for the last token
only, n_batch 512; tg = single-token evals of random ids, no sampling).

    EDGELLM_BUILD_DIR=build/x PYTHONPATH=python python bench/compare.py smollm2 gemma3 -t 2 -r 3
    python bench/compare.py ~/.cache/edgellm/synthetic/smollm2-1.7b-shape-Q4_0.gguf -p 128 -n 32
    python bench/compare.py smollm2 --batch 1,4,8,16 -o json

Also measured, for tg, the share of the bandwidth floor reached: a decode step has to read every
weight matrix once, so tg t/s can be at most bandwidth / weight bytes. For a mixture of experts
the weight bytes are the active ones: of each 3-D expert tensor only the expert_used_count /
expert_count share a token selects (edgellm.bench.model_info). The bandwidth is edgellm's native
probe (edgellm._core.BandwidthProbe: T threads each stream their own 256 MiB buffer, as decode
streams weights, prefetching ahead into L1 as the decode kernels do). On a shared machine it moves by tens of percent from one second to the next,
so one probe before the run is not the floor of a test run later: tg is measured in --rounds
rounds, each running edgellm, llama.cpp and ik_llama.cpp once in turn, every test flanked by
probes right before and right after it; a test's floor is the mean of its two probes and its
"% of bw floor" the median over the rounds of (weight bytes x t/s) / that floor. pp is measured in
the same rounds (each engine -r repetitions a round, in turn), so no engine's pp lands wholly on a
busier or quieter stretch than another's. The t/s are the means over all rounds' samples.

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

from peer import PeerMissing, ensure_edgellm_importable, find_peer_python, run_peer


class Floor:
    """The bandwidth floor around a measurement: median of `passes` probe passes before and after."""

    def __init__(self, n_threads: int, mib: int = 256, passes: int = 3):
        from edgellm import _core

        self.probe = _core.BandwidthProbe(n_threads, mib << 20)
        self.passes = passes

    def gbs(self) -> float:
        out = []
        for _ in range(self.passes):
            r = self.probe.run()
            if r["checksum"] != self.probe.expected_checksum:
                raise RuntimeError("bandwidth probe: checksum mismatch (the pass did not read its buffer)")
            out.append(r["gb_per_s"])
        return statistics.median(out)

    def around(self, fn):
        """(fn(), mean of the probes right before and right after it)."""
        before = self.gbs()
        value = fn()
        return value, (before + self.gbs()) / 2


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
    """llama-bench (llama.cpp's or ik_llama.cpp's) -> {test: {avg_ts, stddev_ts, samples_ts}}."""
    cmd = [binary, "-m", path, "-t", str(threads), "-p", str(n_prompt), "-n", str(n_gen),
           "-r", str(reps), "-o", "json", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    text = r.stdout[r.stdout.index("["):]
    out = {}
    for e in json.loads(text):
        if e.get("n_prompt", 0) > 0 and e.get("n_gen", 0) == 0:
            out[f"pp{e['n_prompt']}"] = {"avg_ts": e["avg_ts"], "stddev_ts": e["stddev_ts"],
                                         "samples_ts": e.get("samples_ts")}
        elif e.get("n_gen", 0) > 0 and e.get("n_prompt", 0) == 0:
            out[f"tg{e['n_gen']}"] = {"avg_ts": e["avg_ts"], "stddev_ts": e["stddev_ts"]}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="known model names or GGUF paths")
    p.add_argument("-p", "--n-prompt", type=int, default=512)
    p.add_argument("-n", "--n-gen", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-r", "--reps", type=int, default=3, help="repetitions of pp and of batched decode")
    p.add_argument("--rounds", type=int, default=5,
                   help="rounds: each runs every engine's pp (-r reps) and tg once in turn, tg flanked by "
                        "bandwidth probes")
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
    floor = Floor(a.threads)
    bw = floor.gbs()
    load = os.getloadavg()[0]
    print(f"read bandwidth ({a.threads} threads, native probe): {bw:.1f} GB/s; load average {load:.2f}",
          file=sys.stderr)

    def ts_of(res, test):
        return res[test]["avg_ts"] if test in res else None

    rows = []
    for m in a.models:
        path = str(resolve(m))
        info = read_model_info(path)
        print(f"{info.label}: edgellm ...", file=sys.stderr, flush=True)
        bench = ThroughputBench(path, n_threads=a.threads, max_batch_tokens=512)
        backend = bench.backend
        ours = {}
        if batches:
            ours.update({r.test: r for r in bench.run([], [a.n_gen], a.reps, batches) if r.n_seqs > 1})

        def peer_run(n_prompt, n_gen, reps):
            if a.no_peer:
                return {}
            if a.llama_bench:
                return run_llama_bench(a.llama_bench, path, a.threads, n_prompt, n_gen, reps)
            if peer_py:
                res = run_peer(peer_py, "throughput", path, "--threads", a.threads, "--n-prompt", n_prompt,
                               "--n-gen", n_gen, "--reps", reps)
                return {r["test"]: r for r in res["results"]}
            return {}

        def ik_run(n_prompt, n_gen, reps):
            return run_llama_bench(ik, path, a.threads, n_prompt, n_gen, reps, ("-rtr", "1")) if ik else {}

        # pp in rounds too (each engine a.reps repetitions a round, in turn): on a shared host one
        # engine's block of repetitions otherwise lands on a busier or quieter moment than the next's.
        pp = f"pp{a.n_prompt}"
        peer, ikr = {}, {}
        pp_samples = {"edgellm": [], "peer": [], "ik": []}
        if a.n_prompt > 0:
            for k in range(a.rounds):
                print(f"{info.label}: {pp} round {k + 1}/{a.rounds} ...", file=sys.stderr, flush=True)
                pp_samples["edgellm"] += bench.pp(a.n_prompt, a.reps).samples_ts
                for name, fn in (("peer", peer_run), ("ik", ik_run)):
                    res = fn(a.n_prompt, 0, a.reps)
                    if ts_of(res, pp) is not None:
                        pp_samples[name] += res[pp].get("samples_ts") or [ts_of(res, pp)]
        # tg in rounds, each engine once a round, every test between two probes.
        tg = f"tg{a.n_gen}"
        samples = {"edgellm": [], "peer": [], "ik": []}
        if a.n_gen > 0:
            for k in range(a.rounds):
                print(f"{info.label}: {tg} round {k + 1}/{a.rounds} ...", file=sys.stderr, flush=True)
                r, f = floor.around(lambda: bench.tg(a.n_gen, 1))
                samples["edgellm"].append((r.avg_ts, f))
                for name, fn in (("peer", peer_run), ("ik", ik_run)):
                    res, f = floor.around(lambda: fn(0, a.n_gen, 1))
                    if ts_of(res, tg) is not None:
                        samples[name].append((ts_of(res, tg), f))
        del bench
        gc.collect()

        def summary(xs):
            """(mean t/s, sd, median % of the floor, median floor GB/s) over the rounds."""
            if not xs:
                return None
            ts = [t for t, _ in xs]
            pct = [100 * t * info.weight_bytes / (f * 1e9) for t, f in xs]
            return (statistics.fmean(ts), statistics.stdev(ts) if len(ts) > 1 else 0.0,
                    statistics.median(pct), statistics.median(f for _, f in xs))

        def row(test, e_ts, e_sd, p_ts, p_sd, k_ts, k_sd):
            return {"model": info.label, "path": path, "test": test, "threads": a.threads, "backend": backend,
                    "edgellm_ts": e_ts, "edgellm_sd": e_sd, "peer_ts": p_ts, "peer_sd": p_sd,
                    "ratio": e_ts / p_ts if p_ts else None, "ik_ts": k_ts, "ik_sd": k_sd,
                    "ik_ratio": e_ts / k_ts if k_ts else None, "weight_bytes": info.weight_bytes,
                    "bandwidth_gbs": bw, "load_avg": load}

        def mean_sd(xs):
            return (statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0) if xs else (None, None)

        if pp_samples["edgellm"]:
            e, pe, ke = (mean_sd(pp_samples[n]) for n in ("edgellm", "peer", "ik"))
            rw = row(pp, *e, *pe, *ke)
            rw.update({"rounds": a.rounds, "samples": pp_samples})
            rows.append(rw)
        for test, r in ours.items():
            pr, kr = peer.get(test), ikr.get(test)
            rows.append(row(test, r.avg_ts, r.stddev_ts, pr["avg_ts"] if pr else None,
                            pr["stddev_ts"] if pr else None, kr["avg_ts"] if kr else None,
                            kr["stddev_ts"] if kr else None))
        se, sp, sk = (summary(samples[n]) for n in ("edgellm", "peer", "ik"))
        if se:
            rw = row(tg, se[0], se[1], sp[0] if sp else None, sp[1] if sp else None,
                     sk[0] if sk else None, sk[1] if sk else None)
            rw.update({"rounds": a.rounds, "floor_gbs": se[3], "edgellm_floor_pct": se[2],
                       "peer_floor_pct": sp[2] if sp else None, "ik_floor_pct": sk[2] if sk else None,
                       "samples": samples})
            rows.append(rw)
    if a.output == "json":
        json.dump({"cpu": cpu_model(), "bandwidth_gbs": bw, "rows": rows}, sys.stdout, indent=2)
        print()
        return
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; {a.threads} threads; read bandwidth at the start "
          f"{bw:.1f} GB/s (tg: the floor around each test, median over rounds in the floor column); "
          f"load average {load:.2f}; pp {a.rounds} rounds of {a.reps} reps, tg {a.rounds} rounds\n")
    print("| model | test | edgellm t/s | llama.cpp t/s | ratio | ik_llama.cpp t/s | ratio | "
          "edgellm % of bw floor | llama.cpp % | ik % |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        peer = f"{r['peer_ts']:.2f} ± {r['peer_sd']:.2f}" if r["peer_ts"] is not None else "—"
        ratio = f"{r['ratio']:.2f}×" if r["ratio"] is not None else "—"
        ikt = f"{r['ik_ts']:.2f} ± {r['ik_sd']:.2f}" if r["ik_ts"] is not None else "—"
        ikq = f"{r['ik_ratio']:.2f}×" if r["ik_ratio"] is not None else "—"
        ef = (f"{r['edgellm_floor_pct']:.0f}% (of {r['floor_gbs']:.1f} GB/s)"
              if "edgellm_floor_pct" in r else "")
        pf = f"{r['peer_floor_pct']:.0f}%" if r.get("peer_floor_pct") is not None else ""
        kf = f"{r['ik_floor_pct']:.0f}%" if r.get("ik_floor_pct") is not None else ""
        print(f"| {r['model']} | {r['test']} | {r['edgellm_ts']:.2f} ± {r['edgellm_sd']:.2f} | {peer} | {ratio} | "
              f"{ikt} | {ikq} | {ef} | {pf} | {kf} |")


if __name__ == "__main__":
    main()
