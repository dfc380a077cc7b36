"""OpenAI's Responses API on the wire: the `POST /v1/responses` body (`ResponsesBody`, every field
used or refused, an unknown one a 400 naming it) and what it asks of the chat API (its input as
chat messages, its tools, sampling and template arguments), and the output items and stream
events it answers with."""
from functools import cached_property
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from typing_extensions import Annotated

from .. import validation as V
from . import media
from .errors import invalid
from .media import TEXT_ONLY, image_part_model
from .wire import (Int, Refusal, Wire, bad_type, new_id, of_type, one_of, refuse as _refuse,
                   shape, text_or)

JSON = Dict[str, Any]


# --- input items -----------------------------------------------------------------------------------

Lists = (Optional[List[Any]], None)
Str = (Optional[str], None)
Given = (str, Field(None, validate_default=True))  # required; absent or null is a wrong type
TextPart = shape("TextPart", Wire, type=Literal["input_text", "output_text", "text"], text=str,
                 annotations=Lists, logprobs=Lists)
RefusalPart = of_type("refusal", Wire, refusal=str, annotations=Lists, logprobs=Lists)
MEDIA_PARTS = ("input_file", "input_audio", "image_url", "image", "file")
# an image (server/media.py): for a model loaded with its projector
ImagePart = image_part_model("input_image", f"'{{where}}' is an input_image part: {TEXT_ONLY}",
                             image_url=Str, file_id=Str, detail=Str)


def _unknown_part(kind: Any) -> Refusal:
    if kind in MEDIA_PARTS:
        return Refusal(f"'{{where}}' is an {kind} part: images, files and audio are not supported "
                       "(this server's models take text only)", "unsupported", "{where}.type")
    return Refusal(f"'{{where}}.type' must be one of input_text, output_text, text, refusal, got "
                   f"{V.short(kind)}", param="{where}.type")


Content = text_or(one_of({"input_text": TextPart, "output_text": TextPart, "text": TextPart,
                          "refusal": RefusalPart, "input_image": ImagePart}, _unknown_part),
                  "content parts")


MessageItem = of_type("message", Wire, role=Literal["user", "assistant", "system", "developer"],
                      content=Content, id=Str, status=Str, phase=Str)
FunctionCallItem = of_type("function_call", Wire, call_id=Given, name=Given, arguments=Given,
                           id=Str, status=Str, namespace=Str)
FunctionCallOutputItem = of_type("function_call_output", Wire, call_id=Given, output=Content,
                                 id=Str, status=Str)
ReasoningText = shape("ReasoningText", Wire, type=Literal["reasoning_text", "summary_text"],
                      text=str)
ReasoningItem = of_type("reasoning", Wire, id=Str, summary=(List[ReasoningText], []),
                        content=(Optional[List[ReasoningText]], None), status=Str,
                        encrypted_content=(Annotated[Optional[str], _refuse(lambda v: True, (
                            "'{where}' is not supported: this server never encrypts reasoning"))],
                                           None))


def _unknown_item(kind: Any) -> Refusal:
    if kind == "item_reference":
        return Refusal("'{where}': item references are not supported; send the item itself or use "
                       "previous_response_id", "unsupported", "{where}.type")
    return Refusal(f"'{{where}}.type' {V.short(kind)} is not supported: send messages, "
                   "function_call, function_call_output or reasoning items", "unsupported",
                   "{where}.type")


Item = one_of({"message": MessageItem, "function_call": FunctionCallItem,
               "function_call_output": FunctionCallOutputItem, "reasoning": ReasoningItem},
              _unknown_item, lambda d: d.get("type", "message" if "role" in d else None))


def _as_items(v: Any) -> Any:
    return [{"type": "message", "role": "user", "content": v}] if isinstance(v, str) else v


# --- tools, text format, reasoning ---------------------------------------------------------------

BUILTIN_TOOLS = ("web_search", "web_search_preview", "web_search_preview_2025_03_11",
                 "web_search_2025_08_26", "file_search", "computer", "computer_use_preview",
                 "computer_use", "code_interpreter", "image_generation", "mcp", "local_shell",
                 "shell", "apply_patch", "custom", "tool_search", "namespace")


# `strict` true when the client leaves it out: OpenAI shows it so
FunctionTool = of_type("function", Wire, name=(Annotated[str, _refuse(
                           lambda v: not isinstance(v, str) or not v, "'{where}' must be a "
                           "non-empty string", "invalid_value", when=BeforeValidator)], Given[1]),
                       description=Str, parameters=(Optional[Dict[str, Any]], None),
                       strict=(bool, True))


def _builtin_tool(kind: Any) -> Refusal:
    if kind in BUILTIN_TOOLS or (isinstance(kind, str) and kind.startswith("web_search")):
        return Refusal(f"built-in tool '{kind}' is not supported: only function tools (type "
                       "'function', run by the client) are", "unsupported", "{where}.type")
    return Refusal(f"'{{where}}.type' must be 'function', got {V.short(kind)}",
                   param="{where}.type")


FunctionChoice = shape("FunctionChoice", Wire, type=Literal["function"], name=str)


def _tool_choice(v: Any) -> Any:
    if isinstance(v, str):
        if v not in ("none", "auto", "required"):
            raise Refusal(f"'{{where}}' must be one of none, auto, required, got {V.short(v)}")
        return v
    if isinstance(v, dict) and v.get("type") != "function":
        raise Refusal(f"'{{where}}' of type {V.short(v.get('type'))} is not supported: send "
                      "'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}",
                      "unsupported", "{where}.type")
    if not isinstance(v, dict):
        raise bad_type(v, "a string or an object")
    return FunctionChoice.model_validate(v)


PlainFormat = shape("PlainFormat", Wire, type=Literal["text", "json_object"])


class SchemaFormat(Wire):
    type: Literal["json_schema"]
    name: str = "response"
    schema_: Dict[str, Any] = Field(alias="schema")
    description: Optional[str] = None
    strict: Optional[bool] = None

    @model_validator(mode="before")
    @classmethod
    def _a_schema(cls, v: Any) -> Any:
        if not isinstance(v.get("schema"), dict):
            raise bad_type(v.get("schema"), "an object (a JSON schema)", "{where}.schema")
        return v


class TextConfig(Wire):
    format: one_of({"text": PlainFormat, "json_object": PlainFormat,
                    "json_schema": SchemaFormat}) = \
        Field(default_factory=lambda: PlainFormat(type="text"))
    verbosity: Annotated[Optional[str], _refuse(
        lambda v: v != "medium", "'{where}' {v} is not supported: the model writes as it does "
                                 "('medium', the default, is accepted)")] = None


Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
Summary = Literal["auto", "concise", "detailed"]


Reasoning = shape("Reasoning", Wire, effort=(Optional[Effort], None),
                  summary=(Optional[Summary], None), generate_summary=(Optional[Summary], None))
StreamOptions = shape("StreamOptions", Wire, include_obfuscation=(Optional[bool], None))


# Fields of OpenAI's API that this server does not implement, with what to do instead.
UNSUPPORTED = {
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
INCLUDABLE = "reasoning.encrypted_content"  # reasoning comes in plain text: nothing to encrypt


class ResponsesBody(Wire):
    """`POST /v1/responses`."""
    model: Optional[str] = None
    input: Annotated[List[Item], BeforeValidator(_as_items), Field(min_length=1)]
    instructions: Optional[str] = None
    max_output_tokens: Annotated[Optional[Int], Field(ge=1)] = None
    temperature: Annotated[Optional[float], Field(ge=0.0, le=2.0)] = None
    top_p: Annotated[Optional[float], Field(gt=0.0, le=1.0)] = None
    tools: List[one_of({"function": FunctionTool}, _builtin_tool)] = []
    tool_choice: Annotated[Union[Literal["none", "auto", "required"], FunctionChoice],
                           BeforeValidator(_tool_choice)] = "auto"
    parallel_tool_calls: bool = True  # OpenAI's default, not llama-server's one call per turn
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    previous_response_id: Optional[str] = None
    store: bool = True
    metadata: Annotated[Dict[Annotated[str, Field(max_length=64)],
                             Annotated[str, Field(max_length=512)]], Field(max_length=16)] = {}
    text: TextConfig = Field(default_factory=TextConfig)
    reasoning: Reasoning = Field(default_factory=Reasoning)
    user: Optional[str] = None
    safety_identifier: Optional[str] = None
    prompt_cache_key: Optional[str] = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] = "default"
    truncation: Annotated[Literal["disabled"], _refuse(
        lambda v: v == "auto", "'{where}': 'auto' is not supported: the conversation is never "
        "cut to fit the context (send 'disabled'; an input that does not fit is a 400)",
        when=BeforeValidator)] = "disabled"
    include: List[Annotated[str, _refuse(
        lambda v: v != INCLUDABLE, "'{where}' {v} is not supported: no log-probabilities, tool "
        f"sources or images are returned ('{INCLUDABLE}' is accepted: reasoning comes in plain "
        "text)")]] = []
    background: Annotated[bool, _refuse(
        bool, "'{where}': true is not supported: responses run in the request")] = False
    # llama-server's telemetry (streams): prompt_progress on response.in_progress, timings
    return_progress: bool = False
    timings_per_token: bool = False

    @model_validator(mode="before")
    @classmethod
    def _unsupported(cls, v: Any) -> Any:
        for key in UNSUPPORTED:
            if isinstance(v, dict) and v.get(key) is not None:
                raise invalid(f"'{key}' is not supported by this server: {UNSUPPORTED[key]}", key,
                              "unsupported")
        return v

    @model_validator(mode="after")
    def _together(self) -> "ResponsesBody":
        if self.stream_options is not None and not self.stream:
            raise invalid("'stream_options' is only allowed when 'stream' is true",
                          "stream_options", "invalid_value")
        names = [t.name for t in self.tools]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise invalid(f"two tools are named '{name}'", f"tools[{i}].name",
                              "invalid_value")
        if self.tool_choice == "required" and not names:
            raise invalid("'tool_choice': 'required' needs at least one tool in 'tools'",
                          "tool_choice", "invalid_value")
        if isinstance(self.tool_choice, FunctionChoice) and self.tool_choice.name not in names:
            raise invalid(f"'tool_choice.name' is '{self.tool_choice.name}', which is not a "
                          "function in 'tools'", "tool_choice.name", "invalid_value")
        return self

    # --- what the request asks of the chat API ---

    @cached_property
    def input_messages(self) -> List[JSON]:
        """The input items -> chat messages (function calls join the assistant message before
        them; tool results become `role: tool` messages; reasoning goes with the next assistant
        message)."""
        out: List[JSON] = []
        tool_names: Dict[str, str] = {}
        reasoning: List[str] = []
        for i, it in enumerate(self.input):
            if isinstance(it, FunctionCallItem) and (not out or out[-1]["role"] != "assistant"):
                out.append({"role": "assistant", "content": ""})
            if isinstance(it, MessageItem):
                out.append({"role": "system" if it.role == "developer" else it.role,
                            "content": _text(it.content, f"input[{i}].content")})
            if isinstance(it, (MessageItem, FunctionCallItem)) and reasoning and \
                    out[-1]["role"] == "assistant" and "reasoning_content" not in out[-1]:
                out[-1]["reasoning_content"], reasoning = "\n".join(reasoning), []
            if isinstance(it, FunctionCallItem):
                out[-1].setdefault("tool_calls", []).append(
                    {"id": it.call_id, "type": "function",
                     "function": {"name": it.name, "arguments": it.arguments}})
                tool_names[it.call_id] = it.name
            elif isinstance(it, FunctionCallOutputItem):
                out.append({"role": "tool", "tool_call_id": it.call_id,
                            "content": _text(it.output, f"input[{i}].output"),
                            **({"name": tool_names[it.call_id]} if it.call_id in tool_names
                               else {})})
            elif isinstance(it, ReasoningItem):  # the full text when there is one, else the summary
                text = "\n".join(p.text for p in it.content or ()) or \
                    "\n".join(p.text for p in it.summary)
                reasoning += [text] if text else []
        if not out:
            raise invalid("'input' has no messages", "input", "invalid_value")
        return out

    @cached_property
    def items(self) -> List[JSON]:
        """The input as stored items with ids, for GET /v1/responses/{id}/input_items."""
        out = []
        for it in self.input:
            d = {"type": it.type, "id": it.id or new_id(_ITEM_IDS[it.type] + "_"),
                 **it.model_dump(include=_ITEM_FIELDS[it.type], exclude_none=True)}
            if it.type == "message":
                part = "output_text" if it.role == "assistant" else "input_text"
                if isinstance(it.content, str):
                    d["content"] = [{"type": part, "text": it.content}]
                for p in d["content"]:
                    if p["type"] == "output_text":
                        p.setdefault("annotations", [])
            out.append({**d, "status": "completed"})
        return out

    @property
    def sampling(self) -> JSON:
        """SamplingParams keyword arguments."""
        out: JSON = {"max_tokens": self.max_output_tokens,
                     **self.model_dump(include={"temperature", "top_p"}, exclude_none=True)}
        if self.stream and self.return_progress:
            out["return_progress"] = True
        fmt = self.text.format
        if fmt.type != "text":
            out["response_format"] = {"type": fmt.type} if fmt.type == "json_object" else {
                "type": "json_schema", "json_schema": {
                    "name": fmt.name, "schema": fmt.schema_,
                    **({} if fmt.strict is None else {"strict": fmt.strict})}}
        return out

    @property
    def chat_tools(self) -> Optional[List[JSON]]:
        """The tools, chat-completions style (`strict` only where the client sent it)."""
        return [{"type": "function", "function": {
            "name": t.name, **({} if t.description is None else {"description": t.description}),
            "parameters": t.parameters or {"type": "object", "properties": {}},
            **({"strict": t.strict} if "strict" in t.model_fields_set else {})}}
            for t in self.tools] or None

    @property
    def chat_tool_choice(self) -> Any:
        """tool_choice, chat-completions style; None: not sent."""
        c = self.tool_choice
        return None if "tool_choice" not in self.model_fields_set else c if isinstance(c, str) \
            else {"type": "function", "function": {"name": c.name}}

    @property
    def template_kwargs(self) -> Optional[JSON]:
        effort = self.reasoning.effort
        return None if effort is None else {"enable_thinking": effort != "none",
                                            "reasoning_effort": effort}

    @cached_property
    def echo(self) -> JSON:
        """The request fields the response object repeats."""
        c, r = self.tool_choice, self.reasoning
        return {**self.model_dump(include={
            "instructions", "max_output_tokens", "metadata", "parallel_tool_calls",
            "previous_response_id", "service_tier", "store", "tools", "truncation", "user",
            "safety_identifier", "prompt_cache_key", "temperature", "top_p"}),
            "reasoning": {"effort": r.effort, "summary": r.summary or r.generate_summary},
            "text": self.text.model_dump(by_alias=True, exclude_none=True),
            "tool_choice": c if isinstance(c, str) else c.model_dump()}


def _text(content: Any, where: str = "") -> Any:
    """A message's content: its text, or text and image parts (server/media.py) in order."""
    return content if isinstance(content, str) else media.content([
        p.refusal if isinstance(p, RefusalPart) else media.part(p, f"{where}[{j}]")
        if isinstance(p, ImagePart) else p.text for j, p in enumerate(content)])


_ITEM_IDS = {"message": "msg", "function_call": "fc", "function_call_output": "fco",
             "reasoning": "rs"}
_ITEM_FIELDS = {"message": {"role", "content"}, "function_call": {"call_id", "name", "arguments"},
                "function_call_output": {"call_id", "output"}, "reasoning": {"summary", "content"}}


class ItemsQuery(BaseModel):
    """`GET /v1/responses/{id}/input_items`'s query (strings: not strict), a page as OpenAI's."""
    model_config = ConfigDict(extra="forbid")
    limit: Annotated[int, Field(ge=1, le=100)] = 20
    order: Literal["asc", "desc"] = "desc"
    after: Optional[str] = None
    include: Any = None  # nothing more can be included than what was stored
    include_: Any = Field(None, alias="include[]")


# --- the answer: a response object, its output items, the stream events ------------------------

OutputText = of_type("output_text", text=(str, ""), annotations=(List[Any], []),
                     logprobs=(List[Any], []))
ReasoningOut = of_type("reasoning_text", text=(str, ""))
Status = (str, "in_progress")
OutMessage = of_type("message", id=str, status=Status, role=(Literal["assistant"], "assistant"),
                     content=(List[OutputText], []))
OutReasoning = of_type("reasoning", id=str, summary=(List[Any], []),
                       content=(List[ReasoningOut], []), status=Status)
OutCall = of_type("function_call", id=str, call_id=str, name=str, arguments=(str, ""),
                  status=Status)
OutItem = Union[OutMessage, OutReasoning, OutCall]
Usage = shape("Usage", input_tokens=int,
              input_tokens_details=shape("InputTokens", cached_tokens=(int, 0)),
              output_tokens=int,
              output_tokens_details=shape("OutputTokens", reasoning_tokens=(int, 0)),
              total_tokens=int)
ErrorInfo = shape("ErrorInfo", code=str, message=str)
Incomplete = shape("Incomplete", reason=str)


class ResponseObject(BaseModel):
    """The response; the request fields it repeats (`echo`) follow as extra fields."""
    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: str
    background: bool = False
    error: Optional[ErrorInfo] = None
    incomplete_details: Optional[Incomplete] = None
    model: str
    output: List[OutItem] = []
    usage: Optional[Usage] = None
    completed_at: Optional[int] = None
    max_tool_calls: Optional[int] = None


ItemsPage = shape("ItemsPage", object=(Literal["list"], "list"), data=List[JSON],
                  first_id=Optional[str], last_id=Optional[str], has_more=bool)
Deleted = shape("Deleted", id=str, object=(Literal["response.deleted"], "response.deleted"),
                deleted=(bool, True))


# Stream events, by type (OpenAI's ResponseStreamEvent union); `sequence_number` is set as each
# is sent, and llama-server's `timings` / `prompt_progress` ride along where asked for.
_Item = dict(item_id=str, output_index=int)
_Part = dict(_Item, content_index=int)
EVENTS = {cls.model_fields["type"].default: cls for cls in [
    *(of_type(f"response.{s}", response=JSON)
      for s in ("created", "in_progress", "completed", "incomplete", "failed")),
    of_type("response.output_item.added", output_index=int, item=OutItem),
    of_type("response.output_item.done", output_index=int, item=OutItem),
    of_type("response.content_part.added", **_Part, part=Union[OutputText, ReasoningOut]),
    of_type("response.content_part.done", **_Part, part=Union[OutputText, ReasoningOut]),
    of_type("response.output_text.delta", **_Part, delta=str, logprobs=(List[Any], [])),
    of_type("response.output_text.done", **_Part, text=str, logprobs=(List[Any], [])),
    of_type("response.reasoning_text.delta", **_Part, delta=str),
    of_type("response.reasoning_text.done", **_Part, text=str),
    of_type("response.function_call_arguments.delta", **_Item, delta=str),
    of_type("response.function_call_arguments.done", **_Item, name=str, arguments=str),
    of_type("error", code=Optional[str], message=str, param=Optional[str]),
]}


def event(kind: str, **fields: Any) -> JSON:
    """The stream event `kind` as JSON (its models dumped as they are now)."""
    return EVENTS[kind](**fields).model_dump()
