"""Server-sent events, with the client's disconnect watched the whole time.

Starlette's StreamingResponse only notices a vanished client when a write fails, i.e. at the
next token; during a long prefill nothing is written. Here a second task waits on the ASGI
`receive` channel for `http.disconnect` and cancels the producer at once, and `on_close` runs
whatever happened (finished, disconnected, failed), so the engine request is always aborted and
its pages freed.
"""
import asyncio
import json
import logging
from typing import AsyncIterator, Awaitable, Callable, Optional

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

log = logging.getLogger("edgellm.server")


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


async def wait_disconnect(receive: Receive) -> None:
    """Return when the client goes away. Call only after the request body has been read."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def cancel_and_wait(*tasks: asyncio.Future) -> None:
    """Cancel the tasks and wait until they have unwound, so that nothing else touches an
    engine stream while one of them is still inside it."""
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def race(awaitable, receive: Receive, timeout: Optional[float] = None,
               late: Optional[BaseException] = None):
    """Await `awaitable` (a coroutine or a task) against the client's disconnect: when the client
    leaves first it is cancelled, waited for, and ClientGone raised; when `timeout` seconds pass
    first, the same with `late` raised. Cancelled itself (shutdown), it cancels both first."""
    task = asyncio.ensure_future(awaitable)
    watcher = asyncio.ensure_future(wait_disconnect(receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        await asyncio.shield(cancel_and_wait(task, watcher))
        raise
    watcher.cancel()
    if task in done:
        return task.result()
    await cancel_and_wait(task)
    raise ClientGone() if watcher in done else late


def sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


class EventStreamResponse(Response):
    """An ASGI response sending the byte strings `events` yields as one text/event-stream (a
    Response, so FastAPI passes it through as it is)."""

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[bool], Awaitable[None]],
                 headers: Optional[dict] = None):
        self.events = events
        self.on_close = on_close  # called with True when the client disconnected
        self.extra_headers = headers or {}
        self.background, self.status_code, self.raw_headers = None, 200, []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected = False
        try:
            extra = {k.lower(): v for k, v in self.extra_headers.items()}
            # text/event-stream unless the API streams another type (Ollama's NDJSON)
            kind = extra.pop("content-type", "text/event-stream; charset=utf-8")
            headers = [(b"content-type", kind.encode()),
                       (b"cache-control", b"no-cache"),
                       (b"x-accel-buffering", b"no")]  # proxies must not hold events back
            headers += [(k.encode(), v.encode()) for k, v in extra.items()]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            try:
                await race(self._pump(send), receive)
            except (ClientGone, OSError):  # OSError: a write failed, the client is gone too
                disconnected = True
        finally:
            # Shielded: on cancellation (shutdown) the engine request must still be aborted.
            await asyncio.shield(self.on_close(disconnected))
        if disconnected:
            log.info("client disconnected mid-stream; request aborted")

    async def _pump(self, send: Send) -> None:
        async for data in self.events:
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
