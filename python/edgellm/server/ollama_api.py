"""Ollama's native API (docs/SERVER.md "Ollama's API"): the routes apps written for Ollama call.

One model's routes (`OllamaRoutes`, reached through the many-model router by the body's
`model`): POST /api/generate, /api/chat (NDJSON streams, or one object with `"stream": false`),
/api/embed and the legacy /api/embeddings. A request is parsed by its wire model
(ollama_models.py), turned into the chat API's OpenAI-style messages, tools and sampling
arguments (Ollama `images` become image_url content parts with data URIs), and run by the one
lifecycle (lifecycle.py: admission, the first chunk raced against disconnect and deadline,
in-band errors, metrics); `OllamaEncoder` shapes the chunks. Tool calls are sent whole, with
`arguments` as an object, once the model has finished writing each.

The server's routes (`OllamaServer`): GET / ("Ollama is running"; a browser gets the web chat
page), /api/version, /api/tags, /api/ps, POST /api/show, /api/pull, /api/create, /api/copy,
DELETE /api/delete. Models are the many-model server's catalog (model_catalog.py), so names
resolve as on every route (`smollm2` == `smollm2:latest`); a copy is a second name for an entry,
a created model a name with its own system prompt, template and parameters over an entry's file.
A single-model server lists its one model and refuses the verbs that change the set.

Errors are Ollama's `{"error": "..."}` with the status the other routes give, also in-band as
the last line of a stream.
"""
import base64
import binascii
import glob
import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Optional, Tuple

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

import edgellm

from . import ollama_models as W
from .anthropic_api import _tool_input as tool_input  # arguments JSON text -> an object
from .answer_items import ItemAssembler
from .config import parse_keep_alive
from .errors import APIError, invalid
from .lifecycle import (ClientGone, Encoder, Generation, Lifecycle, engine_error, off_loop,
                        read_json)
from .wire import chunk_delta, parse

log = logging.getLogger("edgellm.server")

JSON = Dict[str, Any]
OLLAMA_VERSION = "0.12.0"  # the Ollama API level these routes follow (GET /api/version)
NDJSON = "application/x-ndjson"
ENCODER_ARCHS = ("bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "xlm-roberta", "t5encoder")
FIM_TOKENS = (("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
              ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
              ("<|fim_begin|>", "<|fim_hole|>", "<|fim_end|>"))


def is_ollama_path(path: str) -> bool:
    return path.startswith("/api/")


def error_body(e: APIError) -> JSON:
    return W.ErrorBody(error=e.message).model_dump()


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(error_body(e), status_code=e.status, headers=e.headers)


def now_iso(t: Optional[float] = None) -> str:
    when = datetime.fromtimestamp(time.time() if t is None else t, timezone.utc)
    return when.isoformat(timespec="microseconds").replace("+00:00", "Z")


def tagged(name: str) -> str:
    """Ollama's spelling of a name: with its tag (`smollm2` -> `smollm2:latest`)."""
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


def _key(name: str) -> str:
    return tagged(name.strip().lower())


def _ns(seconds: float) -> int:
    return max(0, int(seconds * 1e9))


# --- what a model file is ------------------------------------------------------------------------

@dataclass
class Facts:
    """A GGUF's facts for /api/tags, /api/show, /api/ps (read once per file version)."""
    metadata: JSON
    details: Any
    capabilities: List[str]
    template: str
    size: int
    modified: float
    digest: str
    fim: Optional[Tuple[str, str, str]]


_facts: Dict[Tuple[str, int, int], Facts] = {}
_facts_lock = threading.Lock()


def _param_count(n: int) -> str:
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}".rstrip("0").rstrip(".") + suffix
    return str(n)


def _digest(path: str, st: os.stat_result) -> str:
    """The known model's SHA-256, else a fingerprint of the file (size, time, first and last
    MiB): hashing a multi-GB file on every listing would take seconds."""
    from edgellm import models

    for spec in models.KNOWN_MODELS.values():
        if spec.filename == os.path.basename(path) and spec.size == st.st_size:
            return spec.sha256
    h = hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns}".encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, st.st_size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()


def capabilities(md: JSON, template: str, fim) -> List[str]:
    arch = str(md.get("general.architecture", ""))
    encoder = arch in ENCODER_ARCHS
    caps = [] if encoder else ["completion"]
    if not encoder and "tools" in template:
        caps.append("tools")
    if fim:
        caps.append("insert")
    if any(k.startswith(("clip.", f"{arch}.vision.")) for k in md):
        caps.append("vision")
    if encoder or f"{arch}.pooling_type" in md:
        caps.append("embedding")
    if any(w in template for w in ("enable_thinking", "<think>", "reasoning_content")):
        caps.append("thinking")
    return caps


def facts(path: str) -> Facts:
    from edgellm.model_file import ModelFile
    from edgellm.repl.model_facts import _FILE_TYPES

    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    with _facts_lock:
        if key in _facts:
            return _facts[key]
    try:
        with ModelFile(path) as mf:
            md = dict(mf.metadata)
            n_params = sum(t.n_elements for t in mf.tensors.values())
    except Exception as e:  # noqa: BLE001 - a file that is no GGUF
        raise APIError(500, f"cannot read the model file {os.path.basename(path)}: {e}",
                       "server_error") from None
    tokens = md.get("tokenizer.ggml.tokens") or []
    vocab = set(tokens) if isinstance(tokens, list) else set()
    fim = next((t for t in FIM_TOKENS if all(x in vocab for x in t)), None)
    template = md.get("tokenizer.chat_template") or ""
    arch = str(md.get("general.architecture", ""))
    ftype = md.get("general.file_type")
    details = W.Details(format="gguf", family=arch, families=[arch] if arch else None,
                        parameter_size=str(md.get("general.size_label") or _param_count(n_params)),
                        quantization_level=_FILE_TYPES.get(ftype, "") if isinstance(ftype, int)
                        else "")
    out = Facts(md, details, capabilities(md, template, fim), template, st.st_size, st.st_mtime,
                _digest(path, st), fim)
    with _facts_lock:
        _facts[key] = out
    return out


def model_info(md: JSON, verbose: bool) -> JSON:
    """The GGUF's keys; the tokenizer's long arrays as null unless `verbose` (as Ollama)."""
    out = {k: (None if isinstance(v, list) and len(v) > 64 and not verbose else v)
           for k, v in md.items() if k != "tokenizer.chat_template"}
    out["general.parameter_count"] = out.get("general.parameter_count")
    return {k: v for k, v in out.items() if not (k == "general.parameter_count" and v is None)}


# --- created models: a name with its own system prompt, template and parameters --------------------

@dataclass
class Made:
    name: str
    source: str                      # the name or file it was made from
    system: Optional[str] = None
    template: Optional[str] = None
    parameters: JSON = field(default_factory=dict)   # Ollama option name -> value, as given
    modified: float = field(default_factory=time.time)

    def options(self) -> Any:
        return W.parse_options(self.parameters)


def parameters_text(parameters: JSON) -> str:
    """Ollama's `parameters` text: one `name value` line each (stop: one line a string)."""
    lines = []
    for name, value in parameters.items():
        for v in (value if isinstance(value, list) else [value]):
            lines.append(f"{name:<30} {json.dumps(v) if isinstance(v, str) else v}")
    return "\n".join(lines)


def parse_modelfile(text: str) -> JSON:
    """The Modelfile subset: FROM, PARAMETER, SYSTEM, TEMPLATE (values may be \"\"\"-quoted
    over several lines); ADAPTER, MESSAGE, LICENSE are refused by name."""
    out: JSON = {"parameters": {}}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word, rest = word.upper(), rest.strip()
        if rest.startswith('"""'):
            body = rest[3:]
            while '"""' not in body and i < len(lines):
                body += "\n" + lines[i]
                i += 1
            if '"""' not in body:
                raise invalid(f"Modelfile: the \"\"\" of {word} is never closed", "modelfile")
            rest = body[:body.index('"""')]
        elif rest.startswith('"') and rest.endswith('"') and len(rest) > 1:
            rest = json.loads(rest) if word != "PARAMETER" else rest
        if word == "FROM":
            out["from"] = rest
        elif word in ("SYSTEM", "TEMPLATE"):
            out[word.lower()] = rest
        elif word == "PARAMETER":
            name, _, value = rest.partition(" ")
            value = value.strip()
            try:
                v = json.loads(value)
            except json.JSONDecodeError:
                v = value
            if name == "stop":
                out["parameters"].setdefault("stop", []).append(str(v))
            else:
                out["parameters"][name] = v
        else:
            raise invalid(f"Modelfile: {word} is not supported (FROM, PARAMETER, SYSTEM and "
                          "TEMPLATE are)", "modelfile", "unsupported")
    return out


# --- the models a server has ---------------------------------------------------------------------

class OneModel:
    """A single-model server's set: its one model, whatever name a request uses."""
    manages = False

    def __init__(self, host):
        self.host = host

    def path(self) -> Optional[str]:
        llm = self.host.llm
        inner = getattr(llm, "llm", llm)
        return getattr(inner, "model_path", None) or self.host.config.model_path

    def entries(self) -> List[Tuple[str, Optional[str]]]:
        return [(self.host.config.model_id, self.path())]

    def find(self, name: str) -> Tuple[str, Optional[str]]:
        return self.entries()[0]

    def running(self) -> List[Tuple[str, Optional[str], Any, Optional[float], Optional[int]]]:
        if self.host.state != "ready":
            return []
        return [(self.host.config.model_id, self.path(), self.host.llm, None, None)]


class ManyModels:
    """A many-model server's set: the catalog, the pool, and the router's per-model apps."""
    manages = True

    def __init__(self, catalog, pool, router):
        self.catalog, self.pool, self.router = catalog, pool, router

    def entries(self) -> List[Tuple[str, Optional[str]]]:
        self.catalog._scan_quietly()
        return [(e.id, e.path) for e in self.catalog.entries]

    def find(self, name: str) -> Tuple[str, Optional[str]]:
        e = self.catalog.find(name)
        return e.id, e.path

    def running(self):
        from .model_pool import LOADED

        out = []
        for e in self.catalog.entries:
            s = self.pool.slot(e)
            if s.state == LOADED:
                out.append((e.id, e.path, s.host.llm, s.expires_at, s.bytes))
        return out


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
    """The lifecycle's view of one Ollama answer: NDJSON lines, or one object."""
    headers = {"Content-Type": NDJSON}

    def __init__(self, chat: bool, model: str, t0: float, want_logprobs: bool = False):
        self.chat, self.model, self.t0 = chat, model, t0
        self.answer = Answer()
        self.want_logprobs = want_logprobs
        self.logprobs: List[JSON] = []
        self.t_first: Optional[float] = None
        self.final: Optional[JSON] = None
        self._lines: List[JSON] = []

    def _head(self) -> JSON:
        return {"model": self.model, "created_at": now_iso()}

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
                       total_duration=_ns(now - self.t0), load_duration=0,
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
        return [error_body(err)]

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
    return [{"type": "text", "text": text}] + [image_part(d, f"{where}[{i}]")
                                               for i, d in enumerate(images)]


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

    def __init__(self, host, server: Optional["OllamaServer"] = None):
        self.host = host
        self.config = host.config
        self.metrics = host.metrics
        self.server = server
        self.life = Lifecycle(host, envelope=error_response)

    def _made(self, name: str) -> Optional[Made]:
        return self.server.made.get(_key(name)) if self.server else None

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

    async def _generation(self, llm, body: W.OllamaGeneration, chat: bool, t0: float,
                          messages: List[JSON], tools=None, prompt: Optional[str] = None,
                          template: Optional[str] = None) -> Generation:
        """The engine call: a prompt written out (raw, fill-in-the-middle, or `template`
        rendered), its special tokens the model's markup; else the chat API over `messages`."""
        kw, opts = self._sampling(body, self._made(body.model))
        ctx = self._load_settings(llm, opts)
        think = self._think(body, llm, body.model)
        enc = OllamaEncoder(chat, body.model, t0, body.logprobs)
        param = "messages" if chat else "prompt"
        if prompt is None and template:
            prompt = await off_loop(_render, template, messages, tools, think)
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
            out = {"model": body.model, "created_at": now_iso(),
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
            return await self._generation(llm, body, True, t0, messages, tools,
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
            return await self._generation(llm, body, False, t0, messages, None, prompt,
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
        try:
            result = await self.life.race(llm.embeddings(
                prompts, normalize=-1 if legacy else 2, pooling=pooling), request,
                self.life.deadline(t0)) if prompts else None
        except ClientGone:
            return self.life.gone(endpoint, "while its embeddings were computed")
        except Exception as e:  # noqa: BLE001
            return self.life.fail(endpoint, engine_error(e, param))
        finally:
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
            "total_duration": _ns(time.monotonic() - t0), "load_duration": 0,
            "prompt_eval_count": n}))


def _shorten(v: List[float], d: int) -> List[float]:
    """The first d dimensions, normalised again (Ollama's `dimensions`)."""
    v = v[:d]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v] if norm else v


def _render(template: str, messages: List[JSON], tools, think: Optional[JSON]) -> str:
    """A created model's (or the request's) TEMPLATE -- Jinja, edgellm's template language --
    over the conversation."""
    from edgellm.chat_template import render_chat

    return render_chat(messages, template, add_generation_prompt=True, tools=tools,
                       **(think or {}))


# --- the server's routes ---------------------------------------------------------------------------

class OllamaServer:
    """The routes about the server's models (tags, ps, show, pull, create, copy, delete) and
    the probes (/, /api/version)."""

    def __init__(self, models, metrics, webui=None):
        self.models = models          # OneModel or ManyModels
        self.metrics = metrics
        self.webui = webui
        self.made: Dict[str, Made] = {}  # created models and copies, by lower-case tagged name
        self._lock = threading.Lock()

    def routes(self, route) -> list:
        r = [("/api/version", self.version, "GET", None), ("/api/tags", self.tags, "GET", None),
             ("/api/ps", self.ps, "GET", None), ("/api/show", self.show, "POST", W.OllamaShowBody),
             ("/api/pull", self.pull, "POST", W.OllamaPullBody),
             ("/api/create", self.create, "POST", W.OllamaCreateBody),
             ("/api/copy", self.copy, "POST", W.OllamaCopyBody),
             ("/api/delete", self.delete, "DELETE", W.OllamaDeleteBody),
             ("/api/blobs/{digest}", self.blob, "HEAD", None),
             ("/api/blobs/{digest}", self.blob, "POST", None)]
        out = [route(p, fn, m, b, "Ollama", streams=NDJSON if p in ("/api/pull", "/api/create")
                     else None) for p, fn, m, b in r]
        # "/" is the web chat page's too: like its routes, not in /openapi.json
        return out + [Route("/", self.root, methods=["GET", "HEAD"])]

    async def _answer(self, endpoint: str, work) -> Response:
        try:
            out = await work()
        except Exception as e:  # noqa: BLE001
            err = engine_error(e, None)
            self.metrics.request_done(endpoint, err.status)
            return error_response(err)
        self.metrics.request_done(endpoint, 200)
        return out

    async def root(self, request: Request) -> Response:
        """GET / : "Ollama is running" to Ollama's clients (they ask for JSON, or say they are
        ollama in User-Agent); anyone else gets the web chat page (404 without it)."""
        accept = request.headers.get("accept", "")
        if request.headers.get("user-agent", "").lower().startswith("ollama") or (
                "application/json" in accept and "text/html" not in accept):
            return PlainTextResponse("Ollama is running")
        if self.webui is None:
            raise HTTPException(404)
        return await self.webui.page(request)

    async def version(self, request: Request) -> Response:
        """The Ollama API version these routes follow."""
        return JSONResponse({"version": OLLAMA_VERSION, "edgellm": edgellm.__version__})

    def _card(self, name: str, path: str, modified: Optional[float] = None) -> JSON:
        f = facts(path)
        return W.ModelCard(name=tagged(name), model=tagged(name),
                           modified_at=now_iso(modified or f.modified), size=f.size,
                           digest=f.digest, details=f.details).model_dump()

    async def tags(self, request: Request) -> Response:
        """The models this server has (and the created ones)."""
        async def work():
            def run():
                cards = [self._card(i, p) for i, p in self.models.entries()
                         if p and os.path.isfile(p)]  # a stand-in engine has none
                for m in list(self.made.values()):
                    _, path = self.models.find(m.name)
                    cards.append(self._card(m.name, path, m.modified))
                return cards
            return JSONResponse({"models": await off_loop(run)})
        return await self._answer("ollama_tags", work)

    async def ps(self, request: Request) -> Response:
        """The models in memory."""
        async def work():
            out = []
            for ident, path, llm, expires, size in self.models.running():
                if not path or not os.path.isfile(path):
                    continue
                f = await off_loop(facts, path)
                inner = getattr(llm, "llm", llm)
                out.append(W.Running(
                    name=tagged(ident), model=tagged(ident), size=size or f.size, digest=f.digest,
                    details=f.details, size_vram=0, context_length=getattr(inner, "n_ctx", None),
                    expires_at=now_iso(expires) if expires else "2318-01-01T00:00:00Z"
                ).model_dump(exclude_none=True))
            return JSONResponse({"models": out})
        return await self._answer("ollama_ps", work)

    def _resolve(self, name: str) -> Tuple[str, str, Optional[Made]]:
        """(entry id, file, created model) of a name; Ollama's 404 when unknown."""
        try:
            ident, path = self.models.find(name)
        except APIError as e:
            if e.status == 404:
                raise APIError(404, f"model '{name}' not found", "not_found_error", "model",
                               "model_not_found") from None
            raise
        if not path:
            raise APIError(503, "the model is still loading", "unavailable_error")
        return ident, path, self.made.get(_key(name))

    async def show(self, request: Request) -> Response:
        """A model's details, GGUF keys, capabilities, template and parameters."""
        async def work():
            body = parse(W.OllamaShowBody, await read_json(request))
            name = _named(body)
            ident, path, made = self._resolve(name)
            f = await off_loop(facts, path)
            params = made.parameters if made else {}
            template = (made.template if made and made.template else None) or f.template
            system = made.system if made else None
            modelfile = [f"# Modelfile of {tagged(name)} (edgellm)", f"FROM {path}"]
            if template:
                modelfile.append(f'TEMPLATE """{template}"""')
            if system:
                modelfile.append(f'SYSTEM """{system}"""')
            modelfile += [f"PARAMETER {line}" for line in parameters_text(params).splitlines()]
            out = W.Show(license=_license(f.metadata), modelfile="\n".join(modelfile) + "\n",
                         parameters=parameters_text(params), template=template, system=system,
                         details=f.details, model_info=model_info(f.metadata, body.verbose),
                         capabilities=f.capabilities,
                         modified_at=now_iso(made.modified if made else f.modified))
            return JSONResponse(out.model_dump(exclude_none=True))
        return await self._answer("ollama_show", work)

    # --- changing the set ------------------------------------------------------------------------
    def _managed(self, verb: str):
        if not self.models.manages:
            raise invalid(f"{verb} needs a many-model server: start edgellm serve with "
                          "--models-dir (or several models)", None, "unsupported")
        return self.models

    async def copy(self, request: Request) -> Response:
        """A second name for a model."""
        async def work():
            body = parse(W.OllamaCopyBody, await read_json(request))
            models = self._managed("/api/copy")
            ident, path, made = self._resolve(body.source)
            entry = models.catalog.find(body.source)
            self._name(body.destination, entry, Made(
                name=tagged(body.destination), source=tagged(body.source),
                system=made.system if made else None, template=made.template if made else None,
                parameters=dict(made.parameters) if made else {}))
            return Response(status_code=200)
        return await self._answer("ollama_copy", work)

    def _name(self, name: str, entry, made: Made) -> None:
        from .model_catalog import CatalogError

        key = _key(name)
        try:
            current = self.models.catalog.find(name)
        except APIError:
            current = None
        if current is not None and key not in self.made and current is not entry:
            raise invalid(f"the name '{name}' is taken by the model {current.id}", "model",
                          "model_exists")
        try:
            self.models.catalog.add_name(tagged(name), entry)
        except CatalogError as e:
            raise invalid(str(e), "model", "model_exists") from None
        self.made[key] = made

    async def delete(self, request: Request) -> Response:
        """Forget a name: a copy or created model; a model file of --models-dir is deleted, one
        given on the command line or pulled only leaves the list."""
        async def work():
            body = parse(W.OllamaDeleteBody, await read_json(request))
            models = self._managed("/api/delete")
            name = _named(body)
            ident, path, made = self._resolve(name)
            key = _key(name)
            if key in self.made:
                del self.made[key]
                models.catalog.remove_name(tagged(name))
                return Response(status_code=200)
            entry = models.catalog.find(name)
            slot = models.pool.slot(entry)
            if not await models.pool.unload(slot):
                raise APIError(409, f"the model {entry.id} is busy; delete it when its requests "
                                    "are done", "invalid_request_error", "model", "model_busy")
            for k in [k for k, m in self.made.items() if models.catalog.find(m.name) is entry]:
                del self.made[k]
            models.catalog.remove(entry)
            models.pool.slots.pop(entry.id, None)
            models.router.forget(entry.id)
            d = models.catalog.models_dir
            if d and os.path.dirname(os.path.abspath(entry.path)) == os.path.abspath(d):
                os.remove(entry.path)  # else the next scan of --models-dir brings it back
            return Response(status_code=200)
        return await self._answer("ollama_delete", work)

    async def create(self, request: Request) -> Response:
        """A model from one of this server's models or a GGUF file on its disk, with a system
        prompt, template and parameters (or a Modelfile with those)."""
        body: Any = None

        async def prepare():
            nonlocal body
            body = parse(W.OllamaCreateBody, await read_json(request))
            models = self._managed("/api/create")
            name = _named(body)
            spec: JSON = {"from": body.from_, "system": body.system, "template": body.template,
                          "parameters": dict(body.parameters or {})}
            if body.modelfile:
                mf = parse_modelfile(body.modelfile)
                spec = {**{k: spec.get(k) or mf.get(k) for k in ("from", "system", "template")},
                        "parameters": {**mf["parameters"], **spec["parameters"]}}
            for what in ("files", "adapters", "messages", "quantize"):
                if getattr(body, what):
                    raise invalid(f"'{what}' is not supported: create from a model of this server "
                                  "or a GGUF file on its disk ('from')", what, "unsupported")
            source = spec["from"] or body.path
            if not source:
                raise invalid("'from' is required: a model of this server or the path of a GGUF "
                              "file on its disk", "from", "missing_field")
            W.parse_options(spec["parameters"], "parameters")  # a 400 naming a bad one
            if spec["template"]:
                await off_loop(_render, spec["template"], [{"role": "user", "content": "hi"}],
                               None, None)
            if os.path.isfile(os.path.expanduser(source)):
                entry = models.catalog.add(source, os.path.expanduser(source))
                base = None
            else:
                entry = models.catalog.find(self._resolve(source)[0])
                base = self.made.get(_key(source))
            made = Made(name=tagged(name), source=source,
                        system=spec["system"] or (base.system if base else None),
                        template=spec["template"] or (base.template if base else None),
                        parameters={**(base.parameters if base else {}), **spec["parameters"]})
            self._name(name, entry, made)
            return facts(entry.path).digest

        stream = True
        try:
            digest = await prepare()
            stream = body.stream
        except Exception as e:  # noqa: BLE001
            err = engine_error(e, None)
            self.metrics.request_done("ollama_create", err.status)
            return error_response(err)
        self.metrics.request_done("ollama_create", 200)
        lines = [{"status": "parsing modelfile"},
                 {"status": f"using existing layer sha256:{digest}"},
                 {"status": "writing manifest"}, {"status": "success"}]
        return _progress_answer(lines, stream)

    async def pull(self, request: Request) -> Response:
        """A known model fetched into the cache (`edgellm models fetch`), with Ollama's progress
        lines, then served."""
        try:
            body = parse(W.OllamaPullBody, await read_json(request))
            models = self._managed("/api/pull")
            name = _named(body)
            from edgellm import models as registry
            try:
                spec = registry._spec(registry.canonical_name(name.split(":")[0]))
            except Exception:  # noqa: BLE001 - not a known name
                raise APIError(404, f"pull model manifest: file does not exist: '{name}' is not "
                                    f"one of the known models ({', '.join(registry.all_names())})",
                               "not_found_error", "model", "model_not_found") from None
        except Exception as e:  # noqa: BLE001
            err = engine_error(e, None)
            self.metrics.request_done("ollama_pull", err.status)
            return error_response(err)
        self.metrics.request_done("ollama_pull", 200)
        return await _PullAnswer(spec, registry, models, body.stream).answer()

    async def blob(self, request: Request) -> Response:
        """Blob uploads are not taken: create from a GGUF on the server's disk instead."""
        raise APIError(404 if request.method == "HEAD" else 400,
                       "blob uploads are not supported: /api/create takes 'from' as the path of a "
                       "GGUF file on the server's disk", "invalid_request_error", None,
                       "unsupported")


def _named(body) -> str:
    name = body.model or body.name
    if not name:
        raise invalid("'model' is required", "model", "missing_field")
    return name


def _license(md: JSON) -> Optional[str]:
    v = md.get("general.license")
    return v if isinstance(v, str) else None


def _progress_answer(lines: List[JSON], stream: bool) -> Response:
    if not stream:
        return JSONResponse(lines[-1])
    data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    return Response(data, media_type=NDJSON)


class _PullAnswer:
    """The NDJSON progress of one pull: the fetch runs in a thread; its bytes so far are polled
    from the download's partial file."""

    def __init__(self, spec, registry, models: ManyModels, stream: bool):
        self.spec, self.registry, self.models, self.stream = spec, registry, models, stream
        self.digest = f"sha256:{spec.sha256}"

    def _written(self) -> int:
        dest = self.registry.cache_dir() / self.spec.filename
        if dest.is_file() and dest.stat().st_size == self.spec.size:
            return self.spec.size
        parts = glob.glob(str(dest.parent / f".fetch-{self.spec.name}-*" / "*.partial"))
        return max([os.path.getsize(p) for p in parts if os.path.exists(p)], default=0)

    async def _run(self):
        import asyncio

        yield W.Progress(status="pulling manifest")
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(None, lambda: self.registry.fetch(self.spec.name, quiet=True))
        total, last = self.spec.size, -1
        while True:
            done = job.done()
            n = self._written() if not done or job.exception() else total
            if n != last:
                yield W.Progress(status=f"pulling {self.spec.sha256[:12]}", digest=self.digest,
                                 total=total, completed=n)
                last = n
            if done:
                break
            await asyncio.sleep(0.5)
        path = job.result()  # its error, if any, becomes the in-band error line
        yield W.Progress(status="verifying sha256 digest")
        self.models.catalog.add(self.spec.name, str(path))
        yield W.Progress(status="writing manifest")
        yield W.Progress(status="success")

    async def answer(self) -> Response:
        from .sse import EventStreamResponse

        if not self.stream:  # the last status, once done; or the error with its status
            last = None
            try:
                async for p in self._run():
                    last = p
            except Exception as e:  # noqa: BLE001
                return error_response(engine_error(e, None))
            return JSONResponse(W.dump(last))

        async def lines():
            try:
                async for p in self._run():
                    yield json.dumps(W.dump(p)).encode() + b"\n"
            except Exception as e:  # noqa: BLE001 - the headers are out: the error goes in-band
                yield json.dumps(error_body(engine_error(e, None))).encode() + b"\n"

        async def on_close(disconnected: bool):
            return None  # a fetch under way finishes in its thread (the cache keeps it)

        return EventStreamResponse(lines(), on_close, headers={"Content-Type": NDJSON})
