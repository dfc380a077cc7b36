"""Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

A request is checked field by field (an unknown field is a 400, as on the OpenAI routes), turned
into OpenAI-style chat messages and tools, and run through the shared chat API
(`llm.chat_stream_chunks`), whose chunks carry parsed `ChatDelta`s: content, reasoning and
tool-call fragments. `MessageBuilder` turns those deltas into Anthropic content blocks (`text`,
`thinking`, `tool_use`) and, when streaming, into Anthropic's named SSE events. The request life
cycle -- admission, the wait for the first chunk while watching for disconnect and the deadline,
aborting the engine request on close -- is the OpenAI routes' own (`Routes`, `ChunkStream`,
`EventStreamResponse`); only the shapes differ. Errors use Anthropic's envelope
`{"type": "error", "error": {"type", "message"}}`.
"""
import asyncio
import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from edgellm.chat_output import ChatDelta

from .admission import ChunkStream
from .errors import APIError, invalid, timed_out
from .protocol import (_bad_type, _short, anything, boolean, integer, number, obj,
                       stop_strings, string)
from .routes import CLIENT_CLOSED, Routes, engine_error, off_loop, read_json
from .sse import EventStreamResponse

log = logging.getLogger("edgellm.server")

JSON = Dict[str, Any]

# --- errors --------------------------------------------------------------------------------------

# Our HTTP statuses -> Anthropic's error types.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
               504: "timeout_error"}


def error_body(e: APIError) -> JSON:
    kind = ERROR_TYPES.get(e.status, "api_error" if e.status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": e.message}}


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(error_body(e), status_code=e.status, headers=e.headers)


def is_anthropic_path(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


# --- request checking ------------------------------------------------------------------------------

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _fields(d: Any, where: str, allowed: Dict[str, Callable], required=()) -> JSON:
    """Check object `d`: every key known, every value of the right kind; null = absent."""
    if not isinstance(d, dict):
        raise _bad_type(where or "body", d, "an object")
    out = {}
    for key, value in d.items():
        check = allowed.get(key)
        if check is None:
            raise invalid(f"unknown field '{_at(where, key)}'", _at(where, key), "unknown_field")
        if value is not None:
            out[key] = check(value, _at(where, key))
    for key in required:
        if key not in out:
            raise invalid(f"'{_at(where, key)}' is required", _at(where, key), "missing_field")
    return out


def cache_control(v, name):
    """Accepted where Anthropic allows it; the engine's prefix cache is automatic anyway."""
    f = _fields(v, name, {"type": string, "ttl": string}, ("type",))
    if f["type"] != "ephemeral":
        raise invalid(f"'{name}.type' must be 'ephemeral'", f"{name}.type", "invalid_value")
    if f.get("ttl", "5m") not in ("5m", "1h"):
        raise invalid(f"'{name}.ttl' must be '5m' or '1h'", f"{name}.ttl", "invalid_value")
    return v


def no_citations(v, name):
    if not isinstance(v, list) or v:
        raise invalid(f"'{name}': citations are not supported", name, "unsupported")
    return v


def metadata(v, name):
    return _fields(v, name, {"user_id": string})


def stop_sequences(v, name):
    if not isinstance(v, list):
        raise _bad_type(name, v, "an array of strings")
    return stop_strings(v, name) or []


def _type_is(value: str) -> Callable:
    def check(v, name):
        if v != value:
            raise invalid(f"'{name}' must be {value!r}", name, "invalid_value")
        return v
    return check


_UNSUPPORTED_BLOCKS = {
    "image": "images (this server runs text-only models)",
    "document": "documents (PDF, plain-text or content sources): send the text as a text block",
    "search_result": "search results", "container_upload": "container uploads",
    "server_tool_use": "server tools", "web_search_tool_result": "server tools",
}

_TEXT_BLOCK = {"type": string, "text": string, "cache_control": cache_control,
               "citations": no_citations}


def _block_type(b: Any, where: str) -> str:
    if not isinstance(b, dict):
        raise _bad_type(where, b, "a content block object")
    kind = b.get("type")
    if not isinstance(kind, str):
        raise invalid(f"'{where}.type' is required", f"{where}.type", "missing_field")
    if kind in _UNSUPPORTED_BLOCKS:
        raise invalid(f"'{where}': {kind} blocks are not supported: {_UNSUPPORTED_BLOCKS[kind]}",
                      f"{where}.type", "unsupported")
    return kind


def _wrong_block(kind: str, role: str, where: str) -> APIError:
    known = {"text", "tool_use", "tool_result", "thinking", "redacted_thinking"}
    if kind == "redacted_thinking":
        return invalid(f"'{where}': redacted_thinking blocks (encrypted Claude output) cannot be "
                       f"used by this model", f"{where}.type", "unsupported")
    if kind in known:
        return invalid(f"'{where}': a {kind} block is not allowed in a {role} message",
                       f"{where}.type", "invalid_value")
    return invalid(f"'{where}.type' {_short(kind)} is not a known content block type",
                   f"{where}.type", "invalid_value")


def _tool_result_text(v: Any, where: str) -> str:
    if isinstance(v, str):
        return v
    if not isinstance(v, list):
        raise _bad_type(where, v, "a string or an array of text blocks")
    texts = []
    for j, b in enumerate(v):
        w = f"{where}[{j}]"
        kind = _block_type(b, w)
        if kind != "text":
            raise invalid(f"'{w}': only text blocks are supported in tool results",
                          f"{w}.type", "unsupported")
        texts.append(_fields(b, w, _TEXT_BLOCK, ("text",))["text"])
    return "\n".join(texts)


def _user_turn(blocks: List[Tuple[str, Any]], tool_names: Dict[str, str]) -> List[JSON]:
    """Tool results -> `role: tool` messages (first, as they answer the previous turn's calls),
    the text -> one user message."""
    out, texts = [], []
    for where, b in blocks:
        kind = _block_type(b, where)
        if kind == "text":
            texts.append(_fields(b, where, _TEXT_BLOCK, ("text",))["text"])
        elif kind == "tool_result":
            f = _fields(b, where, {"type": string, "tool_use_id": string, "content": anything,
                                   "is_error": boolean, "cache_control": cache_control},
                        ("tool_use_id",))
            call_id = f["tool_use_id"]
            if call_id not in tool_names:
                raise invalid(f"'{where}.tool_use_id' {call_id!r} answers no tool_use block of an "
                              f"earlier assistant message", f"{where}.tool_use_id",
                              "invalid_value")
            text = _tool_result_text(f.get("content", ""), f"{where}.content")
            if f.get("is_error"):
                text = "Error: " + text
            out.append({"role": "tool", "tool_call_id": call_id, "name": tool_names[call_id],
                        "content": text})
        else:
            raise _wrong_block(kind, "user", where)
    if texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _assistant_turn(blocks: List[Tuple[str, Any]], tool_names: Dict[str, str]) -> JSON:
    texts, calls, thoughts = [], [], []
    for where, b in blocks:
        kind = _block_type(b, where)
        if kind == "text":
            texts.append(_fields(b, where, _TEXT_BLOCK, ("text",))["text"])
        elif kind == "tool_use":
            f = _fields(b, where, {"type": string, "id": string, "name": string, "input": obj,
                                   "cache_control": cache_control}, ("id", "name", "input"))
            tool_names[f["id"]] = f["name"]
            calls.append({"id": f["id"], "type": "function",
                          "function": {"name": f["name"],
                                       "arguments": json.dumps(f["input"], ensure_ascii=False)}})
        elif kind == "thinking":
            f = _fields(b, where, {"type": string, "thinking": string, "signature": string},
                        ("thinking",))
            thoughts.append(f["thinking"])
        else:
            raise _wrong_block(kind, "assistant", where)
    msg: JSON = {"role": "assistant", "content": "\n".join(texts)}
    if calls:
        msg["tool_calls"] = calls
    if thoughts:
        msg["reasoning_content"] = "\n".join(thoughts)
    return msg


def convert_messages(v: Any, system: Any = None) -> List[JSON]:
    """Anthropic `system` + `messages` -> OpenAI-style chat messages. Consecutive turns of one
    role are combined into one turn, as Anthropic does."""
    out: List[JSON] = []
    if system is not None:
        if isinstance(system, str):
            text = system
        elif isinstance(system, list):
            parts = []
            for j, b in enumerate(system):
                w = f"system[{j}]"
                if _block_type(b, w) != "text":
                    raise invalid(f"'{w}.type' must be 'text'", f"{w}.type", "invalid_value")
                parts.append(_fields(b, w, _TEXT_BLOCK, ("text",))["text"])
            text = "\n".join(parts)
        else:
            raise _bad_type("system", system, "a string or an array of text blocks")
        out.append({"role": "system", "content": text})

    if not isinstance(v, list):
        raise _bad_type("messages", v, "an array of message objects")
    if not v:
        raise invalid("'messages' must not be empty", "messages", "invalid_value")
    turns: List[Tuple[str, List[Tuple[str, Any]]]] = []
    for i, msg in enumerate(v):
        where = f"messages[{i}]"
        f = _fields(msg, where, {"role": string, "content": anything}, ("role", "content"))
        role = f["role"]
        if role not in ("user", "assistant"):
            raise invalid(f"'{where}.role' must be 'user' or 'assistant', got {_short(role)} "
                          f"(put system prompts in the top-level 'system' field)",
                          f"{where}.role", "invalid_value")
        content = f["content"]
        if isinstance(content, str):
            blocks = [(f"{where}.content", {"type": "text", "text": content})]
        elif isinstance(content, list):
            if not content:
                raise invalid(f"'{where}.content' must not be empty", f"{where}.content",
                              "invalid_value")
            blocks = [(f"{where}.content[{j}]", b) for j, b in enumerate(content)]
        else:
            raise _bad_type(f"{where}.content", content, "a string or an array of content blocks")
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    if turns[-1][0] == "assistant":
        raise invalid("the last message is from the assistant: continuing a partial assistant "
                      "turn (prefill) is not supported; end with a user message",
                      f"messages[{len(v) - 1}]", "unsupported")
    tool_names: Dict[str, str] = {}  # tool_use id -> tool name, for the tool results
    for role, blocks in turns:
        if role == "user":
            out.extend(_user_turn(blocks, tool_names))
        else:
            out.append(_assistant_turn(blocks, tool_names))
    return out


def convert_tools(v: Any) -> List[JSON]:
    """Anthropic custom tools -> OpenAI function tools."""
    if not isinstance(v, list):
        raise _bad_type("tools", v, "an array of tool objects")
    out, seen = [], set()
    for i, t in enumerate(v):
        where = f"tools[{i}]"
        if not isinstance(t, dict):
            raise _bad_type(where, t, "a tool object")
        if t.get("type") not in (None, "custom"):
            raise invalid(f"'{where}.type' {_short(t.get('type'))}: server tools (web search, "
                          f"code execution, bash, text editor, computer use, ...) are not "
                          f"supported; define a custom tool with an input_schema",
                          f"{where}.type", "unsupported")
        f = _fields(t, where, {"type": string, "name": string, "description": string,
                               "input_schema": obj, "cache_control": cache_control},
                    ("name", "input_schema"))
        name = f["name"]
        if not TOOL_NAME.match(name):
            raise invalid(f"'{where}.name' must match {TOOL_NAME.pattern}, got {_short(name)}",
                          f"{where}.name", "invalid_value")
        if name in seen:
            raise invalid(f"'{where}.name': tool {name!r} is defined twice", f"{where}.name",
                          "invalid_value")
        seen.add(name)
        if f["input_schema"].get("type") != "object":
            raise invalid(f"'{where}.input_schema.type' must be 'object'",
                          f"{where}.input_schema.type", "invalid_value")
        fn: JSON = {"name": name}
        if "description" in f:
            fn["description"] = f["description"]
        fn["parameters"] = f["input_schema"]
        out.append({"type": "function", "function": fn})
    return out


def convert_tool_choice(v: Any, tools: Optional[List[JSON]]) -> Tuple[Any, Optional[bool]]:
    """Anthropic tool_choice -> (OpenAI tool_choice, parallel_tool_calls)."""
    if not isinstance(v, dict):
        raise _bad_type("tool_choice", v, "an object")
    kind = v.get("type")
    if kind not in ("auto", "any", "tool", "none"):
        raise invalid(f"'tool_choice.type' must be 'auto', 'any', 'tool' or 'none', got "
                      f"{_short(kind)}", "tool_choice.type", "invalid_value")
    allowed: Dict[str, Callable] = {"type": string}
    if kind != "none":
        allowed["disable_parallel_tool_use"] = boolean
    if kind == "tool":
        allowed["name"] = string
    f = _fields(v, "tool_choice", allowed, ("name",) if kind == "tool" else ())
    names = [t["function"]["name"] for t in tools or []]
    if kind in ("any", "tool") and not names:
        raise invalid(f"tool_choice {kind!r} needs 'tools'", "tool_choice", "invalid_value")
    if kind == "tool" and f["name"] not in names:
        raise invalid(f"'tool_choice.name' {f['name']!r} is not one of the tools "
                      f"({', '.join(names)})", "tool_choice.name", "invalid_value")
    choice = {"auto": "auto", "any": "required", "none": "none"}.get(kind) or \
        {"type": "function", "function": {"name": f.get("name")}}
    return choice, not f.get("disable_parallel_tool_use", False)


def convert_thinking(v: Any, max_tokens: Optional[int]) -> Tuple[JSON, bool]:
    """-> (chat_template_kwargs, whether thinking text is shown)."""
    if not isinstance(v, dict):
        raise _bad_type("thinking", v, "an object")
    kind = v.get("type")
    display = {"display": _display}
    if kind == "enabled":
        f = _fields(v, "thinking", {"type": string, "budget_tokens": integer(1), **display},
                    ("budget_tokens",))
        if max_tokens is not None and f["budget_tokens"] >= max_tokens:
            raise invalid(f"'thinking.budget_tokens' ({f['budget_tokens']}) must be less than "
                          f"'max_tokens' ({max_tokens})", "thinking.budget_tokens",
                          "invalid_value")
    elif kind == "adaptive":
        f = _fields(v, "thinking", {"type": string, **display})
    elif kind == "disabled":
        f = _fields(v, "thinking", {"type": string})
    else:
        raise invalid(f"'thinking.type' must be 'enabled', 'adaptive' or 'disabled', got "
                      f"{_short(kind)}", "thinking.type", "invalid_value")
    return {"enable_thinking": kind != "disabled"}, f.get("display") != "omitted"


def output_config(v, name):
    """Structured output: `format: {type: json_schema, schema}` constrains the text to the schema
    (the engine's grammar). `effort` has no counterpart here and is refused."""
    f = _fields(v, name, {"format": obj})
    if "format" not in f:
        return None
    fmt = _fields(f["format"], f"{name}.format", {"type": string, "schema": obj},
                  ("type", "schema"))
    if fmt["type"] != "json_schema":
        raise invalid(f"'{name}.format.type' must be 'json_schema'", f"{name}.format.type",
                      "invalid_value")
    return fmt["schema"]


def _display(v, name):
    if v not in ("summarized", "omitted"):
        raise invalid(f"'{name}' must be 'summarized' or 'omitted'", name, "invalid_value")
    return v


@dataclass
class MessagesRequest:
    messages: List[JSON]                      # OpenAI-style chat messages
    sampling: JSON = field(default_factory=dict)  # SamplingParams keyword arguments
    max_tokens: Optional[int] = None
    stop_sequences: List[str] = field(default_factory=list)
    stream: bool = False
    tools: Optional[List[JSON]] = None        # OpenAI function tools
    tool_choice: Any = None                   # OpenAI tool_choice
    parallel_tool_calls: Optional[bool] = None
    chat_template_kwargs: Optional[JSON] = None
    show_thinking: bool = True

    def chat_kwargs(self) -> JSON:
        """The chat API's keyword arguments; only those the request sets."""
        kw = {"tools": self.tools, "tool_choice": self.tool_choice,
              "parallel_tool_calls": self.parallel_tool_calls,
              "chat_template_kwargs": self.chat_template_kwargs}
        return {k: v for k, v in kw.items() if v is not None}


_PROMPT_FIELDS: Dict[str, Callable] = {
    "model": string, "messages": anything, "system": anything, "tools": anything,
    "tool_choice": anything, "thinking": anything, "cache_control": cache_control,
}

_MESSAGES_FIELDS: Dict[str, Callable] = {
    **_PROMPT_FIELDS,
    "max_tokens": integer(1),
    "stop_sequences": stop_sequences,
    "temperature": number(0.0, 1.0),
    "top_p": number(0.0, 1.0, lo_open=True),
    "top_k": integer(0),
    "stream": boolean,
    "metadata": metadata,
    "output_config": output_config,
}


def _parse(body: Any, allowed: Dict[str, Callable], generation: bool) -> MessagesRequest:
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object", None, "invalid_type")
    f = _fields(body, "", allowed, ("model", "messages") + (("max_tokens",) if generation else ()))
    req = MessagesRequest(messages=convert_messages(f["messages"], f.get("system")))
    if "tools" in f:
        req.tools = convert_tools(f["tools"]) or None
    if "tool_choice" in f:
        req.tool_choice, req.parallel_tool_calls = convert_tool_choice(f["tool_choice"],
                                                                       req.tools)
    if req.tools and req.parallel_tool_calls is None:
        req.parallel_tool_calls = True  # Anthropic's default: several calls may come at once
    if generation:
        req.max_tokens = f["max_tokens"]
        req.stop_sequences = f.get("stop_sequences", [])
        req.stream = f.get("stream", False)
        req.sampling = {"max_tokens": req.max_tokens}
        for key, target in (("temperature", "temperature"), ("top_p", "top_p"),
                            ("top_k", "top_k")):
            if key in f:
                req.sampling[target] = f[key]
        if req.stop_sequences:
            req.sampling["stop"] = list(req.stop_sequences)
        if f.get("output_config") is not None:
            req.sampling["json_schema"] = f["output_config"]
    if "thinking" in f:
        req.chat_template_kwargs, req.show_thinking = convert_thinking(f["thinking"],
                                                                       req.max_tokens)
    return req


def parse_messages(body: Any) -> MessagesRequest:
    return _parse(body, _MESSAGES_FIELDS, generation=True)


def parse_count_tokens(body: Any) -> MessagesRequest:
    return _parse(body, _PROMPT_FIELDS, generation=False)


# --- calling the engine ----------------------------------------------------------------------------

def open_chat(llm, req: MessagesRequest, params):
    return llm.chat_stream_chunks(req.messages, params, **req.chat_kwargs())


def count_prompt_tokens(llm, req: MessagesRequest) -> int:
    """The rendered prompt's size, as the chat API renders it (tool_choice none: no tools)."""
    inner = getattr(llm, "llm", llm)  # AsyncLLM wraps the synchronous LLM
    kw: JSON = {}
    if req.tools and req.tool_choice != "none":
        kw["tools"] = req.tools
    if req.chat_template_kwargs:
        kw["chat_template_kwargs"] = req.chat_template_kwargs
    return len(inner.chat_prompt_ids(req.messages, **kw))


def fit_context(req: MessagesRequest, n_prompt: int, n_ctx: Optional[int],
                context_shift: bool = False) -> JSON:
    """The sampling arguments, `max_tokens` a cap as in Anthropic's API: when the prompt leaves
    less room than that, generation runs until the context is full (stop_reason
    model_context_window_exceeded) instead of the request being refused. A prompt that fills the
    context alone is still refused by the engine. With --context-shift the context never ends a
    generation, so max_tokens stays."""
    if n_ctx and not context_shift and req.max_tokens is not None and n_prompt + req.max_tokens > n_ctx:
        return {**req.sampling, "max_tokens": None}
    return req.sampling


def chunk_delta(chunk) -> ChatDelta:
    """The parsed delta of an engine chunk (raw text as content where the chat API gives none)."""
    delta = getattr(chunk, "delta", None)
    return ChatDelta(content=chunk.text or "") if delta is None else delta


# --- responses -------------------------------------------------------------------------------------

def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def tool_use_id(call_id: Optional[str]) -> str:
    if not call_id:
        return _new_id("toolu_")
    return call_id if call_id.startswith("toolu_") else \
        "toolu_" + (call_id[5:] if call_id.startswith("call_") else call_id)


def usage(u) -> JSON:
    """Anthropic counts cache reads apart: input_tokens + cache_read_input_tokens = the prompt."""
    cached = getattr(u, "cached_tokens", 0) or 0
    return {"input_tokens": u.prompt_tokens - cached, "output_tokens": u.completion_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}


class MessageBuilder:
    """One assistant message built from ChatDeltas: `add`/`finish` return the stream events
    (Anthropic's, as dicts with their `type`); `message()` is the whole response body."""

    def __init__(self, model: str, req: MessagesRequest, input_tokens: int = 0):
        self.id = _new_id("msg_")
        self.model = model
        self.req = req
        self.input_tokens = input_tokens
        self.blocks: List[JSON] = []
        self._open: Optional[str] = None     # kind of blocks[-1] while it is open
        self._pending_ws = ""                # whitespace-only text not yet given a block
        self._args: Dict[int, str] = {}      # tool_use block index -> argument JSON text
        self._call_block: Dict[int, int] = {}  # the chat API's call index -> block index
        self._late: set = set()              # tool_use blocks continued after they closed
        self.stop_reason: Optional[str] = None
        self.stop_sequence: Optional[str] = None
        self.usage: JSON = {"input_tokens": input_tokens, "output_tokens": 0,
                            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}

    def _head(self) -> JSON:
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.model}

    def start(self) -> JSON:
        return {"type": "message_start",
                "message": {**self._head(), "content": [], "stop_reason": None,
                            "stop_sequence": None, "usage": dict(self.usage)}}

    def add(self, delta: ChatDelta) -> List[JSON]:
        ev: List[JSON] = []
        if delta.reasoning:
            ev += self._text("thinking", delta.reasoning)
        if delta.content:
            ev += self._text("text", delta.content)
        for tc in delta.tool_calls:
            ev += self._tool(tc)
        return ev

    def _begin(self, block: JSON) -> List[JSON]:
        ev = self._close()
        self.blocks.append(block)
        self._open = block["type"]
        ev.append({"type": "content_block_start", "index": len(self.blocks) - 1,
                   "content_block": dict(block)})
        return ev

    def _text(self, kind: str, text: str) -> List[JSON]:
        ev: List[JSON] = []
        if self._open != kind:
            if kind == "text" and not text.strip():
                self._pending_ws += text  # e.g. the newlines between </think> and a tool call
                return ev
            block = {"type": "text", "text": ""} if kind == "text" else \
                {"type": "thinking", "thinking": "", "signature": ""}
            ev += self._begin(block)
            if kind == "text":
                text, self._pending_ws = self._pending_ws + text, ""
        if kind == "thinking" and not self.req.show_thinking:
            return ev  # display: omitted -- the block is there, its text is not
        index = len(self.blocks) - 1
        self.blocks[index][kind] += text
        delta = {"type": "text_delta", "text": text} if kind == "text" else \
            {"type": "thinking_delta", "thinking": text}
        ev.append({"type": "content_block_delta", "index": index, "delta": delta})
        return ev

    def _tool(self, tc) -> List[JSON]:
        ev: List[JSON] = []
        index = self._call_block.get(tc.index)
        if index is None or tc.id is not None or tc.name is not None:
            self._pending_ws = ""
            ev += self._begin({"type": "tool_use", "id": tool_use_id(tc.id), "name": tc.name or "",
                               "input": {}})
            index = len(self.blocks) - 1
            self._call_block[tc.index] = index
            self._args[index] = ""
        if tc.arguments:
            self._args[index] += tc.arguments
            if index == len(self.blocks) - 1 and self._open == "tool_use":
                ev.append({"type": "content_block_delta", "index": index,
                           "delta": {"type": "input_json_delta", "partial_json": tc.arguments}})
            else:  # a fragment of an earlier call: the stream cannot reopen its block
                log.warning("tool call %d continued after another block began", tc.index)
                self._late.add(index)
        return ev

    def _close(self) -> List[JSON]:
        if self._open is None:
            return []
        index = len(self.blocks) - 1
        if self._open == "tool_use":
            self.blocks[index]["input"] = _tool_input(self._args.get(index, ""))
        self._open = None
        return [{"type": "content_block_stop", "index": index}]

    def finish(self, chunk) -> List[JSON]:
        """The engine's last chunk: close the open block, work out stop_reason and usage."""
        ev = self._close()
        for i in self._late:  # calls continued after their block was closed
            self.blocks[i]["input"] = _tool_input(self._args[i])
        reason = chunk.finish_reason
        has_calls = any(b["type"] == "tool_use" for b in self.blocks)
        stop = getattr(chunk, "stop_reason", None)
        if chunk.usage is not None:
            self.usage = usage(chunk.usage)
        if reason == "stop" and isinstance(stop, str) and stop in self.req.stop_sequences:
            self.stop_reason, self.stop_sequence = "stop_sequence", stop
        elif reason == "tool_calls" or (reason == "stop" and has_calls):
            self.stop_reason = "tool_use"
        elif reason == "length":
            out = self.usage["output_tokens"]
            self.stop_reason = "max_tokens" if self.req.max_tokens is None or \
                out >= self.req.max_tokens else "model_context_window_exceeded"
        elif reason == "stop":
            self.stop_reason = "end_turn"
        else:
            raise APIError(503, f"the request ended without an answer ({reason})",
                           "unavailable_error", None, "cancelled")
        ev.append({"type": "message_delta",
                   "delta": {"stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence},
                   "usage": dict(self.usage)})
        ev.append({"type": "message_stop"})
        return ev

    def message(self) -> JSON:
        return {**self._head(), "content": self.blocks, "stop_reason": self.stop_reason,
                "stop_sequence": self.stop_sequence, "usage": self.usage}


def _tool_input(args: str) -> JSON:
    if not args.strip():
        return {}
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        log.warning("tool call arguments are not complete JSON (cut off?): %.80s", args)
        return {}
    return value if isinstance(value, dict) else {}


def sse_event(ev: JSON) -> bytes:
    data = json.dumps(ev, ensure_ascii=False, separators=(",", ":"))
    return f"event: {ev['type']}\ndata: {data}\n\n".encode()


PING = sse_event({"type": "ping"})


# --- the routes ------------------------------------------------------------------------------------

class AnthropicRoutes(Routes):
    """The OpenAI routes' life cycle and helpers, with Anthropic's shapes."""

    def _afail(self, endpoint: str, e: APIError) -> Response:
        self.metrics.request_done(endpoint, e.status)
        return error_response(e)

    def _headers(self) -> Dict[str, str]:
        return {"request-id": _new_id("req_")}

    async def count_tokens(self, request: Request) -> Response:
        endpoint = "messages_count_tokens"
        try:
            llm = self.host.require_ready()
            req = parse_count_tokens(await read_json(request))
            n = await off_loop(count_prompt_tokens, llm, req)  # render + tokenize in a thread
        except APIError as e:
            return self._afail(endpoint, e)
        except Exception as e:  # noqa: BLE001
            return self._afail(endpoint, engine_error(e, "messages"))
        self.metrics.request_done(endpoint, 200)
        return JSONResponse({"input_tokens": n}, headers=self._headers())

    async def messages(self, request: Request) -> Response:
        endpoint = "messages"
        t0 = time.monotonic()
        try:
            llm = self.host.require_ready()
            req = parse_messages(await read_json(request))
            # the prompt's size: for max_tokens against the context, and message_start's usage
            n_prompt = await off_loop(count_prompt_tokens, llm, req)
            params = self.host.sampling_params(fit_context(
                req, n_prompt, self.host.n_ctx, getattr(self.host.config, "context_shift", False)))
            admission = self.host.admit(1)
        except APIError as e:
            return self._afail(endpoint, e)
        except Exception as e:  # noqa: BLE001 - e.g. the template refusing the conversation
            return self._afail(endpoint, engine_error(e, "messages"))

        deadline = self._deadline(t0)
        started = await self._start(
            request, endpoint, lambda: [open_chat(llm, req, params)], 1, admission, t0, deadline,
            lambda e: self._afail(endpoint, engine_error(e, "messages")))
        if isinstance(started, Response):
            return started
        stream, first = started

        builder = MessageBuilder(self.config.model_id, req, n_prompt)
        if req.stream:
            return self._stream_message(endpoint, builder, stream, admission, first, deadline)

        async def collect():
            item = first
            while item is not None:
                chunk = item[1]
                builder.add(chunk_delta(chunk))
                if chunk.finish_reason is not None:
                    builder.finish(chunk)
                item = await stream.next()
            if builder.stop_reason is None:
                raise APIError(500, "the engine stream ended without a finish reason",
                               "server_error")

        failed = await self._collect(endpoint, collect, request, deadline, stream, admission,
                                     lambda e: self._afail(endpoint, engine_error(e, "messages")))
        if failed is not None:
            return failed
        self.metrics.request_done(endpoint, 200)
        return JSONResponse(builder.message(), headers=self._headers())

    def _stream_message(self, endpoint: str, builder: MessageBuilder, stream: ChunkStream,
                        admission, first, deadline) -> Response:
        outcome = {"status": 200}

        def fail(err: APIError) -> bytes:
            outcome["status"] = err.status
            return sse_event(error_body(err))

        async def events():
            yield sse_event(builder.start())
            yield PING
            item = first
            while item is not None:
                chunk = item[1]
                try:
                    evs = builder.add(chunk_delta(chunk))
                    if chunk.finish_reason is not None:
                        evs += builder.finish(chunk)
                except APIError as e:
                    yield fail(e)
                    return
                for ev in evs:
                    yield sse_event(ev)
                try:
                    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                    item = await asyncio.wait_for(stream.next(), timeout)
                except asyncio.TimeoutError:
                    yield fail(timed_out(self.config.timeout))
                    return
                except Exception as e:  # noqa: BLE001 - headers are sent: report in-band
                    yield fail(engine_error(e))
                    return
            if builder.stop_reason is None:
                yield fail(APIError(500, "the engine stream ended without a finish reason",
                                    "server_error"))

        async def on_close(disconnected: bool):
            await self._close(stream, admission)
            self.metrics.request_done(endpoint,
                                      CLIENT_CLOSED if disconnected else outcome["status"])

        return EventStreamResponse(events(), on_close, headers=self._headers())
