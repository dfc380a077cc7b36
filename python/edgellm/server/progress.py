"""llama-server's prompt-processing progress (`return_progress`), shared by the routes that
stream it: the chat and legacy completion routes (routes.py), native /completion
(llamacpp_api.py) and /v1/responses (responses_api.py).

The engine sends, for a streaming request with return_progress, a chunk with empty text whose
`progress` is {total, cache, processed, time_ms}: one when the request is admitted (processed ==
cache, the prompt tokens reused from the prefix cache; time 0), then one after each prefill
chunk, the last with processed == total. They go out as llama-server's `prompt_progress`.
"""
from typing import Any, Dict, Optional

JSON = Dict[str, Any]


def progress_of(chunk) -> Optional[JSON]:
    """The chunk's engine progress, or None for every other chunk (and for engines without)."""
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
    n = max(0, int(p["processed"]) - cache)
    ms = max(0.0, float(p["time_ms"]))
    return {"cache_n": cache, "prompt_n": n, "prompt_ms": ms,
            "prompt_per_token_ms": ms / n if n else 0.0,
            "prompt_per_second": 1e3 * n / ms if n and ms > 0 else 0.0,
            "predicted_n": 0, "predicted_ms": 0.0,
            "predicted_per_token_ms": 0.0, "predicted_per_second": 0.0}
