#!/usr/bin/env python3
"""How closely edgellm's next-token distribution agrees with llama.cpp's on the same GGUF.

For one prompt (a fixed English text tokenized by edgellm, the same ids sent to both engines),
at a spread of positions: llama.cpp's top-10 log-probabilities (llama-server's /completion with
n_probs 10, one token predicted from the prompt prefix, prompt cache on) against edgellm's
(LLM.eval_logits over the whole prompt, log-softmax per row). Reported per model:

    top1      share of positions where both engines' most likely token is the same
    overlap   mean |top10(edgellm) ∩ top10(llama.cpp)| / 10
    dlp_mean  mean |Δ log-prob| over llama.cpp's top-10 tokens (edgellm's log-prob of the same ids)
    dlp_max   the largest such difference

With --exact, both engines are also measured against the float64 reference forward of
tests/reference/forward.py (weights dequantized by the gguf package, no activation rounding):
ex_ours / ex_peer = mean |Δ log-prob| over the reference's top-10 tokens at the same positions
(llama.cpp's side only where the reference's top-10 token is among llama.cpp's top-10; the
shared/golden rule: be at least as close to the exact reference as llama.cpp is).

    python bench/logit_agreement.py MODEL.gguf [MODEL2.gguf ...] \
        --server /opt/peer/llama.cpp/build/bin/llama-server --threads 2 [--json out.json]

Random-weight files (bench/make_synthetic.py) have flat distributions, where small numeric
differences reorder the tail; compare a new architecture's figures with an existing
architecture's synthetic file of a similar shape measured in the same run.
"""
import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))

TEXT = ("The history of the city begins with a small settlement on the river, where traders met "
        "to exchange grain, salt and cloth. Over the centuries the market grew into a town with "
        "walls, a cathedral and a university, and its scholars wrote about mathematics, medicine "
        "and law. Today the old quarter is a place of narrow streets, cafes and bookshops, while "
        "the new districts hold offices, laboratories and a busy railway station. ") * 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, timeout=600):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class LlamaServer:
    def __init__(self, binary, model, threads, ctx):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "-m", str(model), "--port", str(self.port), "--host", "127.0.0.1", "-t", str(threads),
             "-tb", str(threads), "-c", str(ctx), "-np", "1", "-ngl", "0", "--no-warmup"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited {self.proc.returncode}: {self.proc.stderr.read()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except Exception:
                time.sleep(0.5)
        raise RuntimeError("llama-server did not become healthy")

    def top(self, ids, n=10):
        out = post(self.url + "/completion", {"prompt": ids, "n_predict": 1, "n_probs": n, "temperature": 0,
                                              "cache_prompt": True, "post_sampling_probs": False})
        probs = out["completion_probabilities"][0]
        tops = probs.get("top_logprobs") or probs.get("probs")
        res = []
        for t in tops:
            lp = t["logprob"] if "logprob" in t else math.log(max(t["prob"], 1e-45))
            res.append((int(t["id"]), float(lp)))
        return res

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def measure(model, server_bin, threads, n_tokens, n_positions, exact=False):
    import edgellm

    llm = edgellm.LLM(str(model), n_ctx=max(512, n_tokens + 16), n_threads=threads)
    ids = llm.tokenize(TEXT, add_special=True)[:n_tokens]
    lp = log_softmax(np.asarray(llm.eval_logits(ids)))
    llm.close()
    ref = None
    if exact:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from reference.forward import ReferenceModel
        ref = log_softmax(ReferenceModel(str(model)).forward(ids))
    ex_ours, ex_peer = [], []
    positions = sorted(set(np.linspace(4, len(ids), n_positions).astype(int).tolist()))
    srv = LlamaServer(server_bin, model, threads, max(512, n_tokens + 16))
    try:
        top1 = overlap = 0
        dl = []
        for p in positions:
            peer = srv.top(ids[:p])
            ours = lp[p - 1]
            mine = np.argsort(-ours)[:10].tolist()
            theirs = [t for t, _ in peer]
            top1 += int(mine[0] == theirs[0])
            overlap += len(set(mine) & set(theirs)) / 10
            dl += [abs(float(ours[t]) - l) for t, l in peer]
            if ref is not None:
                r = ref[p - 1]
                rtop = np.argsort(-r)[:10].tolist()
                ex_ours += [abs(float(ours[t]) - float(r[t])) for t in rtop]
                pd = dict(peer)
                ex_peer += [abs(pd[t] - float(r[t])) for t in rtop if t in pd]
    finally:
        srv.close()
    n = len(positions)
    return {"model": Path(model).name, "positions": n, "top1": top1 / n, "overlap": overlap / n,
            "dlp_mean": float(np.mean(dl)), "dlp_max": float(np.max(dl)),
            **({"ex_ours": float(np.mean(ex_ours)), "ex_peer": float(np.mean(ex_peer))} if ref is not None else {})}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--server", default=os.environ.get("LLAMA_SERVER", "/opt/peer/llama.cpp/build/bin/llama-server"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--positions", type=int, default=24)
    ap.add_argument("--exact", action="store_true", help="also against the float64 reference forward")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    print(f"{'model':48} {'pos':>4} {'top1':>6} {'overlap':>8} {'dlp_mean':>9} {'dlp_max':>8}")
    for m in a.models:
        try:
            r = measure(m, a.server, a.threads, a.tokens, a.positions, a.exact)
        except RuntimeError as e:  # the peer refused the file: say so, go on
            print(f"{Path(m).name[:48]:48} llama.cpp failed: {str(e).splitlines()[0][:120]}", flush=True)
            continue
        rows.append(r)
        print(f"{r['model'][:48]:48} {r['positions']:4d} {r['top1']:6.2f} {r['overlap']:8.2f} "
              f"{r['dlp_mean']:9.4f} {r['dlp_max']:8.4f}"
              + (f"  exact: ours {r['ex_ours']:.4f} llama.cpp {r['ex_peer']:.4f}" if "ex_ours" in r else ""), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
