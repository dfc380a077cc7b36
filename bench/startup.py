#!/usr/bin/env python3
"""Start-up and memory: process start to first generated token, and peak RSS, for

    edgellm generate MODEL -p hi -n 1 -c 4096 --temp 0 -t T

against the peer's equivalent (llama-cpp-python: Llama(MODEL, n_ctx=4096, n_threads=T) and a
one-token completion of "hi", bench/peer_worker.py startup), each a fresh process with a warm
page cache (one untimed run first). With one token to generate, the process's wall time from
spawn to exit is the time to the first token plus interpreter teardown, so it is an upper bound.
Peak RSS is the child's ru_maxrss (os.wait4).

The memory budget checked: RSS <= weights (file size) + KV of one 4096-token sequence + 64 MiB.

    EDGELLM_BUILD_DIR=build/x PYTHONPATH=python python bench/startup.py smollm2 gemma3 -r 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from peer import HERE, PeerMissing, ensure_edgellm_importable, find_peer_python


def run_once(cmd, env=None):
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, ru.ru_maxrss * 1024  # Linux: KiB


def kv_bytes(path, n_ctx):
    """F16 K and V of one n_ctx sequence, computed in a child process: reading the GGUF here would
    grow this process, and Linux reports a child's peak RSS as at least its parent's RSS at the
    fork/exec (the old mm's high-water mark is kept across exec), which would inflate both columns."""
    out = subprocess.run([sys.executable, __file__, "--kv-bytes", path, str(n_ctx)], check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip())


def _kv_bytes_here(path, n_ctx):
    import gguf

    r = gguf.GGUFReader(path, "r")
    v = lambda k, d=None: r.fields[k].contents() if k in r.fields else d  # noqa: E731
    arch = v("general.architecture")
    n_layer = v(f"{arch}.block_count")
    n_head = v(f"{arch}.attention.head_count")
    n_head_kv = v(f"{arch}.attention.head_count_kv", n_head)
    n_embd = v(f"{arch}.embedding_length")
    dk = v(f"{arch}.attention.key_length", n_embd // n_head)
    dv = v(f"{arch}.attention.value_length", n_embd // n_head)
    if isinstance(n_head_kv, list):
        n_head_kv = max(n_head_kv)
    return 2 * n_layer * n_ctx * n_head_kv * (dk + dv)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--kv-bytes":
        print(_kv_bytes_here(sys.argv[2], int(sys.argv[3])))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-c", "--ctx", type=int, default=4096)
    p.add_argument("-r", "--reps", type=int, default=3)
    p.add_argument("--peer-python")
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("-o", "--output", choices=["md", "json"], default="md")
    a = p.parse_args()
    ensure_edgellm_importable()
    from edgellm.models import resolve

    peer_py = None
    if not a.no_peer:
        try:
            peer_py = find_peer_python(a.peer_python)
        except PeerMissing as e:
            sys.exit(f"{e}\n(or run with --no-peer)")
    env = dict(os.environ)
    rows = []
    for m in a.models:
        path = str(resolve(m))
        ours_cmd = [sys.executable, "-m", "edgellm", "generate", path, "-p", "hi", "-n", "1", "-c", str(a.ctx),
                    "--temp", "0", "-t", str(a.threads)]
        peer_cmd = [peer_py, str(HERE / "peer_worker.py"), "startup", path, "--ctx", str(a.ctx),
                    "--threads", str(a.threads)] if peer_py else None
        res = {}
        for side, cmd in (("edgellm", ours_cmd), ("peer", peer_cmd)):
            if cmd is None:
                continue
            run_once(cmd, env)  # warm the page cache
            walls, rss = [], []
            for _ in range(a.reps):
                w, r = run_once(cmd, env)
                walls.append(w)
                rss.append(r)
            res[side] = {"wall_s": statistics.median(walls), "walls": walls, "rss": max(rss)}
        weights = os.path.getsize(path)
        kv = kv_bytes(path, a.ctx)
        budget = weights + kv + (64 << 20)
        rows.append({"model": m, "path": path, "ctx": a.ctx, "weights_bytes": weights, "kv_bytes": kv,
                     "budget_bytes": budget, **{f"{s}_{k}": v for s, d in res.items() for k, v in d.items()},
                     "load_avg": os.getloadavg()[0]})
    if a.output == "json":
        json.dump(rows, sys.stdout, indent=2)
        print()
        return
    mib = lambda b: f"{b / 2**20:.0f} MiB"  # noqa: E731
    print(f"-c {a.ctx}, {a.threads} threads, median of {a.reps} runs after a warm-up run\n")
    print("| model | edgellm start→first token | peer | edgellm peak RSS | peer peak RSS | weights + KV + 64 MiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        pw = f"{r['peer_wall_s']:.2f} s" if "peer_wall_s" in r else "—"
        pr = mib(r["peer_rss"]) if "peer_rss" in r else "—"
        ok = "within" if r["edgellm_rss"] <= r["budget_bytes"] else "OVER"
        print(f"| {r['model']} | {r['edgellm_wall_s']:.2f} s | {pw} | {mib(r['edgellm_rss'])} | {pr} | "
              f"{mib(r['budget_bytes'])} ({ok}) |")


if __name__ == "__main__":
    main()
