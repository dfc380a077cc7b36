"""OpenAI's Responses API on the wire: the `POST /v1/responses` body (`ResponsesBody`, every field
used or refused, an unknown one a 400 naming it), its input items, and the output items and
stream events it answers with. What they mean for the engine is responses_api.py's."""
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from typing_extensions import Annotated

from .. import validation as V
from .errors import invalid
from .media import TEXT_ONLY, image_part_model
from .wire import Int, Refusal, Wire, bad_type, of_type, shape, tagged, text_or

JSON = Dict[str, Any]


def _refuse(test, message: str, code: str = "unsupported", param: str = "{where}",
            when=AfterValidator):
    """A field validator refusing the values `test` picks."""
    def check(v):
        if test(v):
            raise Refusal(message.replace("{v}", V.short(v)), code, param)
        return v
    return when(check)


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


Part = Annotated[Union[TextPart, RefusalPart, ImagePart], tagged(
    {"input_text": TextPart, "output_text": TextPart, "text": TextPart, "refusal": RefusalPart,
     "input_image": ImagePart},
    _unknown_part)]
Content = text_or(Part, "content parts")


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


Item = Annotated[Union[MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem],
                 tagged({"message": MessageItem, "function_call": FunctionCallItem,
                         "function_call_output": FunctionCallOutputItem,
                         "reasoning": ReasoningItem}, _unknown_item,
                        lambda d: d.get("type", "message" if "role" in d else None))]


def _as_items(v: Any) -> Any:
    return [{"type": "message", "role": "user", "content": v}] if isinstance(v, str) else v


# --- tools, text format, reasoning ---------------------------------------------------------------

BUILTIN_TOOLS = ("web_search", "web_search_preview", "web_search_preview_2025_03_11",
                 "web_search_2025_08_26", "file_search", "computer", "computer_use_preview",
                 "computer_use", "code_interpreter", "image_generation", "mcp", "local_shell",
                 "shell", "apply_patch", "custom", "tool_search", "namespace")


def _nonempty(v: Any) -> Any:
    if not isinstance(v, str) or not v:
        raise Refusal("'{where}' must be a non-empty string")
    return v


# `strict` true when the client leaves it out: OpenAI shows it so
FunctionTool = of_type("function", Wire, name=(Annotated[str, BeforeValidator(_nonempty)], Given[1]),
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
    format: Annotated[Union[PlainFormat, SchemaFormat], tagged(
        {"text": PlainFormat, "json_object": PlainFormat, "json_schema": SchemaFormat})] = \
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
    tools: List[Annotated[FunctionTool, tagged({"function": FunctionTool}, _builtin_tool)]] = []
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
