#!/usr/bin/env python3
"""Speculative decoding (issue 18): edgellm off / ngram / draft / auto against llama.cpp's own
plain decode, draft-model speculation and n-gram lookup, on the same model pair, prompts,
threads and token budget, one run each, one after the other in one invocation.

    EDGELLM_BUILD_DIR=build/dev PYTHONPATH=python python bench/speculative.py
    python bench/speculative.py --workloads code,prose --ours off,auto --peer plain,draft
    python bench/speculative.py --no-peer -o json > spec.json
    python bench/speculative.py --print-prompt code --variant 3     # the rendered prompt

Workloads (greedy, temperature 0; chat-templated for the instruct model):
  code     return a ~100-line Python function with one identifier renamed (until the
           function is done, cap 600 tokens); --variant picks another identifier / name
  summary  a ~400-word passage, "Summarize this, quoting the key sentences verbatim." (256)
  prose    "Write a short story about a lighthouse keeper." -- nothing to copy (256)
  concurrent  16 streams of mixed code/summary/prose variants submitted at once; total
           generated tokens / wall time (edgellm, and llama-server -np 16 when it is built)

Decode t/s is generated tokens over decode time, prompt excluded: edgellm's completion timings
(predicted_n - 1 tokens over first -> last token), llama.cpp's own "decoded N tokens in T s"
line (the decode loop after the prompt). Acceptance = accepted / drafted tokens.

edgellm modes need `LLM(..., speculative=, draft_model=)`; while the constructor does not take
them, those cells say "API missing" and only `off` runs. llama.cpp modes (binaries from
--peer-bin, default /opt/peer/llama.cpp/build/bin):
  plain      llama-completion -no-cnv (its "eval time = ... / N runs" line: decode only)
  draft      llama-speculative-simple -md DRAFT --spec-type draft-simple --spec-draft-n-max 16
             --spec-draft-n-min 1 (this llama.cpp renamed --draft-max / --draft-min; the same
             common_speculative code llama-server --model-draft runs)
  draft-classic  llama-speculative, same flags (opt-in: ~10 % acceptance, < 2 t/s in this build)
  lookup     llama-lookup --spec-draft-n-max 16 (n-gram cache of prompt + output)
  ngram      llama-speculative-simple --spec-type ngram-mod (llama.cpp's defaults)
  ngram-s    llama-speculative-simple --spec-type ngram-simple (llama.cpp's defaults)
The prompt goes in as the rendered chat text with -p (not -f: -f drops the trailing newline
after "<|im_start|>assistant"); llama.cpp tokenizes it with specials parsed, and the encoded
token count it prints is checked against edgellm's.
"""
import argparse
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peer import ensure_edgellm_importable  # noqa: E402

MODELS = Path(os.environ.get("EDGELLM_MODELS", Path.home() / ".cache" / "edgellm" / "models"))
TARGET = MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
PEER_BIN = Path(os.environ.get("EDGELLM_PEER_BIN", "/opt/peer/llama.cpp/build/bin"))

OUR_MODES = ["off", "ngram", "draft", "auto"]
PEER_MODES = ["plain", "draft", "lookup", "ngram", "ngram-s", "draft-classic"]
PEER_SPEC = ["draft", "lookup", "ngram", "ngram-s", "draft-classic"]
# llama-speculative (the classic example) drafted at ~10 % acceptance and decoded at 0.7-1.9 t/s
# in this build (0c1e570) -- minutes per workload for nothing -- so it is opt-in
PEER_DEFAULT = ["plain", "draft", "lookup", "ngram", "ngram-s"]

# ---- workloads ------------------------------------------------------------------------------

# A realistic function (~100 lines) with several identifiers that recur; {name} is the
# function's own name so variants differ in more than the rename instruction.
FUNCTION = '''\
def {name}(reports, warehouse_codes, cutoff_date=None, strict=False, currency="EUR"):
    """Merge per-warehouse inventory reports into one summary per SKU.

    Each report is a dict with "warehouse", "date" (ISO string) and "lines", a list of
    dicts with "sku", "qty", "unit_cost" and an optional "currency". Reports from unknown
    warehouses or after cutoff_date are skipped (or rejected when strict is true).
    Returns (summary, problems): summary maps sku -> dict of totals, problems is a list
    of human-readable strings describing what was skipped and why.
    """
    import datetime

    rates = {{"EUR": 1.0, "USD": 0.92, "GBP": 1.17, "CHF": 1.04}}
    if currency not in rates:
        raise ValueError(f"unknown target currency: {{currency}}")
    known = set(code.upper() for code in warehouse_codes)
    limit = None
    if cutoff_date is not None:
        limit = datetime.date.fromisoformat(str(cutoff_date))

    summary = {{}}
    problems = []
    seen_reports = set()

    for index, report in enumerate(reports):
        warehouse = str(report.get("warehouse", "")).upper()
        if warehouse not in known:
            message = f"report {{index}}: unknown warehouse {{warehouse!r}}"
            if strict:
                raise KeyError(message)
            problems.append(message)
            continue
        try:
            report_date = datetime.date.fromisoformat(report["date"])
        except (KeyError, ValueError) as exc:
            message = f"report {{index}}: bad date ({{exc}})"
            if strict:
                raise ValueError(message) from exc
            problems.append(message)
            continue
        if limit is not None and report_date > limit:
            problems.append(f"report {{index}}: {{report_date}} is after the cutoff {{limit}}")
            continue
        key = (warehouse, report_date)
        if key in seen_reports:
            problems.append(f"report {{index}}: duplicate report for {{warehouse}} on {{report_date}}")
            continue
        seen_reports.add(key)

        for line_no, line in enumerate(report.get("lines", [])):
            sku = str(line.get("sku", "")).strip()
            if not sku:
                problems.append(f"report {{index}} line {{line_no}}: missing sku")
                continue
            try:
                qty = int(line["qty"])
                unit_cost = float(line["unit_cost"])
            except (KeyError, TypeError, ValueError):
                message = f"report {{index}} line {{line_no}}: bad qty or unit_cost"
                if strict:
                    raise ValueError(message)
                problems.append(message)
                continue
            if qty < 0:
                problems.append(f"report {{index}} line {{line_no}}: negative qty {{qty}} for {{sku}}")
                continue
            line_currency = line.get("currency", "EUR")
            if line_currency not in rates:
                problems.append(f"report {{index}} line {{line_no}}: unknown currency {{line_currency}}")
                continue
            value = qty * unit_cost * rates[line_currency] / rates[currency]

            entry = summary.get(sku)
            if entry is None:
                entry = {{
                    "sku": sku,
                    "qty": 0,
                    "value": 0.0,
                    "warehouses": {{}},
                    "first_seen": report_date,
                    "last_seen": report_date,
                }}
                summary[sku] = entry
            entry["qty"] += qty
            entry["value"] += value
            entry["warehouses"][warehouse] = entry["warehouses"].get(warehouse, 0) + qty
            if report_date < entry["first_seen"]:
                entry["first_seen"] = report_date
            if report_date > entry["last_seen"]:
                entry["last_seen"] = report_date

    for sku, entry in summary.items():
        if entry["qty"]:
            entry["avg_cost"] = round(entry["value"] / entry["qty"], 4)
        else:
            entry["avg_cost"] = 0.0
        entry["value"] = round(entry["value"], 2)
        entry["first_seen"] = entry["first_seen"].isoformat()
        entry["last_seen"] = entry["last_seen"].isoformat()
        entry["currency"] = currency

    problems.sort()
    return summary, problems
'''

# (function name, identifier X, replacement Y): variant i uses entry i % len
RENAMES = [
    ("merge_inventory_reports", "entry", "record"),
    ("merge_stock_reports", "problems", "issues"),
    ("combine_inventory", "warehouse", "site"),
    ("merge_inventory_reports", "report_date", "day"),
    ("summarize_stock", "summary", "totals"),
    ("merge_reports", "line_no", "position"),
    ("merge_inventory", "rates", "fx_rates"),
    ("aggregate_inventory", "unit_cost", "price"),
]


def code_function(variant: int = 0) -> str:
    name, _, _ = RENAMES[variant % len(RENAMES)]
    return FUNCTION.format(name=name)


def code_messages(variant: int = 0):
    _, x, y = RENAMES[variant % len(RENAMES)]
    return [{"role": "user", "content":
             f"```python\n{code_function(variant)}```\n\n"
             f"Return this function with the identifier `{x}` renamed to `{y}`. Output only the code."}]


PASSAGE = """\
When the town of Marrow Creek replaced its water mains in 1987, nobody expected the work to \
become a lesson in how cities forget. The original pipes had been laid between 1902 and 1911 by \
a private company that went bankrupt before the last section was finished, and its maps were \
lost in a warehouse fire in 1934. For most of the twentieth century the town simply repaired \
leaks where they appeared and wrote the location on a card.

By 1985 the card index held more than eleven thousand entries. An engineer named Ruth Okafor, \
hired to plan the replacement, decided to treat the cards as data. She sorted them by street and \
by year, and she plotted every repair on a large paper map of the town. The result surprised \
the council. The leaks were not spread evenly across the network; more than sixty percent of \
them came from just nine kilometres of pipe, all of it laid in a single season in 1909. \
Okafor wrote in her report that "the town has been paying, year after year, for one bad summer \
of work that everyone had forgotten."

The council had planned to replace the whole network over twenty years, starting in the centre. \
Okafor argued for the opposite order: replace the nine kilometres first, then measure again. \
Her plan was adopted by a single vote. Within three years of the first phase, the number of \
repairs fell by more than half, and the money saved paid for the second phase two years ahead \
of schedule.

The story is now taught in engineering courses, but Okafor herself was careful about what it \
showed. "The cards were not a plan," she said in a later interview. "They were a memory, and a \
memory is only useful if somebody reads it." She pointed out that the index had been kept by \
the same two clerks for almost forty years, and that without their habit of writing the street \
number and the depth of every repair, the pattern would have stayed invisible.

Today Marrow Creek keeps its records in a database, and every repair is tagged automatically \
with its position. The old cards sit in the town archive in twelve wooden drawers. Visitors are \
sometimes surprised to learn that they are still consulted. When a new crew finds an unexpected \
joint or a pipe that is not on any map, someone goes to the drawers first, because the clerks \
wrote down things the database was never designed to hold: the smell of the soil, the colour of \
the water, and the name of the person who dug the hole.
"""

SUMMARY_ASKS = [
    "Summarize this, quoting the key sentences verbatim.",
    "Summarize this in a few paragraphs, quoting the key sentences verbatim.",
    "Summarize the passage for a town council briefing, quoting its key sentences verbatim.",
    "Write a summary of this text that quotes its most important sentences word for word.",
]

STORY_SUBJECTS = ["a lighthouse keeper", "a beekeeper who moves to the city",
                  "a night-shift baker", "a retired cartographer", "a ferry pilot",
                  "a clockmaker's apprentice"]


def summary_messages(variant: int = 0):
    ask = SUMMARY_ASKS[variant % len(SUMMARY_ASKS)]
    return [{"role": "user", "content": f"{PASSAGE}\n{ask}"}]


def prose_messages(variant: int = 0):
    return [{"role": "user", "content":
             f"Write a short story about {STORY_SUBJECTS[variant % len(STORY_SUBJECTS)]}."}]


WORKLOADS = {
    # name: (messages builder, max tokens)
    "code": (code_messages, 600),
    "summary": (summary_messages, 256),
    "prose": (prose_messages, 256),
}


def concurrent_set(n: int):
    """n (workload, variant) pairs, mixed: mostly summaries and code edits, some prose."""
    kinds = ["summary", "code", "summary", "prose"]
    return [(kinds[i % len(kinds)], i // len(kinds)) for i in range(n)]


# ---- edgellm --------------------------------------------------------------------------------

def spec_api() -> bool:
    import edgellm
    params = inspect.signature(edgellm.LLM).parameters
    return "speculative" in params and "draft_model" in params


def open_llm(mode: str, threads: int, k):
    import edgellm
    if mode == "off":
        if spec_api():
            return edgellm.LLM(str(TARGET), n_threads=threads, speculative="off")
        return edgellm.LLM(str(TARGET), n_threads=threads)
    kw = {"speculative": mode}
    if mode in ("draft", "auto"):
        kw["draft_model"] = str(DRAFT)
    if k is not None:
        kw["num_speculative_tokens"] = k
    return edgellm.LLM(str(TARGET), n_threads=threads, **kw)


def stats_counts(llm):
    """(drafted, accepted) so far from llm.stats(), or None while the engine has no counters."""
    s = llm.stats()
    if "spec_drafted" in s:
        return int(s["spec_drafted"]), int(s.get("spec_accepted", 0))
    return None


def timing_counts(t):
    """(drafted, accepted) from a completion's timings (llama-server's names), or None."""
    for d, a in (("draft_n", "draft_n_accepted"), ("spec_drafted", "spec_accepted")):
        if d in t:
            return int(t[d]), int(t.get(a, 0))
    return None


def delta(before, after):
    if after is None:
        return None, None
    b = before or (0, 0)
    return after[0] - b[0], after[1] - b[1]


def ours_single(llm, ids, max_tokens):
    from edgellm import SamplingParams
    before = stats_counts(llm)
    t0 = time.perf_counter()
    c = llm.generate(ids, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    wall = time.perf_counter() - t0
    t = c.timings or {}
    n = c.usage.completion_tokens
    if t.get("predicted_ms") and t.get("predicted_n", 0) > 1:
        tps = 1e3 * (t["predicted_n"] - 1) / t["predicted_ms"]
    else:  # no timings: whole wall time, prompt included
        tps = n / wall
    counts = timing_counts(t)
    drafted, accepted = counts if counts is not None else delta(before, stats_counts(llm))
    return {"tps": tps, "n": n, "prompt_n": len(ids), "drafted": drafted, "accepted": accepted,
            "wall_s": wall, "text": c.text, "finish": c.finish_reason}


def ours_concurrent(llm, prompts, max_tokens):
    from edgellm import SamplingParams
    before = stats_counts(llm)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    wall = time.perf_counter() - t0
    n = sum(c.usage.completion_tokens for c in outs)
    drafted, accepted = delta(before, stats_counts(llm))
    return {"tps": n / wall, "n": n, "wall_s": wall, "drafted": drafted, "accepted": accepted,
            "streams": len(prompts)}


# ---- llama.cpp --------------------------------------------------------------------------------

def peer_cmd(mode, prompt_text, n_predict, threads, ctx, k):
    b = PEER_BIN
    common = ["-m", str(TARGET), "-p", prompt_text, "-n", str(n_predict), "-t", str(threads),
              "-tb", str(threads), "-c", str(ctx), "--temp", "0", "--top-k", "1", "-s", "1"]
    draft = ["-md", str(DRAFT), "-td", str(threads), "-tbd", str(threads)]
    if mode == "plain":  # the speculative examples refuse to run without a proposer
        return [str(b / "llama-completion"), *common, "-no-cnv", "--no-display-prompt", "--simple-io"]
    # this llama.cpp renamed --draft-max/--draft-min to --spec-draft-n-max/--spec-draft-n-min
    kmax = ["--spec-draft-n-max", str(k), "--spec-draft-n-min", "1"]
    if mode == "draft-classic":
        return [str(b / "llama-speculative"), *common, *draft, *kmax]
    if mode == "draft":
        return [str(b / "llama-speculative-simple"), *common, *draft, "--spec-type", "draft-simple", *kmax]
    if mode == "lookup":
        return [str(b / "llama-lookup"), *common, "--spec-draft-n-max", str(k)]
    if mode == "ngram":  # llama.cpp's own defaults for the n-gram proposers
        return [str(b / "llama-speculative-simple"), *common, "--spec-type", "ngram-mod"]
    if mode == "ngram-s":
        return [str(b / "llama-speculative-simple"), *common, "--spec-type", "ngram-simple"]
    raise ValueError(mode)


_RE = {
    "encoded": re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds"),
    "decoded": re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s"),
    # llama-completion (llama_perf_context_print)
    "p_prompt": re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens"),
    "p_eval": re.compile(r"\beval time =\s+([\d.]+) ms /\s+(\d+) runs"),
    "drafted": re.compile(r"n_drafted\s*=\s*(\d+)"),
    "accepted": re.compile(r"n_accept\s*=\s*(\d+)"),
}


def peer_single(mode, prompt_text, n_predict, threads, ctx, k, timeout=1200):
    cmd = peer_cmd(mode, prompt_text, n_predict, threads, ctx, k)
    if not Path(cmd[0]).exists():
        return {"error": f"{Path(cmd[0]).name} not built"}
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       errors="replace", timeout=timeout)
    wall = time.perf_counter() - t0
    log = r.stderr + "\n" + r.stdout
    m = _RE["decoded"].search(log)
    pe = None if m else _RE["p_eval"].search(log)
    if r.returncode != 0 or not (m or pe):
        return {"error": f"exit {r.returncode}: {log.strip().splitlines()[-1:] if log.strip() else ''}",
                "cmd": cmd}
    if m:
        out = {"n": int(m.group(1)), "tps": float(m.group(3)), "wall_s": wall}
        e = _RE["encoded"].search(log)
        out["prompt_n"] = int(e.group(1)) if e else None
    else:
        # eval runs = decode steps after the prompt; the first token comes from the prompt pass
        ms, runs = float(pe.group(1)), int(pe.group(2))
        out = {"n": runs + 1, "tps": 1e3 * runs / ms if ms > 0 else 0.0, "wall_s": wall}
        pp = _RE["p_prompt"].search(log)
        out["prompt_n"] = int(pp.group(2)) if pp else None
        out["text"] = r.stdout.strip()
        return out
    d, a = _RE["drafted"].search(log), _RE["accepted"].search(log)
    out["drafted"] = int(d.group(1)) if d else None
    out["accepted"] = int(a.group(1)) if a else None
    # stdout: the prompt as tokens, then the generated text
    text = r.stdout
    i = text.find("<|im_start|>assistant\n")
    out["text"] = text[i + len("<|im_start|>assistant\n"):].strip() if i >= 0 else text[-4000:]
    return out


def peer_server_concurrent(mode, prompts_text, n_predict, threads, ctx, k, port=18431):
    """llama-server -np N (draft: --model-draft); N /completion requests at once."""
    exe = PEER_BIN / "llama-server"
    if not exe.exists():
        return {"error": "llama-server not built"}
    n = len(prompts_text)
    cmd = [str(exe), "-m", str(TARGET), "-t", str(threads), "-tb", str(threads),
           "-c", str(2048 * n), "-np", str(n), "--port", str(port), "--host", "127.0.0.1",
           "--no-webui", "-cb"]
    if mode == "draft":
        cmd += ["-md", str(DRAFT), "-td", str(threads), "-tbd", str(threads),
                "--spec-draft-n-max", str(k), "--spec-draft-n-min", "1"]
    elif mode == "ngram":
        cmd += ["--spec-type", "ngram-mod"]
    log = tempfile.TemporaryFile(mode="w+")  # a pipe nobody reads would fill and stall the server
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            if proc.poll() is not None:
                log.seek(0)
                return {"error": f"llama-server exited {proc.returncode}: {log.read()[-300:]}"}
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except Exception:
                pass
            if time.time() > deadline:
                return {"error": "llama-server did not come up"}
            time.sleep(1)
        results = [None] * n

        def one(i):
            body = json.dumps({"prompt": prompts_text[i], "n_predict": n_predict, "temperature": 0,
                               "top_k": 1, "cache_prompt": False}).encode()
            req = urllib.request.Request(base + "/completion", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=1800) as resp:
                results[i] = json.loads(resp.read())

        th = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        t0 = time.perf_counter()
        for t in th:
            t.start()
        for t in th:
            t.join()
        wall = time.perf_counter() - t0
        if any(r is None for r in results):
            return {"error": "a request failed"}
        toks = sum(r.get("tokens_predicted", 0) for r in results)
        drafted = sum((r.get("timings") or {}).get("draft_n", 0) for r in results)
        accepted = sum((r.get("timings") or {}).get("draft_n_accepted", 0) for r in results)
        return {"tps": toks / wall, "n": toks, "wall_s": wall, "drafted": drafted or None,
                "accepted": accepted if drafted else None, "streams": n}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# ---- report -----------------------------------------------------------------------------------

def fmt_cell(r):
    if r is None:
        return "not run"
    if "error" in r:
        return r["error"]
    s = f"{r['tps']:.1f}"
    if r.get("drafted"):
        s += f" ({100.0 * r['accepted'] / r['drafted']:.0f}%)"
    return s


def ratio(a, b):
    if not a or not b or "error" in a or "error" in b:
        return "—"
    return f"{a['tps'] / b['tps']:.2f}×"


def best(cells):
    ok = [c for c in cells if c and "error" not in c]
    return max(ok, key=lambda c: c["tps"]) if ok else None


def markdown(res, ours_modes, peer_modes, meta):
    peer_modes = [m for m in peer_modes if any(m in row["peer"] for row in res.values())]
    cols = [f"edgellm {m}" for m in ours_modes] + [f"llama.cpp {m}" for m in peer_modes]
    lines = [f"CPU: {meta['cpu']}; {meta['threads']} threads; target {TARGET.name}, draft {DRAFT.name}; "
             f"k={meta['k']}; load average {meta['load_start']:.2f} at start, {meta['load_end']:.2f} at end",
             "",
             "decode t/s (acceptance = accepted/drafted); one run each",
             "",
             "| workload | gen tokens (ours/peer) | " + " | ".join(cols) +
             " | ours auto / ours off | ours best / ours off | ours best spec / peer best spec | load |",
             "| --- | --- | " + " | ".join("---:" for _ in cols) + " | ---: | ---: | ---: | ---: |"]
    for w, row in res.items():
        ours = [row["ours"].get(m) for m in ours_modes]
        peer = [row["peer"].get(m) for m in peer_modes]
        o_off = row["ours"].get("off")
        o_auto = row["ours"].get("auto")
        o_best = best([row["ours"].get(m) for m in OUR_MODES if m != "off"])
        p_best = best([row["peer"].get(m) for m in PEER_SPEC])
        n_ours = (o_off or {}).get("n", "")
        n_peer = next((c.get("n") for c in peer if c and "n" in c), "")
        loads = row.get("loads") or []
        lines.append(f"| {w} | {n_ours}/{n_peer} | " + " | ".join(fmt_cell(c) for c in ours + peer) +
                     f" | {ratio(o_auto, o_off)} | {ratio(o_best, o_off)} | {ratio(o_best, p_best)} | "
                     + (f"{min(loads):.1f}–{max(loads):.1f}" if loads else "") + " |")
    return "\n".join(lines)


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="code,summary,prose,concurrent")
    ap.add_argument("--ours", default=",".join(OUR_MODES), help="edgellm modes ('' for none)")
    ap.add_argument("--peer", default=",".join(PEER_DEFAULT),
                    help=f"llama.cpp modes ('' for none) of {','.join(PEER_MODES)}")
    ap.add_argument("--peer-concurrent", default="plain,draft",
                    help="llama-server modes for the concurrent workload ('' for none)")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-k", type=int, default=16, help="max draft tokens (peer --draft-max; ours "
                    "num_speculative_tokens only when --ours-k is given)")
    ap.add_argument("--ours-k", type=int, default=None, help="edgellm num_speculative_tokens (default: engine's)")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--variant", type=int, default=0, help="workload variant (code: which rename)")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--max-tokens", type=int, default=None, help="override every workload's cap")
    ap.add_argument("--print-prompt", choices=sorted(WORKLOADS), help="print the rendered prompt and exit")
    ap.add_argument("-o", "--output", choices=["md", "json"], default="md")
    ap.add_argument("--save", help="write every result (with generated text) as JSON here")
    args = ap.parse_args()

    ensure_edgellm_importable()

    if args.no_peer:
        args.peer = args.peer_concurrent = ""
    workloads = [w for w in args.workloads.split(",") if w]
    ours_modes = [m for m in args.ours.split(",") if m]
    peer_modes = [m for m in args.peer.split(",") if m]
    peerc_modes = [m for m in args.peer_concurrent.split(",") if m]
    for m in ours_modes:
        if m not in OUR_MODES:
            ap.error(f"unknown edgellm mode {m}")
    for m in peer_modes:
        if m not in PEER_MODES:
            ap.error(f"unknown llama.cpp mode {m}")
    for p in (TARGET, DRAFT):
        if not p.is_file():
            sys.exit(f"{p} missing: edgellm models fetch qwen2.5-coder-1.5b qwen2.5-coder-0.5b")

    load_start = os.getloadavg()[0]
    print(f"# load average at start: {os.getloadavg()}", file=sys.stderr)
    have_spec = spec_api()
    print(f"# edgellm.LLM takes speculative=/draft_model=: {have_spec}", file=sys.stderr)

    # Render every prompt once with edgellm's template (the off model's tokenizer and template).
    base = open_llm("off", args.threads, None)
    prompts = {}   # key -> (ids, text, max_tokens)
    for w in [w for w in workloads if w in WORKLOADS]:
        build, cap = WORKLOADS[w]
        msgs = build(args.variant)
        prompts[w] = (base.chat_prompt_ids(msgs), base.render_chat_prompt(msgs), args.max_tokens or cap)
    conc = []
    if "concurrent" in workloads:
        for kind, v in concurrent_set(args.streams):
            msgs = WORKLOADS[kind][0](v)
            conc.append((base.chat_prompt_ids(msgs), base.render_chat_prompt(msgs)))
    if args.print_prompt:
        msgs = WORKLOADS[args.print_prompt][0](args.variant)
        print(base.render_chat_prompt(msgs), end="")
        print(f"\n# {len(base.chat_prompt_ids(msgs))} tokens", file=sys.stderr)
        return
    conc_cap = args.max_tokens or 256

    res = {w: {"ours": {}, "peer": {}, "loads": []} for w in workloads}

    def note(w, who, mode, r):
        r["load"] = os.getloadavg()[0]
        res[w]["loads"].append(r["load"])
        res[w][who][mode] = r
        print(f"# {w:10s} {who} {mode:8s} {fmt_cell(r)}  n={r.get('n')} prompt={r.get('prompt_n')} "
              f"load={r['load']:.2f}", file=sys.stderr)

    # edgellm, one engine per mode (the draft model and speculation are engine settings)
    for mode in ours_modes:
        if mode != "off" and not have_spec:
            for w in workloads:
                res[w]["ours"][mode] = {"error": "API missing"}
            continue
        try:
            llm = base if mode == "off" else open_llm(mode, args.threads, args.ours_k)
        except Exception as exc:  # noqa: BLE001 - a mode the engine refuses is a cell, not a crash
            for w in workloads:
                res[w]["ours"][mode] = {"error": f"{type(exc).__name__}: {exc}"[:80]}
            continue
        # warm-up: a few tokens so first-call costs (page allocation, repack) are not measured
        ours_single(llm, prompts[next(iter(prompts))][0][:32] if prompts else [1, 2, 3], 4)
        for w in workloads:
            try:
                if w == "concurrent":
                    r = ours_concurrent(llm, [ids for ids, _ in conc], conc_cap)
                else:
                    ids, _, cap = prompts[w]
                    r = ours_single(llm, ids, cap)
            except Exception as exc:  # noqa: BLE001
                r = {"error": f"{type(exc).__name__}: {exc}"[:80]}
            note(w, "ours", mode, r)
        if llm is not base:
            llm.close()
            del llm
    base.close()

    # llama.cpp
    for w in workloads:
        modes = peerc_modes if w == "concurrent" else peer_modes
        for mode in modes:
            try:
                if w == "concurrent":
                    r = peer_server_concurrent(mode, [t for _, t in conc], conc_cap, args.threads,
                                               args.ctx, args.k)
                else:
                    ids, text, cap = prompts[w]
                    r = peer_single(mode, text, cap, args.threads, args.ctx, args.k)
                    if r.get("prompt_n") is not None and abs(r["prompt_n"] - len(ids)) > 2:
                        print(f"# WARNING {w}: llama.cpp encoded {r['prompt_n']} prompt tokens, "
                              f"edgellm {len(ids)}", file=sys.stderr)
            except Exception as exc:  # noqa: BLE001
                r = {"error": f"{type(exc).__name__}: {exc}"[:80]}
            note(w, "peer", mode, r)

    load_end = os.getloadavg()[0]
    print(f"# load average at end: {os.getloadavg()}", file=sys.stderr)
    meta = {"cpu": f"{cpu_name()}, {os.cpu_count()} CPUs", "threads": args.threads, "k": args.k,
            "load_start": load_start, "load_end": load_end, "spec_api": have_spec,
            "time": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    if args.save:
        Path(args.save).write_text(json.dumps({"meta": meta, "results": res}, indent=1, default=str))
    if args.output == "json":
        slim = {w: {who: {m: {k: v for k, v in r.items() if k != "text"} for m, r in row[who].items()}
                    for who in ("ours", "peer")} for w, row in res.items()}
        print(json.dumps({"meta": meta, "results": slim}, indent=1, default=str))
    else:
        all_peer = peer_modes + [m for m in (peerc_modes if "concurrent" in workloads else [])
                                 if m not in peer_modes]
        print(markdown(res, ours_modes, all_peer, meta))


if __name__ == "__main__":
    main()
