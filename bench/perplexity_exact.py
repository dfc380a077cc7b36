#!/usr/bin/env python3
"""Per-chunk NLL of the exact float64 reference (tests/reference/forward.py: weights
dequantized by the `gguf` package, no activation quantization, float64 activations and KV),
next to edgellm's, on the chunks `edgellm perplexity` scores, to tell which side of a gap
between edgellm and the peer is closer to the model's true perplexity.

    EDGELLM_BUILD_DIR=build/x PYTHONPATH=python python bench/perplexity_exact.py gemma3 \
        -f bench/data/declaration.txt -c 512 --chunks 0,1,2

Prints, per chunk, the mean NLL over the scored half of the chunk for edgellm and the exact
reference; compare with the peer's per-chunk figures from perplexity_peer.py -o json.
Slow and memory hungry (dense float64 weights): small models only.
"""
import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from peer import HERE, ensure_edgellm_importable


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("-f", "--file", default=str(HERE / "data" / "declaration.txt"))
    p.add_argument("-c", "--ctx", type=int, default=512)
    p.add_argument("--chunks", default="0", help="comma-separated chunk indices")
    p.add_argument("--float32", action="store_true", help="float32 reference (models above ~400M)")
    a = p.parse_args()
    ensure_edgellm_importable()
    sys.path.insert(0, str(HERE.parent / "tests"))
    from edgellm import _core
    from edgellm.bench.perplexity import chunk_tokens, target_nll
    from edgellm.models import resolve
    from reference.forward import ReferenceModel

    path = str(resolve(a.model))
    tok = _core.Tokenizer.from_gguf(path)
    add_bos = bool(tok.add_bos) and tok.bos_id is not None
    ids = list(tok.encode(open(a.file, encoding="utf-8").read(), True, False))
    chunks = chunk_tokens(ids, a.ctx, tok.bos_id if add_bos else None)
    first = a.ctx // 2
    model = _core.Model(path, n_threads=0, max_batch_tokens=a.ctx)
    runner = _core.ModelRunner(model, n_ctx=a.ctx, kv_type="F16")
    ref = ReferenceModel(path, dtype=np.float32 if a.float32 else np.float64)
    out = []
    for i in [int(x) for x in a.chunks.split(",")]:
        chunk = chunks[i]
        targets = np.asarray(chunk[first + 1:], dtype=np.int64)
        runner.reset()
        runner.eval(chunk[:first], all_logits=False)
        ours = target_nll(runner.eval(chunk[first:], all_logits=True)[:a.ctx - 1 - first], targets)
        exact = target_nll(ref.forward(chunk)[first:a.ctx - 1], targets)
        row = {"chunk": i, "edgellm_nll": float(ours.mean()), "exact_nll": float(exact.mean()),
               "edgellm_ppl": math.exp(ours.mean()), "exact_ppl": math.exp(exact.mean()),
               "mean_abs_token_diff": float(np.abs(ours - exact).mean())}
        out.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
