"""The one AsyncLLM every request shares, and the server's side of its life: it loads in a
thread once the server listens (so /health can say 503 "loading" instead of a closed port);
admission lets at most `parallel + max_queue` sequences in at once and answers 429 with
Retry-After beyond that, so a burst never grows an unbounded queue; ChunkStream merges one
request's engine streams (one per prompt of a batched /v1/completions), numbers their choices
and records latency metrics, and closing it aborts those sequences and frees their pages.
"""
import asyncio
import logging
import math
import threading
import time
from collections import deque
from typing import Any, AsyncIterator, Callable, List, Optional, Tuple

from . import lora_api
from .config import ServerConfig
from .errors import invalid, not_ready, queue_full
from .metrics import ServerMetrics

log = logging.getLogger("edgellm.server")


# AsyncLLM's arguments from ServerConfig's fields: argument -> field (the same name when None)
ENGINE_ARGS = {"n_ctx": "ctx_size", "n_threads": "threads", "kv_memory": None, "max_seqs": "parallel",
               "max_batch_tokens": None, "chat_template": None, "n_gpu_layers": None,
               "speculative": None, "draft_model": None, "num_speculative_tokens": None,
               "context_shift": None, "cache_dir": None, "cache_max_bytes": None, "mmproj": None,
               "media_path": None, "allow_remote_media": None}


def engine_args(config: ServerConfig, *names: str) -> dict:
    """AsyncLLM's arguments `names` (default: all of ENGINE_ARGS) as `config` sets them."""
    return {a: getattr(config, ENGINE_ARGS[a] or a) for a in names or ENGINE_ARGS}


def default_loader(config: ServerConfig):
    """Build the engine the way `edgellm serve` asks for it."""
    from edgellm.async_llm import AsyncLLM  # heavy; imported only when a model is really served

    llm = AsyncLLM(config.model_path or config.model, lora=lora_api.loader_arg(config),
                   **engine_args(config))
    if getattr(config, "reasoning", "auto") == "off":  # llama-server's --reasoning off
        llm.llm.chat_template_defaults["enable_thinking"] = False
    if getattr(config, "thermal_backoff", False):  # ends by itself when the engine closes
        from edgellm.thermal import SysfsThermal, ThermalBackoff
        llm.thermal = ThermalBackoff(llm, SysfsThermal(config.thermal_root),
                                     interval=config.thermal_interval).start()
    return llm


def default_params_factory(**kwargs):
    from edgellm.sampling_params import SamplingParams

    return SamplingParams(**kwargs)


class Admission:
    """One request's claim on `n` of the server's sequence slots; release() exactly once."""

    def __init__(self, host: "EngineHost", n: int):
        self._host = host
        self.n = n
        self._released = False
        self.started = time.monotonic()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._host._release(self)


class EngineHost:
    def __init__(self, config: ServerConfig, loader: Callable[[ServerConfig], Any] = default_loader,
                 params_factory: Callable[..., Any] = default_params_factory,
                 metrics: Optional[ServerMetrics] = None,
                 on_load_failure: Optional[Callable[[BaseException], None]] = None):
        self.config = config
        self.loader = loader
        self.params_factory = params_factory
        self.metrics = metrics or ServerMetrics()
        self.on_load_failure = on_load_failure
        self.state = "loading"          # loading -> ready | failed; closed at shutdown
        self.error: Optional[BaseException] = None
        self.llm = None                 # the AsyncLLM
        self.loaded_at: Optional[float] = None
        self._lock = threading.Lock()
        self._admitted = 0
        self._durations: deque = deque(maxlen=32)  # recent request durations, for Retry-After

    # --- loading -----------------------------------------------------------------------------
    async def load(self) -> None:
        """Run the loader in a thread; the event loop keeps serving /health meanwhile."""
        t0 = time.monotonic()
        try:
            llm = await asyncio.get_running_loop().run_in_executor(None, self.loader, self.config)
        except BaseException as e:  # noqa: BLE001 - any failure is reported, then the server exits
            self.state, self.error = "failed", e
            log.error("loading %s failed: %s", self.config.model, e)
            if self.on_load_failure is not None:
                self.on_load_failure(e)
            return
        if self.state == "closed":  # shut down while loading
            close_engine(llm)
            return
        self.llm = llm
        self.loaded_at = time.time()
        self.state = "ready"
        log.info("model %s ready in %.2f s", self.config.model_id, time.monotonic() - t0)

    def require_ready(self):
        if self.state != "ready":
            raise not_ready(self.state)
        return self.llm

    n_ctx = property(lambda self: self.engine_attr("n_ctx"))
    n_vocab = property(lambda self: self.engine_attr("n_vocab"))

    def engine_attr(self, name: str):
        """The engine's `name` (AsyncLLM's own, else its LLM's)."""
        return getattr(self.llm, name, None) or getattr(getattr(self.llm, "llm", None), name, None)

    def stats(self) -> Optional[dict]:
        if self.state != "ready":
            return None
        try:
            return dict(self.llm.stats())
        except Exception as e:  # noqa: BLE001 - a scrape must not fail because stats did
            log.warning("engine stats failed: %s", e)
            return None

    # --- admission -----------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.config.parallel + self.config.max_queue

    def admit(self, n: int) -> Admission:
        with self._lock:
            if n > self.capacity:
                raise invalid(f"the request asks for {n} sequences but the server admits at most "
                              f"{self.capacity} at once (--parallel {self.config.parallel} + "
                              f"--max-queue {self.config.max_queue})", "n", "too_many_sequences")
            if self._admitted + n > self.capacity:
                raise queue_full(self.capacity, self._retry_after())
            self._admitted += n
            self.metrics.active_requests += 1
        return Admission(self, n)

    def _release(self, a: Admission) -> None:
        with self._lock:
            self._admitted -= a.n
            self.metrics.active_requests -= 1
            self._durations.append(time.monotonic() - a.started)

    def _retry_after(self) -> int:
        """Seconds until a slot is likely free: a typical request's duration, 1..60 s."""
        if not self._durations:
            return 1
        typical = sorted(self._durations)[len(self._durations) // 2]
        return int(min(60, max(1, math.ceil(typical))))

    # --- requests --------------------------------------------------------------------------------
    def sampling_params(self, kwargs: dict):
        kwargs = dict(kwargs)
        self.apply_server_defaults(kwargs)
        if kwargs.get("repeat_last_n") == -1 and self.n_ctx:
            kwargs["repeat_last_n"] = self.n_ctx  # llama-server: -1 = the whole context
        lora_api.request_adapter(self.llm, kwargs)  # the adapter `model` named; names checked (404)
        try:
            return self.params_factory(**kwargs)
        except (ValueError, TypeError) as e:
            raise invalid(f"invalid sampling parameters: {e}", None, "invalid_value") from None

    def apply_server_defaults(self, kwargs: dict) -> None:
        """llama-server's --n-predict, --seed and --temp: defaults for requests that give
        none (a request's own max_tokens / n_predict wins, as in llama-server)."""
        if self.config.n_predict and kwargs.get("max_tokens") is None:
            kwargs["max_tokens"] = self.config.n_predict
        if self.config.seed is not None and kwargs.get("seed") is None:
            kwargs["seed"] = self.config.seed
        if self.config.temperature is not None and "temperature" not in kwargs:
            kwargs["temperature"] = self.config.temperature

    def close(self) -> None:
        llm, self.llm = self.llm, None
        self.state = "closed"
        if llm is not None:
            close_engine(llm)


def close_engine(llm) -> None:
    try:
        llm.close()
    except Exception as e:  # noqa: BLE001
        log.warning("closing the engine failed: %s", e)


class ChunkStream:
    """The chunks of one request, from one engine stream per prompt, as (choice index, chunk).

    Choice numbering follows OpenAI: prompt p's completion j is choice p * n + j. Metrics:
    time to first token is measured from `t_arrival` (the request's arrival) to the first
    chunk with tokens; inter-token latency between later chunks, per token.
    """

    def __init__(self, streams: List[AsyncIterator], n: int, metrics: ServerMetrics,
                 t_arrival: float):
        self._streams = streams
        self._n = n
        self._metrics = metrics
        self._t_arrival = t_arrival
        self._last_token_at: dict = {}   # choice -> monotonic time of its last token
        self._queue: Optional[asyncio.Queue] = None
        self._tasks: List[asyncio.Task] = []
        self._live = len(streams)
        self._first_seen = False
        self.closed = False

    async def next(self) -> Optional[Tuple[int, Any]]:
        """The next (choice index, chunk), or None when every completion has finished."""
        if len(self._streams) == 1:
            try:
                chunk = await self._streams[0].__anext__()
            except StopAsyncIteration:
                return None
            return self._seen(0, chunk)
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._tasks = [asyncio.ensure_future(self._pump(i, s))
                           for i, s in enumerate(self._streams)]
        while self._live:
            kind, i, item = await self._queue.get()
            if kind == "end":
                self._live -= 1
            elif kind == "error":
                raise item
            else:
                return self._seen(i, item)
        return None

    async def _pump(self, i: int, stream: AsyncIterator) -> None:
        try:
            async for chunk in stream:
                await self._queue.put(("chunk", i, chunk))
            await self._queue.put(("end", i, None))
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # noqa: BLE001 - handed to the reader
            await self._queue.put(("error", i, e))

    def _seen(self, prompt_i: int, chunk) -> Tuple[int, Any]:
        index = prompt_i * self._n + getattr(chunk, "index", 0)
        ntok = len(chunk.token_ids or ())
        now = time.monotonic()
        if ntok:
            if not self._first_seen:
                self._first_seen = True
                self._metrics.first_token(now - self._t_arrival)
            last = self._last_token_at.get(index)
            if last is not None:
                self._metrics.inter_token(now - last, ntok)
            self._last_token_at[index] = now
            self._metrics.tokens(generated=ntok)
        if chunk.usage is not None:
            self._metrics.tokens(prompt=chunk.usage.prompt_tokens)
            if chunk.timings:
                self._metrics.timed(chunk.timings, chunk.usage.prompt_tokens
                                    + chunk.usage.completion_tokens)
        if chunk.finish_reason is not None:
            self._metrics.finish(chunk.finish_reason)
        return index, chunk

    async def aclose(self) -> None:
        """Abort whatever is still running in the engine and free its pages."""
        if self.closed:
            return
        self.closed = True
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in self._streams:
            close = getattr(s, "aclose", None)
            if close is not None:
                try:
                    await close()
                except Exception as e:  # noqa: BLE001 - closing is best effort, keep closing
                    log.warning("closing an engine stream failed: %s", e)
