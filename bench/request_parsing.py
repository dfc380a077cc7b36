#!/usr/bin/env python3
"""What parsing a request body costs the server: microseconds per body for the OpenAI chat and
completion parsers and llama-server's /completion, on one tree or on two side by side.

    python bench/request_parsing.py [--tree DIR ...] [-n 5000]

Each --tree is a checkout whose python/ folder is imported in its own process (default: this
one), e.g. an old commit unpacked with `git archive OLD | tar -x -C /tmp/old`. Bodies are
already-decoded JSON (the json.loads before them is the same in every tree); best of 5 runs.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

TOOL = {"type": "function", "function": {"name": "get_weather", "description": "the weather",
                                         "parameters": {"type": "object", "properties": {
                                             "city": {"type": "string"}}, "required": ["city"]}}}
BODIES = {
    "chat": {"model": "smollm2", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                "function": {"name": "get_weather",
                                                                             "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        "tools": [TOOL] * 4, "tool_choice": "auto", "temperature": 0.7, "top_p": 0.9,
        "max_tokens": 64, "stop": ["\n\n"], "seed": 1, "stream": True,
        "stream_options": {"include_usage": True}},
    "completion": {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 32,
                   "temperature": 0.8, "top_k": 40, "logprobs": 2, "n": 2},
    "native": {"prompt": "Once upon a time", "n_predict": 32, "temperature": 0.8, "top_k": 40,
               "mirostat": 0, "id_slot": -1, "cache_prompt": True, "samplers": ["top_k"],
               "stream": True, "n_probs": 2, "logit_bias": [[5, -1.0]]},
}

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1] + "/python")
from edgellm.server import protocol, llamacpp_api
bodies, n = json.loads(sys.argv[2]), int(sys.argv[3])
if hasattr(llamacpp_api, "NativeCompletionBody"):
    from edgellm.server.wire import parse
    native = lambda b: parse(llamacpp_api.NativeCompletionBody, b).model_dump(by_alias=True, exclude_unset=True)
else:
    native = lambda b: protocol.check_fields(b, llamacpp_api.COMPLETION_FIELDS, name_type=False)
fns = {"chat": protocol.parse_chat, "completion": protocol.parse_completion, "native": native}
out = {}
for name, body in bodies.items():
    fn = fns[name]
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(body)
        best = min(best, (time.perf_counter() - t0) / n)
    out[name] = best * 1e6
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", help="a checkout (default: this one)")
    ap.add_argument("-n", type=int, default=5000, help="bodies per timed run")
    args = ap.parse_args()
    trees = args.tree or [str(Path(__file__).resolve().parents[1])]
    rows = {}
    for tree in trees:
        out = subprocess.run([sys.executable, "-c", CHILD, tree, json.dumps(BODIES), str(args.n)],
                             check=True, capture_output=True, text=True).stdout
        rows[tree] = json.loads(out)
    print("| tree | " + " | ".join(f"{k} (us/body)" for k in BODIES) + " |")
    print("|---|" + "---|" * len(BODIES))
    for tree, r in rows.items():
        print(f"| {tree} | " + " | ".join(f"{r[k]:.1f}" for k in BODIES) + " |")


if __name__ == "__main__":
    main()
