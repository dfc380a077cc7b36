"""The peer side of bench/compare.py, bench/perplexity_peer.py and bench/startup.py: runs
under the Python that has llama-cpp-python (e.g. /opt/peer/venv/bin/python), measures with the
same method as edgellm's side, prints one JSON document on stdout. Standard library, numpy
and llama_cpp only; it never imports edgellm.

    python peer_worker.py throughput MODEL --threads 2 --n-prompt 512 --n-gen 128 --reps 5
    python peer_worker.py perplexity MODEL --text FILE --ctx 512 --threads 2
    python peer_worker.py startup MODEL --ctx 4096 --threads 2
"""
import argparse
import json
import math
import random
import statistics
import sys
import time


def _pad256(n):
    return max(256, (n + 255) // 256 * 256)


def _bos_rule(llm):
    """(add_bos, bos_id): does tokenizing with add_special put BOS in front?"""
    bos = llm.token_bos()
    with_special = llm.tokenize(b"hello", add_bos=True, special=False)
    without = llm.tokenize(b"hello", add_bos=False, special=False)
    return len(with_special) > len(without) and with_special[0] == bos, bos


def throughput(a):
    from llama_cpp import Llama

    n_ctx = _pad256(max(a.n_prompt, a.n_gen) + 1)
    llm = Llama(a.model, n_ctx=n_ctx, n_threads=a.threads, n_threads_batch=a.threads, n_batch=512,
                verbose=False)
    n_vocab = llm.n_vocab()
    add_bos, bos = _bos_rule(llm)
    rng = random.Random(a.seed)

    def tokens(n):
        ids = [rng.randrange(n_vocab) for _ in range(n)]
        if add_bos and ids:
            ids[0] = bos
        return ids

    out = []
    if a.n_prompt > 0:
        llm.reset()
        llm.eval(tokens(a.n_prompt))  # warm-up: one prompt run and one generation step
        llm.eval([rng.randrange(n_vocab)])
        ns = []
        for _ in range(a.reps):
            llm.reset()  # n_tokens = 0: the next eval removes every cached position first
            ids = tokens(a.n_prompt)
            t0 = time.perf_counter_ns()
            llm.eval(ids)
            ns.append(time.perf_counter_ns() - t0)
        out.append({"test": f"pp{a.n_prompt}", "samples_ts": [a.n_prompt * 1e9 / t for t in ns]})
    if a.n_gen > 0:
        llm.reset()
        llm.eval(tokens(1))
        ns = []
        for _ in range(a.reps):
            llm.reset()
            ids = tokens(a.n_gen)
            t0 = time.perf_counter_ns()
            for t in ids:
                llm.eval([t])
            ns.append(time.perf_counter_ns() - t0)
        out.append({"test": f"tg{a.n_gen}", "samples_ts": [a.n_gen * 1e9 / t for t in ns]})
    for r in out:
        s = r["samples_ts"]
        r["avg_ts"] = statistics.fmean(s)
        r["stddev_ts"] = statistics.stdev(s) if len(s) > 1 else 0.0
    return {"results": out, "n_threads": a.threads}


def _nll(logits, targets):
    import numpy as np

    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return lse - x[np.arange(len(x)), targets]


def perplexity(a):
    import numpy as np
    from llama_cpp import Llama

    c = a.ctx
    llm = Llama(a.model, n_ctx=c, logits_all=True, n_threads=a.threads, n_threads_batch=a.threads, n_batch=c,
                verbose=False)
    add_bos, bos = _bos_rule(llm)
    with open(a.text, "rb") as f:
        ids = llm.tokenize(f.read(), add_bos=True, special=False)
    n_chunks = len(ids) // c
    first = c // 2
    nlls, running = [], []
    for i in range(n_chunks):
        chunk = list(ids[i * c:(i + 1) * c])
        if add_bos:
            chunk[0] = bos
        llm.reset()
        llm.eval(chunk)
        logits = np.array(llm.scores[first:c - 1], dtype=np.float32)
        nlls.append(_nll(logits, np.asarray(chunk[first + 1:], dtype=np.int64)))
        running.append(math.exp(float(np.concatenate(nlls).mean())))
        print(f"[{i + 1}]{running[-1]:.4f}", file=sys.stderr, flush=True)
    nll = np.concatenate(nlls)
    mean = float(nll.mean())
    var = float((nll * nll).mean()) - mean * mean
    ppl = math.exp(mean)
    err = ppl * math.sqrt(var / (len(nll) - 1)) if len(nll) > 1 and var > 0 else 0.0
    return {"ppl": ppl, "ppl_err": err, "n_tokens": len(ids), "n_chunks": n_chunks, "n_scored": int(len(nll)),
            "running": running, "add_bos": add_bos}


def startup(a):
    """Load, then generate one token of a greedy completion of "hi"; the caller times the
    whole process and reads its peak RSS."""
    from llama_cpp import Llama

    llm = Llama(a.model, n_ctx=a.ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False)
    r = llm.create_completion("hi", max_tokens=1, temperature=0.0)
    return {"text": r["choices"][0]["text"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["throughput", "perplexity", "startup"])
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-prompt", type=int, default=512)
    p.add_argument("--n-gen", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--text")
    p.add_argument("--ctx", type=int, default=512)
    a = p.parse_args()
    result = {"throughput": throughput, "perplexity": perplexity, "startup": startup}[a.mode](a)
    import llama_cpp
    result["peer"] = f"llama-cpp-python {llama_cpp.__version__}"
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
