"""OpenAI's Responses API: `POST /v1/responses`, `GET /v1/responses/{id}`,
`DELETE /v1/responses/{id}`.

A request is translated into an OpenAI chat conversation and run through the shared chat API
(`llm.chat_stream_chunks`), whose chunks carry `ChatDelta`s (content, reasoning, tool-call
pieces) parsed by edgellm.chat_output; this module only re-shapes them:

    instructions                -> a leading system message (not carried to later turns)
    input messages              -> user / assistant / system messages (developer -> system)
    function_call items         -> the assistant message's `tool_calls`
    function_call_output items  -> `role: tool` messages with `tool_call_id` (and the name)
    previous_response_id        -> the stored conversation of that response, prepended
    reasoning deltas            -> a `reasoning` output item
    content deltas              -> a `message` output item with one `output_text` part
    tool-call deltas            -> `function_call` output items

Responses are kept in memory (a bounded LRU, `ResponseStore`) unless `store: false`.
The request life cycle (admission, first-chunk race with disconnect and deadline, engine error
mapping, closing the engine stream) is the chat route's, reused from routes.Routes.
"""
import asyncio
import inspect
import json
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from edgellm.chat_output import ChatDelta, new_call_id

from . import protocol
from .admission import ChunkStream
from .errors import APIError, invalid, timed_out
from .progress import progress_of, progress_timings, prompt_progress
from .protocol import _bad_type, _short, boolean, integer, number, obj, string
from .routes import CLIENT_CLOSED, Routes, engine_error, read_json
from .responses import timings
from .sse import EventStreamResponse


JSON = Dict[str, Any]
ENDPOINT = "responses"
STORE_MAX = 1024          # responses kept for previous_response_id / GET, least recently used out
STORE_MAX_BYTES = 256 << 20  # and at most this many bytes of them (their JSON), LRU out
MAX_METADATA_KEYS = 16    # OpenAI's limits on `metadata`
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512

BUILTIN_TOOLS = ("web_search", "web_search_preview", "web_search_preview_2025_03_11",
                 "web_search_2025_08_26", "file_search", "computer", "computer_use_preview",
                 "computer_use", "code_interpreter", "image_generation", "mcp", "local_shell",
                 "shell", "apply_patch", "custom", "tool_search", "namespace")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
REASONING_SUMMARIES = ("auto", "concise", "detailed")


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


# --- request checking ------------------------------------------------------------------------

@dataclass
class ResponsesRequest:
    """A checked `POST /v1/responses` body."""
    input_messages: List[JSON]            # this request's input, as chat messages
    sampling: JSON                        # SamplingParams keyword arguments
    instructions: Optional[str] = None
    chat_tools: Optional[List[JSON]] = None      # chat-completions style
    chat_tool_choice: Any = None                 # chat-completions style, None = not sent
    parallel_tool_calls: bool = True
    template_kwargs: Optional[JSON] = None
    stream: bool = False
    store: bool = True
    previous_response_id: Optional[str] = None
    echo: JSON = field(default_factory=dict)     # request fields the response object repeats
    items: List[JSON] = field(default_factory=list)  # the input as items with ids
    timings_per_token: bool = False       # llama-server: stream events carry running "timings"


def _metadata(v, name):
    obj(v, name)
    if len(v) > MAX_METADATA_KEYS:
        raise invalid(f"'{name}' has {len(v)} keys, at most {MAX_METADATA_KEYS} are allowed",
                      name, "invalid_value")
    for k, val in v.items():
        if len(k) > MAX_METADATA_KEY:
            raise invalid(f"'{name}' key {_short(k)} is longer than {MAX_METADATA_KEY} characters",
                          name, "invalid_value")
        if not isinstance(val, str):
            raise _bad_type(f"{name}.{k}", val, "a string")
        if len(val) > MAX_METADATA_VALUE:
            raise invalid(f"'{name}.{k}' is longer than {MAX_METADATA_VALUE} characters",
                          f"{name}.{k}", "invalid_value")
    return v


def _max_output_tokens(v, name):
    return integer(1)(v, name)


def _choice(allowed: Tuple[str, ...]):
    def check(v, name):
        if v not in allowed:
            raise invalid(f"'{name}' must be one of {', '.join(allowed)}, got {_short(v)}", name,
                          "invalid_value")
        return v
    return check


def _truncation(v, name):
    if v == "auto":
        raise invalid("'truncation': 'auto' is not supported: the conversation is never cut to "
                      "fit the context (send 'disabled'; an input that does not fit is a 400)",
                      name, "unsupported")
    return _choice(("disabled",))(v, name)


def _include(v, name):
    """Only "reasoning.encrypted_content", which stateless clients ask for: reasoning items
    are always returned in plain text, so there is nothing to encrypt."""
    if not isinstance(v, list):
        raise _bad_type(name, v, "an array")
    for i, entry in enumerate(v):
        if entry != "reasoning.encrypted_content":
            raise invalid(f"'{name}[{i}]' {_short(entry)} is not supported: no log-probabilities, "
                          "tool sources or images are returned ('reasoning.encrypted_content' is "
                          "accepted: reasoning comes in plain text)", f"{name}[{i}]",
                          "unsupported")
    return v


def _background(v, name):
    if boolean(v, name):
        raise invalid("'background': true is not supported: responses run in the request",
                      name, "unsupported")
    return v


def _stream_options(v, name):
    obj(v, name)
    for key, val in v.items():
        if key != "include_obfuscation":
            raise invalid(f"unknown field '{name}.{key}'", f"{name}.{key}", "unknown_field")
        boolean(val, f"{name}.{key}")
    return v


def _check_keys(d: JSON, allowed: Tuple[str, ...], where: str) -> None:
    for key in d:
        if key not in allowed:
            raise invalid(f"unknown field '{where}.{key}'", f"{where}.{key}", "unknown_field")


def _text(v, name) -> JSON:
    """`text: {"format": {...}, "verbosity"}` -> the echoed config (and the format is checked)."""
    obj(v, name)
    _check_keys(v, ("format", "verbosity"), name)
    verbosity = v.get("verbosity")
    if verbosity not in (None, "medium"):
        raise invalid(f"'{name}.verbosity' {_short(verbosity)} is not supported: the model writes "
                      "as it does ('medium', the default, is accepted)", f"{name}.verbosity",
                      "unsupported")
    fmt = v.get("format")
    where = f"{name}.format"
    if fmt is None:
        fmt = {"type": "text"}
    obj(fmt, where)
    kind = fmt.get("type")
    if kind in ("text", "json_object"):
        _check_keys(fmt, ("type",), where)
    elif kind == "json_schema":
        _check_keys(fmt, ("type", "name", "schema", "description", "strict"), where)
        if not isinstance(fmt.get("schema"), dict):
            raise _bad_type(f"{where}.schema", fmt.get("schema"), "an object (a JSON schema)")
        fmt = dict(fmt, name=string(fmt.get("name", "response"), f"{where}.name"))
        if fmt.get("description") is not None:
            string(fmt["description"], f"{where}.description")
        if fmt.get("strict") is not None:
            boolean(fmt["strict"], f"{where}.strict")
    else:
        raise invalid(f"'{where}.type' must be 'text', 'json_object' or 'json_schema', got "
                      f"{_short(kind)}", f"{where}.type", "invalid_value")
    return {"format": fmt, **({"verbosity": verbosity} if verbosity else {})}


def _response_format(text_cfg: Optional[JSON]) -> Optional[JSON]:
    """The chat API's `response_format` for a checked `text` config."""
    fmt = (text_cfg or {}).get("format") or {"type": "text"}
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    if fmt["type"] == "json_schema":
        inner = {"name": fmt.get("name", "response"), "schema": fmt["schema"]}
        if fmt.get("strict") is not None:
            inner["strict"] = fmt["strict"]
        return {"type": "json_schema", "json_schema": inner}
    return None


def _reasoning(v, name) -> JSON:
    obj(v, name)
    _check_keys(v, ("effort", "summary", "generate_summary"), name)
    for key, allowed in (("effort", REASONING_EFFORTS), ("summary", REASONING_SUMMARIES),
                         ("generate_summary", REASONING_SUMMARIES)):
        if v.get(key) is not None:
            _choice(allowed)(v[key], f"{name}.{key}")
    return {"effort": v.get("effort"), "summary": v.get("summary") or v.get("generate_summary")}


def _tools(v, name) -> List[JSON]:
    """Function tools, normalised to the Responses shape that the response repeats."""
    if not isinstance(v, list):
        raise _bad_type(name, v, "an array")
    out, names = [], set()
    for i, tool in enumerate(v):
        where = f"{name}[{i}]"
        obj(tool, where)
        kind = tool.get("type")
        if kind != "function":
            if kind in BUILTIN_TOOLS or (isinstance(kind, str) and kind.startswith("web_search")):
                raise invalid(f"built-in tool '{kind}' is not supported: only function tools "
                              "(type 'function', run by the client) are", f"{where}.type",
                              "unsupported")
            raise invalid(f"'{where}.type' must be 'function', got {_short(kind)}",
                          f"{where}.type", "invalid_value")
        _check_keys(tool, ("type", "name", "description", "parameters", "strict"), where)
        fname = tool.get("name")
        if not isinstance(fname, str) or not fname:
            raise invalid(f"'{where}.name' must be a non-empty string", f"{where}.name",
                          "invalid_value")
        if fname in names:
            raise invalid(f"two tools are named '{fname}'", f"{where}.name", "invalid_value")
        names.add(fname)
        if tool.get("description") is not None:
            string(tool["description"], f"{where}.description")
        if tool.get("parameters") is not None:
            obj(tool["parameters"], f"{where}.parameters")
        if tool.get("strict") is not None:
            boolean(tool["strict"], f"{where}.strict")
        out.append({"type": "function", "name": fname,
                    "description": tool.get("description"),
                    "parameters": tool.get("parameters"),
                    "strict": tool.get("strict", True)})
    return out


def chat_tools(tools: List[JSON]) -> List[JSON]:
    """Responses function tools (as sent, already checked) -> chat-completions tools."""
    out = []
    for t in tools:
        fn: JSON = {"name": t["name"]}
        if t.get("description") is not None:
            fn["description"] = t["description"]
        fn["parameters"] = t["parameters"] if t.get("parameters") is not None else {
            "type": "object", "properties": {}}
        if t.get("strict") is not None:  # only when the client sent it
            fn["strict"] = t["strict"]
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(v, name, tools: List[JSON]) -> Tuple[Any, Any]:
    """(the choice as the response repeats it, the chat-completions tool_choice)."""
    if isinstance(v, str):
        _choice(("none", "auto", "required"))(v, name)
        if v == "required" and not tools:
            raise invalid("'tool_choice': 'required' needs at least one tool in 'tools'", name,
                          "invalid_value")
        return v, v
    obj(v, name)
    kind = v.get("type")
    if kind == "function":
        _check_keys(v, ("type", "name"), name)
        fname = v.get("name")
        if not isinstance(fname, str):
            raise _bad_type(f"{name}.name", fname, "a string")
        if fname not in {t["name"] for t in tools}:
            raise invalid(f"'{name}.name' is '{fname}', which is not a function in 'tools'",
                          f"{name}.name", "invalid_value")
        return {"type": "function", "name": fname}, {"type": "function",
                                                      "function": {"name": fname}}
    raise invalid(f"'{name}' of type {_short(kind)} is not supported: send 'none', 'auto', "
                  "'required' or {\"type\": \"function\", \"name\": ...}", f"{name}.type",
                  "unsupported")


# --- input items -> chat messages --------------------------------------------------------------

_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
_MEDIA_PARTS = ("input_image", "input_file", "input_audio", "image_url", "image", "file")
_ROLES = ("user", "assistant", "system", "developer")


def _content_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad_type(where, content, "a string or an array of content parts")
    texts = []
    for j, part in enumerate(content):
        w = f"{where}[{j}]"
        obj(part, w)
        kind = part.get("type")
        if kind in _MEDIA_PARTS:
            raise invalid(f"'{w}' is an {kind} part: images, files and audio are not supported "
                          "(this server's models take text only)", f"{w}.type", "unsupported")
        if kind not in _TEXT_PARTS:
            raise invalid(f"'{w}.type' must be one of {', '.join(_TEXT_PARTS)}, got "
                          f"{_short(kind)}", f"{w}.type", "invalid_value")
        key = "refusal" if kind == "refusal" else "text"
        _check_keys(part, ("type", key, "annotations", "logprobs"), w)
        texts.append(string(part.get(key), f"{w}.{key}"))
    return "\n".join(texts)


def _reasoning_text(item: JSON, where: str) -> str:
    parts = []
    for key, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        val = item.get(key)
        if val is None:
            continue
        if not isinstance(val, list):
            raise _bad_type(f"{where}.{key}", val, "an array")
        for j, p in enumerate(val):
            obj(p, f"{where}.{key}[{j}]")
            parts.append(string(p.get("text"), f"{where}.{key}[{j}].text"))
        if parts:
            break  # the full reasoning when there is one, else the summary
    return "\n".join(parts)


def input_messages(v: Any, name: str = "input") -> List[JSON]:
    """`input` (a string or a list of items) -> OpenAI chat messages."""
    if isinstance(v, str):
        return [{"role": "user", "content": v}]
    if not isinstance(v, list):
        raise _bad_type(name, v, "a string or an array of input items")
    out: List[JSON] = []
    tool_names: Dict[str, str] = {}
    reasoning: List[str] = []

    def assistant() -> JSON:
        """The assistant message that function calls join: the last one, if nothing followed."""
        if out and out[-1]["role"] == "assistant":
            return out[-1]
        msg: JSON = {"role": "assistant", "content": ""}
        out.append(msg)
        return msg

    for i, item in enumerate(v):
        where = f"{name}[{i}]"
        obj(item, where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            _check_keys(item, ("type", "role", "content", "id", "status", "phase"), where)
            role = item.get("role")
            if role not in _ROLES:
                raise invalid(f"'{where}.role' must be one of {', '.join(_ROLES)}, got "
                              f"{_short(role)}", f"{where}.role", "invalid_value")
            if "content" not in item:
                raise invalid(f"'{where}.content' is missing", f"{where}.content",
                              "missing_field")
            msg = {"role": "system" if role == "developer" else role,
                   "content": _content_text(item["content"], f"{where}.content")}
            if role == "assistant" and reasoning:
                msg["reasoning_content"] = "\n".join(reasoning)
                reasoning = []
            out.append(msg)
        elif kind == "function_call":
            _check_keys(item, ("type", "id", "call_id", "name", "arguments", "status",
                               "namespace"), where)
            call_id = string(item.get("call_id"), f"{where}.call_id")
            fname = string(item.get("name"), f"{where}.name")
            args = string(item.get("arguments"), f"{where}.arguments")
            msg = assistant()
            if reasoning and "reasoning_content" not in msg:
                msg["reasoning_content"] = "\n".join(reasoning)
                reasoning = []
            msg.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function",
                 "function": {"name": fname, "arguments": args}})
            tool_names[call_id] = fname
        elif kind == "function_call_output":
            _check_keys(item, ("type", "id", "call_id", "output", "status"), where)
            call_id = string(item.get("call_id"), f"{where}.call_id")
            if "output" not in item:
                raise invalid(f"'{where}.output' is missing", f"{where}.output", "missing_field")
            msg = {"role": "tool", "tool_call_id": call_id,
                   "content": _content_text(item["output"], f"{where}.output")}
            if call_id in tool_names:
                msg["name"] = tool_names[call_id]
            out.append(msg)
        elif kind == "reasoning":
            _check_keys(item, ("type", "id", "summary", "content", "encrypted_content",
                               "status"), where)
            if item.get("encrypted_content") is not None:
                raise invalid(f"'{where}.encrypted_content' is not supported: this server "
                              "never encrypts reasoning", f"{where}.encrypted_content",
                              "unsupported")
            text = _reasoning_text(item, where)
            if text:
                reasoning.append(text)
        elif kind == "item_reference":
            raise invalid(f"'{where}': item references are not supported; send the item itself "
                          "or use previous_response_id", f"{where}.type", "unsupported")
        else:
            raise invalid(f"'{where}.type' {_short(kind)} is not supported: send messages, "
                          "function_call, function_call_output or reasoning items",
                          f"{where}.type", "unsupported")
    if not out:
        raise invalid(f"'{name}' has no messages", name, "invalid_value")
    return out


def input_items(v: Any) -> List[JSON]:
    """`input` (already checked by input_messages) as stored items with ids, for
    GET /v1/responses/{id}/input_items."""
    if isinstance(v, str):
        v = [{"role": "user", "content": v}]
    out = []
    for item in v:
        kind = item.get("type", "message")
        it: JSON = {"type": kind}
        if kind == "message":
            content = item["content"]
            part = "output_text" if item["role"] == "assistant" else "input_text"
            if isinstance(content, str):
                content = [{"type": part, "text": content}]
            parts = []
            for p in content:
                p = dict(p)
                if p["type"] == "output_text":
                    p.setdefault("annotations", [])
                parts.append(p)
            it.update(id=item.get("id") or _id("msg"), role=item["role"], content=parts)
        elif kind == "function_call":
            it.update(id=item.get("id") or _id("fc"), call_id=item["call_id"],
                      name=item["name"], arguments=item["arguments"])
        elif kind == "function_call_output":
            it.update(id=item.get("id") or _id("fco"), call_id=item["call_id"],
                      output=item["output"])
        else:  # reasoning
            it.update(id=item.get("id") or _id("rs"), summary=item.get("summary") or [])
            if item.get("content") is not None:
                it["content"] = item["content"]
        it["status"] = "completed"
        out.append(it)
    return out


def _name_tool_results(history: List[JSON], messages: List[JSON]) -> None:
    """Give `role: tool` messages the name of the call they answer, found in the history."""
    names = {c["id"]: c["function"]["name"] for m in history for c in m.get("tool_calls", ())}
    for m in messages:
        if m["role"] == "tool" and "name" not in m and m["tool_call_id"] in names:
            m["name"] = names[m["tool_call_id"]]


# Fields of OpenAI's API that this server does not implement, with what to do instead.
_UNSUPPORTED = {
    "conversation": "use previous_response_id",
    "prompt": "prompt templates are not stored here; send 'input'",
    "max_tool_calls": "limit calls on the client side",
    "top_logprobs": "log-probabilities are not returned by this endpoint",
    "context_management": "the conversation is never compacted",
    "prompt_cache_retention": "the prefix cache is automatic and in memory",
    "prompt_cache_options": "the prefix cache is automatic and in memory",
    "background_options": "background responses are not supported",
    "moderation": "no moderation is run",
    "image": "images are not supported",
    "access_programs": "not applicable",
}

_FIELDS = {
    "model": string,
    "input": lambda v, n: v,  # checked by input_messages
    "instructions": string,
    "max_output_tokens": _max_output_tokens,
    "temperature": number(0.0, 2.0),
    "top_p": number(0.0, 1.0, lo_open=True),
    "tools": _tools,
    "tool_choice": lambda v, n: v,  # checked with the tools
    "parallel_tool_calls": boolean,
    "stream": boolean,
    "stream_options": _stream_options,
    "previous_response_id": string,
    "store": boolean,
    "metadata": _metadata,
    "text": _text,
    "reasoning": _reasoning,
    "user": string,
    "safety_identifier": string,
    "prompt_cache_key": string,
    "service_tier": _choice(("auto", "default", "flex", "scale", "priority")),
    "truncation": _truncation,
    "include": _include,
    "background": _background,
    # llama-server's telemetry (streams): prompt_progress on response.in_progress events, timings
    "return_progress": boolean,
    "timings_per_token": boolean,
}


def parse_request(body: Any) -> ResponsesRequest:
    """Check a `POST /v1/responses` body (400 naming the field on anything wrong)."""
    if not isinstance(body, dict):
        raise invalid(f"the request body must be a JSON object, got {protocol._type_name(body)}",
                      None, "invalid_type")
    fields: JSON = {}
    for key, value in body.items():
        if key in _UNSUPPORTED and value is not None:
            raise invalid(f"'{key}' is not supported by this server: {_UNSUPPORTED[key]}", key,
                          "unsupported")
        check = _FIELDS.get(key)
        if check is None and key not in _UNSUPPORTED:
            raise invalid(f"unknown field '{key}'", key, "unknown_field")
        if value is None or check is None:
            continue  # null = absent, as OpenAI's SDKs send it
        fields[key] = check(value, key)
    if "input" not in fields:
        raise invalid("'input' is required", "input", "missing_field")
    if "stream_options" in fields and not fields.get("stream"):
        raise invalid("'stream_options' is only allowed when 'stream' is true", "stream_options",
                      "invalid_value")
    messages = input_messages(fields["input"])

    tools = fields.get("tools") or []
    choice_echo, chat_choice = "auto", None
    if "tool_choice" in fields:
        choice_echo, chat_choice = _tool_choice(fields["tool_choice"], "tool_choice", tools)

    sampling: JSON = {"max_tokens": fields.get("max_output_tokens")}
    if fields.get("stream") and fields.get("return_progress"):
        sampling["return_progress"] = True
    for key in ("temperature", "top_p"):
        if key in fields:
            sampling[key] = fields[key]
    text_cfg = fields.get("text") or {"format": {"type": "text"}}
    rf = _response_format(text_cfg)
    if rf is not None:
        sampling["response_format"] = rf

    reasoning = fields.get("reasoning") or {"effort": None, "summary": None}
    template_kwargs = None
    if reasoning.get("effort") is not None:
        template_kwargs = {"enable_thinking": reasoning["effort"] != "none",
                           "reasoning_effort": reasoning["effort"]}

    echo = {
        "instructions": fields.get("instructions"),
        "max_output_tokens": fields.get("max_output_tokens"),
        "metadata": fields.get("metadata") or {},
        "parallel_tool_calls": fields.get("parallel_tool_calls", True),
        "previous_response_id": fields.get("previous_response_id"),
        "reasoning": reasoning,
        "service_tier": fields.get("service_tier", "default"),
        "store": fields.get("store", True),
        "text": text_cfg,
        "tool_choice": choice_echo,
        "tools": tools,
        "truncation": "disabled",
        "user": fields.get("user"),
        "safety_identifier": fields.get("safety_identifier"),
        "prompt_cache_key": fields.get("prompt_cache_key"),
        "temperature": fields.get("temperature"),
        "top_p": fields.get("top_p"),
    }
    return ResponsesRequest(
        input_messages=messages, sampling=sampling, instructions=fields.get("instructions"),
        chat_tools=chat_tools(body["tools"]) if tools else None, chat_tool_choice=chat_choice,
        # OpenAI's default, not llama-server's one call per turn
        parallel_tool_calls=fields.get("parallel_tool_calls", True),
        template_kwargs=template_kwargs,
        stream=fields.get("stream", False), store=fields.get("store", True),
        previous_response_id=fields.get("previous_response_id"), echo=echo,
        items=input_items(fields["input"]),
        timings_per_token=bool(fields.get("stream") and fields.get("timings_per_token")))


def conversation(req: ResponsesRequest, history: List[JSON]) -> List[JSON]:
    """The chat messages to run: instructions, the earlier turns, this request's input."""
    _name_tool_results(history, req.input_messages)
    head = [{"role": "system", "content": req.instructions}] if req.instructions else []
    return head + [dict(m) for m in history] + req.input_messages


# --- the stored responses ----------------------------------------------------------------------

@dataclass
class StoredResponse:
    body: JSON               # the response object, as GET returns it
    history: List[JSON]      # chat messages up to and including its output (no instructions)
    items: List[JSON] = field(default_factory=list)  # its own input items, in order
    size: int = 0            # bytes it holds (its JSON), set by ResponseStore.put

    def measure(self) -> int:
        return len(json.dumps([self.body, self.history, self.items], ensure_ascii=False))


class ResponseStore:
    """Responses by id, least recently used dropped beyond `capacity` responses or `max_bytes`
    bytes (each measured as its JSON: input items the template never renders count too)."""

    def __init__(self, capacity: int = STORE_MAX, max_bytes: Optional[int] = None):
        self.capacity = capacity
        self.max_bytes = STORE_MAX_BYTES if max_bytes is None else max_bytes
        self.bytes = 0
        self._items: "OrderedDict[str, StoredResponse]" = OrderedDict()

    def put(self, rid: str, stored: StoredResponse) -> bool:
        """Keep `stored` (False: it alone is over max_bytes, so it is not kept)."""
        self.delete(rid)
        stored.size = stored.measure()
        if stored.size > self.max_bytes:
            return False
        self._items[rid] = stored
        self.bytes += stored.size
        while len(self._items) > self.capacity or self.bytes > self.max_bytes:
            self.bytes -= self._items.popitem(last=False)[1].size
        return True

    def get(self, rid: str) -> Optional[StoredResponse]:
        stored = self._items.get(rid)
        if stored is not None:
            self._items.move_to_end(rid)
        return stored

    def delete(self, rid: str) -> bool:
        stored = self._items.pop(rid, None)
        if stored is not None:
            self.bytes -= stored.size
        return stored is not None

    def __len__(self) -> int:
        return len(self._items)


# --- output items from chat deltas -------------------------------------------------------------

class OutputBuilder:
    """Assembles the output items of one response from ChatDeltas and produces the stream
    events of each step (`feed`, `finish` return lists of event dicts without sequence numbers).

    Items follow the order the model writes them: reasoning, message text, function calls; a
    new kind of piece closes the open item. Whitespace-only text between items (the newline
    after </think> or before a tool call) belongs to neither and is dropped.
    """

    def __init__(self):
        self.items: List[JSON] = []
        self._open: Optional[int] = None     # position of the open item
        self._open_key: Any = None           # "reasoning" | "message" | ("call", index)
        self._held = ""                      # whitespace text waiting for a message
        self.reasoning_tokens = 0

    # -- items --
    def _close(self, status: str = "completed") -> List[JSON]:
        if self._open is None:
            return []
        pos, item = self._open, self.items[self._open]
        self._open = self._open_key = None
        item["status"] = status
        events: List[JSON] = []
        if item["type"] == "message":
            part = item["content"][0]
            events.append({"type": "response.output_text.done", "item_id": item["id"],
                           "output_index": pos, "content_index": 0, "text": part["text"],
                           "logprobs": []})
            events.append({"type": "response.content_part.done", "item_id": item["id"],
                           "output_index": pos, "content_index": 0, "part": dict(part)})
        elif item["type"] == "reasoning":
            part = item["content"][0]
            events.append({"type": "response.reasoning_text.done", "item_id": item["id"],
                           "output_index": pos, "content_index": 0, "text": part["text"]})
            events.append({"type": "response.content_part.done", "item_id": item["id"],
                           "output_index": pos, "content_index": 0, "part": dict(part)})
        else:
            events.append({"type": "response.function_call_arguments.done", "item_id": item["id"],
                           "output_index": pos, "name": item["name"],
                           "arguments": item["arguments"]})
        events.append({"type": "response.output_item.done", "output_index": pos,
                       "item": _copy(item)})
        return events

    def _start(self, key, item: JSON, part: Optional[JSON]) -> List[JSON]:
        events = self._close()
        self.items.append(item)
        pos = self._open = len(self.items) - 1
        self._open_key = key
        shown = _copy(item)
        if part is not None:
            shown["content"] = []
        events.append({"type": "response.output_item.added", "output_index": pos, "item": shown})
        if part is not None:
            item["content"] = [part]
            events.append({"type": "response.content_part.added", "item_id": item["id"],
                           "output_index": pos, "content_index": 0, "part": dict(part)})
        return events

    def _new_message(self) -> List[JSON]:
        return self._start("message", {"type": "message", "id": _id("msg"),
                                       "status": "in_progress", "role": "assistant",
                                       "content": []},
                           {"type": "output_text", "text": "", "annotations": [],
                            "logprobs": []})

    def _text(self, text: str) -> List[JSON]:
        events: List[JSON] = []
        if self._open_key != "message":
            if not text.strip():
                self._held += text
                return events
            if not self.items:  # the answer's own leading whitespace is kept
                text = self._held + text
            self._held = ""
            events += self._new_message()
        pos = self._open
        self.items[pos]["content"][0]["text"] += text
        events.append({"type": "response.output_text.delta", "item_id": self.items[pos]["id"],
                       "output_index": pos, "content_index": 0, "delta": text, "logprobs": []})
        return events

    def _reasoning(self, text: str) -> List[JSON]:
        events: List[JSON] = []
        if self._open_key != "reasoning":
            events += self._start("reasoning", {"type": "reasoning", "id": _id("rs"),
                                                "summary": [], "content": [],
                                                "status": "in_progress"},
                                  {"type": "reasoning_text", "text": ""})
        pos = self._open
        self.items[pos]["content"][0]["text"] += text
        events.append({"type": "response.reasoning_text.delta", "item_id": self.items[pos]["id"],
                       "output_index": pos, "content_index": 0, "delta": text})
        return events

    def _call(self, d) -> List[JSON]:
        events: List[JSON] = []
        key = ("call", d.index)
        if self._open_key != key:
            existing = next((p for p, it in enumerate(self.items)
                             if it.get("_index") == d.index and it["type"] == "function_call"),
                            None)
            if existing is not None and d.id is None and d.name is None:
                # More arguments for a call already closed (the parser interleaved): keep them.
                self.items[existing]["arguments"] += d.arguments or ""
                return events
            self._held = ""
            events += self._start(key, {"type": "function_call", "id": _id("fc"),
                                        "call_id": d.id or new_call_id(), "name": d.name or "",
                                        "arguments": "", "status": "in_progress",
                                        "_index": d.index}, None)
        item = self.items[self._open]
        if d.name and not item["name"]:
            item["name"] = d.name
        if d.arguments:
            item["arguments"] += d.arguments
            events.append({"type": "response.function_call_arguments.delta",
                           "item_id": item["id"], "output_index": self._open,
                           "delta": d.arguments})
        return events

    def feed(self, delta: ChatDelta, n_tokens: int = 0) -> List[JSON]:
        events: List[JSON] = []
        if delta.reasoning:
            events += self._reasoning(delta.reasoning)
            if not delta.content and not delta.tool_calls:
                self.reasoning_tokens += n_tokens
        if delta.content:
            events += self._text(delta.content)
        for d in delta.tool_calls or ():
            events += self._call(d)
        return events

    def finish(self, status: str) -> List[JSON]:
        """Close the open item; `status` "incomplete" marks it cut off. An answer with no item
        at all still gets a message (empty, or the whitespace it wrote), so `output_text` is
        always there; whitespace held back after other items is dropped."""
        events: List[JSON] = []
        if not self.items:
            held, self._held = self._held, ""
            events += self._new_message()
            if held:
                events += self._text(held)
        self._held = ""
        events += self._close(status)
        return events

    def output(self) -> List[JSON]:
        return [_copy(it) for it in self.items]

    def assistant_message(self) -> JSON:
        """This output as one chat message, for the stored conversation."""
        msg: JSON = {"role": "assistant", "content": ""}
        texts, thoughts, calls = [], [], []
        for it in self.items:
            if it["type"] == "message":
                texts.append(it["content"][0]["text"])
            elif it["type"] == "reasoning":
                thoughts.append(it["content"][0]["text"])
            elif it["type"] == "function_call":
                calls.append({"id": it["call_id"], "type": "function",
                              "function": {"name": it["name"], "arguments": it["arguments"]}})
        msg["content"] = "".join(texts)
        if thoughts:
            msg["reasoning_content"] = "\n".join(thoughts)
        if calls:
            msg["tool_calls"] = calls
        return msg


def _copy(item: JSON) -> JSON:
    out = {k: v for k, v in item.items() if not k.startswith("_")}
    if "content" in out:
        out["content"] = [dict(p) for p in out["content"]]
    return out


def chunk_delta(chunk) -> ChatDelta:
    """The chunk's parsed delta; plain text when the chat API gives none."""
    delta = getattr(chunk, "delta", None)
    return delta if delta is not None else ChatDelta(content=chunk.text or "")


def open_chat(llm, messages: List[JSON], params, req: ResponsesRequest):
    """llm.chat_stream_chunks with the tool and template arguments it takes."""
    fn = llm.chat_stream_chunks
    try:
        sig = inspect.signature(fn).parameters
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.values())
    except (TypeError, ValueError):
        sig, takes_all = {}, True
    kwargs: JSON = {"tools": req.chat_tools}
    extra = {"tool_choice": req.chat_tool_choice, "parallel_tool_calls": req.parallel_tool_calls,
             "chat_template_kwargs": req.template_kwargs}
    for key, value in extra.items():
        if value is not None and (takes_all or key in sig):
            kwargs[key] = value
    if "tool_choice" not in kwargs and req.chat_tool_choice == "none":
        kwargs["tools"] = None  # an older chat API: render no tools, so none can be called
    return fn(messages, params, **kwargs)


class _RunningTimings:
    """timings_per_token on a Responses stream: llama-server's timings so far (the prompt's
    figures from the progress events when there were any, else known at the first token)."""

    def __init__(self):
        self.start = time.monotonic()
        self.first: Optional[float] = None
        self.prompt_n = 0
        self.n = 0

    def progress(self, p: JSON) -> JSON:
        out = progress_timings(p)
        self.prompt_n = out["prompt_n"]
        return out

    def tokens(self, n: int) -> JSON:
        now = time.monotonic()
        if self.first is None:
            self.first = now
        self.n += n
        prompt_ms = 1e3 * (self.first - self.start)
        gen_ms = 1e3 * (now - self.first)
        steps = self.n - 1  # the first token comes with the prompt
        return {"prompt_n": self.prompt_n, "prompt_ms": prompt_ms,
                "prompt_per_token_ms": prompt_ms / self.prompt_n if self.prompt_n else 0.0,
                "prompt_per_second": 1e3 * self.prompt_n / prompt_ms
                if self.prompt_n and prompt_ms > 0 else 0.0,
                "predicted_n": self.n, "predicted_ms": gen_ms,
                "predicted_per_token_ms": gen_ms / steps if steps > 0 else 0.0,
                "predicted_per_second": 1e3 * steps / gen_ms if steps > 0 and gen_ms > 0 else 0.0}


# --- the routes ----------------------------------------------------------------------------------

def _event(seq: int, ev: JSON) -> bytes:
    ev = dict(ev, sequence_number=seq)
    return (f"event: {ev['type']}\n".encode() + b"data: "
            + json.dumps(ev, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n")


class ResponsesAPI:
    def __init__(self, routes: Routes, store: Optional[ResponseStore] = None):
        self.routes = routes
        self.host = routes.host
        self.config = routes.config
        self.metrics = routes.metrics
        self.store = store if store is not None else ResponseStore()  # an empty one is falsy

    # -- GET / DELETE --
    def _not_found(self, rid: str) -> APIError:
        return APIError(404, f"no response with id '{rid}' (responses are kept in memory, the "
                             f"{self.store.capacity} most recent with store: true)",
                        "invalid_request_error", "response_id", "response_not_found")

    async def retrieve(self, request: Request) -> Response:
        rid = request.path_params["response_id"]
        for key, value in request.query_params.items():
            if key == "stream" and value.lower() in ("false", "0", ""):
                continue
            if key == "include" or key == "include[]":
                continue  # as for POST: nothing more can be included than what was stored
            return self.routes._fail(ENDPOINT, invalid(
                f"query parameter '{key}' is not supported: a stored response is returned whole "
                "(no streaming replay: there are no background responses)", key, "unsupported"))
        stored = self.store.get(rid)
        if stored is None:
            return self.routes._fail(ENDPOINT, self._not_found(rid))
        self.metrics.request_done(ENDPOINT, 200)
        return JSONResponse(stored.body)

    async def input_items(self, request: Request) -> Response:
        """The stored response's own input items (not those of earlier responses), a cursor
        page as OpenAI's: `limit` 1..100 (20), `order` desc (default) | asc, `after` an id."""
        rid = request.path_params["response_id"]
        stored = self.store.get(rid)
        if stored is None:
            return self.routes._fail(ENDPOINT, self._not_found(rid))
        q = request.query_params
        try:
            for key in q:
                if key not in ("limit", "order", "after", "include", "include[]"):
                    raise invalid(f"unknown query parameter '{key}'", key, "unknown_field")
            try:
                limit = int(q.get("limit", "20"))
            except ValueError:
                raise invalid(f"'limit' must be an integer, got {q['limit']!r}", "limit",
                              "invalid_type") from None
            if not 1 <= limit <= 100:
                raise invalid(f"'limit' must be in 1..100, got {limit}", "limit",
                              "invalid_value")
            order = q.get("order", "desc")
            if order not in ("asc", "desc"):
                raise invalid(f"'order' must be 'asc' or 'desc', got {order!r}", "order",
                              "invalid_value")
            items = stored.items if order == "asc" else stored.items[::-1]
            if "after" in q:
                ids = [it["id"] for it in items]
                if q["after"] not in ids:
                    raise invalid(f"no input item '{q['after']}' in response '{rid}'", "after",
                                  "invalid_value")
                items = items[ids.index(q["after"]) + 1:]
        except APIError as e:
            return self.routes._fail(ENDPOINT, e)
        page = items[:limit]
        self.metrics.request_done(ENDPOINT, 200)
        return JSONResponse({"object": "list", "data": page,
                             "first_id": page[0]["id"] if page else None,
                             "last_id": page[-1]["id"] if page else None,
                             "has_more": len(items) > limit})

    async def delete(self, request: Request) -> Response:
        rid = request.path_params["response_id"]
        if not self.store.delete(rid):
            return self.routes._fail(ENDPOINT, self._not_found(rid))
        self.metrics.request_done(ENDPOINT, 200)
        return JSONResponse({"id": rid, "object": "response.deleted", "deleted": True})

    # -- POST --
    def _history(self, req: ResponsesRequest) -> List[JSON]:
        if req.previous_response_id is None:
            return []
        stored = self.store.get(req.previous_response_id)
        if stored is None:
            raise invalid(f"previous response with id '{req.previous_response_id}' not found "
                          "(responses are kept in memory while the server runs, only with "
                          "store: true)", "previous_response_id", "previous_response_not_found")
        limit = getattr(self.config, "max_body_size", None)
        if limit and stored.size > limit:  # a continued conversation counts as if sent whole
            raise APIError(413, f"the conversation of previous_response_id is {stored.size} "
                                f"bytes, over the server's request limit of {limit} bytes "
                                "(edgellm serve --max-body-size); start a new one",
                           "invalid_request_error", "previous_response_id", "request_too_large")
        return stored.history

    def _body(self, rid: str, created: float, req: ResponsesRequest, params, status: str,
              output: List[JSON], usage: Optional[JSON], incomplete: Optional[str] = None,
              error: Optional[JSON] = None) -> JSON:
        echo = dict(req.echo)
        # What was really used: SamplingParams' defaults fill what the client left out.
        for key in ("temperature", "top_p"):
            if echo[key] is None:
                echo[key] = getattr(params, key, None)
        return {
            "id": rid, "object": "response", "created_at": int(created), "status": status,
            "background": False, "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "model": self.config.model_id, "output": output, "usage": usage,
            "completed_at": int(time.time()) if status == "completed" else None,
            "max_tool_calls": None, **echo,
        }

    @staticmethod
    def _usage(u, reasoning_tokens: int) -> Optional[JSON]:
        if u is None:
            return None
        return {"input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": getattr(u, "cached_tokens", 0) or 0},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
                "total_tokens": u.prompt_tokens + u.completion_tokens}

    @staticmethod
    def _status(finish: Optional[str]) -> Tuple[str, Optional[str]]:
        if finish == "length":
            return "incomplete", "max_output_tokens"
        if finish == "cancelled":
            return "failed", None
        return "completed", None

    def _keep(self, rid: str, body: JSON, req: ResponsesRequest, history: List[JSON],
              builder: OutputBuilder) -> None:
        if req.store and body["status"] in ("completed", "incomplete"):
            kept = [dict(m) for m in history] + req.input_messages + [builder.assistant_message()]
            self.store.put(rid, StoredResponse(body, kept, req.items))

    async def create(self, request: Request) -> Response:
        t0 = time.monotonic()
        created = time.time()
        routes = self.routes
        try:
            llm = self.host.require_ready()
            req = parse_request(await read_json(request))
            history = self._history(req)
            messages = conversation(req, history)
            params = self.host.sampling_params(req.sampling)
            admission = self.host.admit(1)
        except Exception as e:  # noqa: BLE001 - APIError, and what bad input makes Python raise
            return routes._fail(ENDPOINT, engine_error(e, "input"))

        deadline = routes._deadline(t0)
        started = await routes._start(
            request, ENDPOINT, lambda: [open_chat(llm, messages, params, req)], 1, admission, t0,
            deadline, lambda e: routes._fail(ENDPOINT, engine_error(e, "input")))
        if isinstance(started, Response):
            return started
        stream, first = started

        rid = _id("resp")
        builder = OutputBuilder()
        if req.stream:
            return self._stream(rid, created, req, params, history, builder, stream, admission,
                                first, deadline)

        last = {"finish": None, "usage": None}

        async def collect():
            item = first
            while item is not None:
                _, chunk = item
                builder.feed(chunk_delta(chunk), len(chunk.token_ids or ()))
                if chunk.finish_reason is not None:
                    last["finish"] = chunk.finish_reason
                if chunk.usage is not None:
                    last["usage"] = chunk.usage
                item = await stream.next()

        failed = await routes._collect(ENDPOINT, collect, request, deadline, stream, admission,
                                       lambda e: routes._fail(ENDPOINT, engine_error(e, "input")))
        if failed is not None:
            return failed

        status, reason = self._status(last["finish"])
        builder.finish("incomplete" if status == "incomplete" else "completed")
        error = None
        if status == "failed":
            error = {"code": "server_error", "message": "the request was cancelled by the server"}
        body = self._body(rid, created, req, params, status, builder.output(),
                          self._usage(last["usage"], builder.reasoning_tokens), reason, error)
        self._keep(rid, body, req, history, builder)
        self.metrics.request_done(ENDPOINT, 200)
        return JSONResponse(body)

    def _stream(self, rid, created, req, params, history, builder: OutputBuilder,
                stream: ChunkStream, admission, first, deadline) -> Response:
        outcome = {"status": 200}
        seq = iter(range(1 << 62))

        def send(ev: JSON) -> bytes:
            return _event(next(seq), ev)

        per_token = req.timings_per_token
        clock = _RunningTimings()
        last_timings: JSON = {"t": None}

        async def events():
            start = self._body(rid, created, req, params, "in_progress", [], None)
            yield send({"type": "response.created", "response": start})
            yield send({"type": "response.in_progress", "response": start})
            item, finish, usage = first, None, None
            while item is not None:
                _, chunk = item
                progress = progress_of(chunk)
                if progress is not None:  # return_progress, as llama-server sends it
                    ev = {"type": "response.in_progress", "response": start}
                    if per_token:
                        ev["timings"] = clock.progress(progress)
                    ev["prompt_progress"] = prompt_progress(progress)
                    yield send(ev)
                evs = builder.feed(chunk_delta(chunk), len(chunk.token_ids or ()))
                if per_token and chunk.token_ids:
                    t = clock.tokens(len(chunk.token_ids))
                    if evs:  # llama-server: on the last event of the step
                        evs[-1] = dict(evs[-1], timings=t)
                for ev in evs:
                    yield send(ev)
                if chunk.finish_reason is not None:
                    finish = chunk.finish_reason
                    last_timings["t"] = chunk.timings
                if chunk.usage is not None:
                    usage = chunk.usage
                try:
                    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                    item = await asyncio.wait_for(stream.next(), timeout)
                except asyncio.TimeoutError:
                    err = timed_out(self.config.timeout)
                except Exception as e:  # noqa: BLE001 - headers are sent: report in-band
                    err = engine_error(e)
                else:
                    continue
                outcome["status"] = err.status
                for ev in builder.finish("incomplete"):
                    yield send(ev)
                yield send({"type": "error", "code": err.code, "message": err.message,
                            "param": err.param})
                body = self._body(rid, created, req, params, "failed", builder.output(),
                                  self._usage(usage, builder.reasoning_tokens), None,
                                  {"code": "server_error", "message": err.message})
                yield send({"type": "response.failed", "response": body})
                return
            status, reason = self._status(finish)
            for ev in builder.finish("incomplete" if status == "incomplete" else "completed"):
                yield send(ev)
            error = None
            if status == "failed":
                error = {"code": "server_error",
                         "message": "the request was cancelled by the server"}
            body = self._body(rid, created, req, params, status, builder.output(),
                              self._usage(usage, builder.reasoning_tokens), reason, error)
            self._keep(rid, body, req, history, builder)
            done = {"type": f"response.{status}", "response": body}
            if per_token and last_timings["t"]:
                done["timings"] = timings(last_timings["t"])
            yield send(done)

        async def on_close(disconnected: bool):
            await self.routes._close(stream, admission)
            self.metrics.request_done(ENDPOINT,
                                      CLIENT_CLOSED if disconnected else outcome["status"])

        return EventStreamResponse(events(), on_close)
