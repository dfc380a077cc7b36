"""Time to first token when a desktop app reopens a long conversation (issue 19 item 4).

Every measurement is a fresh process, as a restarted app is: it loads the model, renders a chat
of ~N tokens (several user / assistant turns of real text), and streams the reply; the time from
the chat call to the first streamed text is the figure.

  cold   LLM(model)                      -- no persistent cache: the whole prompt is prefilled
  prime  LLM(model, cache_dir=D)         -- the first session: prefill + pages written to D
  warm   LLM(model, cache_dir=D)         -- the app reopened: the same conversation
  next   LLM(model, cache_dir=D)         -- reopened and continued: the conversation, the reply
                                            the primed session gave, and a new question

  python bench/persistent_cache.py [MODEL ...] [--tokens 4000] [--threads 2] [--repeat 2]

Goal: warm first token < 0.2x cold. The load time (model mmap + repack + the model key from
the memo file) is reported beside it, not included.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import edgellm
args = json.loads(sys.argv[1])
t0 = time.perf_counter()
llm = edgellm.LLM(args["model"], n_ctx=args["n_ctx"], n_threads=args["threads"], max_seqs=1,
                  speculative="off", cache_dir=args["cache_dir"] or None)
load = time.perf_counter() - t0
msgs = args["messages"]
n_prompt = len(llm.chat_prompt_ids(msgs))
p = edgellm.SamplingParams(max_tokens=args["max_tokens"], temperature=0)
t0 = time.perf_counter()
first = None
text = ""
for piece in llm.chat_stream(msgs, p):
    if first is None and piece:
        first = time.perf_counter() - t0
    text += piece
total = time.perf_counter() - t0
st = llm.stats()
llm.close()
print(json.dumps({"load_s": load, "ttft_s": first, "total_s": total, "n_prompt": n_prompt,
                  "text": text, "cached": st["prefix_cache_hit_tokens"],
                  "disk_tokens": st["cache_disk_hit_tokens"],
                  "written": st["cache_disk_pages_written"], "read": st["cache_disk_pages_read"]}))
"""


def conversation(tokens_goal: int, tokenize) -> list:
    """System + alternating user/assistant turns of real text until the chat reaches the goal."""
    texts = []
    for name in ("README.md", "docs/ARCHITECTURE.md", "bench/README.md"):
        p = REPO / name
        if p.exists():
            texts += [t.strip() for t in p.read_text(encoding="utf-8").split("\n\n") if len(t.strip()) > 200]
    msgs = [{"role": "system", "content": "You are a helpful assistant for the edgellm project."}]
    i = 0
    while sum(len(tokenize(m["content"])) + 6 for m in msgs) < tokens_goal and i < len(texts):
        msgs.append({"role": "user", "content": "Explain this part of the documentation:\n\n" + texts[i]})
        msgs.append({"role": "assistant", "content": texts[i + 1] if i + 1 < len(texts) else "Done."})
        i += 2
    msgs.append({"role": "user", "content": "Summarise what we discussed in three sentences."})
    return msgs


def run_child(args: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True,
                       timeout=3600)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=["qwen2.5-coder-0.5b"])
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    a = ap.parse_args()
    import edgellm
    from edgellm.models import resolve
    rows = []
    for model in a.models:
        path = str(resolve(model))
        with edgellm.LLM(path, n_ctx=512, n_threads=1, max_seqs=1) as probe:
            msgs = conversation(a.tokens, lambda t: probe.tokenize(t, add_special=False))
        n_ctx = 8192
        base = {"model": path, "n_ctx": n_ctx, "threads": a.threads, "messages": msgs, "max_tokens": a.max_tokens}
        cold, warm, nxt = [], [], []
        for _ in range(a.repeat):
            d = tempfile.mkdtemp(prefix="edgellm-pc-")
            try:
                cold.append(run_child(dict(base, cache_dir="")))
                prime = run_child(dict(base, cache_dir=d))
                warm.append(run_child(dict(base, cache_dir=d)))
                cont = msgs + [{"role": "assistant", "content": prime["text"]},
                               {"role": "user", "content": "And what would you change first?"}]
                nxt.append(run_child(dict(base, cache_dir=d, messages=cont)))
                size = sum(f.stat().st_size for f in Path(d).glob("*/*.kvp"))
            finally:
                shutil.rmtree(d, ignore_errors=True)
            assert warm[-1]["text"] == prime["text"] == cold[-1]["text"], "a cache hit changed the output"
        med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
        row = {"model": model, "n_prompt": cold[0]["n_prompt"], "cold_ttft": med(cold, "ttft_s"),
               "warm_ttft": med(warm, "ttft_s"), "next_ttft": med(nxt, "ttft_s"),
               "warm_cached": warm[0]["disk_tokens"], "next_cached": nxt[0]["disk_tokens"],
               "next_prompt": nxt[0]["n_prompt"], "load_cold": med(cold, "load_s"),
               "load_warm": med(warm, "load_s"), "cache_mb": size / 1e6, "pages_read": warm[0]["read"]}
        row["ratio"] = row["warm_ttft"] / row["cold_ttft"]
        row["next_ratio"] = row["next_ttft"] / row["cold_ttft"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    load = os.getloadavg()[0]
    print(f"\nload average {load:.2f}, {a.threads} threads, {a.repeat} runs each (median), "
          f"every figure a fresh process\n")
    print("| model | prompt tokens | cold first token | warm (reopened) | ratio | reopened + new turn | ratio |"
          " tokens from disk | cache on disk | load (cold / warm) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['n_prompt']} | {r['cold_ttft']:.2f} s | {r['warm_ttft']:.3f} s | "
              f"**{r['ratio']:.3f}×** | {r['next_ttft']:.3f} s ({r['next_prompt']} tokens) | {r['next_ratio']:.3f}× | "
              f"{r['warm_cached']} / {r['next_cached']} | {r['cache_mb']:.0f} MB | "
              f"{r['load_cold']:.2f} / {r['load_warm']:.2f} s |")


if __name__ == "__main__":
    main()
