#!/usr/bin/env python3
"""Load generator for any OpenAI-compatible server (edgellm serve, llama-server,
`python -m llama_cpp.server`, vLLM, ...).

N clients each send streaming chat requests back to back until R requests are done. Every
prompt is ~P tokens of words in its own random order (so no two prompts share a prefix and no
prefix cache flatters the result), asking for M tokens with end-of-generation suppressed, so
every request generates the same number of tokens on every server.

    python bench/load.py --base-url http://127.0.0.1:8080/v1 --clients 16 --requests 64

Reports requests/s, time to first token p50/p99, aggregate generated tokens/s (total tokens /
wall time) and the per-stream rate. Speed depends on the machine: compare servers side by side
in one run, never against a number from elsewhere.

End of generation is suppressed in two ways at once, because servers differ in what they
honour: `ignore_eos` (llama-server, edgellm) and `logit_bias` -100 on --ban-token ids
(OpenAI-style, honoured by llama-cpp-python). Generated tokens are counted from the server's
usage when it reports one (stream_options.include_usage), else as content chunks (one token
per chunk in every server above).
"""
import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import List, Optional

import httpx

WORDS = ("river mountain lantern orchard compass harbor meadow thunder velvet pepper garden "
         "window silver candle marble forest engine ribbon saddle island copper needle basket "
         "feather anchor glacier violin pocket tunnel blanket ladder sunset mirror cabin "
         "rocket canvas whistle pillow desert button castle pebble falcon kettle puzzle "
         "harvest comet lemon bridge shadow tiger jacket planet").split()


@dataclass
class Result:
    ok: bool
    ttft: Optional[float] = None      # seconds from sending to the first content token
    duration: float = 0.0
    tokens: int = 0
    error: str = ""


def make_prompt(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n_words)]
    return ("Here is a list of words: " + " ".join(words) +
            ". Write a long story that uses every one of these words.")


async def one_request(client: httpx.AsyncClient, args, prompt: str) -> Result:
    body = {"model": args.model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": args.max_tokens, "temperature": args.temperature, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.ban_token:
        body["logit_bias"] = {str(t): -100 for t in args.ban_token}
    t0 = time.perf_counter()
    ttft, chunks, usage_tokens = None, 0, None
    try:
        async with client.stream("POST", "/chat/completions", json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                return Result(False, error=f"HTTP {r.status_code}: {text[:200]}")
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    return Result(False, error=str(ev["error"])[:200])
                if ev.get("usage"):
                    usage_tokens = ev["usage"].get("completion_tokens")
                for ch in ev.get("choices") or []:
                    if (ch.get("delta") or {}).get("content"):
                        chunks += 1
                        if ttft is None:
                            ttft = time.perf_counter() - t0
    except httpx.HTTPError as e:
        return Result(False, error=f"{type(e).__name__}: {e}")
    return Result(True, ttft, time.perf_counter() - t0,
                  usage_tokens if usage_tokens is not None else chunks)


def percentile(xs: List[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def run(args, keep_samples: bool = False) -> dict:
    rng = random.Random(args.seed)
    prompts = [make_prompt(rng, args.prompt_words) for _ in range(args.requests + args.warmup)]
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=args.clients + 4, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(base_url=args.base_url.rstrip("/"), headers=headers,
                                 timeout=args.timeout, limits=limits) as client:
        for p in prompts[:args.warmup]:  # load the weights into the cache, start the threads
            await one_request(client, args, p)
        queue = list(prompts[args.warmup:])
        results: List[Result] = []

        async def worker():
            while queue:
                results.append(await one_request(client, args, queue.pop()))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.clients)))
        wall = time.perf_counter() - t0
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    tokens = sum(r.tokens for r in ok)
    return {
        "base_url": args.base_url, "clients": args.clients, "requests": len(results),
        "failed": len(results) - len(ok), "wall_s": wall,
        "requests_per_s": len(ok) / wall,
        "ttft_p50_s": percentile(ttfts, 0.50), "ttft_p99_s": percentile(ttfts, 0.99),
        "generated_tokens": tokens, "aggregate_tokens_per_s": tokens / wall,
        "per_stream_tokens_per_s": statistics.mean(
            [r.tokens / (r.duration - r.ttft) for r in ok if r.ttft and r.duration > r.ttft
             and r.tokens > 1] or [float("nan")]),
        "mean_tokens_per_request": tokens / len(ok) if ok else 0,
        "errors": sorted({r.error for r in results if not r.ok})[:5],
        **({"ttft_samples": ttfts} if keep_samples else {}),
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--model", default="default", help="the 'model' field sent")
    ap.add_argument("--clients", type=int, default=16, help="concurrent streams")
    ap.add_argument("--requests", type=int, default=64, help="requests measured in all")
    ap.add_argument("--warmup", type=int, default=1, help="requests sent first, not measured")
    ap.add_argument("--prompt-words", type=int, default=120,
                    help="random words per prompt (~150 prompt tokens with the chat template)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false")
    ap.add_argument("--ban-token", type=int, action="append", default=[],
                    help="token id to forbid with logit_bias -100 (repeatable; e.g. the "
                         "model's end-of-generation ids)")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    res = asyncio.run(run(args))
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['base_url']}: {res['requests']} requests ({res['failed']} failed), "
              f"{res['clients']} clients, {res['wall_s']:.1f} s")
        print(f"  requests/s            {res['requests_per_s']:.2f}")
        print(f"  TTFT p50 / p99        {res['ttft_p50_s']:.3f} s / {res['ttft_p99_s']:.3f} s")
        print(f"  aggregate gen tok/s   {res['aggregate_tokens_per_s']:.1f}")
        print(f"  per-stream tok/s      {res['per_stream_tokens_per_s']:.1f}")
        print(f"  tokens per request    {res['mean_tokens_per_request']:.1f}")
        for e in res["errors"]:
            print(f"  error: {e}")
    return 0 if res["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
