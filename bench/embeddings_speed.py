"""Embeddings per second of an encoder GGUF (issue 41): edgellm's LLM.embed, and optionally
sentence-transformers on torch CPU and llama.cpp's llama-server --embedding on the same model,
on a batch of 64 short texts and one of 8 long ones (about 250 tokens each), with the same
thread count. Alternates the runs and reports the median of --repeat rounds.

    python bench/embeddings_speed.py all-minilm-l6-v2 --threads 2 \
        [--st FOLDER --st-python /work/venv-ref/bin/python] \
        [--llama-server /work/peers/llama.cpp/build/bin/llama-server]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

SHORT = [f"Sentence number {i}: a short text about topic {i % 7} for embedding." for i in range(64)]
LONG = [" ".join(f"Long document {i}, paragraph {j}: the quick brown fox jumps over the lazy dog."
                 for j in range(16)) for i in range(8)]
BATCHES = {"64 short": SHORT, "8 long": LONG}

ST_SCRIPT = """
import sys, time, json, torch
torch.set_num_threads(int(sys.argv[2]))
from sentence_transformers import SentenceTransformer
m = SentenceTransformer(sys.argv[1], device="cpu")
batches = json.loads(sys.stdin.read())
out = {}
for name, texts in batches.items():
    m.encode(texts[:4], batch_size=64)
    ts = []
    for _ in range(int(sys.argv[3])):
        t = time.perf_counter(); m.encode(texts, batch_size=64); ts.append(time.perf_counter() - t)
    out[name] = ts
print(json.dumps(out))
"""


def time_edgellm(model, threads, repeat):
    from edgellm import LLM

    llm = LLM(model, n_threads=threads)
    out = {}
    for name, texts in BATCHES.items():
        llm.embed(texts[:4])
        ts = []
        for _ in range(repeat):
            t = time.perf_counter()
            llm.embed(texts)
            ts.append(time.perf_counter() - t)
        out[name] = ts
    llm.close()
    return out


def time_llama_server(binary, gguf, threads, repeat, port=18931):
    proc = subprocess.Popen([binary, "-m", gguf, "--embedding", "--port", str(port), "-t", str(threads),
                             "-tb", str(threads), "-c", "8192", "-b", "4096", "-ub", "4096", "--pooling", "mean",
                             "-np", "8"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if urllib.request.urlopen(url + "/health", timeout=1).status == 200:
                    break
            except Exception:
                time.sleep(0.2)

        def post(texts):
            req = urllib.request.Request(url + "/v1/embeddings", json.dumps({"input": texts}).encode(),
                                         {"Content-Type": "application/json"})
            return json.loads(urllib.request.urlopen(req, timeout=600).read())

        out = {}
        for name, texts in BATCHES.items():
            post(texts[:4])
            ts = []
            for _ in range(repeat):
                t = time.perf_counter()
                post(texts)
                ts.append(time.perf_counter() - t)
            out[name] = ts
        return out
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--st", help="sentence-transformers folder")
    ap.add_argument("--st-python", default="/work/venv-ref/bin/python")
    ap.add_argument("--llama-server")
    a = ap.parse_args()
    from edgellm.models import resolve

    gguf = str(resolve(a.model))
    results = {"edgellm": time_edgellm(gguf, a.threads, a.repeat)}
    if a.st:
        p = subprocess.run([a.st_python, "-c", ST_SCRIPT, a.st, str(a.threads), str(a.repeat)],
                           input=json.dumps(BATCHES), capture_output=True, text=True, check=True)
        results["sentence-transformers (torch CPU)"] = json.loads(p.stdout.strip().splitlines()[-1])
    if a.llama_server:
        results["llama-server --embedding"] = time_llama_server(a.llama_server, gguf, a.threads, a.repeat)
    print(f"{'':36s}" + "".join(f"{n:>18s}" for n in BATCHES))
    for who, r in results.items():
        print(f"{who:36s}" + "".join(f"{len(BATCHES[n]) / statistics.median(r[n]):14.1f} /s " for n in BATCHES))


if __name__ == "__main__":
    sys.exit(main())
