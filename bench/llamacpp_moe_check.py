#!/usr/bin/env python3
"""Cross-check with llama.cpp: its llama-server's top-5 next-token log-probabilities against
edgellm's on the same GGUF files, for the tiny mixture-of-experts fixtures (qwen3moe, olmoe,
qwen2moe with its shared expert, Mixtral-style llama with experts; a dense llama for comparison;
F32 and Q8_0 weights, written by tests/tiny_vocab_model.py; gpt-oss at F32 and with MXFP4
experts, tests/reference/gpt_oss.py) and any files given on the command line (e.g. the
bench/make_synthetic.py --preset qwen3-30b-a3b model). It proves the files are laid out as
llama.cpp reads real ones and that both compute the same thing.

    EDGELLM_BUILD_DIR=build/dev python bench/llamacpp_moe_check.py [MODEL.gguf ...]
        [--server /opt/peer/llama.cpp/build/bin/llama-server] [--kv f32|f16]

Both sides run an F32 KV cache by default (llama-server -ctk f32 -ctv f32 -fa off): with F16
caches the two engines round K/V differently and a near-tie in a router can then pick another
expert. llama.cpp's load-time repacking is off (--no-repack: it crashes on the tiny shapes).
llama-server leaves out the probabilities of a token that ends inside a UTF-8 sequence; such
prompts are skipped and counted.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tests")]

PROMPTS = [[259, 72, 101, 108, 108, 111, 44, 32, 119], [259, 84, 104, 101, 32, 113, 117, 105, 99, 107],
           [259, 257, 32, 99, 97, 116, 32], [259, 65, 66, 67, 68, 69, 70, 71], [259, 49, 50, 51, 52, 53],
           [259, 116, 104, 101, 32, 100, 111, 103, 32, 115, 97, 116]]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=600).read())


def tiny_models(out_dir):
    import gguf
    from tiny_vocab_model import write_tiny_vocab_model

    pre = gguf.GGUFWriter.add_tokenizer_pre
    gguf.GGUFWriter.add_tokenizer_pre = lambda self, v: pre(self, "default")  # llama.cpp has no "gpt2" pre
    try:
        paths = []
        for arch in ("llama", "qwen3moe", "olmoe", "qwen2moe", "mixtral"):
            for wt in ("F32", "Q8_0"):
                paths.append(str(write_tiny_vocab_model(Path(out_dir) / f"{arch}-{wt}.gguf", weight_type=wt, arch=arch)))
        # gpt-oss (tests/reference/gpt_oss.py) with the same vocabulary: F32, and MXFP4 experts
        from reference.gpt_oss import write_gpt_oss
        from tiny_vocab_model import add_tokenizer, vocab
        tokens, types, merges = vocab()
        for wt, et in (("F32", None), ("Q8_0", "MXFP4")):
            paths.append(str(write_gpt_oss(Path(out_dir) / f"gpt-oss-{et or wt}.gguf", n_vocab=len(tokens),
                                           weight_type=wt, expert_type=et,
                                           tokenizer=lambda w: add_tokenizer(w, tokens, types, merges))))
        return paths
    finally:
        gguf.GGUFWriter.add_tokenizer_pre = pre


def check(server, path, port, kv):
    import edgellm._core as core

    kv_args = ["-ctk", "f32", "-ctv", "f32", "-fa", "off"] if kv == "f32" else []
    log = open(path + ".llama-server.log", "w")
    srv = subprocess.Popen([server, "-m", path, "--port", str(port), "-t", "2", "-c", "512", "--no-warmup", "-np",
                            "1", "--no-repack", *kv_args], stdout=subprocess.DEVNULL, stderr=log)
    try:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except Exception:
                if srv.poll() is not None:
                    return f"llama-server exited (rc {srv.returncode}); see {log.name}"
                time.sleep(0.5)
        model = core.Model(path, n_threads=2)
        worst, agree, compared, skipped = 0.0, True, 0, 0
        n_vocab = model.n_vocab
        for ids in PROMPTS:
            ids = [i % n_vocab for i in ids]
            r = post(port, {"prompt": ids, "n_predict": 1, "n_probs": 5, "temperature": 0, "cache_prompt": False})
            if "completion_probabilities" not in r:
                skipped += 1
                continue
            top = r["completion_probabilities"][0]["top_logprobs"]
            runner = core.ModelRunner(model, n_ctx=128, kv_type=kv.upper())
            lg = runner.eval(ids, all_logits=True)[-1].astype(np.float64)
            lp = lg - lg.max()
            lp -= np.log(np.exp(lp).sum())
            agree &= list(np.argsort(-lp)[:3]) == [t["id"] for t in top[:3]]
            worst = max(worst, max(abs(lp[t["id"]] - t["logprob"]) for t in top))
            compared += 1
        return (f"{compared} prompts compared ({skipped} skipped), top-3 ids agree: {agree}, "
                f"max |logprob diff| over llama.cpp's top 5: {worst:.4f}")
    finally:
        srv.terminate()
        srv.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*")
    p.add_argument("--server", default="/opt/peer/llama.cpp/build/bin/llama-server")
    p.add_argument("--kv", choices=["f32", "f16"], default="f32")
    p.add_argument("--no-tiny", action="store_true", help="only the files given")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = ([] if a.no_tiny else tiny_models(tmp)) + a.models
        for i, path in enumerate(paths):
            print(f"{os.path.basename(path)}: {check(a.server, path, 18600 + i, a.kv)}", flush=True)


if __name__ == "__main__":
    main()
