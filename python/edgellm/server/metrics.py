"""Prometheus text exposition (format 0.0.4) for GET /metrics, without a client library.

Two sources meet here. The engine's own counters (LLM.stats(): running and waiting sequences,
KV pages, prefix-cache hits, token totals, throughput) are read at scrape time, because only
the engine knows them exactly, cancelled work included. What only the server sees — latency as
the client experiences it (time to first token, time between tokens) and requests by endpoint
and status — is recorded here as requests pass.
"""
import bisect
import threading
from typing import Dict, Iterable, List, Optional, Tuple

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)


def _fmt(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    if float(v).is_integer():
        return str(int(v))
    return repr(float(v))


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
        out, cumulative = [], 0
        for bound, c in zip(self.bounds + (float("inf"),), self.counts):
            cumulative += c
            out.append(f'{name}_bucket{{le="{_fmt(bound)}"}} {cumulative}')
        out.append(f"{name}_sum {_fmt(self.sum)}")
        out.append(f"{name}_count {self.count}")
        return out


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

        def metric(name: str, kind: str, help_: str, samples: List[Tuple[str, float]]):
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                out.append(f"{name}{labels} {_fmt(value)}")

        with self._lock:
            metric("edgellm_model_ready", "gauge", "1 once the model is loaded and serving",
                   [(_labels([("model", m)]), 1 if r else 0)
                    for m, r in (models if models is not None else [(model_id, ready)])])
            metric("edgellm_requests_running", "gauge", "Sequences the engine is running now",
                   [("", e.get("running", 0))])
            metric("edgellm_requests_waiting", "gauge",
                   "Sequences admitted and waiting in the engine queue",
                   [("", e.get("waiting", 0))])
            metric("edgellm_http_requests_active", "gauge",
                   "Generation requests admitted by the server and not yet answered in full",
                   [("", self.active_requests)])
            metric("edgellm_prompt_tokens_total", "counter", "Prompt tokens processed",
                   [("", e.get("prompt_tokens_total", self.prompt_tokens))])
            metric("edgellm_generation_tokens_total", "counter", "Tokens generated",
                   [("", e.get("generated_tokens_total", self.generation_tokens))])
            metric("edgellm_kv_pages_used", "gauge",
                   "KV pages out of the free lists (held by requests or kept by the prefix cache)",
                   [("", used_pages(e))])
            metric("edgellm_kv_pages_total", "gauge",
                   "The most KV pages out of the free lists at once (the pools share one byte budget)",
                   [("", e.get("pages_total", 0))])
            if "kv_bytes_total" in e:
                metric("edgellm_kv_bytes_used", "gauge",
                       "KV bytes out of the free lists, both layer groups (requests and prefix cache)",
                       [("", e.get("kv_bytes_used", 0))])
                metric("edgellm_kv_bytes_total", "gauge", "The KV byte budget (kv_memory)",
                       [("", e["kv_bytes_total"])])
            metric("edgellm_kv_pages_in_use_requests", "gauge",
                   "KV pages held by requests (excluding pages only the prefix cache keeps); "
                   "0 when idle",
                   [("", requests_pages(e))])
            metric("edgellm_kv_pages_cached", "gauge",
                   "KV pages only the prefix cache keeps (reclaimable)",
                   [("", e.get("pages_cached", 0))])
            if "preemptions" in e:
                metric("edgellm_preemptions_total", "counter",
                       "Sequences preempted (pages reclaimed, recomputed later) for lack of KV pages",
                       [("", e["preemptions"])])
            if "context_shifts" in e:
                metric("edgellm_context_shifts_total", "counter",
                       "Context shifts (--context-shift): a full context kept its first n_keep "
                       "tokens and the newer half of the rest and went on generating",
                       [("", e["context_shifts"])])
            if e.get("cache_disk"):  # --cache-dir
                for key, name, help_ in (
                        ("cache_disk_pages_read", "edgellm_cache_disk_pages_read_total",
                         "Persistent prefix cache: KV pages read back from --cache-dir"),
                        ("cache_disk_pages_written", "edgellm_cache_disk_pages_written_total",
                         "Persistent prefix cache: KV pages written to --cache-dir"),
                        ("cache_disk_corrupt", "edgellm_cache_disk_corrupt_total",
                         "Persistent prefix cache: files that failed their checks (deleted, "
                         "never loaded)")):
                    metric(name, "counter", help_, [("", e.get(key, 0))])
                metric("edgellm_cache_disk_bytes", "gauge",
                       "Persistent prefix cache: bytes of this model's files in --cache-dir",
                       [("", e.get("cache_disk_bytes", 0))])
            queries = e.get("prefix_cache_queries", 0)
            metric("edgellm_prefix_cache_hit_ratio", "gauge",
                   "Prefix cache hits / lookups since start",
                   [("", (e.get("prefix_cache_hits", 0) / queries) if queries else 0.0)])
            if "spec_drafted" in e:  # speculative decoding
                drafted = e.get("spec_drafted", 0)
                metric("edgellm_spec_draft_tokens_total", "counter",
                       "Speculative decoding: tokens drafted (n-gram or draft model) and verified",
                       [("", drafted)])
                metric("edgellm_spec_accepted_tokens_total", "counter",
                       "Speculative decoding: drafted tokens the model accepted",
                       [("", e.get("spec_accepted", 0))])
                metric("edgellm_spec_verify_steps_total", "counter",
                       "Speculative decoding: sequence-steps that verified a draft",
                       [("", e.get("spec_steps", 0))])
                metric("edgellm_spec_acceptance_ratio", "gauge",
                       "Speculative decoding: accepted / drafted tokens since start",
                       [("", (e.get("spec_accepted", 0) / drafted) if drafted else 0.0)])
                metric("edgellm_spec_draft_seconds_total", "counter",
                       "Speculative decoding: time in draft-model forward passes",
                       [("", e.get("spec_draft_seconds", 0.0))])
            metric("edgellm_tokens_per_second", "gauge",
                   "Generated tokens per second over the engine's recent window",
                   [("", e.get("tokens_per_second", 0.0))])
            metric("edgellm_requests_total", "counter",
                   "HTTP requests answered, by endpoint and status code",
                   [(_labels([("endpoint", ep), ("status", st)]), n)
                    for (ep, st), n in sorted(self.requests.items())])
            metric("edgellm_requests_finished_total", "counter",
                   "Completions finished, by finish reason",
                   [(_labels([("finish_reason", r)]), n) for r, n in sorted(self.finished.items())])
            out.append("# HELP edgellm_time_to_first_token_seconds Request arrival to first "
                       "generated token, as the client sees it")
            out.append("# TYPE edgellm_time_to_first_token_seconds histogram")
            out.extend(self.ttft.lines("edgellm_time_to_first_token_seconds"))
            out.append("# HELP edgellm_inter_token_latency_seconds Time between generated tokens "
                       "of one completion")
            out.append("# TYPE edgellm_inter_token_latency_seconds histogram")
            out.extend(self.itl.lines("edgellm_inter_token_latency_seconds"))
        return "\n".join(out) + "\n"


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
