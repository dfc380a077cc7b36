#!/usr/bin/env python3
"""Perplexity of edgellm and of the peer (llama-cpp-python) on the same text, same chunks,
same BOS rule and same scoring (llama.cpp's method; see python/edgellm/bench/perplexity.py and
bench/peer_worker.py), one after the other:

    EDGELLM_BUILD_DIR=build/x PYTHONPATH=python python bench/perplexity_peer.py smollm2 gemma3 \
        -f bench/data/declaration.txt -c 512 -t 2

Peer: Llama(model_path, n_ctx=c, logits_all=True, n_threads=t, n_batch=c).
"""
import argparse
import json
import sys
import time

from peer import PeerMissing, ensure_edgellm_importable, find_peer_python, run_peer


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("-f", "--file", default="bench/data/declaration.txt")
    p.add_argument("-c", "--ctx", type=int, default=512)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--peer-python")
    p.add_argument("-o", "--output", choices=["md", "json"], default="md")
    a = p.parse_args()
    ensure_edgellm_importable()
    from edgellm.bench.perplexity import perplexity
    from edgellm.models import resolve

    try:
        peer_py = find_peer_python(a.peer_python)
    except PeerMissing as e:
        sys.exit(str(e))
    text = open(a.file, encoding="utf-8").read()
    rows = []
    for m in a.models:
        path = str(resolve(m))
        t0 = time.perf_counter()
        ours = perplexity(path, text, n_ctx=a.ctx, n_batch=a.ctx, n_threads=a.threads)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        peer = run_peer(peer_py, "perplexity", path, "--text", a.file, "--ctx", a.ctx, "--threads", a.threads)
        t_peer = time.perf_counter() - t0
        rows.append({"model": m, "n_ctx": a.ctx, "n_chunks": ours.n_chunks, "n_scored": ours.n_scored,
                     "edgellm_ppl": ours.ppl, "edgellm_err": ours.ppl_err, "peer_ppl": peer["ppl"],
                     "peer_err": peer["ppl_err"], "peer_n_scored": peer["n_scored"],
                     "rel_diff": ours.ppl / peer["ppl"] - 1.0, "edgellm_s": t_ours, "peer_s": t_peer,
                     "edgellm_running": ours.running, "peer_running": peer["running"]})
    if a.output == "json":
        json.dump(rows, sys.stdout, indent=2)
        print()
        return
    print(f"text: {a.file}, n_ctx {a.ctx}, threads {a.threads}\n")
    print("| model | chunks | scored tokens | edgellm PPL | peer PPL | difference |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['model']} | {r['n_chunks']} | {r['n_scored']} | {r['edgellm_ppl']:.4f} ± {r['edgellm_err']:.4f} | "
              f"{r['peer_ppl']:.4f} ± {r['peer_err']:.4f} | {100 * r['rel_diff']:+.3f}% |")


if __name__ == "__main__":
    main()
