"""Constrained vs unconstrained generation speed on the same model (issue 7.4).

    EDGELLM_BUILD_DIR=build/dev PYTHONPATH=python python bench/constrained.py \
        [--models smollm2 gemma3] [--tokens 128] [--runs 3] [--threads N]

Per model, one prompt, greedy, `--tokens` generated tokens in every run:
  * unconstrained: end-of-generation ignored so the run always reaches --tokens;
  * json warm: a JSON schema (an array of at least 40 {name, qty} objects, so the grammar is
    never complete within --tokens) whose masks were computed by an earlier run;
  * json cold: the same schema made textually unique per run (a "description" field), so the
    grammar is compiled and every mask computed while the request runs.
Each figure is the engine's decode rate (timings.predicted_per_second: tokens after the first /
time after the first), best and median over --runs; the three kinds are interleaved per run.
On a shared machine the best run is the stable figure (other load only ever slows a run down).

Because end-to-end rates on a busy machine move by more than the constraint costs, the script
also replays the constrained run's tokens through a GrammarConstraint outside the engine and
reports the CPU time of apply() + accept() per token (cold: fresh grammar, every mask computed;
warm: the same tokens again, masks cached), and the decode rate that overhead implies:
1 / (1 / unconstrained + overhead).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import edgellm
from edgellm import _core

PROMPT = "Here is the shopping list for the party, as JSON:\n"
SCHEMA = {
    "type": "array",
    "items": {"type": "object",
              "properties": {"name": {"type": "string", "maxLength": 24},
                             "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
              "required": ["name", "qty"], "additionalProperties": False},
    "minItems": 40,
}


def run(llm, tokens, **constraint):
    params = edgellm.SamplingParams(temperature=0.0, max_tokens=tokens, **constraint)
    t0 = time.perf_counter()
    out = llm.generate(PROMPT, params)
    out = out[0] if isinstance(out, list) else out
    wall = time.perf_counter() - t0
    if len(out.token_ids) != tokens:
        sys.exit(f"expected {tokens} tokens, got {len(out.token_ids)} ({out.finish_reason}): {out.text!r}")
    return out.timings["predicted_per_second"], wall, out


def replay_overhead_ms(llm, token_ids, schema_text):
    """CPU ms per token of apply() + accept() over token_ids (cold, warm) and the schema's compile ms."""
    t0 = time.perf_counter()
    g = _core.Grammar.from_json_schema(schema_text)
    compile_ms = 1e3 * (time.perf_counter() - t0)
    g.constraint(llm.tokenizer)  # the vocabulary trie is built once per tokenizer: not per token
    result = []
    for _ in range(2):
        c = g.constraint(llm.tokenizer)
        logits = np.zeros(llm.n_vocab, dtype=np.float32)
        spent = 0.0
        for t in token_ids:
            t0 = time.process_time()
            c.apply(logits)
            c.accept(t)
            spent += time.process_time() - t0
        result.append(1e3 * spent / len(token_ids))
    return result + [compile_ms]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["smollm2", "gemma3"])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    rows = []
    for model in args.models:
        llm = edgellm.LLM(model, n_ctx=512, n_threads=args.threads)
        warm_schema = json.dumps(SCHEMA)
        run(llm, args.tokens, ignore_eos=True)                 # warm-up: weights, threads
        _, _, sample = run(llm, args.tokens, json_schema=warm_schema)  # warm-up: this schema's masks
        free, warm, cold = [], [], []
        for r in range(args.runs):
            free.append(run(llm, args.tokens, ignore_eos=True)[0])
            warm.append(run(llm, args.tokens, json_schema=warm_schema)[0])
            fresh = dict(SCHEMA, description=f"cold run {r} {time.time()}")
            cold.append(run(llm, args.tokens, json_schema=json.dumps(fresh))[0])
        stats = _core.Grammar.from_json_schema(warm_schema).stats()  # the engine's cached context
        replay = dict(SCHEMA, description=f"replay {time.time()}")
        cold_ms, warm_ms, compile_ms = replay_overhead_ms(llm, sample.token_ids, json.dumps(replay))
        best_free = max(free)
        row = dict(model=model, isa=llm.isa, threads=llm.n_threads, vocab=llm.n_vocab,
                   free=best_free, warm=max(warm), cold=max(cold),
                   free_median=statistics.median(free), warm_median=statistics.median(warm),
                   cold_median=statistics.median(cold),
                   overhead_cold_ms=cold_ms, overhead_warm_ms=warm_ms, compile_ms=compile_ms,
                   loadavg=os.getloadavg()[0],
                   implied_cold=1.0 / (1.0 / best_free + cold_ms / 1e3),
                   implied_warm=1.0 / (1.0 / best_free + warm_ms / 1e3),
                   states=stats["states"], masks=stats["masks"], hits=stats["mask_hits"],
                   misses=stats["mask_misses"], sample=sample.text[:60])
        rows.append(row)
        print(json.dumps(row), flush=True)

    print("\nEnd to end (tok/s, best of runs; median in parentheses):\n")
    print("| model | n_vocab | unconstrained | JSON schema, warm masks | ratio (median) | "
          "JSON schema, cold | ratio (median) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['vocab']} | {r['free']:.1f} ({r['free_median']:.1f}) | "
              f"{r['warm']:.1f} ({r['warm_median']:.1f}) | {r['warm'] / r['free']:.2f} "
              f"({r['warm_median'] / r['free_median']:.2f}) | "
              f"{r['cold']:.1f} ({r['cold_median']:.1f}) | {r['cold'] / r['free']:.2f} "
              f"({r['cold_median'] / r['free_median']:.2f}) |")
    print("\nConstraint cost per token (apply + accept, CPU ms) and the rate it implies:\n")
    print("| model | decode ms/token | cold ms/token | implied ratio | warm ms/token | implied ratio | "
          "schema compile ms | load average |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {1e3 / r['free']:.1f} | {r['overhead_cold_ms']:.3f} | "
              f"{r['implied_cold'] / r['free']:.3f} | {r['overhead_warm_ms']:.3f} | "
              f"{r['implied_warm'] / r['free']:.3f} | {r['compile_ms']:.2f} | {r['loadavg']:.1f} |")

if __name__ == "__main__":
    main()
