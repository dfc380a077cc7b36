"""Anthropic's Messages API: `POST /v1/messages` and `POST /v1/messages/count_tokens`.

A request, parsed by its wire model (anthropic_models.py), becomes OpenAI-style chat messages
and tools for the shared chat API (`llm.chat_stream_chunks`); `MessageBuilder` turns its
ChatDeltas into Anthropic content blocks (`text`, `thinking`, `tool_use`) and named SSE events.
The request's life is lifecycle.py's. Errors use Anthropic's envelope
`{"type": "error", "error": {"type", "message"}}`.
"""
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .. import sampling_fields
from . import anthropic_models as W
from . import media
from .answer_items import ItemAssembler
from .errors import APIError, invalid
from .lifecycle import Encoder, Generation, Lifecycle, off_loop, read_json
from .wire import chunk_delta, named_event, new_id, parse

log = logging.getLogger("edgellm.server")

JSON = Dict[str, Any]

# Our HTTP statuses -> Anthropic's error types.
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
               504: "timeout_error"}


def error_body(e: APIError) -> JSON:
    kind = ERROR_TYPES.get(e.status, "api_error" if e.status >= 500 else "invalid_request_error")
    return W.ErrorBody(error=W.ErrorDetail(type=kind, message=e.message)).model_dump()


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(error_body(e), status_code=e.status, headers=e.headers)


def is_anthropic_path(path: str) -> bool:
    return path == "/v1/messages" or path.startswith("/v1/messages/")


# --- the request as a chat conversation ------------------------------------------------------------

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


Blocks = List[Tuple[str, BaseModel]]  # (where, block)


def _wrong_block(kind: str, role: str, where: str) -> APIError:
    if kind == "redacted_thinking":
        return invalid(f"'{where}': redacted_thinking blocks (encrypted Claude output) cannot be "
                       f"used by this model", f"{where}.type", "unsupported")
    return invalid(f"'{where}': a {kind} block is not allowed in a {role} message",
                   f"{where}.type", "invalid_value")


def _texts(content: Any) -> str:
    return content if isinstance(content, str) else "\n".join(b.text for b in content)


def _tool_result_content(b: BaseModel, where: str) -> Any:
    """A tool_result's content: its text, or (with image blocks) the text and image parts in
    order, each image through the one converter every API's images take (vision.image_part)."""
    prefix = "Error: " if b.is_error else ""
    if isinstance(b.content, str) or not any(isinstance(x, W.ImageBlock) for x in b.content):
        return prefix + _texts(b.content)
    pieces: List[Any] = [prefix] if prefix else []
    for j, x in enumerate(b.content):
        pieces.append(media.part(x, f"{where}[{j}]") if isinstance(x, W.ImageBlock) else x.text)
    return media.content(pieces)


def _user_turn(blocks: Blocks, tool_names: Dict[str, str]) -> List[JSON]:
    """Tool results -> `role: tool` messages (first, as they answer the previous turn's calls),
    the text -> one user message."""
    out, texts = [], []
    for where, b in blocks:
        if isinstance(b, (W.TextBlock, W.ImageBlock)):
            texts.append(b.text if isinstance(b, W.TextBlock) else media.part(b, where))
        elif isinstance(b, W.ToolResultBlock):
            if b.tool_use_id not in tool_names:
                raise invalid(f"'{where}.tool_use_id' {b.tool_use_id!r} answers no tool_use block "
                              f"of an earlier assistant message", f"{where}.tool_use_id",
                              "invalid_value")
            out.append({"role": "tool", "tool_call_id": b.tool_use_id,
                        "name": tool_names[b.tool_use_id],
                        "content": _tool_result_content(b, f"{where}.content")})
        else:
            raise _wrong_block(b.type, "user", where)
    if texts:
        out.append({"role": "user", "content": media.content(texts)})
    return out


def _assistant_turn(blocks: Blocks, tool_names: Dict[str, str]) -> JSON:
    texts, calls, thoughts = [], [], []
    for where, b in blocks:
        if isinstance(b, W.TextBlock):
            texts.append(b.text)
        elif isinstance(b, W.ToolUseBlock):
            tool_names[b.id] = b.name
            calls.append({"id": b.id, "type": "function",
                          "function": {"name": b.name,
                                       "arguments": json.dumps(b.input, ensure_ascii=False)}})
        elif isinstance(b, W.ThinkingBlock):
            thoughts.append(b.thinking)
        else:
            raise _wrong_block(b.type, "assistant", where)
    return {"role": "assistant", "content": "\n".join(texts), **({"tool_calls": calls} if calls
                                                                  else {}),
            **({"reasoning_content": "\n".join(thoughts)} if thoughts else {})}


def convert_messages(body: W.CountTokensBody) -> List[JSON]:
    """Anthropic `system` + `messages` -> OpenAI-style chat messages. Consecutive turns of one
    role are combined into one turn, as Anthropic does."""
    out = [] if body.system is None else [{"role": "system", "content": _texts(body.system)}]
    turns: List[Tuple[str, Blocks]] = []
    for i, m in enumerate(body.messages):
        where = f"messages[{i}].content"
        blocks: Blocks = [(where, W.TextBlock(text=m.content))] if isinstance(m.content, str) \
            else [(f"{where}[{j}]", b) for j, b in enumerate(m.content)]
        if turns and turns[-1][0] == m.role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((m.role, blocks))
    if turns[-1][0] == "assistant":
        raise invalid("the last message is from the assistant: continuing a partial assistant "
                      "turn (prefill) is not supported; end with a user message",
                      f"messages[{len(body.messages) - 1}]", "unsupported")
    tool_names: Dict[str, str] = {}  # tool_use id -> tool name, for the tool results
    for role, blocks in turns:
        out += _user_turn(blocks, tool_names) if role == "user" else \
            [_assistant_turn(blocks, tool_names)]
    return out


def parse_messages(raw: Any, model=W.MessagesBody, images: bool = False) -> MessagesRequest:
    """A `POST /v1/messages` body (`model` CountTokensBody: a count_tokens one), checked;
    `images`: the model takes image blocks."""
    body = parse(model, raw, {"images": images})
    req = MessagesRequest(messages=convert_messages(body))
    req.tools = [{"type": "function", "function": {
        "name": t.name, **({} if t.description is None else {"description": t.description}),
        "parameters": t.input_schema}} for t in body.tools or ()] or None
    choice = body.tool_choice
    if choice is not None:
        req.tool_choice = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type) \
            or {"type": "function", "function": {"name": choice.name}}
        req.parallel_tool_calls = not getattr(choice, "disable_parallel_tool_use", False)
    if req.tools and req.parallel_tool_calls is None:
        req.parallel_tool_calls = True  # Anthropic's default: several calls may come at once
    if body.thinking is not None:
        req.chat_template_kwargs = {"enable_thinking": body.thinking.type != "disabled"}
        req.show_thinking = getattr(body.thinking, "display", None) != "omitted"
    if isinstance(body, W.MessagesBody):
        req.max_tokens, req.stop_sequences, req.stream = body.max_tokens, body.stop_sequences, \
            body.stream
        # the sampling fields by edgellm.sampling_fields' Anthropic names (stop_sequences -> stop)
        req.sampling = {f: getattr(body, w) for w, f in
                        sampling_fields.wire_names("anthropic").items()
                        if getattr(body, w) not in (None, [])}
        if body.output_config is not None and body.output_config.format is not None:
            req.sampling["json_schema"] = body.output_config.format.schema_
    return req


# --- calling the engine ----------------------------------------------------------------------------

def count_prompt_tokens(llm, req: MessagesRequest) -> int:
    """The rendered prompt's size, as the chat API renders it (tool_choice none: no tools)."""
    kw = {k: v for k, v in req.chat_kwargs().items() if k == "chat_template_kwargs" or
          k == "tools" and req.tool_choice != "none"}
    return len(getattr(llm, "llm", llm).chat_prompt_ids(req.messages, **kw))  # AsyncLLM: .llm


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


# --- the answer ------------------------------------------------------------------------------------

def tool_use_id(call_id: Optional[str]) -> str:
    return new_id("toolu_", 24) if not call_id else call_id if call_id.startswith("toolu_") \
        else "toolu_" + (call_id[5:] if call_id.startswith("call_") else call_id)


def _tool_input(args: str) -> JSON:
    if not args.strip():
        return {}
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        log.warning("tool call arguments are not complete JSON (cut off?): %.80s", args)
        return {}
    return value if isinstance(value, dict) else {}


class MessageBuilder(ItemAssembler):
    """One assistant message built from ChatDeltas: `add`/`finish` return the stream events
    (Anthropic's, as JSON objects); `message()` is the whole response body."""

    def __init__(self, model: str, req: MessagesRequest, input_tokens: int = 0):
        self.msg = W.MessageOut(id=new_id("msg_", 24), model=model,
                                usage=W.Usage(input_tokens=input_tokens))
        super().__init__(self.msg.content)
        self.blocks, self.req = self.items, req
        self._args: Dict[int, str] = {}      # tool_use block index -> argument JSON text
        self._late: set = set()              # tool_use blocks continued after they closed

    stop_reason = property(lambda self: self.msg.stop_reason)
    stop_sequence = property(lambda self: self.msg.stop_sequence)
    add = ItemAssembler.feed

    def begin(self, kind: str, tc) -> List[JSON]:
        block = W.OutText() if kind == "text" else W.OutThinking() if kind == "reasoning" else \
            W.OutToolUse(id=tool_use_id(tc.id), name=tc.name or "")
        self.blocks.append(block)
        return [W.BlockStart(index=len(self.blocks) - 1, content_block=block).model_dump()]

    def extend(self, pos: int, kind: str, text: str) -> List[JSON]:
        block = self.blocks[pos]
        if kind == "text":
            block.text += text
            return [W.BlockDelta(index=pos, delta=W.TextDelta(text=text)).model_dump()]
        if not self.req.show_thinking:
            return []  # display: omitted -- the block is there, its text is not
        block.thinking += text
        return [W.BlockDelta(index=pos, delta=W.ThinkingDelta(thinking=text)).model_dump()]

    def extend_call(self, pos: int, tc, live: bool) -> List[JSON]:
        if not tc.arguments:
            return []
        self._args[pos] = self._args.get(pos, "") + tc.arguments
        if live:
            return [W.BlockDelta(index=pos, delta=W.InputJsonDelta(
                partial_json=tc.arguments)).model_dump()]
        log.warning("tool call %d continued after another block began", tc.index)
        self._late.add(pos)
        return []

    def end(self, pos: int, status: str) -> List[JSON]:
        if self.blocks[pos].type == "tool_use":
            self.blocks[pos].input = _tool_input(self._args.get(pos, ""))
        return [W.BlockStop(index=pos).model_dump()]

    def finish(self, chunk) -> List[JSON]:
        """The engine's last chunk: close the open block, work out stop_reason and usage."""
        ev = self.close_item()
        for i in self._late:  # calls continued after their block was closed
            self.blocks[i].input = _tool_input(self._args[i])
        reason, stop, msg = chunk.finish_reason, getattr(chunk, "stop_reason", None), self.msg
        u = chunk.usage
        if u is not None:
            cached = getattr(u, "cached_tokens", 0) or 0
            msg.usage = W.Usage(input_tokens=u.prompt_tokens - cached,
                                output_tokens=u.completion_tokens, cache_read_input_tokens=cached)
        if reason == "stop" and isinstance(stop, str) and stop in self.req.stop_sequences:
            msg.stop_reason, msg.stop_sequence = "stop_sequence", stop
        elif reason == "tool_calls" or (reason == "stop" and any(
                b.type == "tool_use" for b in self.blocks)):
            msg.stop_reason = "tool_use"
        elif reason == "length":
            msg.stop_reason = "max_tokens" if self.req.max_tokens is None or \
                msg.usage.output_tokens >= self.req.max_tokens else "model_context_window_exceeded"
        elif reason == "stop":
            msg.stop_reason = "end_turn"
        else:
            raise APIError(503, f"the request ended without an answer ({reason})",
                           "unavailable_error", None, "cancelled")
        return ev + [W.MessageDelta(delta=W.StopDelta(stop_reason=msg.stop_reason,
                                                      stop_sequence=msg.stop_sequence),
                                    usage=msg.usage).model_dump(), W.MessageStop().model_dump()]

    def message(self) -> JSON:
        return self.msg.model_dump()


class MessageEncoder(Encoder):
    """The lifecycle's view of a MessageBuilder: Anthropic's named events, its envelope."""

    def __init__(self, builder: MessageBuilder):
        self.builder, self.headers, self._events = builder, {"request-id": new_id("req_", 24)}, []

    def add(self, index: int, chunk) -> None:
        self._events = self.builder.add(chunk_delta(chunk))
        if chunk.finish_reason is not None:
            self._events += self.builder.finish(chunk)

    def start(self) -> List[JSON]:
        return [W.MessageStart(message=self.builder.msg).model_dump(), W.Ping().model_dump()]

    def events(self, index: int, chunk) -> List[JSON]:
        return self._events

    def finish(self) -> List[JSON]:
        if self.builder.stop_reason is None:
            raise APIError(500, "the engine stream ended without a finish reason", "server_error")
        return []

    def error(self, err: APIError) -> List[JSON]:
        return [error_body(err)]

    def response(self) -> Response:
        self.finish()
        return JSONResponse(self.builder.message(), headers=self.headers)

    frame = staticmethod(named_event)


# --- the routes ------------------------------------------------------------------------------------

class AnthropicRoutes:
    def __init__(self, host):
        self.host = host
        self.life = Lifecycle(host, envelope=error_response)

    async def count_tokens(self, request: Request) -> Response:
        async def work() -> Response:
            llm = self.host.require_ready()
            req = parse_messages(await read_json(request), W.CountTokensBody, media.takes_images(llm))
            n = await off_loop(count_prompt_tokens, llm, req)  # render + tokenize in a thread
            return JSONResponse(W.TokenCount(input_tokens=n).model_dump(),
                                headers={"request-id": new_id("req_", 24)})
        return await self.life.answer("messages_count_tokens", work, "messages")

    async def messages(self, request: Request) -> Response:
        async def plan(llm) -> Generation:
            req = parse_messages(await read_json(request), images=media.takes_images(llm))
            # the prompt's size: for max_tokens against the context, and message_start's usage
            n_prompt = await off_loop(count_prompt_tokens, llm, req)
            params = self.host.sampling_params(fit_context(
                req, n_prompt, self.host.n_ctx, getattr(self.host.config, "context_shift", False)))
            builder = MessageBuilder(self.host.config.model_id, req, n_prompt)
            return Generation(lambda: [llm.chat_stream_chunks(req.messages, params,
                                                              **req.chat_kwargs())],
                              MessageEncoder(builder), stream=req.stream, param="messages")
        return await self.life.run(request, "messages", plan, param="messages")
