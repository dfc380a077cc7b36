"""Anthropic's Messages API on the wire: the request body (`MessagesBody`, checked field by field,
an unknown field a 400 naming it) and the message, content blocks and stream events it answers
with. What they mean for the engine is anthropic_api.py's."""
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import Field, model_validator
from typing_extensions import Annotated

from .. import validation as V
from .errors import invalid
from .media import TEXT_ONLY, image_part_model
from .wire import Int, Refusal, Wire, bad_type, of_type, one_of, refuse, rule, shape, text_or

JSON = Dict[str, Any]
Display = (Literal["summarized", "omitted"], "summarized")

# --- the request ---------------------------------------------------------------------------------

# Accepted where Anthropic allows it; the engine's prefix cache is automatic anyway.
CacheControl = shape("CacheControl", Wire, type=Literal["ephemeral"],
                     ttl=(Literal["5m", "1h"], "5m"))
Cache = (Optional[CacheControl], None)


TextBlock = of_type("text", Wire, text=str, cache_control=Cache, citations=(Annotated[
    Optional[List[Any]], refuse(bool, "'{where}': citations are not supported")], None))
ToolUseBlock = of_type("tool_use", Wire, id=str, name=str, input=Dict[str, Any], cache_control=Cache)
ThinkingBlock = of_type("thinking", Wire, thinking=str, signature=(Optional[str], None))
RedactedThinkingBlock = of_type("redacted_thinking", Wire, data=(Optional[str], None))

UNSUPPORTED_BLOCKS = {
    "image": "images go in a user message's content or a tool_result's",  # (not in system blocks)
    "document": "documents (PDF, plain-text or content sources): send the text as a text block",
    "search_result": "search results", "container_upload": "container uploads",
    "server_tool_use": "server tools", "web_search_tool_result": "server tools",
}


# an image (server/media.py): source {"type": "base64", "media_type", "data"} or {"type": "url"}
ImageBlock = image_part_model("image", f"'{{where}}': image blocks are not supported: {TEXT_ONLY}",
                              source=Dict[str, Any], cache_control=Cache)


def _unknown_block(kind: Any) -> Refusal:
    if kind is None:
        return Refusal("'{where}.type' is required", "missing_field", "{where}.type")
    if not isinstance(kind, str):
        return bad_type(kind, "a string", "{where}.type")
    if kind in UNSUPPORTED_BLOCKS:
        return Refusal(f"'{{where}}': {kind} blocks are not supported: {UNSUPPORTED_BLOCKS[kind]}",
                       "unsupported", "{where}.type")
    return Refusal(f"'{{where}}.type' {V.short(kind)} is not a known content block type",
                   param="{where}.type")


def _text_only(kind: Any) -> Refusal:
    if isinstance(kind, str) and kind not in UNSUPPORTED_BLOCKS:
        return Refusal("'{where}': only text blocks are allowed here", param="{where}.type")
    return _unknown_block(kind)


TextBlocks = text_or(one_of({"text": TextBlock}, _text_only), "text blocks")


def _text_or_image(kind: Any) -> Refusal:
    if isinstance(kind, str) and kind not in UNSUPPORTED_BLOCKS:
        return Refusal("'{where}': only text and image blocks are allowed in a tool_result",
                       param="{where}.type")
    return _unknown_block(kind)


# a tool's answer: text, and images (a screenshot tool's) where the model takes images
ToolResultContent = text_or(one_of({"text": TextBlock, "image": ImageBlock}, _text_or_image),
                            "text and image blocks")
ToolResultBlock = of_type("tool_result", Wire, tool_use_id=str, content=(ToolResultContent, ""),
                          is_error=(bool, False), cache_control=Cache)
Blocks = text_or(one_of({"text": TextBlock, "tool_use": ToolUseBlock, "tool_result": ToolResultBlock,
                         "thinking": ThinkingBlock, "redacted_thinking": RedactedThinkingBlock,
                         "image": ImageBlock}, _unknown_block), "content blocks")


Message = shape("Message", Wire, role=Annotated[str, refuse(
    lambda v: v not in ("user", "assistant"), "'{where}' must be 'user' or 'assistant', got {v} "
    "(put system prompts in the top-level 'system' field)", "invalid_value")],
    content=Annotated[Blocks, Field(min_length=1)])
Tool = shape("Tool", Wire, type=(Literal["custom"], "custom"),
             name=Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,128}$")],
             description=(Optional[str], None), input_schema=Annotated[Dict[str, Any], refuse(
                 lambda v: v.get("type") != "object", "'{where}.type' must be 'object'",
                 "invalid_value", "{where}.type")],
             cache_control=(Optional[CacheControl], None))


def _server_tool(kind: Any) -> Refusal:
    return Refusal(f"'{{where}}.type' {V.short(kind)}: server tools (web search, code execution, "
                   "bash, text editor, computer use, ...) are not supported; define a custom "
                   "tool with an input_schema", "unsupported", "{where}.type")


def _stop_sequences(v: Any, name: str) -> List[str]:
    if not isinstance(v, list):
        raise V.bad_type(name, v, "an array of strings")
    return V.stop_strings(v, name) or []


ChoiceAuto = shape("ChoiceAuto", Wire, type=Literal["auto", "any"],
                   disable_parallel_tool_use=(bool, False))
ChoiceTool = of_type("tool", Wire, name=str, disable_parallel_tool_use=(bool, False))
ChoiceNone = of_type("none", Wire)
ThinkingEnabled = of_type("enabled", Wire, budget_tokens=Annotated[Int, Field(ge=1)],
                          display=Display)
ThinkingAdaptive = of_type("adaptive", Wire, display=Display)
ThinkingDisabled = of_type("disabled", Wire)
# Structured output: the format's schema constrains the text (the engine's grammar).
OutputFormat = shape("OutputFormat", Wire, type=Literal["json_schema"],
                     schema_=(Dict[str, Any], Field(alias="schema")))
OutputConfig = shape("OutputConfig", Wire, format=(Optional[OutputFormat], None))
Metadata = shape("Metadata", Wire, user_id=(Optional[str], None))


class CountTokensBody(Wire):
    """`POST /v1/messages/count_tokens`: what makes the prompt."""
    model: str
    messages: Annotated[List[Message], Field(min_length=1)]
    system: Optional[TextBlocks] = None
    tools: Optional[List[one_of({"custom": Tool, None: Tool}, _server_tool)]] = None
    tool_choice: Optional[one_of({"auto": ChoiceAuto, "any": ChoiceAuto, "tool": ChoiceTool,
                                  "none": ChoiceNone})] = None
    thinking: Optional[one_of({"enabled": ThinkingEnabled, "adaptive": ThinkingAdaptive,
                               "disabled": ThinkingDisabled})] = None
    cache_control: Optional[CacheControl] = None

    @model_validator(mode="after")
    def _tools_agree(self) -> "CountTokensBody":
        names = [t.name for t in self.tools or ()]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise invalid(f"'tools[{i}].name': tool {name!r} is defined twice",
                              f"tools[{i}].name", "invalid_value")
        kind = getattr(self.tool_choice, "type", None)
        if kind in ("any", "tool") and not names:
            raise invalid(f"tool_choice {kind!r} needs 'tools'", "tool_choice", "invalid_value")
        if kind == "tool" and self.tool_choice.name not in names:
            raise invalid(f"'tool_choice.name' {self.tool_choice.name!r} is not one of the tools "
                          f"({', '.join(names)})", "tool_choice.name", "invalid_value")
        return self


class MessagesBody(CountTokensBody):
    """`POST /v1/messages`."""
    max_tokens: Annotated[Int, Field(ge=1)]
    stop_sequences: Annotated[List[str], rule(_stop_sequences)] = []
    temperature: Annotated[Optional[float], Field(ge=0.0, le=1.0)] = None
    top_p: Annotated[Optional[float], Field(gt=0.0, le=1.0)] = None
    top_k: Annotated[Optional[Int], Field(ge=0)] = None
    stream: bool = False
    metadata: Optional[Metadata] = None
    output_config: Optional[OutputConfig] = None

    @model_validator(mode="after")
    def _budget_in_max_tokens(self) -> "MessagesBody":
        budget = getattr(self.thinking, "budget_tokens", None)
        if budget is not None and budget >= self.max_tokens:
            raise invalid(f"'thinking.budget_tokens' ({budget}) must be less than 'max_tokens' "
                          f"({self.max_tokens})", "thinking.budget_tokens", "invalid_value")
        return self


# --- the answer: a message, and the stream events that build it ----------------------------------

# Anthropic counts cache reads apart: input_tokens + cache_read_input_tokens = the prompt.
Usage = shape("Usage", input_tokens=(int, 0), output_tokens=(int, 0),
              cache_creation_input_tokens=(int, 0), cache_read_input_tokens=(int, 0))
OutText = of_type("text", text=(str, ""))
OutThinking = of_type("thinking", thinking=(str, ""), signature=(str, ""))
OutToolUse = of_type("tool_use", id=str, name=str, input=(JSON, {}))
OutBlock = Union[OutText, OutThinking, OutToolUse]
MessageOut = of_type("message", id=str, role=(Literal["assistant"], "assistant"), model=str,
                     content=(List[OutBlock], []), stop_reason=(Optional[str], None),
                     stop_sequence=(Optional[str], None), usage=Usage)
MessageStart = of_type("message_start", message=MessageOut)
BlockStart = of_type("content_block_start", index=int, content_block=OutBlock)
TextDelta = of_type("text_delta", text=str)
ThinkingDelta = of_type("thinking_delta", thinking=str)
InputJsonDelta = of_type("input_json_delta", partial_json=str)
BlockDelta = of_type("content_block_delta", index=int,
                     delta=Union[TextDelta, ThinkingDelta, InputJsonDelta])
BlockStop = of_type("content_block_stop", index=int)
StopDelta = shape("StopDelta", stop_reason=Optional[str], stop_sequence=Optional[str])
MessageDelta = of_type("message_delta", delta=StopDelta, usage=Usage)
MessageStop = of_type("message_stop")
Ping = of_type("ping")
# The error envelope, as a body and as the stream's `error` event.
ErrorDetail = shape("ErrorDetail", type=str, message=str)
ErrorBody = of_type("error", error=ErrorDetail)
TokenCount = shape("TokenCount", input_tokens=int)
