"""Ollama's native API (docs/SERVER.md "Ollama's API"): the routes apps written for Ollama call.

One model's routes (`OllamaRoutes`, reached through the many-model router by the body's
`model`): POST /api/generate, /api/chat (NDJSON streams, or one object with `"stream": false`),
/api/embed and the legacy /api/embeddings. A request is parsed by its wire model
(ollama_models.py), turned into the chat API's OpenAI-style messages, tools and sampling
arguments (Ollama `images` become image_url content parts with data URIs), and run by the one
lifecycle (lifecycle.py: admission, the first chunk raced against disconnect and deadline,
in-band errors, metrics); `OllamaEncoder` shapes the chunks. Tool calls are sent whole, with
`arguments` as an object, once the model has finished writing each.

The routes about the server's models (/, /api/version, tags, ps, show, pull, create, copy,
delete) and what they know of a model file are ollama_library.py's; the wire shapes and the
conventions of every answer (NDJSON, the error envelope, `name:tag`) ollama_models.py's.

Errors are Ollama's `{"error": "..."}` with the status the other routes give, also in-band as
the last line of a stream.
"""

import base64
import binascii
import json
import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import ollama_models as W
from .anthropic_api import _tool_input as tool_input  # arguments JSON text -> an object
from .answer_items import ItemAssembler
from .config import parse_keep_alive
from .errors import APIError, invalid
from .lifecycle import (Encoder, Generation, Lifecycle, engine_error, off_loop,
                        read_json)
from .ollama_library import Made, facts, render
from .wire import chunk_delta, parse

log = logging.getLogger("edgellm.server")

JSON = Dict[str, Any]


def _ns(seconds: float) -> int:
    return max(0, int(seconds * 1e9))


# --- an answer -------------------------------------------------------------------------------------

class Answer(ItemAssembler):
    """The assistant's answer from the chat API's deltas: pieces of content and thinking as they
    come, each tool call whole (arguments an object) once the model has finished it."""

    def __init__(self):
        super().__init__()
        self.content: List[str] = []
        self.thinking: List[str] = []
        self.tool_calls: List[Any] = []
        self.pieces: List[Tuple[str, Any]] = []  # since the last take()
        self._sent: Dict[int, int] = {}  # call item position -> its place in tool_calls

    def begin(self, kind: str, tc) -> list:
        self.items.append({"name": tc.name or "", "args": ""} if kind == "call" else kind)
        return []

    def extend(self, pos: int, kind: str, text: str) -> list:
        (self.thinking if kind == "reasoning" else self.content).append(text)
        self.pieces.append(("thinking" if kind == "reasoning" else "content", text))
        return []

    def extend_call(self, pos: int, tc, live: bool) -> list:
        item = self.items[pos]
        item["name"] = item["name"] or tc.name or ""
        item["args"] += tc.arguments or ""
        if not live and pos in self._sent:  # continued after it was sent: re-send it whole
            self._send(pos)
        return []

    def end(self, pos: int, status: str) -> list:
        if isinstance(self.items[pos], dict):
            self._send(pos)
        return []

    def _send(self, pos: int) -> None:
        item, place = self.items[pos], self._sent.get(pos, len(self.tool_calls))
        call = W.OutToolCall(function=W.OutFunction(name=item["name"], index=place,
                                                    arguments=tool_input(item["args"])))
        if pos in self._sent:
            self.tool_calls[place] = call
        else:
            self._sent[pos] = place
            self.tool_calls.append(call)
        self.pieces.append(("tool_calls", call))

    def take(self) -> List[Tuple[str, Any]]:
        out, self.pieces = self.pieces, []
        return out


class OllamaEncoder(Encoder):
    """The lifecycle's view of one Ollama answer: NDJSON lines, or one object. `t0`: when the
    request reached its route; `load_s`: the seconds its model took to load before that."""
    headers = {"Content-Type": W.NDJSON}

    def __init__(self, chat: bool, model: str, t0: float, want_logprobs: bool = False,
                 load_s: float = 0.0):
        self.chat, self.model, self.t0, self.load_s = chat, model, t0, load_s
        self.answer = Answer()
        self.want_logprobs = want_logprobs
        self.logprobs: List[JSON] = []
        self.t_first: Optional[float] = None
        self.final: Optional[JSON] = None
        self._lines: List[JSON] = []

    def _head(self) -> JSON:
        return {"model": self.model, "created_at": W.now_iso()}

    def _line(self, kind: str, value: Any, logprobs: List[JSON]) -> JSON:
        if self.chat:
            msg = W.OutMessage(**{kind: [value] if kind == "tool_calls" else value})
            out = {**self._head(), "message": W.dump(msg), "done": False}
        else:
            out = {**self._head(), "response": value if kind == "content" else "", "done": False}
            if kind == "thinking":
                out["thinking"] = value
        if logprobs:
            out["logprobs"] = logprobs
        return out

    def add(self, index: int, chunk) -> None:
        if self.t_first is None and (chunk.token_ids or chunk.text):
            self.t_first = time.monotonic()
        self.answer.feed(chunk_delta(chunk))
        lps = [_logprob(t) for t in chunk.logprobs or ()] if self.want_logprobs else []
        self.logprobs += lps
        if chunk.finish_reason is not None:
            self.answer.close_item()
            self.final = self._stats(chunk)
        lines = [self._line(kind, value, []) for kind, value in self.answer.take()
                 if self.chat or kind != "tool_calls"]
        if lps:
            if lines:
                lines[-1]["logprobs"] = lps
            else:
                lines = [self._line("content", "", lps)]
        self._lines = lines

    def _stats(self, chunk) -> JSON:
        reason = chunk.finish_reason
        if reason not in ("stop", "length", "tool_calls"):
            raise APIError(503, f"the request ended without an answer ({reason})",
                           "unavailable_error", None, "cancelled")
        now = time.monotonic()
        first = self.t_first or now
        t = chunk.timings or {}
        u = chunk.usage
        prompt_s = t["prompt_ms"] / 1e3 if "prompt_ms" in t else first - self.t0
        eval_s = t["predicted_ms"] / 1e3 if "predicted_ms" in t else now - first
        return W.Stats(done_reason="length" if reason == "length" else "stop",
                       total_duration=_ns(now - self.t0 + self.load_s),
                       load_duration=_ns(self.load_s),
                       prompt_eval_count=u.prompt_tokens if u else 0,
                       prompt_eval_duration=_ns(prompt_s),
                       eval_count=u.completion_tokens if u else 0,
                       eval_duration=_ns(eval_s)).model_dump()

    def events(self, index: int, chunk) -> List[JSON]:
        if self.final is None:
            return self._lines
        last = {**self._head(), **({"message": {"role": "assistant", "content": ""}}
                                   if self.chat else {"response": ""}), "done": True,
                **self.final}
        return self._lines + [last]

    def finish(self) -> List[JSON]:
        if self.final is None:
            raise APIError(500, "the engine stream ended without a finish reason", "server_error")
        return []

    def error(self, err: APIError) -> List[JSON]:
        return [W.error_body(err)]

    def response(self) -> Response:
        self.finish()
        a = self.answer
        content, thinking = "".join(a.content), "".join(a.thinking) or None
        if self.chat:
            body = {**self._head(), "message": W.dump(W.OutMessage(
                content=content, thinking=thinking, tool_calls=a.tool_calls or None))}
        else:
            body = {**self._head(), "response": content,
                    **({"thinking": thinking} if thinking else {})}
        if self.want_logprobs:
            body["logprobs"] = self.logprobs
        return JSONResponse({**body, "done": True, **self.final})

    def frame(self, event: JSON) -> bytes:
        return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _logprob(t) -> JSON:
    def one(x) -> JSON:
        return W.TokenLogprob(token=x.token, logprob=x.logprob, bytes=list(x.bytes)).model_dump()
    return {**one(t), "top_logprobs": [one(x) for x in (t.top_logprobs or [])]}


# --- requests -> the chat API ----------------------------------------------------------------------

_IMAGE_TYPES = ((b"\x89PNG", "image/png"), (b"\xff\xd8", "image/jpeg"), (b"GIF8", "image/gif"),
                (b"RIFF", "image/webp"), (b"BM", "image/bmp"))


def image_part(data: str, where: str) -> JSON:
    """An Ollama image (base64) as an OpenAI image_url content part with a data URI."""
    try:
        head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4), validate=True)
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"'{where}' is not base64-encoded image data", where, "invalid_value") \
            from None
    mime = next((m for magic, m in _IMAGE_TYPES if head.startswith(magic)), "image/png")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def content(text: str, images: Optional[List[str]], where: str) -> Any:
    if not images:
        return text
    # Ollama puts a message's images before its text (server/prompt.go prefixes the image tags)
    return [image_part(d, f"{where}[{i}]") for i, d in enumerate(images)] + \
        [{"type": "text", "text": text}]


def chat_messages(body: W.OllamaChatBody, system: Optional[str]) -> List[JSON]:
    """Ollama messages -> the chat API's: thinking -> reasoning_content, tool calls with ids and
    JSON-string arguments, a tool result's tool_name matched to the call it answers."""
    out: List[JSON] = []
    if system and not any(m.role == "system" for m in body.messages):
        out.append({"role": "system", "content": system})
    open_calls: Dict[str, List[str]] = {}  # tool name -> ids of calls not yet answered
    for i, m in enumerate(body.messages):
        msg: JSON = {"role": m.role, "content": content(m.content, m.images, f"messages[{i}].images")}
        if m.thinking:
            msg["reasoning_content"] = m.thinking
        if m.tool_calls:
            msg["tool_calls"] = []
            for j, tc in enumerate(m.tool_calls):
                cid = tc.id or f"call_{i}_{j}"
                open_calls.setdefault(tc.function.name, []).append(cid)
                msg["tool_calls"].append({"id": cid, "type": "function", "function": {
                    "name": tc.function.name,
                    "arguments": json.dumps(tc.function.arguments, ensure_ascii=False)}})
        if m.role == "tool":
            if m.tool_name:
                msg["name"] = m.tool_name
            pending = open_calls.get(m.tool_name or "") or next(
                (ids for ids in open_calls.values() if ids), [])
            cid = m.tool_call_id or (pending.pop(0) if pending else None)
            if cid:
                msg["tool_call_id"] = cid
        out.append(msg)
    return out


def load_seconds(request: Request) -> float:
    """How long the many-model router waited for the request's model to load (0: it was)."""
    return getattr(request.state, "load_seconds", 0.0)


def keep_alive_of(request: Request, body) -> Any:
    """The request's keep_alive: the many-model router took it out of the body (and left it in
    request.state); a single-model server reads it here (its model stays loaded anyway)."""
    ka = getattr(request.state, "keep_alive", None)
    if ka is not None:
        return ka
    try:
        return parse_keep_alive(body.keep_alive) if body.keep_alive is not None else None
    except ValueError as e:
        raise invalid(str(e), "keep_alive", "invalid_value") from None


class OllamaRoutes:
    """One model's Ollama routes (generate, chat, embed, embeddings)."""

    def __init__(self, host, server: Any = None):
        self.host = host
        self.config = host.config
        self.metrics = host.metrics
        self.server = server
        self.life = Lifecycle(host, envelope=W.error_response)

    def _made(self, name: str) -> Optional[Made]:
        return self.server.made.get(W.name_key(name)) if self.server else None

    def _caps(self, llm) -> List[str]:
        inner = getattr(llm, "llm", llm)
        path = getattr(inner, "model_path", None)
        return facts(path).capabilities if path and os.path.isfile(str(path)) else ["completion"]

    def _sampling(self, body: W.OllamaGeneration, made: Optional[Made]) -> Tuple[JSON, Any]:
        """SamplingParams keyword arguments (the created model's parameters, then the request's
        options), and the options object holding the load settings."""
        base = made.options() if made else None
        kw = {**W.sampling(base), **W.sampling(body.options)}
        kw.setdefault("max_tokens", None)
        if body.format == "json":
            kw["response_format"] = {"type": "json_object"}
        elif isinstance(body.format, dict):
            kw["json_schema"] = body.format
        if body.logprobs:
            kw["logprobs"] = body.top_logprobs or 0
        opts = {**(base.model_dump(exclude_none=True) if base else {}),
                **(body.options.model_dump(exclude_none=True) if body.options else {})}
        return kw, opts

    def _load_settings(self, llm, opts: JSON) -> Optional[int]:
        """num_thread: the engine's active threads (at most its pool); num_ctx: the context this
        request may use (at most the loaded one, --ctx-size), returned."""
        inner = getattr(llm, "llm", llm)
        n = opts.get("num_thread")
        if n is not None and hasattr(inner, "set_n_threads"):
            inner.set_n_threads(min(int(n), int(inner.n_threads)))
        ctx = opts.get("num_ctx")
        return min(ctx, self.host.n_ctx) if ctx and self.host.n_ctx else ctx

    def _think(self, body: W.OllamaGeneration, llm, name: str) -> Optional[JSON]:
        if body.think is None:
            return None
        if body.think is not False and "thinking" not in self._caps(llm):
            raise invalid(f'"{name}" does not support thinking', "think", "unsupported")
        kw: JSON = {"enable_thinking": body.think is not False}
        if isinstance(body.think, str):
            kw["reasoning_effort"] = body.think
        return kw

    def _fit(self, kw: JSON, ctx: Optional[int], count: Callable[[], int]) -> None:
        """num_ctx below the loaded context: the prompt (`count()` tokens) and the answer must
        fit in it."""
        if not ctx or not self.host.n_ctx or ctx >= self.host.n_ctx:
            return
        n = count()
        if n >= ctx:
            raise invalid(f"the prompt has {n} tokens, more than num_ctx {ctx}", "options.num_ctx",
                          "context_length_exceeded")
        room = ctx - n
        kw["max_tokens"] = room if kw.get("max_tokens") is None else min(kw["max_tokens"], room)

    async def _generation(self, llm, request: Request, body: W.OllamaGeneration, chat: bool,
                          t0: float,
                          messages: List[JSON], tools=None, prompt: Optional[str] = None,
                          template: Optional[str] = None) -> Generation:
        """The engine call: a prompt written out (raw, fill-in-the-middle, or `template`
        rendered), its special tokens the model's markup; else the chat API over `messages`."""
        kw, opts = self._sampling(body, self._made(body.model))
        ctx = self._load_settings(llm, opts)
        think = self._think(body, llm, body.model)
        enc = OllamaEncoder(chat, body.model, t0, body.logprobs, load_seconds(request))
        param = "messages" if chat else "prompt"
        if prompt is None and template:
            prompt = await off_loop(render, template, messages, tools, think)
        if prompt is not None:
            ids = await off_loop(llm.tokenize, prompt, True, True)
            self._fit(kw, ctx, lambda: len(ids))
            params = self.host.sampling_params(kw)
            return Generation(lambda: [llm.stream_chunks(ids, params)], enc, body.stream,
                              param=param)
        inner = getattr(llm, "llm", llm)
        count = lambda: len(inner.chat_prompt_ids(  # noqa: E731
            messages, tools=tools, chat_template_kwargs=think))
        await off_loop(self._fit, kw, ctx, count)  # renders only when num_ctx is the tighter
        params = self.host.sampling_params(kw)
        return Generation(lambda: [llm.chat_stream_chunks(
            messages, params, tools=tools, chat_template_kwargs=think)], enc, body.stream,
            param=param)

    async def _loaded(self, request: Request, body, chat: bool, t0: float) -> Response:
        """The empty request: load the model (keep_alive 0: unload it once answered)."""
        async def work() -> Response:
            self.host.require_ready()
            unload = keep_alive_of(request, body) == 0
            out = {"model": body.model, "created_at": W.now_iso(),
                   **({"message": {"role": "assistant", "content": ""}} if chat
                      else {"response": ""}),
                   "done": True, "done_reason": "unload" if unload else "load"}
            return JSONResponse(out)
        return await self.life.answer("ollama_chat" if chat else "ollama_generate", work)

    async def _parsed(self, request: Request, model, endpoint: str, param: str):
        try:
            return parse(model, await read_json(request)), None
        except Exception as e:  # noqa: BLE001
            return None, self.life.fail(endpoint, engine_error(e, param))

    async def chat(self, request: Request) -> Response:
        t0 = time.monotonic()
        body, failed = await self._parsed(request, W.OllamaChatBody, "ollama_chat", "messages")
        if failed:
            return failed
        if not body.messages:
            return await self._loaded(request, body, True, t0)

        async def plan(llm) -> Generation:
            made = self._made(body.model)
            messages = chat_messages(body, made.system if made else None)
            tools = [t.model_dump(exclude_none=True) for t in body.tools or ()] or None
            if tools and "tools" not in self._caps(llm):
                raise invalid(f'"{body.model}" does not support tools', "tools", "unsupported")
            return await self._generation(llm, request, body, True, t0, messages, tools,
                                          template=made.template if made else None)
        return await self.life.run(request, "ollama_chat", plan, "messages")

    async def generate(self, request: Request) -> Response:
        t0 = time.monotonic()
        body, failed = await self._parsed(request, W.OllamaGenerateBody, "ollama_generate", "prompt")
        if failed:
            return failed
        if not body.prompt and body.suffix is None and not body.images:
            return await self._loaded(request, body, False, t0)

        async def plan(llm) -> Generation:
            made = self._made(body.model)
            if body.context:
                raise invalid("'context' (the token ids of an earlier answer) is not supported: "
                              "use /api/chat with the conversation", "context", "unsupported")
            system = body.system if body.system is not None else (made.system if made else None)
            template = body.template or (made.template if made else None)
            prompt = None
            if body.suffix is not None:  # fill in the middle
                fim = facts(str(getattr(getattr(llm, "llm", llm), "model_path", ""))).fim \
                    if "insert" in self._caps(llm) else None
                if fim is None:
                    raise invalid(f'"{body.model}" does not support insert', "suffix",
                                  "unsupported")
                prompt = f"{fim[0]}{body.prompt}{fim[1]}{body.suffix}{fim[2]}"
            elif body.raw:
                if body.images:
                    raise invalid("'images' cannot be sent with 'raw': the template places "
                                  "them", "images", "unsupported")
                prompt = body.prompt
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": content(body.prompt, body.images, "images")}]
            return await self._generation(llm, request, body, False, t0, messages, None, prompt,
                                          template)
        return await self.life.run(request, "ollama_generate", plan, "prompt")

    # --- embeddings ------------------------------------------------------------------------------
    async def embed(self, request: Request) -> Response:
        return await self._embed(request, legacy=False)

    async def embeddings(self, request: Request) -> Response:
        return await self._embed(request, legacy=True)

    async def _embed(self, request: Request, legacy: bool) -> Response:
        endpoint, t0 = "ollama_embed", time.monotonic()
        param = "prompt" if legacy else "input"
        try:
            llm = self.host.require_ready()
            inner = getattr(llm, "llm", llm)
            body = parse(W.OllamaEmbeddingsBody if legacy else W.OllamaEmbedBody, await read_json(request))
            texts = [body.prompt] if legacy else \
                [body.input] if isinstance(body.input, str) else body.input
            pooling = getattr(self.config, "pooling", None) or getattr(inner, "default_pooling",
                                                                         "mean")
            if pooling == "none":
                raise invalid("the server runs with --pooling none (one vector per token); "
                              "Ollama's embeddings are pooled", param, "unsupported")
            n_ctx = self.host.n_ctx
            truncate = legacy or body.truncate

            def tokenize() -> List[List[int]]:
                out = []
                for i, text in enumerate(texts):
                    ids = list(llm.tokenize(text, True, False))
                    if not ids:
                        raise invalid(f"'{param}' entry {i} has no tokens: input cannot be empty",
                                      param, "invalid_value")
                    if n_ctx and len(ids) > n_ctx:
                        if not truncate:
                            raise invalid(f"'{param}' entry {i} has {len(ids)} tokens, more than "
                                          f"the context ({n_ctx}); send truncate true to cut it",
                                          param, "context_length_exceeded")
                        ids = ids[:n_ctx]
                    out.append(ids)
                return out
            prompts = await off_loop(tokenize) if texts else []
            admission = self.host.admit(max(1, len(prompts)))
        except Exception as e:  # noqa: BLE001
            return self.life.fail(endpoint, engine_error(e, param))
        result = None
        if prompts:
            result, ended = await self.life.embed(endpoint, param, llm, prompts, admission, request,
                                                  t0, normalize=-1 if legacy else 2, pooling=pooling)
            if ended is not None:
                return ended
        else:
            admission.release()
        vectors = [] if result is None else [v.tolist() for v in result.data]
        n = 0 if result is None else result.prompt_tokens
        self.metrics.tokens(prompt=n)
        if legacy:
            return self.life.done(endpoint, JSONResponse({"embedding": vectors[0]}))
        if body.dimensions is not None:
            vectors = [_shorten(v, body.dimensions) for v in vectors]
        return self.life.done(endpoint, JSONResponse({
            "model": body.model, "embeddings": vectors,
            "total_duration": _ns(time.monotonic() - t0 + load_seconds(request)),
            "load_duration": _ns(load_seconds(request)),
            "prompt_eval_count": n}))


def _shorten(v: List[float], d: int) -> List[float]:
    """The first d dimensions, normalised again (Ollama's `dimensions`)."""
    v = v[:d]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v] if norm else v
