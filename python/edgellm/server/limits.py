"""Limits on what one client can make the server hold: the size of a request body, and the time
it may take to send its headers and its body (docs/SERVER.md "Limits").

- `BodyLimit` (pure ASGI middleware) reads the request body before the routes see it: a
  Content-Length over `--max-body-size` is answered 413 at once, a chunked body is counted as it
  arrives and cut at the limit, so an oversized body is never held in memory. The whole body
  must arrive within `--read-timeout` seconds of its headers, else 408. The routes then read the
  body from memory, and every later `receive()` (disconnect watching) goes to the connection.
- `http_protocol(read_timeout)` is uvicorn's HTTP protocol (h11, or httptools when installed)
  with a header timer: a connection must deliver a request's complete headers within
  `read_timeout` seconds of connecting (or of the first byte of its next request on a kept-alive
  connection), else it is closed. uvicorn itself never times out a header read, so a client
  sending one byte every few seconds would hold its socket forever.

413 and 408 answers carry `Connection: close`. Before answering 413 the rest of a declared body is
read and dropped (up to `DRAIN_MAX` bytes and the read deadline), so a client that writes the
whole body before reading the answer gets the 413 instead of a reset connection.
"""
import asyncio
import logging
import re
import time
from typing import Any, Callable, Optional

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError

log = logging.getLogger("edgellm.server")

DRAIN_MAX = 64 << 20  # bytes of an oversized body read and dropped before the 413 is sent


def _fmt_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def too_large(limit: int, size: Optional[int] = None) -> APIError:
    got = f" ({size} bytes)" if size is not None else ""
    return APIError(413, f"the request body{got} is larger than the server's limit of "
                         f"{_fmt_size(limit)} (edgellm serve --max-body-size)",
                    "invalid_request_error", None, "request_too_large",
                    headers={"Connection": "close"})


def read_timed_out(seconds: float) -> APIError:
    return APIError(408, f"the request body did not arrive within {seconds:g} s of its headers "
                         f"(edgellm serve --read-timeout)", "invalid_request_error", None,
                    "request_timeout", headers={"Connection": "close"})


# a JSON escape of a UTF-16 surrogate (\ud800-\udfff): only such a body can hold a lone one
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def check_unicode(raw: bytes, value: Any) -> None:
    """A parsed JSON body may hold strings no engine can take: JSON's \\ud800 escape gives a
    lone UTF-16 surrogate, which has no UTF-8 form (the engine's text is UTF-8; the binding
    would raise TypeError, a 500). 400 naming where it is, code `invalid_unicode`. Only a body
    whose bytes have a surrogate escape is walked (iteratively: any nesting json.loads took)."""
    if not _SURROGATE_ESCAPE.search(raw):
        return
    stack = [(value, "")]
    while stack:  # in the body's order, so the first bad string is the one named
        v, path = stack.pop()
        if isinstance(v, str):
            _check_text(v, path)
        elif isinstance(v, dict):
            for k in v:
                _check_text(k, path, key=True)
            stack.extend(reversed([(x, f"{path}.{k}" if path else k) for k, x in v.items()]))
        elif isinstance(v, list):
            stack.extend(reversed([(x, f"{path}[{i}]") for i, x in enumerate(v)]))


def _check_text(text: str, path: str, key: bool = False) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        where = (f"a key of '{path}'" if path else "a key") if key else \
            (f"'{path}'" if path else "the request body")
        raise APIError(400, f"{where} holds a lone UTF-16 surrogate (\\u{ord(text[e.start]):04x} "
                            f"at character {e.start}), which is not valid Unicode: pair it or "
                            "leave it out", "invalid_request_error", path or None,
                       "invalid_unicode") from None


class Guard:
    """A pure ASGI middleware that may refuse a request before the routes, in the envelope of
    the path's API (`render_error(scope, err)`; OpenAI's by default), counted in metrics."""

    def __init__(self, app: ASGIApp, render_error: Optional[Callable[[Scope, APIError], ASGIApp]]
                 = None, metrics=None):
        self.app = app
        self.render_error = render_error
        self.metrics = metrics

    async def refuse(self, scope: Scope, receive: Receive, send: Send, err: APIError,
                     endpoint: str = "http") -> None:
        if self.metrics is not None:
            self.metrics.request_done(endpoint, err.status)
        response = self.render_error(scope, err) if self.render_error else err.response()
        await response(scope, receive, send)


class BodyLimit(Guard):
    def __init__(self, app: ASGIApp, max_body_size: Optional[int], read_timeout: Optional[float],
                 **kw):
        super().__init__(app, **kw)
        self.limit = max_body_size or None      # None / 0 = unlimited
        self.timeout = read_timeout or None     # None / 0 = no deadline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = time.monotonic() + self.timeout if self.timeout else None
        declared = None
        expect_continue = False
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    pass  # the HTTP parser has refused it already
            elif name == b"expect" and value.lower() == b"100-continue":
                expect_continue = True

        async def next_message() -> Optional[Message]:
            """The next message from the client; None when the deadline has passed."""
            if deadline is None:
                return await receive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                return await asyncio.wait_for(receive(), remaining)
            except asyncio.TimeoutError:
                return None

        async def drain(more: bool, dropped: int) -> None:
            # the rest of an oversized body, dropped as it comes, so the client reads the 413
            while more and dropped < DRAIN_MAX:
                message = await next_message()
                if message is None or message["type"] != "http.request":
                    return
                dropped += len(message.get("body", b""))
                more = message.get("more_body", False)

        if self.limit and declared is not None and declared > self.limit:
            if not expect_continue:  # else the client waits for "100 Continue" and sends nothing
                await drain(True, 0)
            await self.refuse(scope, receive, send, too_large(self.limit, declared))
            return

        chunks = []
        size = 0
        more = True
        while more:
            message = await next_message()
            if message is None:
                log.info("request body too slow (--read-timeout %g s): answered 408", self.timeout)
                await self.refuse(scope, receive, send, read_timed_out(self.timeout))
                return
            if message["type"] == "http.disconnect":
                return  # the client left before sending its body: nobody to answer
            body = message.get("body", b"")
            more = message.get("more_body", False)
            size += len(body)
            if self.limit and size > self.limit:
                chunks.clear()
                await drain(more, size)
                await self.refuse(scope, receive, send, too_large(self.limit))
                return
            if body:
                chunks.append(body)

        whole = b"".join(chunks)
        chunks.clear()
        await self.app(scope, replay(whole, receive), send)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive() that gives the body read already, then goes to the connection."""
    sent = False

    async def receive_again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return receive_again


def http_protocol(read_timeout: Optional[float], base: Optional[type] = None) -> type:
    """uvicorn's HTTP protocol class (`uvicorn.Config(http=...)`) with the header timer.
    `base` defaults to h11 whatever else is installed: uvicorn's httptools protocol (picked
    when httptools is present, e.g. pulled in by `ray[serve]`) sends header names lowercased,
    h11 as the server wrote them (Access-Control-Allow-Origin, Process-Start-Time-Unix), which
    clients comparing names exactly — llama.cpp's server tests among them — rely on."""
    if base is None:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    if not read_timeout:
        return base
    return type("HeaderTimeout" + base.__name__, (_HeaderTimer, base),
                {"header_timeout": float(read_timeout)})


class _HeaderTimer:
    """Mixed into uvicorn's H11Protocol / HttpToolsProtocol. Both keep the request being served
    in `self.cycle` (a new object once a request's headers are parsed) and the socket in
    `self.transport`; nothing else of theirs is touched."""

    header_timeout: float = 30.0

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._edgellm_cycle = None
        self._edgellm_timer = None
        self._edgellm_arm()

    def data_received(self, data: bytes) -> None:
        cycle = getattr(self, "cycle", None)
        if self._edgellm_timer is None and (cycle is None or cycle.response_complete):
            self._edgellm_arm()  # the first bytes of the next request on a kept-alive socket
        super().data_received(data)
        cycle = getattr(self, "cycle", None)
        if cycle is not None and cycle is not self._edgellm_cycle:
            self._edgellm_cycle = cycle  # its headers are complete
            self._edgellm_disarm()

    def connection_lost(self, exc) -> None:
        self._edgellm_disarm()
        super().connection_lost(exc)

    def _edgellm_arm(self) -> None:
        self._edgellm_disarm()
        loop = asyncio.get_event_loop()
        self._edgellm_timer = loop.call_later(self.header_timeout, self._edgellm_expired)

    def _edgellm_disarm(self) -> None:
        timer = getattr(self, "_edgellm_timer", None)
        if timer is not None:
            timer.cancel()
            self._edgellm_timer = None

    def _edgellm_expired(self) -> None:
        self._edgellm_timer = None
        cycle = getattr(self, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            # a request is being served: its headers came in without passing data_received
            # (a pipelined request parsed when the one before it finished)
            self._edgellm_cycle = cycle
            return
        transport = self.transport
        if transport is not None and not transport.is_closing():
            log.info("closing a connection that sent no complete request headers within %g s "
                     "(--read-timeout)", self.header_timeout)
            transport.close()
