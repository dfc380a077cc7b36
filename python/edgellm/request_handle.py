"""`RequestHandle`: one request in flight, for loops that must never block (GUI main loops).

    h = llm.submit_chat([{"role": "user", "content": "Hi"}], SamplingParams(max_tokens=200))
    def tick():                       # e.g. every 30 ms from Tk's after()
        text.insert("end", h.poll())  # the new text since the last poll; never waits
        if not h.done:
            root.after(30, tick)
    stop_button["command"] = h.cancel  # from any thread

`LLM.submit` / `submit_chat` queue the request and return at once. The engine thread pushes
its events into the request's `_core.OutputChannel`; `poll()` takes whatever is there without
waiting (a non-blocking `try_pop`), so no Python thread runs per request or per token.
`on_text(piece)` and `on_done(handle)` are called from `poll()`, on the polling thread, which is
where GUI toolkits want them. `cancel()` aborts the engine request (its KV pages are freed at the
engine's next step); the handle then finishes with finish_reason "cancelled" and the text made
until then. `result()` waits (GIL released) for the end and returns what `generate` / `chat`
would: a Completion, or a ChatCompletion for `submit_chat`.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional

from . import _core
from ._chat import finish_chat, parse_chunk
from ._engine_client import event_error
from ._core import InvalidRequestError
from .outputs import Completion, CompletionChunk, Usage
from .sampling_params import SamplingParams

__all__ = ["RequestHandle"]

_WAIT_S = 0.1  # result()'s wait wakes this often (KeyboardInterrupt, the timeout)


class RequestHandle:
    """A submitted request: poll() / poll_chunks() without blocking, done, result(), cancel()."""

    def __init__(self, client, ids: List[int], params: SamplingParams, *, new_parser=None,
                 on_text: Optional[Callable[[str], None]] = None,
                 on_done: Optional[Callable[["RequestHandle"], None]] = None):
        if params.n != 1:
            raise InvalidRequestError(f"a RequestHandle carries one completion (n=1), got n={params.n}; "
                                      "use generate or stream_chunks for n > 1")
        for name, cb in (("on_text", on_text), ("on_done", on_done)):
            if cb is not None and not callable(cb):
                raise InvalidRequestError(f"{name} must be callable, got {type(cb).__name__}")
        self._client = client
        self._params = params
        self._new_parser = new_parser
        self._parsers: dict = {}
        self._want_lp = params.logprobs is not None
        self._want_prompt = params.prompt_logprobs is not None
        self.on_text = on_text
        self.on_done = on_done
        self._take_lock = threading.Lock()   # one consumer of the channel at a time
        self._state_lock = threading.Lock()  # the chunks taken so far
        self._chunks: List[CompletionChunk] = []
        self._cursor = 0           # chunks already handed out by poll()
        self._final: Optional[CompletionChunk] = None
        self._error: Optional[BaseException] = None
        self._error_raised = False
        self._done_notified = False
        self._cancelled = False
        self._channel = _core.OutputChannel()
        core = params.to_core(client.n_vocab)
        self._rid = client.submit(ids, core, self._channel, True, params.lora)

    # ---- taking events (any thread; never more than one at a time) ----
    def _take(self, ev) -> None:
        if ev.finished and ev.finish_reason == "error":
            err = event_error(ev.error)
            with self._state_lock:
                self._error = err
                self._final = CompletionChunk(text="", token_ids=[], finish_reason="error")
            return
        ch = self._client.chunk(ev, self._want_lp, self._want_prompt)
        if self._new_parser is not None:
            parse_chunk(ch, self._parsers, self._new_parser)
        with self._state_lock:
            self._chunks.append(ch)
            if ch.finish_reason is not None:
                self._final = ch

    def _drain(self, wait_s: float = 0.0) -> None:
        """Take every event already in the channel; with wait_s > 0 first wait that long for one.
        Returns at once if another thread is taking events."""
        if self._final is not None or not self._take_lock.acquire(blocking=wait_s > 0):
            return
        try:
            if wait_s > 0 and self._final is None:
                ev = self._channel.pop(wait_s)  # GIL released while it waits
                if ev is not None:
                    self._take(ev)
            while self._final is None:
                ev = self._channel.try_pop()
                if ev is None:
                    break
                self._take(ev)
        finally:
            self._take_lock.release()

    # ---- the polling side ----
    def poll_chunks(self) -> List[CompletionChunk]:
        """The CompletionChunks that arrived since the last poll (possibly none); never waits.
        submit_chat's chunks carry the parsed `.delta`. Calls on_text / on_done. After the last
        chunk, an error of the request (EdgeLLMError) is raised once."""
        self._drain()
        with self._state_lock:
            new = self._chunks[self._cursor:]
            self._cursor = len(self._chunks)
            finished = self._final is not None
            error = None
            if self._error is not None and not self._error_raised:
                error, self._error_raised = self._error, True
        if self.on_text is not None:
            for ch in new:
                piece = self._piece(ch)
                if piece:
                    self.on_text(piece)
        if finished and not self._done_notified:
            self._done_notified = True
            if self.on_done is not None:
                self.on_done(self)
        if error is not None:
            raise error
        return new

    def poll(self) -> str:
        """The text that arrived since the last poll ("" when none); never waits. For
        submit_chat it is the answer's content (reasoning and tool-call markup left out)."""
        return "".join(self._piece(ch) for ch in self.poll_chunks())

    def _piece(self, ch: CompletionChunk) -> str:
        if self._new_parser is not None:
            return (ch.delta.content or "") if ch.delta is not None else ""
        return ch.text

    # ---- state ----
    @property
    def done(self) -> bool:
        """The last event has arrived (taken by a poll or a result)."""
        self._drain()
        return self._final is not None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def request_id(self) -> int:
        return self._rid

    @property
    def text(self) -> str:
        """All the text so far (content for submit_chat), polled or not."""
        self._drain()
        with self._state_lock:
            chunks = list(self._chunks)
        return "".join(self._piece(ch) for ch in chunks)

    @property
    def finish_reason(self) -> Optional[str]:
        """None while running, then "stop" | "length" | "cancelled" | "error" (| "tool_calls")."""
        self._drain()
        return self._final.finish_reason if self._final is not None else None

    @property
    def usage(self) -> Optional[Usage]:
        return self._final.usage if self._final is not None else None

    @property
    def timings(self) -> Optional[dict]:
        """The final timings (prompt_per_second, predicted_per_second, ...) once done."""
        return self._final.timings if self._final is not None else None

    @property
    def completion_tokens(self) -> int:
        """Tokens generated so far."""
        self._drain()
        with self._state_lock:
            return sum(len(ch.token_ids) for ch in self._chunks)

    # ---- control ----
    def cancel(self) -> None:
        """Abort the request (any thread, idempotent; nothing happens once it has finished).
        The engine ends it at its next step with finish_reason "cancelled" and frees its slot."""
        self._cancelled = True
        if not self._channel.all_sent:
            self._client.abort(self._rid)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Block (GIL released) until the last event arrives or timeout seconds pass: done."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._final is None:
            left = _WAIT_S if deadline is None else min(_WAIT_S, deadline - time.monotonic())
            if left <= 0:
                break
            self._drain(left)
        return self._final is not None

    def result(self, timeout: Optional[float] = None):
        """Wait for the end and return the Completion (submit) or ChatCompletion (submit_chat),
        as generate / chat would; a cancelled request's has finish_reason "cancelled" and the
        text made until then. TimeoutError if timeout seconds pass first; the request's
        EdgeLLMError if it failed."""
        if not self.wait(timeout):
            raise TimeoutError(f"request {self._rid} still running after {timeout} s")
        if self._error is not None:
            raise self._error
        with self._state_lock:
            chunks = list(self._chunks)
        final = self._final
        c = Completion(text="".join(ch.text for ch in chunks),
                       token_ids=[t for ch in chunks for t in ch.token_ids],
                       finish_reason=final.finish_reason, usage=final.usage,
                       stop_reason=final.stop_reason, timings=final.timings or {})
        if self._want_lp:
            c.logprobs = [lp for ch in chunks for lp in (ch.logprobs or [])]
        if self._want_prompt:
            c.prompt_logprobs = next((ch.prompt_logprobs for ch in chunks
                                      if ch.prompt_logprobs is not None), None)
        if self._new_parser is None:
            return c
        if c.finish_reason == "tool_calls":  # parse_chunk renamed it; finish_chat does again
            c.finish_reason = "stop"
        return finish_chat(c, self._new_parser())

    def __del__(self):
        try:
            ch = self._channel
            if not ch.all_sent:
                self._client.abort(self._rid)
        except Exception:
            pass

    def __repr__(self) -> str:
        state = self._final.finish_reason if self._final is not None else "running"
        return f"<RequestHandle {self._rid} {state}>"
