"""Limits on what one client can make the server hold (docs/SERVER.md "Limits").

- `BodyLimit` reads the body before the routes: a Content-Length over `--max-body-size` is a
  413 at once, a chunked body is counted as it arrives and cut at the limit (never held whole);
  the body must arrive within `--read-timeout` of its headers, else 408. The routes then read it
  from memory; later `receive()` calls (disconnect watching) go to the connection. Before a 413
  the rest of a declared body is read and dropped (up to DRAIN_MAX bytes and the deadline), so
  a client that writes its whole body before reading gets the 413, not a reset connection.
- `http_protocol(read_timeout)`: uvicorn's protocol with a header timer, since uvicorn never
  times out a header read (one byte every few seconds would hold a socket for ever): a
  connection's request headers must be complete within `read_timeout` of connecting (or of the
  first byte of its next request), else it is closed.

413 and 408 answers carry `Connection: close`.
"""
import asyncio
import logging
import re
import time
from typing import Any, Optional

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError, Guard

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
        headers = dict(scope.get("headers", ()))
        try:
            declared = int(headers[b"content-length"])
        except (KeyError, ValueError):  # none, or one the HTTP parser has refused already
            declared = None

        async def next_message() -> Optional[Message]:
            """The next message from the client; None when the deadline has passed."""
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            try:
                return await asyncio.wait_for(receive(), left)
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
            # with "Expect: 100-continue" the client sends nothing until told to
            if headers.get(b"expect", b"").lower() != b"100-continue":
                await drain(True, 0)
            await self.refuse(scope, receive, send, too_large(self.limit, declared))
            return
        chunks, size, more = [], 0, True
        while more:
            message = await next_message()
            if message is None:
                log.info("request body too slow (--read-timeout %g s): answered 408", self.timeout)
                await self.refuse(scope, receive, send, read_timed_out(self.timeout))
                return
            if message["type"] == "http.disconnect":
                return  # the client left before sending its body: nobody to answer
            body, more = message.get("body", b""), message.get("more_body", False)
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
