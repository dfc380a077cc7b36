"""Prometheus text exposition (format 0.0.4) for GET /metrics, without a client library.

Two sources meet here. The engine's own counters (LLM.stats(): running and waiting sequences,
KV pages, prefix-cache hits, token totals, throughput) are read at scrape time, because only
the engine knows them exactly, cancelled work included. What only the server sees — latency as
the client experiences it (time to first token, time between tokens) and requests by endpoint
and status — is recorded here as requests pass.
"""
import bisect
import itertools
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from . import request_log

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)


def _fmt(v: float) -> str:
    return "+Inf" if v == float("inf") else str(int(v)) if float(v).is_integer() else repr(float(v))


def _labels(pairs: Iterable[Tuple[str, str]]) -> str:
    items = [f'{k}="{_escape(str(v))}"' for k, v in pairs]
    return "{" + ",".join(items) + "}" if items else ""


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Histogram:
    def __init__(self, buckets: Tuple[float, ...]):
        self.bounds = tuple(sorted(buckets))
        self.counts = [0] * (len(self.bounds) + 1)  # last: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.sum += value * times
        self.count += times

    def lines(self, name: str) -> List[str]:
        return [f'{name}_bucket{{le="{_fmt(bound)}"}} {n}' for bound, n in zip(
            self.bounds + (float("inf"),), itertools.accumulate(self.counts))] + [
            f"{name}_sum {_fmt(self.sum)}", f"{name}_count {self.count}"]


class ServerMetrics:
    """What the server records per request; thread-safe, rendered with the engine's stats."""

    def __init__(self):
        self._lock = threading.Lock()
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.requests: Dict[Tuple[str, str], int] = {}      # (endpoint, status) -> count
        self.finished: Dict[str, int] = {}                   # finish_reason -> count
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.active_requests = 0  # HTTP requests admitted and not yet answered in full
        # for llama.cpp's metric names (llamacpp_api.llamacpp_metrics)
        self.prompt_ms_total = 0.0
        self.predicted_ms_total = 0.0
        self.n_tokens_max = 0

    def request_done(self, endpoint: str, status: int) -> None:
        with self._lock:
            key = (endpoint, str(status))
            self.requests[key] = self.requests.get(key, 0) + 1

    def first_token(self, seconds: float) -> None:
        with self._lock:
            self.ttft.observe(seconds)

    def inter_token(self, seconds: float, tokens: int) -> None:
        with self._lock:
            self.itl.observe(seconds / max(1, tokens), max(1, tokens))

    def tokens(self, prompt: int = 0, generated: int = 0) -> None:
        request_log.count(prompt, generated)  # the request's own log line
        with self._lock:
            self.prompt_tokens += prompt
            self.generation_tokens += generated

    def timed(self, timings: dict, n_tokens: int) -> None:
        """A finished completion's engine timings and its prompt + generated tokens."""
        with self._lock:
            self.prompt_ms_total += float(timings.get("prompt_ms", 0.0) or 0.0)
            self.predicted_ms_total += float(timings.get("predicted_ms", 0.0) or 0.0)
            self.n_tokens_max = max(self.n_tokens_max, int(n_tokens))

    def finish(self, reason: str) -> None:
        with self._lock:
            self.finished[reason] = self.finished.get(reason, 0) + 1

    def render(self, engine: Optional[dict], model_id: Optional[str], ready: bool,
               models: Optional[List[Tuple[str, bool]]] = None) -> str:
        """`engine` is LLM.stats() (None while loading); `models`, (id, ready) per model of a
        many-model server, replaces (model_id, ready) in edgellm_model_ready."""
        e = engine or {}
        out: List[str] = []
        with self._lock:
            family(out, "edgellm_model_ready", "gauge", "1 once the model is loaded and serving",
                   [(_labels([("model", m)]), 1 if r else 0)
                    for m, r in (models if models is not None else [(model_id, ready)])])
            for name, kind, help_, value in ENGINE_FAMILIES:
                v = value(e, self)
                if v is not None:
                    family(out, name, kind, help_, [("", v)])
            family(out, "edgellm_requests_total", "counter",
                   "HTTP requests answered, by endpoint and status code",
                   [(_labels([("endpoint", ep), ("status", st)]), n)
                    for (ep, st), n in sorted(self.requests.items())])
            family(out, "edgellm_requests_finished_total", "counter",
                   "Completions finished, by finish reason",
                   [(_labels([("finish_reason", r)]), n) for r, n in sorted(self.finished.items())])
            for name, help_, hist in (
                    ("edgellm_time_to_first_token_seconds",
                     "Request arrival to first generated token, as the client sees it", self.ttft),
                    ("edgellm_inter_token_latency_seconds",
                     "Time between generated tokens of one completion", self.itl)):
                out += [f"# HELP {name} {help_}", f"# TYPE {name} histogram", *hist.lines(name)]
        return "\n".join(out) + "\n"


def family(out: List[str], name: str, kind: str, help_: str,
           samples: Iterable[Tuple[str, float]]) -> None:
    """One metric family in the text format: HELP, TYPE and a line per (labels, value)."""
    out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    out += [f"{name}{labels} {_fmt(value)}" for labels, value in samples]


def _if(key: str, value: Callable[[dict], float]) -> Callable[[dict, "ServerMetrics"], Any]:
    """The family only when the engine's stats have `key` (and it is set)."""
    return lambda e, m: value(e) if e.get(key) else None


def _ratio(e: dict, num: str, den: str) -> float:
    return e.get(num, 0) / e[den] if e.get(den) else 0.0


_DISK = "Persistent prefix cache: "
_SPEC = "Speculative decoding: "
# (name, type, help, value from the engine's stats and the server's figures; None: left out)
ENGINE_FAMILIES = [
    ("edgellm_requests_running", "gauge", "Sequences the engine is running now",
     lambda e, m: e.get("running", 0)),
    ("edgellm_requests_waiting", "gauge", "Sequences admitted and waiting in the engine queue",
     lambda e, m: e.get("waiting", 0)),
    ("edgellm_http_requests_active", "gauge",
     "Generation requests admitted by the server and not yet answered in full",
     lambda e, m: m.active_requests),
    ("edgellm_prompt_tokens_total", "counter", "Prompt tokens processed",
     lambda e, m: e.get("prompt_tokens_total", m.prompt_tokens)),
    ("edgellm_generation_tokens_total", "counter", "Tokens generated",
     lambda e, m: e.get("generated_tokens_total", m.generation_tokens)),
    ("edgellm_kv_pages_used", "gauge",
     "KV pages out of the free lists (held by requests or kept by the prefix cache)",
     lambda e, m: used_pages(e)),
    ("edgellm_kv_pages_total", "gauge",
     "The most KV pages out of the free lists at once (the pools share one byte budget)",
     lambda e, m: e.get("pages_total", 0)),
    ("edgellm_kv_bytes_used", "gauge",
     "KV bytes out of the free lists, both layer groups (requests and prefix cache)",
     lambda e, m: e.get("kv_bytes_used", 0) if "kv_bytes_total" in e else None),
    ("edgellm_kv_bytes_total", "gauge", "The KV byte budget (kv_memory)",
     lambda e, m: e.get("kv_bytes_total")),
    ("edgellm_kv_pages_in_use_requests", "gauge",
     "KV pages held by requests (excluding pages only the prefix cache keeps); 0 when idle",
     lambda e, m: requests_pages(e)),
    ("edgellm_kv_pages_cached", "gauge", "KV pages only the prefix cache keeps (reclaimable)",
     lambda e, m: e.get("pages_cached", 0)),
    ("edgellm_preemptions_total", "counter",
     "Sequences preempted (pages reclaimed, recomputed later) for lack of KV pages",
     lambda e, m: e.get("preemptions")),
    ("edgellm_context_shifts_total", "counter",
     "Context shifts (--context-shift): a full context kept its first n_keep tokens and the "
     "newer half of the rest and went on generating", lambda e, m: e.get("context_shifts")),
    ("edgellm_cache_disk_pages_read_total", "counter", _DISK + "KV pages read back from --cache-dir",
     _if("cache_disk", lambda e: e.get("cache_disk_pages_read", 0))),
    ("edgellm_cache_disk_pages_written_total", "counter", _DISK + "KV pages written to --cache-dir",
     _if("cache_disk", lambda e: e.get("cache_disk_pages_written", 0))),
    ("edgellm_cache_disk_corrupt_total", "counter",
     _DISK + "files that failed their checks (deleted, never loaded)",
     _if("cache_disk", lambda e: e.get("cache_disk_corrupt", 0))),
    ("edgellm_cache_disk_bytes", "gauge", _DISK + "bytes of this model's files in --cache-dir",
     _if("cache_disk", lambda e: e.get("cache_disk_bytes", 0))),
    ("edgellm_prefix_cache_hit_ratio", "gauge", "Prefix cache hits / lookups since start",
     lambda e, m: _ratio(e, "prefix_cache_hits", "prefix_cache_queries")),
    ("edgellm_spec_draft_tokens_total", "counter",
     _SPEC + "tokens drafted (n-gram or draft model) and verified", lambda e, m: e.get("spec_drafted")),
    ("edgellm_spec_accepted_tokens_total", "counter", _SPEC + "drafted tokens the model accepted",
     lambda e, m: e.get("spec_accepted", 0) if "spec_drafted" in e else None),
    ("edgellm_spec_verify_steps_total", "counter", _SPEC + "sequence-steps that verified a draft",
     lambda e, m: e.get("spec_steps", 0) if "spec_drafted" in e else None),
    ("edgellm_spec_acceptance_ratio", "gauge", _SPEC + "accepted / drafted tokens since start",
     lambda e, m: _ratio(e, "spec_accepted", "spec_drafted") if "spec_drafted" in e else None),
    ("edgellm_spec_draft_seconds_total", "counter", _SPEC + "time in draft-model forward passes",
     lambda e, m: e.get("spec_draft_seconds", 0.0) if "spec_drafted" in e else None),
    ("edgellm_tokens_per_second", "gauge",
     "Generated tokens per second over the engine's recent window",
     lambda e, m: e.get("tokens_per_second", 0.0)),
]


def requests_pages(stats: dict) -> int:
    """KV pages held by requests, as opposed to pages kept only for the prefix cache (the
    engine's `pages_used`; `pages_in_use_requests` if a build names it so)."""
    return int(stats.get("pages_in_use_requests", stats.get("pages_used", 0)))


def used_pages(stats: dict) -> int:
    """Every page out of the free lists: the engine's `pages_allocated`, else requests' pages
    plus the prefix cache's."""
    if "pages_allocated" in stats:
        return int(stats["pages_allocated"])
    return requests_pages(stats) + int(stats.get("pages_cached", 0))
