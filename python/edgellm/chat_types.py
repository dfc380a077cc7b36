"""The vocabulary every chat-output format shares: parsed tool calls and streaming deltas, the
format names, the GBNF and tool-list helpers, and the registry of formats by name.

edgellm.chat_output (the generic formats: Hermes/Qwen, Llama 3.x, Mistral, generic JSON) and
edgellm.harmony (gpt-oss) both build on this module; a format that is not one of the generic ones
registers its hooks here (`register_format`), so `ChatFormat` finds it without importing it.
"""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["StreamingParser", "ToolCall", "ToolCallDelta", "ChatDelta", "new_call_id", "FormatHooks",
           "register_format", "registered_formats", "gbnf_literal", "prefix_rules",
           "partial_suffix", "tool_name", "tool_parameters", "chosen_tools", "check_tools"]

def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass
class ToolCall:
    """One parsed call: `arguments` is JSON text (as OpenAI sends it)."""
    id: str
    name: str
    arguments: str

    def arguments_object(self) -> Any:
        try:
            return json.loads(self.arguments) if self.arguments else {}
        except json.JSONDecodeError:
            return self.arguments

    def to_openai(self) -> Dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ToolCallDelta:
    """A piece of call `index`: the first piece of a call carries `id` and `name`."""
    index: int
    id: Optional[str] = None
    name: Optional[str] = None
    arguments: str = ""

    def to_openai(self) -> Dict[str, Any]:
        fn: Dict[str, Any] = {}
        if self.name is not None:
            fn["name"] = self.name
        fn["arguments"] = self.arguments
        out: Dict[str, Any] = {"index": self.index, "function": fn}
        if self.id is not None:
            out["id"] = self.id
            out["type"] = "function"
        return out


@dataclass
class ChatDelta:
    content: str = ""
    reasoning: str = ""
    tool_calls: List[ToolCallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)

    def extend(self, other: "ChatDelta") -> None:
        self.content += other.content
        self.reasoning += other.reasoning
        for d in other.tool_calls:
            last = self.tool_calls[-1] if self.tool_calls else None
            if last is not None and last.index == d.index and d.id is None and d.name is None:
                last.arguments += d.arguments
            else:
                self.tool_calls.append(ToolCallDelta(d.index, d.id, d.name, d.arguments))


HERMES, LLAMA3, MISTRAL, GENERIC = "hermes", "llama3", "mistral", "generic"
HARMONY = "harmony"  # gpt-oss: channels and recipients in message headers (edgellm.harmony)


@dataclass(frozen=True)
class FormatHooks:
    """What a registered chat format supplies: `detect(template_source)` says whether a template
    is written in it; `tool_grammar(json_schema_to_gbnf, tools, tool_choice)` returns (GBNF,
    triggers); `parser(use_tools)` returns a streaming parser (feed / finish / content /
    reasoning_content / tool_calls, as ChatOutputParser)."""
    detect: Callable[[str], bool]
    tool_grammar: Callable[..., Tuple[str, List[str]]]
    parser: Callable[[bool], Any]


_FORMATS: Dict[str, FormatHooks] = {}


def register_format(name: str, hooks: FormatHooks) -> None:
    _FORMATS[name] = hooks


def registered_formats() -> Dict[str, FormatHooks]:
    """The registered formats by name, in registration order (the first whose detect() accepts
    a template wins)."""
    return dict(_FORMATS)


def gbnf_literal(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def prefix_rules(gbnf: str, prefix: str) -> Tuple[str, str]:
    """Rename every rule of `gbnf` to prefix + name; returns (text, renamed root)."""
    out: List[str] = []
    i, n = 0, len(gbnf)
    while i < n:
        ch = gbnf[i]
        if ch == '"' or ch == "[":
            close = '"' if ch == '"' else "]"
            j = i + 1
            while j < n and gbnf[j] != close:
                j += 2 if gbnf[j] == "\\" else 1
            out.append(gbnf[i:j + 1])
            i = j + 1
        elif ch == "#":
            j = gbnf.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif ch.isalnum() or ch in "-_":
            j = i
            while j < n and (gbnf[j].isalnum() or gbnf[j] in "-_"):
                j += 1
            word = gbnf[i:j]
            # {m,n} repetition counts are digits: leave numbers alone
            out.append(word if word.isdigit() else prefix + word)
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out), prefix + "root"


def tool_name(tool: Dict[str, Any]) -> str:
    fn = tool.get("function", tool)
    return str(fn.get("name", ""))


def tool_parameters(tool: Dict[str, Any]) -> Any:
    fn = tool.get("function", tool)
    params = fn.get("parameters")
    if params is None or params == {}:
        return {"type": "object"}
    return params


def chosen_tools(tools: Sequence[Dict[str, Any]], tool_choice: Any) -> List[Dict[str, Any]]:
    """The tools a call may name under `tool_choice` (a named function narrows them to one)."""
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function") or {}
        name = fn.get("name") or tool_choice.get("name")
        picked = [t for t in tools if tool_name(t) == name]
        if not picked:
            from ._core import InvalidRequestError
            raise InvalidRequestError(f"tool_choice names function {name!r}, which is not in 'tools' "
                                      f"({', '.join(tool_name(t) for t in tools) or 'none'})")
        return picked
    return list(tools)


def check_tools(tools: Any, tool_choice: Any) -> List[Dict[str, Any]]:
    """Validate OpenAI-style function tools and tool_choice; returns the tools as a list."""
    from ._core import InvalidRequestError

    if tools is None:
        tools = []
    if not isinstance(tools, (list, tuple)):
        raise InvalidRequestError("tools must be a list of {'type': 'function', 'function': {...}}")
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise InvalidRequestError(f"tools[{i}] must be an object")
        fn = t.get("function", t)
        if t.get("type", "function") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidRequestError(f"tools[{i}] must be {{'type': 'function', 'function': "
                                      "{'name': ..., 'parameters': {...}}}")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, (dict, bool)):
            raise InvalidRequestError(f"tools[{i}].function.parameters must be a JSON schema object")
    if tool_choice is None or tool_choice in ("auto", "none"):
        return list(tools)
    if tool_choice == "required" or isinstance(tool_choice, dict):
        if not tools:
            raise InvalidRequestError(f"tool_choice {tool_choice!r} needs 'tools'")
        chosen_tools(tools, tool_choice)  # a named function must exist
        return list(tools)
    raise InvalidRequestError(f"tool_choice must be 'none', 'auto', 'required' or "
                              f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")


def partial_suffix(text: str, markers: Sequence[str]) -> int:
    """Length of the longest suffix of text that is a proper prefix of some marker."""
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), 0, -1):
            if text.endswith(m[:k]):
                best = max(best, k)
                break
    return best


class StreamingParser:
    """What every format's streaming parser shares: text pieces are buffered and run through
    `_run(delta, final)`; `finish()` runs the buffer out and lets the format close what is open
    (`_close(delta)`). `content`, `reasoning_content` and `tool_calls` are the message so far."""

    def __init__(self):
        self.buf = ""
        self.content = ""
        self.reasoning_content = ""
        self.tool_calls: List[ToolCall] = []

    def feed(self, text: str) -> ChatDelta:
        self.buf += text
        delta = ChatDelta()
        self._run(delta, final=False)
        return delta

    def finish(self) -> ChatDelta:
        delta = ChatDelta()
        self._run(delta, final=True)
        self._close(delta)
        return delta

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.tool_calls)

    def _run(self, delta: ChatDelta, final: bool) -> None:
        raise NotImplementedError

    def _close(self, delta: ChatDelta) -> None:
        raise NotImplementedError
