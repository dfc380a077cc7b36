"""The request layer under `LLM` and `AsyncLLM`: submit to the C++ engine, receive its events.

`EngineClient` wraps one `_core.Engine`: prompt ids, submit / abort, the events of a request
(blocking: each wait releases the GIL and wakes every POLL_S so KeyboardInterrupt gets through;
asyncio: a `WakePipe` wakes the loop), and their conversion into `edgellm.outputs` types.
Leaving an event stream early (break, close, exception, a cancelled task) aborts the request in
the engine; `RequestControl.cancel` does it from any other thread (edgellm.stream.Stream,
edgellm.request_handle.RequestHandle). edgellm.embeddings submits through the same client and pipe.
"""
from __future__ import annotations

import asyncio
import os
import threading
from typing import AsyncIterator, Dict, Iterator, List, Optional

from . import _core
from .lora import LoraRegistry
from ._core import InvalidRequestError
from .outputs import Completion, CompletionChunk, TokenLogprob, TopLogprob, Usage
from .sampling_params import SamplingParams
from .validation import token_ids

__all__ = ["POLL_S", "WakePipe", "EngineClient", "RequestControl", "is_batch", "open_engine",
           "engine_config"]

POLL_S = 0.1  # a blocking wait wakes this often to let KeyboardInterrupt through


def is_batch(prompt) -> bool:
    """A list of prompts (strings or id lists), as opposed to one prompt given as ids."""
    return isinstance(prompt, (list, tuple)) and len(prompt) > 0 and \
        all(isinstance(p, (str, list, tuple)) for p in prompt)


_DEFAULT_CONTEXT = 4096  # n_ctx None: min(trained, this), as the engine


def open_engine(model_path, a: Dict, progress=None):
    """LLM(...)'s engine from its checked arguments (validation.check_engine_args; a["n_ctx"] is
    set when the memory plan picks it): (model path, memory plan, _core.Engine, cache dir path).
    progress: the load's callback (fraction, stage), None for none."""
    from .models import resolve

    model_path = str(resolve(model_path))
    # The draft is only loaded where it is used ("draft", "auto"); with "off" / "ngram" it
    # is accepted and ignored.
    draft_path = ""
    if a["draft_model"] is not None and a["speculative"] in ("draft", "auto"):
        draft_path = str(resolve(a["draft_model"]))
    # The memory plan before anything is loaded (edgellm.memory_plan): MemoryPlanError when
    # it cannot fit; with n_ctx unset, the largest context that fits.
    from .memory_plan import check as _check_memory
    plan = _check_memory(model_path, a, draft_path)
    if a["n_ctx"] == 0 and plan.n_ctx < min(_DEFAULT_CONTEXT, plan.n_ctx_train or _DEFAULT_CONTEXT):
        import warnings
        warnings.warn(f"n_ctx {plan.n_ctx} chosen to fit the memory available "
                      f"({plan.available} bytes, {plan.machine.source})", stacklevel=3)
        a["n_ctx"] = plan.n_ctx
    cache_path, cache_key = "", ""
    if a["cache_dir"]:
        from .cache_dir import prepare
        try:
            cache_path, cache_key = prepare(a["cache_dir"], model_path)
        except OSError as e:
            raise InvalidRequestError(f"cache_dir {a['cache_dir']!r}: {e.strerror or e}") from None
    config = engine_config({**a, "draft_model": draft_path, "cache_dir": cache_path,
                            "cache_key": cache_key})
    engine = _core.Engine(model_path, config, progress=progress)
    return model_path, plan, engine, cache_path


def engine_config(a: Dict) -> "_core.EngineConfig":
    """The engine's load options (one _core.EngineConfig) from check_engine_args' dict: each
    checked argument is the attribute of the same name (an unknown one is an error)."""
    config = _core.EngineConfig()
    for name, value in a.items():
        if not hasattr(config, name):
            raise TypeError(f"EngineConfig has no option {name!r}")
        setattr(config, name, value)
    return config


def _timings(t: Dict[str, float]) -> Dict[str, float]:
    out = dict(t)
    out["prompt_per_token_ms"] = t["prompt_ms"] / t["prompt_n"] if t.get("prompt_n") else 0.0
    out["predicted_per_token_ms"] = (t["predicted_ms"] / (t["predicted_n"] - 1)
                                     if t.get("predicted_n", 0) > 1 else 0.0)
    return out


def _usage(ev) -> Usage:
    return Usage(ev.prompt_tokens, ev.completion_tokens,
                 ev.prompt_tokens + ev.completion_tokens, ev.cached_tokens)


def event_error(message: str, default: str = "request failed in the engine") -> Exception:
    """The exception a request's error event stands for: ModelFileChangedError when the model
    file changed under the engine (its message says so: _core.MODEL_FILE_CHANGED), else
    EdgeLLMError."""
    if message and _core.MODEL_FILE_CHANGED in message:
        return _core.ModelFileChangedError(message)
    return _core.EdgeLLMError(message or default)


def raise_if_error(ev) -> None:
    if ev.finished and ev.finish_reason == "error":
        raise event_error(ev.error)


class WakePipe:
    """One wake-up pipe for the OutputChannels of a call (each writes a byte to it per event),
    so an asyncio loop can wait on them: two file descriptors however many channels. It is
    closed only once the engine has sent every channel's last event, so no write can hit a
    reused fd."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._ready = asyncio.Event()
        self._closing = self._closed = False
        self.channels: List = []
        loop.add_reader(self._rfd, self._on_readable)

    def channel(self):
        ch = _core.OutputChannel(self._wfd)
        self.channels.append(ch)
        return ch

    def _on_readable(self) -> None:
        try:
            while os.read(self._rfd, 4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._ready.set()
        if self._closing:
            self._close_if_done()

    async def wait(self) -> None:
        await self._ready.wait()
        self._ready.clear()

    async def next_event(self, ch):
        """The next event of channel `ch` (one of this pipe's)."""
        while True:
            ev = ch.try_pop()
            if ev is not None:
                return ev
            await self.wait()

    def _close_if_done(self) -> None:
        if not self._closed and all(ch.all_sent for ch in self.channels):
            self._closed = True
            self._loop.remove_reader(self._rfd)
            os.close(self._rfd)
            os.close(self._wfd)

    def close(self) -> None:
        """Release the pipe now if the engine is done with it, else after its last event."""
        self._closing = True
        self._close_if_done()


class RequestControl:
    """Cancels one request from any thread: before it is submitted (it is aborted as soon as it
    is) or while it runs (the engine ends it "cancelled" at its next step and frees its KV
    pages; its consumer then gets that last event as usual)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._abort = None
        self.cancelled = False

    def attach(self, abort) -> None:
        """The submitted request's abort function (the consumer's thread, right after submit)."""
        with self._lock:
            self._abort = abort
            pending = self.cancelled
        if pending:
            abort()

    def detach(self) -> None:
        """The request has ended: later cancels do nothing."""
        with self._lock:
            self._abort = None

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            abort = self._abort
        if abort is not None:
            abort()


class _Live:
    """One submitted request as its consumer follows it (the sync and the async event loops):
    its unfinished sequences, counted off as their last events arrive; end() detaches its
    RequestControl and aborts the request when sequences are left (the consumer left early)."""

    def __init__(self, client: "EngineClient", n: int, control: Optional[RequestControl]):
        self.client = client
        self.remaining = n
        self.control = control
        self.rid: Optional[int] = None

    def submitted(self, rid: int) -> None:
        self.rid = rid
        if self.control is not None:
            self.control.attach(lambda: self.client.abort(rid))

    def take(self, ev):
        """`ev` counted; the request's error raised."""
        if ev.finished:
            self.remaining -= 1
        raise_if_error(ev)
        return ev

    def end(self) -> None:
        if self.control is not None:
            self.control.detach()
        if self.remaining and self.rid is not None:
            self.client.abort(self.rid)


class EngineClient:
    """Requests to one engine and their results (see the module docstring)."""

    def __init__(self, engine):
        self.engine = engine
        self.tok = engine.tokenizer
        self.n_vocab: int = engine.n_vocab
        self.loras = LoraRegistry(engine)  # the LoRA adapters by name (edgellm.lora)

    # ---- prompts and submission ----
    def prompt_ids(self, prompt) -> List[int]:
        """A text prompt tokenized (BOS added, special-token texts left as text), or ids checked."""
        if isinstance(prompt, str):
            return list(self.tok.encode(prompt, True, False))
        if getattr(prompt, "images", None):  # edgellm.vision.PromptIds, made by the chat renderer
            return prompt
        return token_ids(prompt, self.n_vocab, "prompt")

    def submit(self, ids: List[int], core: "_core.SamplingParams", channel, stream: bool, lora=None) -> int:
        """`lora`: the request's SamplingParams.lora (names resolved here: LoraNotFoundError).
        Image blocks (edgellm.vision.PromptIds) go with their ids."""
        return self.engine.submit(ids, core, channel, stream, list(getattr(ids, "images", ())),
                                  self.loras.resolve(lora))

    def abort(self, request_id: int) -> None:
        self.engine.abort(request_id)

    # ---- events ----
    def events(self, prompt, params: Optional[SamplingParams], stream: bool,
               control: Optional[RequestControl] = None) -> Iterator:
        """Events of one request (blocking); leaving early aborts it, and so does
        control.cancel() from another thread (the stream then ends with its "cancelled" event)."""
        params = params or SamplingParams()
        core = params.to_core(self.n_vocab)
        ids = self.prompt_ids(prompt)
        channel = _core.OutputChannel()
        live = _Live(self, core.n, control)
        live.submitted(self.submit(ids, core, channel, stream, params.lora))
        try:
            while live.remaining:
                ev = channel.pop(POLL_S)
                if ev is None:
                    continue
                yield live.take(ev)
        finally:
            live.end()

    async def async_events(self, ids: List[int], params: SamplingParams, stream: bool,
                           control: Optional[RequestControl] = None):
        """Events of one request on the running asyncio loop; leaving early aborts it, and so
        does control.cancel() from any thread."""
        core = params.to_core(self.n_vocab)
        pipe = WakePipe(asyncio.get_running_loop())
        channel = pipe.channel()
        live = _Live(self, core.n, control)
        try:
            live.submitted(self.submit(ids, core, channel, stream, params.lora))
            while live.remaining:
                yield live.take(await pipe.next_event(channel))
        finally:
            live.end()
            pipe.close()

    # ---- events -> results ----
    def _piece(self, tid: int):
        b = self.tok.token_to_piece(tid, True)
        return b.decode("utf-8", errors="replace"), list(b)

    def _token_logprob(self, tid: int, lp: float, top) -> TokenLogprob:
        text, raw = self._piece(tid)
        tops = []
        for t, l in top:
            tt, tb = self._piece(t)
            tops.append(TopLogprob(t, tt, l, tb))
        return TokenLogprob(tid, text, lp, raw, tops)

    def _logprobs(self, ch, ev, want_logprobs: bool, want_prompt: bool) -> None:
        if want_logprobs:
            ch.logprobs = [self._token_logprob(*x) for x in ev.logprobs]
        if want_prompt and ev.prompt_logprobs is not None:
            ch.prompt_logprobs = [None] + [self._token_logprob(*x) for x in ev.prompt_logprobs]

    def completion(self, ev, want_logprobs: bool, want_prompt: bool) -> Completion:
        """The Completion of a non-streaming request's final event."""
        t = ev.timings
        c = Completion(text=ev.text, token_ids=list(ev.token_ids),
                       finish_reason=ev.finish_reason, usage=_usage(ev), index=ev.index,
                       stop_reason=ev.stop_reason, timings=_timings(t) if t is not None else {})
        self._logprobs(c, ev, want_logprobs, want_prompt)
        return c

    def chunk(self, ev, want_logprobs: bool, want_prompt: bool) -> CompletionChunk:
        ch = CompletionChunk(text=ev.text, token_ids=list(ev.token_ids), index=ev.index,
                             progress=ev.progress)
        self._logprobs(ch, ev, want_logprobs, want_prompt)
        if ev.finished:
            ch.finish_reason = ev.finish_reason
            ch.usage = _usage(ev)
            ch.timings = _timings(ev.timings)
            ch.stop_reason = ev.stop_reason
        return ch

    # ---- whole requests ----
    def collect(self, prompt, params: SamplingParams) -> List[Completion]:
        """The completions of one request, by index (prompt_logprobs shared by all n)."""
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        done = [self.completion(ev, want_lp, want_prompt)
                for ev in self.events(prompt, params, stream=False)]
        done.sort(key=lambda c: c.index)
        if want_prompt and done and done[0].prompt_logprobs is not None:
            for c in done[1:]:
                c.prompt_logprobs = done[0].prompt_logprobs
        return done

    async def async_collect(self, ids: List[int], params: SamplingParams):
        """One request's Completion (a list of n, by index, when params.n > 1), on the loop."""
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        done = []
        agen = self.async_events(ids, params, stream=False)
        try:
            async for ev in agen:
                done.append(self.completion(ev, want_lp, want_prompt))
        finally:
            await agen.aclose()
        done.sort(key=lambda c: c.index)
        return done if params.n > 1 else done[0]

    def generate_many(self, prompts: list, params: SamplingParams):
        """Every prompt submitted at once; one result (a list of n when n > 1) per prompt."""
        core = params.to_core(self.n_vocab)
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        channels, ids = [], []
        try:
            for p in prompts:
                ch = _core.OutputChannel()
                ids.append(self.submit(self.prompt_ids(p), core, ch, False, params.lora))
                channels.append(ch)
            results = []
            for ch in channels:
                got = []
                while len(got) < core.n:
                    ev = ch.pop(POLL_S)
                    if ev is None:
                        continue
                    raise_if_error(ev)
                    got.append(self.completion(ev, want_lp, want_prompt))
                got.sort(key=lambda c: c.index)
                results.append(got if params.n > 1 else got[0])
            return results
        except BaseException:
            for rid, ch in zip(ids, channels):
                if not ch.all_sent:
                    self.abort(rid)
            raise

    def stream_chunks(self, prompt, params: Optional[SamplingParams],
                      control: Optional[RequestControl] = None) -> Iterator[CompletionChunk]:
        params = params or SamplingParams()
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        for ev in self.events(prompt, params, stream=True, control=control):
            yield self.chunk(ev, want_lp, want_prompt)

    async def async_stream_chunks(self, ids: List[int], params: SamplingParams,
                                  control: Optional[RequestControl] = None) -> AsyncIterator[CompletionChunk]:
        want_lp = params.logprobs is not None
        want_prompt = params.prompt_logprobs is not None
        agen = self.async_events(ids, params, stream=True, control=control)
        try:
            async for ev in agen:
                yield self.chunk(ev, want_lp, want_prompt)
        finally:
            await agen.aclose()
