"""The HTTP endpoints. Generation requests share one life cycle (`_generate`):

    parse + check -> SamplingParams -> admit (429) -> open engine streams -> wait for the first
    chunk while watching for disconnect and the deadline -> stream SSE events, or collect the
    rest (still watching) and answer one JSON body -> close the streams, release the slots.

Waiting for the first chunk before answering means a request the engine rejects (context
overflow, bad template input) gets a proper 400 even when it asked to stream.
"""
import asyncio
import errno
import inspect
import json
import logging
import os
import re
import sys
import time
from typing import Any, Callable, List, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

import edgellm

from . import protocol
from .admission import ChunkStream, EngineHost
from .errors import APIError, from_exception, invalid, timed_out
from .progress import progress_of, progress_timings, prompt_progress
from .responses import Choice, Formatter
from .sse import DONE, EventStreamResponse, cancel_and_wait, sse, wait_disconnect

log = logging.getLogger("edgellm.server")

CLIENT_CLOSED = 499  # nginx's code for "the client went away first", used in metrics only


class ClientGone(Exception):
    """The client disconnected before the answer was ready."""


async def _maybe_await(x):
    return await x if inspect.isawaitable(x) else x


def engine_error(e: BaseException, param: Optional[str] = None) -> APIError:
    """Map what the engine raises to the status a client should see."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, edgellm.ModelFileChangedError):  # the server's file, not the request
        return APIError(503, str(e), "unavailable_error", None, "model_file_changed")
    if isinstance(e, edgellm.StorageError):  # the server's disk: full (507) or failing (500)
        full = e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
        return APIError(507 if full else 500, f"server storage {'full' if full else 'error'}: {os.strerror(e.errno)}",
                        "server_error", None, "storage_full" if full else "storage_error")
    if isinstance(e, edgellm.ContextLengthError):
        return _context_error(e, param)
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


class _ContextError(APIError):
    """OpenAI's code (context_length_exceeded) with llama-server's type and numbers
    (exceed_context_size_error, n_prompt_tokens, n_ctx), which llama.cpp clients read."""

    def __init__(self, message: str, param: Optional[str], extra: dict):
        super().__init__(400, message, "exceed_context_size_error", param, "context_length_exceeded")
        self.extra = extra

    def body(self) -> dict:
        out = super().body()
        out["error"].update(self.extra)
        return out


def _context_error(e: BaseException, param: Optional[str]) -> APIError:
    text = str(e)
    extra = {}
    m = re.search(r"(?:prompt|input) has (\d+) tokens", text)
    if m:
        extra["n_prompt_tokens"] = int(m.group(1))
    m = re.search(r"n_ctx (\d+)", text)
    if m:
        extra["n_ctx"] = int(m.group(1))
    return _ContextError(f"the request does not fit the context: {text}", param, extra)


async def read_json(request: Request) -> Any:
    raw = await request.body()  # already size- and time-limited by limits.BodyLimit
    if not raw.strip():
        raise invalid("the request body is empty; send a JSON object", None, "invalid_json")
    try:
        if len(raw) > OFF_LOOP_BYTES:  # a few MB of JSON take a while to parse
            return await asyncio.get_running_loop().run_in_executor(None, json.loads, raw)
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise invalid(f"the request body is not valid JSON: {e}", None, "invalid_json") from None
    except RecursionError:
        raise invalid("the request body is nested too deeply: JSON arrays and objects may nest "
                      f"at most about {sys.getrecursionlimit()} levels", None,
                      "nesting_too_deep") from None


OFF_LOOP_BYTES = 256 << 10  # bodies and texts longer than this are parsed / tokenized in a thread


async def off_loop(fn: Callable, *args, **kwargs):
    """fn(*args, **kwargs) in the default executor, so a big tokenization or template rendering
    does not stall every other request (the C++ tokenizer releases the GIL)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, lambda: fn(*args, **kwargs))


INT32_MAX = (1 << 31) - 1


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


def engine_meta(llm) -> dict:
    """What /v1/models tells of a loaded engine: context, vocabulary, ISA, file, architecture,
    speculative decoding."""
    inner = getattr(llm, "llm", llm)
    meta = {"n_ctx": getattr(inner, "n_ctx", None), "n_vocab": getattr(inner, "n_vocab", None),
            "isa": getattr(inner, "isa", None), "path": getattr(inner, "model_path", None)}
    spec = getattr(inner, "speculative", None)
    if isinstance(spec, str):  # speculative decoding: the mode and the draft model's path
        meta["speculative"] = spec
        meta["draft_model"] = getattr(inner, "draft_model_path", None)
    md = getattr(inner, "metadata", None) or {}
    if isinstance(md, dict):
        meta["architecture"] = md.get("general.architecture")
        meta["n_ctx_train"] = md.get(f"{md.get('general.architecture')}.context_length")
    return meta


class Routes:
    def __init__(self, host: EngineHost):
        self.host = host
        self.config = host.config
        self.metrics = host.metrics

    # --- helpers ---------------------------------------------------------------------------
    def _fail(self, endpoint: str, e: APIError) -> Response:
        self.metrics.request_done(endpoint, e.status)
        return e.response()

    def _deadline(self, t0: float) -> Optional[float]:
        return t0 + self.config.timeout if self.config.timeout else None

    async def _race(self, awaitable, request: Request, deadline: Optional[float]):
        """Await `awaitable`, but give up (cancelling it) when the client disconnects or the
        deadline passes."""
        task = asyncio.ensure_future(awaitable)
        watcher = asyncio.ensure_future(wait_disconnect(request.receive))
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            done, _ = await asyncio.wait({task, watcher}, timeout=timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await asyncio.shield(cancel_and_wait(task, watcher))
            raise
        if task in done:
            watcher.cancel()
            return task.result()
        await cancel_and_wait(task)
        if watcher in done:
            raise ClientGone()
        watcher.cancel()
        raise timed_out(self.config.timeout)

    def _fingerprint(self) -> str:
        isa = getattr(self.host.llm, "isa", None) or getattr(
            getattr(self.host.llm, "llm", None), "isa", "cpu")
        return f"edgellm-{edgellm.__version__}-{isa}"

    # --- generation ----------------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        def shaping_of(req) -> dict:
            return {k: req.extra[k] for k in ("add_generation_prompt", "continue_final_message")
                    if k in req.extra}

        async def prepare(llm, req):
            if req.extra.get("verbose", self.config.verbose):  # rendered in a thread
                req.extra["__prompt"] = await off_loop(
                    llm.render_chat_prompt, req.messages, req.tools, req.tool_choice,
                    req.chat_template_kwargs, **shaping_of(req))

        def open_streams(llm, req, params):
            shaping = shaping_of(req)
            return [llm.chat_stream_chunks(req.messages, params, tools=req.tools,
                                           tool_choice=req.tool_choice,
                                           parallel_tool_calls=req.parallel_tool_calls,
                                           chat_template_kwargs=req.chat_template_kwargs,
                                           **shaping)]
        return await self._generate(request, "chat", protocol.parse_chat, open_streams, "messages",
                                    prepare)

    async def completions(self, request: Request) -> Response:
        def open_streams(llm, req, params):
            return [llm.stream_chunks(p, params) for p in req.prompts]
        return await self._generate(request, "completions", protocol.parse_completion,
                                    open_streams, "prompt")

    async def _generate(self, request: Request, endpoint: str, parse: Callable,
                        open_streams: Callable, prompt_param: str,
                        prepare: Optional[Callable] = None) -> Response:
        t0 = time.monotonic()
        try:
            llm = self.host.require_ready()
            req = parse(await read_json(request))
            if req.prompts is not None:
                check_token_ids(req.prompts, self.host.n_vocab, prompt_param)
            if prepare is not None:
                await prepare(llm, req)
            params = self.host.sampling_params(req.sampling)
            prompts = len(req.prompts) if req.prompts is not None else 1
            admission = self.host.admit(prompts * req.n)
        except Exception as e:  # noqa: BLE001 - APIError, and what bad input makes Python raise
            return self._fail(endpoint, engine_error(e, prompt_param))

        deadline = self._deadline(t0)
        started = await self._start(
            request, endpoint, lambda: open_streams(llm, req, params), req.n, admission, t0,
            deadline, lambda e: self._fail(endpoint, engine_error(e, prompt_param)))
        if isinstance(started, Response):
            return started
        stream, first = started

        kind = "chat" if endpoint == "chat" else "completion"
        fmt = Formatter(kind, self.config.model_id, self._fingerprint())
        prefix = {}
        if req.echo:
            for p_i, p in enumerate(req.prompts):
                for j in range(req.n):
                    prefix[p_i * req.n + j] = p
        choices = {i: Choice(i, prefix.get(i, "")) for i in range(prompts * req.n)}
        want_logprobs = req.logprobs if kind == "chat" else "logprobs" in req.sampling

        if req.stream:
            return self._stream(endpoint, fmt, stream, admission, first, choices, req,
                                want_logprobs, deadline, prompts)

        async def collect():
            item = first
            while item is not None:
                index, chunk = item
                choices[index].add(chunk)
                item = await stream.next()

        failed = await self._collect(endpoint, collect, request, deadline, stream, admission,
                                     lambda e: self._fail(endpoint, engine_error(e, prompt_param)))
        if failed is not None:
            return failed
        self.metrics.request_done(endpoint, 200)
        ordered = [choices[i] for i in sorted(choices)]
        body = fmt.response(ordered, want_logprobs, prompts)
        if "__prompt" in req.extra:
            body["__verbose"] = {"prompt": req.extra["__prompt"],
                                 "content": ordered[0].text if ordered else ""}
        return JSONResponse(body)

    def _stream(self, endpoint, fmt: Formatter, stream: ChunkStream, admission, first,
                choices, req, want_logprobs, deadline, prompts) -> Response:
        async def events():
            item = first
            while item is not None:
                index, chunk = item
                choice = choices[index]
                choice.add(chunk)
                parsed = getattr(chunk, "delta", None)
                has_text = bool(parsed) if parsed is not None else bool(chunk.text)
                # chat: a first chunk of its own says the role (content null), as OpenAI and
                # llama-server stream it
                role_first = fmt.kind == "chat" and not choice.started
                progress = progress_of(chunk)
                if progress is not None:  # return_progress: llama-server's prompt_progress chunk
                    yield sse(progress_chunk(choice, progress))
                elif role_first:
                    yield sse(fmt.role_chunk(choice, want_logprobs, req.include_usage))
                if progress is None and (has_text or chunk.finish_reason is not None
                                         or chunk.logprobs or not choice.started):
                    event = fmt.chunk(choice, chunk, want_logprobs, req.include_usage)
                    if per_token and "timings" not in event:
                        event["timings"] = running_timings(chunk)
                    yield sse(event)
                try:
                    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                    item = await asyncio.wait_for(stream.next(), timeout)
                except asyncio.TimeoutError:
                    err = timed_out(self.config.timeout)
                    outcome["status"] = err.status
                    yield sse(err.body())
                    return
                except Exception as e:  # noqa: BLE001 - headers are sent: report in-band
                    err = engine_error(e)
                    outcome["status"] = err.status
                    yield sse(err.body())
                    return
            if req.include_usage:
                yield sse(fmt.usage_chunk([choices[i] for i in sorted(choices)], prompts))
            yield DONE

        # timings_per_token (llama-server): each chunk carries the figures so far; the prompt's
        # are known once the first token is out (prompt_ms = time to it)
        per_token = bool(req.extra.get("timings_per_token"))
        clock = {"start": time.monotonic(), "first": None, "n": 0}

        def running_timings(chunk) -> dict:
            now = time.monotonic()
            clock["n"] += len(chunk.token_ids or ())
            if clock["first"] is None:
                clock["first"] = now
            prompt_ms = 1e3 * (clock["first"] - clock["start"])
            gen_ms = 1e3 * (now - clock["first"])
            n = clock["n"]
            return {"prompt_ms": prompt_ms, "predicted_n": n, "predicted_ms": gen_ms,
                    "predicted_per_token_ms": gen_ms / (n - 1) if n > 1 else 0.0,
                    "predicted_per_second": 1e3 * (n - 1) / gen_ms if n > 1 and gen_ms > 0 else 0.0}

        def progress_chunk(choice, progress) -> dict:
            # chat: a role delta (content null), as llama-server sends each progress update;
            # completions: empty text. Neither starts the choice's text.
            if fmt.kind == "chat":
                event = fmt.role_chunk(choice, want_logprobs, req.include_usage)
            else:
                event = fmt._head("text_completion")
                event["choices"] = [{"index": choice.index, "text": "", "logprobs": None,
                                     "finish_reason": None}]
                if req.include_usage:
                    event["usage"] = None
            if per_token:
                event["timings"] = progress_timings(progress)
            event["prompt_progress"] = prompt_progress(progress)
            return event

        outcome = {"status": 200}

        async def on_close(disconnected: bool):
            await self._close(stream, admission)
            self.metrics.request_done(endpoint, CLIENT_CLOSED if disconnected else outcome["status"])

        return EventStreamResponse(events(), on_close)

    async def _start(self, request: Request, endpoint: str, open_streams: Callable[[], list],
                     n: int, admission, t0: float, deadline: Optional[float],
                     fail: Callable[[BaseException], Response]):
        """Open the engine streams and wait for the first chunk, watching for disconnect and
        the deadline: (stream, first chunk), or the Response to answer with -- 499 when the
        client went away, `fail(e)` for any other failure. Either way the streams are closed
        and the admission released when no answer will follow."""
        stream: Optional[ChunkStream] = None
        try:
            stream = ChunkStream(open_streams(), n, self.metrics, t0)
            return stream, await self._race(stream.next(), request, deadline)
        except ClientGone:
            await self._close(stream, admission)
            self.metrics.request_done(endpoint, CLIENT_CLOSED)
            log.info("client disconnected before the first token; request aborted")
            return Response(status_code=CLIENT_CLOSED)
        except BaseException as e:  # noqa: BLE001 - every failure becomes an answer
            await asyncio.shield(self._close(stream, admission))
            if isinstance(e, asyncio.CancelledError):
                raise
            return fail(e)

    async def _collect(self, endpoint: str, collect, request: Request, deadline: Optional[float],
                       stream: ChunkStream, admission, fail) -> Optional[Response]:
        """Await collect() (the chunks of a non-streaming answer) against the client and the
        deadline, then close the stream and release the admission. None when it finished, else
        the answer to send: 499 when the client left, fail(exception) for an error."""
        try:
            await self._race(collect(), request, deadline)
        except ClientGone:
            self.metrics.request_done(endpoint, CLIENT_CLOSED)
            log.info("client disconnected while waiting; request aborted")
            return Response(status_code=CLIENT_CLOSED)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, asyncio.CancelledError):
                raise
            return fail(e)
        finally:
            await asyncio.shield(self._close(stream, admission))
        return None

    @staticmethod
    async def _close(stream: Optional[ChunkStream], admission) -> None:
        try:
            if stream is not None:
                await stream.aclose()
        finally:
            admission.release()

    # --- the rest -------------------------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        try:
            llm = self.host.require_ready()
        except APIError as e:
            return self._fail("models", e)
        meta = engine_meta(llm)
        self.metrics.request_done("models", 200)
        return JSONResponse({"object": "list", "data": [{
            "id": self.config.model_id, "object": "model",
            "created": int(self.host.loaded_at or time.time()), "owned_by": "edgellm",
            # llama-server's --alias list and --tags
            "aliases": self.config.aliases,
            "tags": [t.strip() for t in (getattr(self.config, "tags", None) or "").split(",")
                     if t.strip()],
            "meta": meta}]})

    async def health(self, request: Request) -> Response:
        state = self.host.state
        if state == "ready":
            return JSONResponse({"status": "ok"})
        if state == "failed":
            return JSONResponse({"status": "error", "message": str(self.host.error)}, 500)
        return JSONResponse({"status": state}, 503, headers={"Retry-After": "1"})

    async def metrics_text(self, request: Request) -> Response:
        text = self.metrics.render(self.host.stats(), self.config.model_id,
                                   self.host.state == "ready")
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def tokenize(self, request: Request) -> Response:
        try:
            llm = self.host.require_ready()
            f = protocol.parse_tokenize(await read_json(request))
            to_piece = getattr(llm, "token_to_piece", None) or llm.llm.token_to_piece

            def run() -> List[Any]:
                ids = [int(t) for t in llm.tokenize(f["content"], add_special=f["add_special"],
                                                    parse_special=f["parse_special"])]
                if not f["with_pieces"]:
                    return ids
                tokens: List[Any] = []
                for t in ids:
                    piece = bytes(to_piece(t))
                    try:
                        tokens.append({"id": t, "piece": piece.decode("utf-8")})
                    except UnicodeDecodeError:  # part of a multi-byte character: raw bytes
                        tokens.append({"id": t, "piece": list(piece)})
                return tokens

            tokens = await off_loop(run)
        except APIError as e:
            return self._fail("tokenize", e)
        except Exception as e:  # noqa: BLE001
            return self._fail("tokenize", engine_error(e, "content"))
        self.metrics.request_done("tokenize", 200)
        return JSONResponse({"tokens": tokens})

    async def detokenize(self, request: Request) -> Response:
        try:
            llm = self.host.require_ready()
            ids = protocol.parse_detokenize(await read_json(request))
            check_token_ids([ids], self.host.n_vocab, "tokens")
            text = await _maybe_await(await off_loop(llm.detokenize, ids))
        except APIError as e:
            return self._fail("detokenize", e)
        except Exception as e:  # noqa: BLE001
            return self._fail("detokenize", engine_error(e, "tokens"))
        self.metrics.request_done("detokenize", 200)
        return JSONResponse({"content": text})
