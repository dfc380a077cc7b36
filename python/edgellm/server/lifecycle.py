"""One generation's life, for every API: plan (parse the body, build the engine call) -> admit
(429) -> open the engine streams -> race the first chunk against the client and the deadline ->
stream the encoder's events (an error after the headers goes in-band), or collect every chunk
(still racing) and answer the encoder's body -> close the streams, release the admission,
record the metrics.

An API supplies only `plan`, which returns a `Generation`: how to open the engine streams and
an `Encoder` (how its answer looks). Waiting for the first chunk before answering means a
request the engine rejects (context overflow, bad template input) gets a proper 400 even when
it asked to stream.
"""
import asyncio
import errno
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Union

from starlette.requests import Request
from starlette.responses import Response

import edgellm

from . import lora_api
from .admission import ChunkStream, EngineHost
from .errors import APIError, from_exception, invalid, timed_out
from .limits import check_unicode
from .sse import ClientGone, EventStreamResponse, race, sse

log = logging.getLogger("edgellm.server")

CLIENT_CLOSED = 499  # nginx's code for "the client went away first", used in metrics only
OFF_LOOP_BYTES = 256 << 10  # bodies and texts longer than this are parsed / tokenized in a thread
INT32_MAX = (1 << 31) - 1
JSON = Dict[str, Any]


def _left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


# --- failures -------------------------------------------------------------------------------

def context_error(message: str, param: Optional[str], extra: dict) -> APIError:
    """OpenAI's code (context_length_exceeded) with llama-server's type and numbers
    (exceed_context_size_error, n_prompt_tokens, n_ctx), which llama.cpp clients read."""
    return APIError(400, message, "exceed_context_size_error", param, "context_length_exceeded",
                    extra=extra)


def engine_error(e: BaseException, param: Optional[str] = None) -> APIError:
    """Map what the engine raises to the status a client should see."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, edgellm.ModelFileChangedError):  # the server's file, not the request
        return APIError(503, str(e), "unavailable_error", None, "model_file_changed")
    if isinstance(e, edgellm.StorageError):  # the server's disk: full (507) or failing (500)
        full = e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        return APIError(507 if full else 500,
                        f"server storage {'full' if full else 'error'}: {os.strerror(e.errno)}",
                        "server_error", None, "storage_full" if full else "storage_error")
    if isinstance(e, edgellm.ContextLengthError):
        text = str(e)
        extra = {key: int(m.group(1)) for key, pattern in (
            ("n_prompt_tokens", r"(?:prompt|input) has (\d+) tokens"), ("n_ctx", r"n_ctx (\d+)"))
            for m in [re.search(pattern, text)] if m}
        return context_error(f"the request does not fit the context: {text}", param, extra)
    if isinstance(e, (edgellm.InvalidRequestError, ValueError)):
        return invalid(str(e), param)
    if isinstance(e, NotImplementedError):  # e.g. a parameter this engine build cannot honour
        return invalid(f"not supported: {e}", param, "unsupported")
    if isinstance(e, edgellm.RequestCancelled):
        return APIError(503, f"the request was cancelled by the server: {e}",
                        "unavailable_error", None, "cancelled")
    err = from_exception(e, param)  # Recursion/Overflow -> 400, MemoryError -> 507, else 500
    if err.status >= 500:
        log.error("request failed", exc_info=e)
    return err


# --- reading requests ------------------------------------------------------------------------

async def read_json(request: Request) -> Any:
    raw = await request.body()  # already size- and time-limited by limits.BodyLimit
    if not raw.strip():
        raise invalid("the request body is empty; send a JSON object", None, "invalid_json")
    try:
        if len(raw) > OFF_LOOP_BYTES:  # a few MB of JSON take a while to parse
            value = await asyncio.get_running_loop().run_in_executor(None, json.loads, raw)
        else:
            value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise invalid(f"the request body is not valid JSON: {e}", None, "invalid_json") from None
    except RecursionError:
        raise invalid("the request body is nested too deeply: JSON arrays and objects may nest "
                      f"at most about {sys.getrecursionlimit()} levels", None,
                      "nesting_too_deep") from None
    check_unicode(raw, value)  # a lone UTF-16 surrogate: a 400 naming the field
    lora_api.note_model(value)  # its `model` may name a LoRA adapter (server/lora_api.py)
    return value


async def off_loop(fn: Callable, *args, **kwargs):
    """fn(*args, **kwargs) in the default executor, so a big tokenization or template rendering
    does not stall every other request (the C++ tokenizer releases the GIL)."""
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


def check_token_ids(lists, n_vocab: Optional[int], param: str) -> None:
    """Every id of every list is in [0, n_vocab) (and fits the engine's int32), so an id such as
    2^40 is a 400 naming it instead of a TypeError from the binding."""
    limit = n_vocab if n_vocab else INT32_MAX + 1
    for ids in lists:
        if not isinstance(ids, (list, tuple)):
            continue  # text prompts are tokenized by the engine
        for k, t in enumerate(ids):
            if isinstance(t, int) and not isinstance(t, bool) and not 0 <= t < limit:
                vocab = f"the vocabulary has {n_vocab} tokens" if n_vocab else \
                    "token ids are below 2^31"
                raise invalid(f"token id {t} (at {param}[{k}]) is out of range: {vocab}",
                              param, "invalid_value")


# --- what an API supplies ----------------------------------------------------------------------

Event = Union[JSON, bytes]


class Encoder:
    """How one API answers one generation. The lifecycle feeds every engine chunk to add();
    when streaming it sends start(), events(...) after each add, then finish() -- or error(err)
    when the generation fails after the headers went out; otherwise it answers response().
    Events are JSON objects framed by frame() (SSE `data:` lines by default) or raw bytes.
    Any method may raise (an APIError, say): before the headers that is the answer, after
    them it goes in-band through error()."""
    headers: Dict[str, str] = {}

    def add(self, index: int, chunk) -> None:
        """Accumulate one engine chunk of choice `index`."""

    def start(self) -> Iterable[Event]:
        return ()

    def events(self, index: int, chunk) -> Iterable[Event]:
        return ()

    def finish(self) -> Iterable[Event]:
        return ()

    def error(self, err: APIError) -> Iterable[Event]:
        return (err.body(),)

    def response(self) -> Response:
        raise NotImplementedError

    def frame(self, event: JSON) -> bytes:
        return sse(event)


@dataclass
class Generation:
    """What a parsed request runs: `open()` -> the engine streams (one per prompt; none answers
    at once), `n` choices each, `sequences` admission slots, answered by `encoder`. `error(e,
    param)` maps a failure: with `param` before the headers, with None in-band."""
    open: Callable[[], List[Any]]
    encoder: Encoder
    stream: bool = False
    n: int = 1
    sequences: int = 1
    param: Optional[str] = None
    error: Callable[[BaseException, Optional[str]], APIError] = field(default=engine_error)


class Lifecycle:
    """Runs generations (and other timed engine calls) over one model's EngineHost."""

    def __init__(self, host: EngineHost,
                 envelope: Callable[[APIError], Response] = lambda e: e.response()):
        self.host = host
        self.config = host.config
        self.metrics = host.metrics
        self.envelope = envelope  # an APIError in this API's error shape

    def fail(self, endpoint: str, e: APIError) -> Response:
        self.metrics.request_done(endpoint, e.status)
        return self.envelope(e)

    def done(self, endpoint: str, response: Response) -> Response:
        self.metrics.request_done(endpoint, 200)
        return response

    async def answer(self, endpoint: str, work: Callable[[], Awaitable[Response]],
                     param: Optional[str] = None) -> Response:
        """A request that is no generation: `work()`'s response, or its failure enveloped."""
        try:
            return self.done(endpoint, await work())
        except Exception as e:  # noqa: BLE001 - APIError, and what bad input makes Python raise
            return self.fail(endpoint, engine_error(e, param))

    def deadline(self, t0: float) -> Optional[float]:
        return t0 + self.config.timeout if self.config.timeout else None

    async def race(self, awaitable, request: Request, deadline: Optional[float]):
        """sse.race against the client and the deadline (a 504 APIError)."""
        return await race(awaitable, request.receive, _left(deadline),
                          timed_out(self.config.timeout))

    async def embed(self, endpoint: str, param: Optional[str], llm, prompts, admission,
                    request: Request, t0: float, **kw):
        """`llm.embeddings(prompts, **kw)` under `admission` (released after), raced against the
        deadline and the client: (result, None), or (None, the response that ends the request)."""
        try:
            return await self.race(llm.embeddings(prompts, **kw), request, self.deadline(t0)), None
        except ClientGone:
            return None, self.gone(endpoint, "while its embeddings were computed")
        except Exception as e:  # noqa: BLE001
            return None, self.fail(endpoint, engine_error(e, param))
        finally:
            admission.release()

    def gone(self, endpoint: str, when: str) -> Response:
        self.metrics.request_done(endpoint, CLIENT_CLOSED)
        log.info("client disconnected %s; request aborted", when)
        return Response(status_code=CLIENT_CLOSED)

    async def run(self, request: Request, endpoint: str,
                  plan: Callable[[Any], Awaitable[Generation]], param: Optional[str] = None
                  ) -> Response:
        """The whole life of one generation request. `plan(llm)` parses the body (its failures
        are mapped with engine_error(e, param))."""
        t0 = time.monotonic()
        try:
            gen = await plan(self.host.require_ready())
            admission = self.host.admit(gen.sequences)
        except Exception as e:  # noqa: BLE001 - APIError, and what bad input makes Python raise
            return self.fail(endpoint, engine_error(e, param))
        deadline, enc, stream, when = self.deadline(t0), gen.encoder, None, "before the first token"

        async def close() -> None:
            try:
                if stream is not None:
                    await stream.aclose()
            finally:
                admission.release()

        async def collect(item):
            while item is not None:
                enc.add(*item)
                item = await stream.next()
            return enc.response()

        try:  # open the streams, wait for the first chunk (and, unless streaming, the rest)
            stream = ChunkStream(gen.open(), gen.n, self.metrics, t0)
            first = await self.race(stream.next(), request, deadline)
            if gen.stream:
                return self._stream(endpoint, gen, stream, first, deadline, close)
            when = "while waiting"
            response = await self.race(collect(first), request, deadline)
        except BaseException as e:  # noqa: BLE001 - every failure becomes an answer
            await asyncio.shield(close())
            if isinstance(e, asyncio.CancelledError):
                raise
            return self.gone(endpoint, when) if isinstance(e, ClientGone) else \
                self.fail(endpoint, gen.error(e, gen.param))
        await asyncio.shield(close())
        return self.done(endpoint, response)

    def _stream(self, endpoint: str, gen: Generation, stream: ChunkStream, first, deadline,
                close: Callable[[], Awaitable[None]]) -> Response:
        enc, status = gen.encoder, {"code": 200}

        def framed(events: Iterable[Event]):
            return [ev if isinstance(ev, bytes) else enc.frame(ev) for ev in events]

        async def events():
            try:
                for b in framed(enc.start()):
                    yield b
                item = first
                while item is not None:
                    enc.add(*item)
                    for b in framed(enc.events(*item)):
                        yield b
                    try:
                        item = await asyncio.wait_for(stream.next(), _left(deadline))
                    except asyncio.TimeoutError:
                        raise timed_out(self.config.timeout) from None
                end = framed(enc.finish())
            except Exception as e:  # noqa: BLE001 - the headers are sent: report in-band
                err = gen.error(e, None)
                status["code"] = err.status
                end = framed(enc.error(err))
            for b in end:
                yield b

        async def on_close(disconnected: bool):
            await close()
            self.metrics.request_done(endpoint, CLIENT_CLOSED if disconnected else status["code"])

        return EventStreamResponse(events(), on_close, headers=enc.headers)
