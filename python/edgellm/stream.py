"""`Stream`: what `LLM.stream` / `stream_chunks` / `chat_stream` / `chat_stream_chunks` return
(`AsyncStream`: the same for AsyncLLM's, with `async for`).

An iterator over one request's output, consumed by one thread, that any other thread can end
with `cancel()` (a generator cannot be closed from a thread other than the one running it):

    s = llm.stream("Once upon a time")
    threading.Timer(2.0, s.cancel).start()   # e.g. a Stop button's handler
    for piece in s:
        print(piece, end="")                 # ends soon after cancel(); the engine frees the slot

After cancel() the iteration ends normally: the chunks stop at the engine's "cancelled" last
event (its finish_reason). close() (or leaving the loop early) aborts as before. Nothing is
computed until the first next(): errors in the prompt surface there, as with a generator.
"""
from __future__ import annotations

from typing import AsyncIterator, Generic, Iterator, TypeVar

from ._engine_client import RequestControl

__all__ = ["Stream", "AsyncStream"]

T = TypeVar("T")


class Stream(Generic[T]):
    """An iterator of text pieces or CompletionChunks with `cancel()` callable from any thread."""

    def __init__(self, gen: Iterator[T], control: RequestControl):
        self._gen = gen
        self._control = control

    def __iter__(self) -> "Stream[T]":
        return self

    def __next__(self) -> T:
        return next(self._gen)

    def cancel(self) -> None:
        """Abort the request (thread-safe, idempotent; before the first next() it is aborted as
        soon as it is submitted). The consuming loop ends after the events already produced."""
        self._control.cancel()

    @property
    def cancelled(self) -> bool:
        return self._control.cancelled

    def close(self) -> None:
        """Stop consuming (on the consuming thread): aborts the request if it is still running."""
        self._gen.close()

    def __enter__(self) -> "Stream[T]":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncStream(Generic[T]):
    """An async iterator of text pieces or CompletionChunks (AsyncLLM's streams) with `cancel()`
    callable from any thread; the `async for` then ends after the events already produced."""

    def __init__(self, agen: AsyncIterator[T], control: RequestControl):
        self._agen = agen
        self._control = control

    def __aiter__(self) -> "AsyncStream[T]":
        return self

    async def __anext__(self) -> T:
        return await self._agen.__anext__()

    def cancel(self) -> None:
        """Abort the request (thread-safe, idempotent), as Stream.cancel."""
        self._control.cancel()

    @property
    def cancelled(self) -> bool:
        return self._control.cancelled

    async def aclose(self) -> None:
        """Stop consuming: aborts the request if it is still running."""
        await self._agen.aclose()
