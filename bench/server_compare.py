#!/usr/bin/env python3
"""edgellm serve vs llama-cpp-python's server, side by side in one run, with bench/load.py.

Both servers are started once on the same model and thread count; measurement rounds then
alternate (edgellm, peer, edgellm, peer, ...) so that a machine whose load drifts during the
run weighs on both columns alike. Each round is `--requests` streaming chat requests from
`--clients` concurrent clients; a round's figures are pooled over all rounds of that server
(tokens / summed wall time, percentiles over every request).

    python bench/server_compare.py --model ~/.cache/edgellm/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --peer-python /opt/peer/venv/bin/python --threads 2 --clients 16 --requests 16 --rounds 2

llama-cpp-python's server runs one llama.cpp context: requests are served one at a time (it
has no slots), and it is started with --interrupt_requests False so a new request waits instead
of cutting off the one streaming. The peer needs its `[server]` extras importable; --peer-path
adds a folder to its PYTHONPATH for that.
"""
import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, env, ready_url, log_path):
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{cmd[:4]} exited with {proc.returncode}; see {log_path}")
        try:
            if httpx.get(ready_url, timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"{cmd[:4]} not ready after 300 s; see {log_path}")
        time.sleep(0.5)


def load_args(args, base_url, seed):
    return load.build_parser().parse_args([
        "--base-url", base_url, "--clients", str(args.clients), "--requests", str(args.requests),
        "--warmup", "0", "--prompt-words", str(args.prompt_words),
        "--max-tokens", str(args.max_tokens), "--seed", str(seed),
        "--timeout", str(args.timeout)] + sum((["--ban-token", str(t)] for t in args.ban_token), []))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--peer-python", default="/opt/peer/venv/bin/python")
    ap.add_argument("--peer-path", default=None, help="extra PYTHONPATH for the peer's server deps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=16, help="edgellm --parallel")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=16, help="requests per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=120)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ban-token", type=int, action="append", default=None,
                    help="EOG id forbidden via logit_bias, repeatable (default: SmolLM2's 0 and 2)")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json-out", default=None)
    args = ap.parse_args(argv)
    if args.ban_token is None:
        args.ban_token = [0, 2]

    e_port, p_port = free_port(), free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    edge = start([sys.executable, "-m", "edgellm", "serve", args.model, "--port", str(e_port),
                  "--threads", str(args.threads), "--parallel", str(args.parallel),
                  "--ctx-size", str(args.ctx), "--log-level", "warning", "--timeout", "0"],
                 env, f"http://127.0.0.1:{e_port}/health", "/tmp/server_compare_edgellm.log")
    penv = dict(os.environ)
    penv.pop("PYTHONPATH", None)
    if args.peer_path:
        penv["PYTHONPATH"] = args.peer_path
    try:
        peer = start([args.peer_python, "-m", "llama_cpp.server", "--model", args.model,
                      "--port", str(p_port), "--n_threads", str(args.threads),
                      "--n_threads_batch", str(args.threads), "--n_ctx", str(args.ctx),
                      "--interrupt_requests", "False", "--verbose", "False"],
                     penv, f"http://127.0.0.1:{p_port}/v1/models", "/tmp/server_compare_peer.log")
    except BaseException:
        edge.terminate()
        raise
    servers = {"edgellm": f"http://127.0.0.1:{e_port}/v1", "peer": f"http://127.0.0.1:{p_port}/v1"}
    pooled = {name: {"wall": 0.0, "tokens": 0, "ok": 0, "failed": 0, "ttfts": []} for name in servers}
    try:
        for name, url in servers.items():  # warm-up: one request each, not measured
            asyncio.run(load.run(load.build_parser().parse_args(
                ["--base-url", url, "--clients", "1", "--requests", "1", "--warmup", "0",
                 "--max-tokens", "8"])))
        for r in range(args.rounds):
            for name, url in servers.items():
                res = asyncio.run(load.run(load_args(args, url, seed=r), keep_samples=True))
                p = pooled[name]
                p["wall"] += res["wall_s"]
                p["tokens"] += res["generated_tokens"]
                p["ok"] += res["requests"] - res["failed"]
                p["failed"] += res["failed"]
                p["ttfts"] += res["ttft_samples"]
                print(f"round {r + 1} {name}: {res['aggregate_tokens_per_s']:.1f} tok/s, "
                      f"TTFT p99 {res['ttft_p99_s']:.2f} s, {res['failed']} failed "
                      f"{res['errors'][:1]}", flush=True)
    finally:
        for proc in (edge, peer):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()

    rows = {}
    for name, p in pooled.items():
        rows[name] = {
            "requests_per_s": p["ok"] / p["wall"], "ttft_p50_s": load.percentile(p["ttfts"], 0.5),
            "ttft_p99_s": load.percentile(p["ttfts"], 0.99),
            "aggregate_tokens_per_s": p["tokens"] / p["wall"], "requests": p["ok"],
            "failed": p["failed"]}
    base = rows["peer"]["aggregate_tokens_per_s"] or float("nan")
    print(f"\n| server ({Path(args.model).name}, {args.threads} threads, {args.clients} clients, "
          f"{args.rounds}x{args.requests} requests) | requests/s | TTFT p50 | TTFT p99 | "
          f"aggregate gen tok/s | ratio |")
    print("|---|---|---|---|---|---|")
    labels = {"edgellm": f"edgellm serve --parallel {args.parallel}", "peer": "llama_cpp.server"}
    for name, row in rows.items():
        print(f"| {labels[name]} | {row['requests_per_s']:.3f} | {row['ttft_p50_s']:.2f} s | "
              f"{row['ttft_p99_s']:.2f} s | {row['aggregate_tokens_per_s']:.1f} | "
              f"{row['aggregate_tokens_per_s'] / base:.2f} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"args": vars(args), "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
