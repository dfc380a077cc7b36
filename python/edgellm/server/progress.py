"""llama-server's `timings` and prompt-processing progress (`return_progress`), shared by the
routes that send them: the chat and legacy completion routes (responses.py), native /completion
(llamacpp_api.py) and /v1/responses (responses_api.py).

The engine sends, for a streaming request with return_progress, a chunk with empty text whose
`progress` is {total, cache, processed, time_ms}: one when the request is admitted (processed ==
cache, the prompt tokens reused from the prefix cache; time 0), then one after each prefill
chunk, the last with processed == total. They go out as llama-server's `prompt_progress`.
"""
import time
from typing import Any, Dict, Optional

JSON = Dict[str, Any]


def timings(t: Optional[dict]) -> Optional[JSON]:
    """The engine's timings as the OpenAI routes send them, filling the per-token figures the
    engine may leave out."""
    if not t:
        return None
    out = dict(t)
    for kind in ("prompt", "predicted"):
        n, ms = out.get(f"{kind}_n"), out.get(f"{kind}_ms")
        if n is not None and ms is not None:
            out.setdefault(f"{kind}_per_token_ms", ms / n if n else 0.0)
            out.setdefault(f"{kind}_per_second", 1e3 * n / ms if ms else 0.0)
    return out


def native_timings(t: Optional[dict], cached: int) -> JSON:
    """llama-server's timings: prompt_n excludes cached tokens (cache_n); the generation rate is
    over predicted_n - 1 decode steps, since the first token comes with the prompt."""
    t = t or {}
    prompt_n, prompt_ms = int(t.get("prompt_n", 0)), float(t.get("prompt_ms", 0.0))
    pred_n, pred_ms = int(t.get("predicted_n", 0)), float(t.get("predicted_ms", 0.0))
    steps = max(0, pred_n - 1)
    out = {"cache_n": int(cached), "prompt_n": prompt_n, "prompt_ms": prompt_ms,
           "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
           "prompt_per_second": 1e3 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
           "predicted_n": pred_n, "predicted_ms": pred_ms,
           "predicted_per_token_ms": pred_ms / steps if steps and pred_ms > 0 else 0.0,
           "predicted_per_second": 1e3 * steps / pred_ms if steps and pred_ms > 0 else 0.0}
    if int(t.get("draft_n", 0) or 0) > 0:  # speculative decoding drafted for this completion
        out["draft_n"] = int(t["draft_n"])
        out["draft_n_accepted"] = int(t.get("draft_n_accepted", 0) or 0)
    return out


def running_timings(t0: float, t_first: Optional[float], n: int, prompt_n: int = 0) -> JSON:
    """timings_per_token: the figures so far of a completion that started at `t0` (monotonic)
    and has `n` tokens, the first at `t_first` (prompt_ms = the time to it)."""
    now = time.monotonic()
    first = t_first or now  # no token yet
    return native_timings({"prompt_n": prompt_n, "prompt_ms": 1e3 * (first - t0),
                           "predicted_n": n, "predicted_ms": 1e3 * (now - first)}, 0)


def progress_of(chunk) -> Optional[JSON]:
    """The chunk's engine progress, or None (every other chunk; engines without)."""
    return getattr(chunk, "progress", None)


def prompt_progress(p: JSON) -> JSON:
    """llama-server's `prompt_progress` object (time_ms in whole milliseconds, as it sends it).
    Overall progress is processed / total; the timed part (processed - cache) / (total - cache)."""
    return {"total": int(p["total"]), "cache": int(p["cache"]),
            "processed": int(p["processed"]), "time_ms": int(p["time_ms"])}


def progress_timings(p: JSON) -> JSON:
    """`timings` of a progress chunk under timings_per_token: the prompt computed so far (cache
    hits excluded), nothing predicted yet -- all zeros on the first, never going back."""
    cache = int(p["cache"])
    return native_timings({"prompt_n": max(0, int(p["processed"]) - cache),
                           "prompt_ms": max(0.0, float(p["time_ms"]))}, cache)
