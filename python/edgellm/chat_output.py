"""What a chat model's raw output text means: content, reasoning and tool calls.

The chat template decides how a model writes a tool call (Hermes/Qwen `<tool_call>{...}</tool_call>`,
Llama 3.x JSON or `<|python_tag|>`, Mistral `[TOOL_CALLS]`, gpt-oss's harmony headers
(edgellm.harmony), or a generic JSON object) and how it thinks (`<think>...</think>`, harmony's
analysis channel). `ChatFormat.detect(template)` reads that from the template source
itself, never from the model's name. A `ChatOutputParser` then turns the text pieces of one
completion, as they stream, into `ChatDelta`s: plain content, reasoning content and tool-call
fragments (name first, then arguments in pieces), holding back any text that may be the start
of a marker so that no marker text ever leaks into `content`.

Interface used by the API layers (_chat.py under LLM and AsyncLLM, the server's OpenAI,
Anthropic and Responses routes):

    fmt = ChatFormat.detect(template_source)           # one per model
    parser = fmt.parser(tools, tool_choice)            # one per completion
    delta = parser.feed(text_piece)                    # -> ChatDelta (may be empty)
    delta = parser.finish()                            # flush at the end of the completion
    parser.content, parser.reasoning_content, parser.tool_calls   # the whole message so far
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import harmony  # noqa: F401  (registers gpt-oss's format with chat_types)
from .chat_types import (GENERIC, HARMONY, HERMES, LLAMA3, MISTRAL, ChatDelta, ToolCall,  # noqa: F401
                         ToolCallDelta, check_tools, chosen_tools, gbnf_literal, new_call_id,
                         partial_suffix, prefix_rules, registered_formats, StreamingParser, tool_name,
                         tool_parameters)

__all__ = ["ToolCall", "ToolCallDelta", "ChatDelta", "ChatFormat", "ChatOutputParser",
           "new_call_id", "HARMONY"]

# a call object's head; `{{` too: Qwen 2.5's template shows the call as {{"name": ..., "arguments": ...}}
# and its models write it so
_NAME_HEAD = re.compile(r'\s*\{\s*(?:\{\s*)?"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')


def check_tool_schemas(tools: Sequence[Dict[str, Any]]) -> None:
    """Each tool's parameters must admit some JSON value, as a response_format schema must:
    checked up front by compiling it alone (microseconds), since inside the tool-call grammar a
    schema that matches nothing (a $ref cycle such as {"$ref": "#"}) sits behind the call's
    literal prefix and would only fail once a call is being written ("no token can be
    sampled", mid-generation)."""
    from ._core import Grammar, InvalidRequestError

    for tool in tools:
        try:
            Grammar.from_json_schema(json.dumps(tool_parameters(tool)))
        except InvalidRequestError as e:
            raise InvalidRequestError(f"tool {tool_name(tool)!r}: its parameters schema cannot "
                                      f"be used: {e}") from None


# With tools and a response_format schema under auto, what the model is told about its final
# answer (the grammar allows a call or that answer; without this the model cannot tell that a
# JSON answer is wanted and, having the tool's result, calls the tool again)
ANSWER_PROMPT = ("When you answer (instead of calling a function), answer with only a JSON object "
                 "that matches this schema:\n{schema}")

GENERIC_TOOL_PROMPT = (
    "You can call these tools (JSON schemas of their parameters):\n{tools}\n\n"
    "To call tools, answer with only a JSON object of the form "
    '{{"tool_calls": [{{"name": "<tool name>", "arguments": {{<arguments>}}}}]}} and nothing else. '
    "Otherwise answer normally.")


@dataclass
class ChatFormat:
    """How a chat template's model writes tool calls and reasoning."""
    tool_format: str = GENERIC
    template_takes_tools: bool = False
    think: Optional[Tuple[str, str]] = None  # reasoning markers, e.g. ("<think>", "</think>")

    @classmethod
    def detect(cls, template_source: str) -> "ChatFormat":
        src = template_source or ""
        takes_tools = "tools" in src
        for name, hooks in registered_formats().items():
            if hooks.detect(src):
                return cls(name, takes_tools, None)
        if "<tool_call>" in src:
            fmt = HERMES
        elif "[TOOL_CALLS]" in src:
            fmt = MISTRAL
        elif "<|python_tag|>" in src or ("<|start_header_id|>" in src and takes_tools
                                         and '"parameters"' in src):
            fmt = LLAMA3
        else:
            fmt = GENERIC
        think = ("<think>", "</think>") if "<think>" in src and "</think>" in src else None
        return cls(fmt, takes_tools, think)

    # --- prompting ------------------------------------------------------------------------
    def tool_system_prompt(self, tools: Sequence[Dict[str, Any]]) -> Optional[str]:
        """For a template that takes no tools: the system text that describes them."""
        if self.template_takes_tools or not tools:
            return None
        listing = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
        return GENERIC_TOOL_PROMPT.format(tools=listing)

    def answer_prompt(self, schema: str) -> str:
        """System text describing the final answer's JSON schema (tools + response_format)."""
        return ANSWER_PROMPT.format(schema=schema)

    # --- constraining ---------------------------------------------------------------------
    @property
    def combines_answer(self) -> bool:
        """Whether tool_grammar can offer a constrained final answer beside the calls
        (response_format with tools under auto); the registered formats (harmony) cannot."""
        return self.tool_format not in registered_formats()

    def tool_grammar(self, json_schema_to_gbnf, tools: Sequence[Dict[str, Any]], tool_choice: Any,
                     parallel: bool, prompt: str = "", answer: Optional[str] = None
                     ) -> Tuple[str, List[str]]:
        """(GBNF, triggers) for tool calls: triggers empty means the whole output is a call
        (tool_choice required or named) -- after the reasoning block when the template thinks;
        else the grammar switches on at a trigger (auto). `answer` (GBNF of the final answer,
        e.g. a response_format schema's, under auto): the whole output is then either the
        calls or that answer, so the model chooses (no triggers)."""
        picked = chosen_tools(tools, tool_choice)
        check_tool_schemas(picked)
        hooks = registered_formats().get(self.tool_format)
        if hooks is not None:
            if answer is not None:
                raise ValueError(f"{self.tool_format}: no answer alternative (combines_answer)")
            return hooks.tool_grammar(json_schema_to_gbnf, tools, tool_choice)
        rules: List[str] = []
        alts: List[str] = []
        key = "parameters" if self.tool_format == LLAMA3 else "arguments"
        for i, tool in enumerate(picked):
            body, root = prefix_rules(json_schema_to_gbnf(json.dumps(tool_parameters(tool))),
                                       f"t{i}-")
            rules.append(body)
            alts.append(gbnf_literal('{"name": ' + json.dumps(tool_name(tool), ensure_ascii=False)
                                      + f', "{key}": ') + f" {root} " + gbnf_literal("}"))
        rules.append("call-object ::= " + " | ".join(f"( {a} )" for a in alts))
        forced = tool_choice == "required" or isinstance(tool_choice, dict)
        nl = gbnf_literal("\n")
        if self.tool_format == HERMES:
            # <tool_call> blocks, or (as small models often write) the bare JSON object(s) at
            # the start of the answer; each object may be written in doubled braces, as Qwen
            # 2.5's template shows the format ({{"name": ..., "arguments": ...}})
            rules.append(f'hermes-call ::= call-object | {gbnf_literal("{")} call-object '
                         f'{gbnf_literal("}")}')
            one = gbnf_literal("<tool_call>\n") + " hermes-call " + gbnf_literal("\n</tool_call>")
            tagged = f"{one} ( {nl} {one} )*" if parallel else one
            bare = f"hermes-call ( {nl} hermes-call )*" if parallel else "hermes-call"
            fenced = gbnf_literal("```json\n") + f" {bare} " + gbnf_literal("\n```")
            many = f"( {tagged} ) | ( {bare} ) | ( {fenced} )"
            triggers = ["<tool_call>", '^{"name"', '^{{"name"', "^```json"]
        elif self.tool_format == LLAMA3:
            one = "call-object"
            many = f'{one} ( {gbnf_literal("; ")} {one} )*' if parallel else one
            triggers = ['^{"name"']
        elif self.tool_format == MISTRAL:
            sep = f'( {gbnf_literal(", ")} call-object )*' if parallel else ""
            many = f'{gbnf_literal("[")} call-object {sep} {gbnf_literal("]")}'
            triggers = ['^[{"name"']
        else:
            sep = f'( {gbnf_literal(", ")} call-object )*' if parallel else ""
            many = (f'{gbnf_literal("{")} {gbnf_literal(chr(34) + "tool_calls" + chr(34) + ": [")} '
                    f'call-object {sep} {gbnf_literal("]}")}')
            triggers = ['^{"tool_calls"']
        if answer is not None:
            body, root = prefix_rules(answer, "answer-")
            rules.append(body)
            many = f"( {many} ) | {root}"
        whole = forced or answer is not None
        if whole and self.think:
            # a thinking model reasons first: free text (without "</") up to the end marker
            start, end = self.think
            rules.append('think-text ::= ( [^<] | "<" [^/] )*')
            rules.append('think-gap ::= [ \\n]*')
            block = f"think-text {gbnf_literal(end)} think-gap"
            if prompt.rstrip().endswith(start):  # the template opened the block itself
                many = f"{block} ( {many} )"
            else:
                many = f"( {gbnf_literal(start)} {block} )? ( {many} )"
        rules.insert(0, f"root ::= {many}")
        return "\n".join(rules) + "\n", ([] if whole else triggers)

    def parser(self, tools: Optional[Sequence[Dict[str, Any]]] = None, tool_choice: Any = None,
               prompt: str = "") -> "ChatOutputParser":
        use_tools = bool(tools) and tool_choice != "none"
        hooks = registered_formats().get(self.tool_format)
        if hooks is not None:
            return hooks.parser(use_tools)
        in_think = False
        if self.think and prompt.rstrip().endswith(self.think[0]):
            in_think = True  # the template opened the thinking block itself
        names = [tool_name(t) for t in tools] if use_tools else []
        return ChatOutputParser(self if use_tools else None, self.think, in_think, names)


# ---- the streaming parser -----------------------------------------------------------------------

class _ArgScanner:
    """Finds where one JSON value ends in text that arrives in pieces."""

    def __init__(self):
        self.depth = 0
        self.in_str = False
        self.esc = False
        self.started = False
        self.done = False

    def feed(self, text: str) -> int:
        """Consume text; returns how many characters belong to the value (all, or up to its end)."""
        for i, ch in enumerate(text):
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif ch == "\\":
                    self.esc = True
                elif ch == '"':
                    self.in_str = False
                    if self.depth == 0:
                        self.done = True
                        return i + 1
                continue
            if ch == '"':
                self.in_str = True
                self.started = True
            elif ch in "{[":
                self.depth += 1
                self.started = True
            elif ch in "}]":
                self.depth -= 1
                if self.depth <= 0:
                    self.done = True
                    return i + 1
            elif not ch.isspace():
                self.started = True
            elif self.started and self.depth == 0:  # a bare scalar ended
                self.done = True
                return i
        return len(text)


class ChatOutputParser(StreamingParser):
    """Incremental parse of one completion's text into content, reasoning and tool calls."""

    def __init__(self, fmt: Optional[ChatFormat], think: Optional[Tuple[str, str]],
                 in_think: bool = False, tool_names: Sequence[str] = ()):
        super().__init__()
        self.fmt = fmt
        # an untagged object at the start is a call only when it names one of these (when given)
        self.tool_names = frozenset(tool_names)
        self.think = think
        self.state = "reasoning" if in_think else "content"
        self._at_start = True         # nothing but whitespace seen in content so far
        self._call_text = ""          # raw text of the call being read
        self._scanner: Optional[_ArgScanner] = None
        self._named = False
        self._pending_ws = ""
        self._pending_rws = ""
        self._after_think = False

    def _close(self, delta: ChatDelta) -> None:
        if self.state == "call" or self.state == "whole":
            self._close_call(delta, final=True)
        elif self.buf:
            self._emit_text(delta, self.buf)
            self.buf = ""
        if self._pending_ws and not self.tool_calls and self.content:
            self.content += self._pending_ws
            delta.content += self._pending_ws
        self._pending_ws = ""

    # --- machinery ------------------------------------------------------------------------
    def _emit_text(self, delta: ChatDelta, text: str) -> None:
        if not text:
            return
        if self.state == "reasoning":
            # reasoning is trimmed at both ends (the template's newlines around it)
            text = self._pending_rws + text
            if not self.reasoning_content:
                text = text.lstrip()
            body = text.rstrip()
            self._pending_rws = text[len(body):]
            if body:
                self.reasoning_content += body
                delta.reasoning += body
            return
        # Trailing whitespace waits for the next text: before a call marker (or at the end,
        # after calls) it is the template's separator, not content; content right after the
        # reasoning block starts at its first non-space character.
        text = self._pending_ws + text
        if self._after_think and not self.content:
            text = text.lstrip()
        body = text.rstrip()
        self._pending_ws = text[len(body):]
        if not body:
            return
        self._at_start = False
        self.content += body
        delta.content += body

    def _start_markers(self) -> List[str]:
        marks = []
        if self.think and self.state == "content":
            marks.append(self.think[0])
        if self.fmt is not None:
            if self.fmt.tool_format == HERMES:
                marks.append("<tool_call>")
            elif self.fmt.tool_format == MISTRAL:
                marks.append("[TOOL_CALLS]")
        return marks

    def _run(self, delta: ChatDelta, final: bool) -> None:
        while self.buf:
            if self.state == "reasoning":
                end = self.think[1]
                at = self.buf.find(end)
                if at < 0:
                    keep = 0 if final else partial_suffix(self.buf, [end])
                    self._emit_text(delta, self.buf[:len(self.buf) - keep])
                    self.buf = self.buf[len(self.buf) - keep:]
                    return
                self._emit_text(delta, self.buf[:at])
                self.buf = self.buf[at + len(end):]
                self.state = "content"
                self._after_think = True
                continue
            if self.state in ("call", "whole"):
                if not self._read_call(delta, final):
                    return
                continue
            if self.state == "done":  # text after the calls: content (rare)
                self._emit_text(delta, self.buf)
                self.buf = ""
                return
            # content
            if self.fmt is not None and self._at_start and not self.content:
                lead = self.buf.lstrip()
                if not lead:
                    if final:
                        break
                    return  # whitespace only so far: wait
                heads = {HERMES: ['{"name"', '{ "name"', '{{"name"', '{{ "name"', "```json\n{",
                                  '```json\n{"name"'],
                         LLAMA3: ['{"name"', '{ "name"', '<|python_tag|>'],
                         MISTRAL: ["[TOOL_CALLS]", '[{"name"', '[{ "name"'],
                         GENERIC: ['{"tool_calls"', '{ "tool_calls"', '{"tool_call"', '{"name"']}[self.fmt.tool_format]
                if any(lead.startswith(h) for h in heads):
                    self.buf = lead
                    self.state = "whole"
                    self._call_text = ""
                    continue
                if not final and any(h.startswith(lead) for h in heads):
                    return  # could still become a call
            marks = self._start_markers()
            hits = [(self.buf.find(m), m) for m in marks]
            hits = [(i, m) for i, m in hits if i >= 0]
            if not hits:
                keep = 0 if final else partial_suffix(self.buf, marks)
                self._emit_text(delta, self.buf[:len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep:]
                return
            at, mark = min(hits)
            before = self.buf[:at]
            if self.think and mark == self.think[0]:
                self._emit_text(delta, before)
                self.buf = self.buf[at + len(mark):]
                self.state = "reasoning"
                continue
            # a call marker: content before it, minus the trailing newline the template adds
            self._emit_text(delta, before)
            self._pending_ws = ""
            self.buf = self.buf[at + len(mark):]
            self.state = "call"
            self._call_text = ""
            self._scanner = None
            self._named = False

    def _read_call(self, delta: ChatDelta, final: bool) -> bool:
        """Advance inside a call; True when the call closed and parsing should go on."""
        fmt = self.fmt.tool_format
        if self.state == "whole":  # the rest of the output is calls (llama3/mistral/generic)
            self._call_text += self.buf
            self.buf = ""
            body = self._call_text.lstrip()
            if body.startswith("```json"):  # a fenced block: stream the object inside it
                body = body[len("```json"):]
            if fmt in (LLAMA3, HERMES) and body.lstrip().startswith("{"):
                self._stream_object(delta, body)
            return False
        # hermes: until </tool_call>
        end = "</tool_call>"
        at = self.buf.find(end)
        if at < 0:
            keep = 0 if final else partial_suffix(self.buf, [end])
            self._call_text += self.buf[:len(self.buf) - keep]
            self.buf = self.buf[len(self.buf) - keep:]
            self._stream_object(delta, self._call_text)
            return False
        self._call_text += self.buf[:at]
        self.buf = self.buf[at + len(end):]
        self._stream_object(delta, self._call_text)
        self._close_call(delta, final=False)
        return True

    def _stream_object(self, delta: ChatDelta, text: str) -> None:
        """Emit name and argument pieces of a {"name": ..., "arguments": ...} call as they arrive."""
        if not self._named:
            m = _NAME_HEAD.match(text)
            if not m:
                return
            try:
                name = json.loads('"' + m.group(1) + '"')
            except json.JSONDecodeError:
                return
            if self.state == "whole" and self.tool_names and name not in self.tool_names:
                return  # names no tool: an answer that is JSON (settled at the end)
            self._named = True
            self._scanner = _ArgScanner()
            self._args_from = m.end()
            self._args_sent = m.end()
            self.tool_calls.append(ToolCall(new_call_id(), name, ""))
            delta.tool_calls.append(ToolCallDelta(len(self.tool_calls) - 1, self.tool_calls[-1].id, name, ""))
        sc = self._scanner
        if sc is None or sc.done:
            return
        fresh = text[self._args_sent:]
        if not fresh:
            return
        used = sc.feed(fresh)
        piece = fresh[:used]
        self._args_sent += len(fresh) if not sc.done else used
        if not sc.started:
            return
        piece = piece if self.tool_calls[-1].arguments else piece.lstrip()
        if piece:
            self.tool_calls[-1].arguments += piece
            delta.tool_calls.append(ToolCallDelta(len(self.tool_calls) - 1, None, None, piece))

    def _close_call(self, delta: ChatDelta, final: bool) -> None:
        """A call's text is complete (or the output ended): settle it."""
        text = self._call_text
        if self.state == "whole" or not self._named:
            calls, after = _parse_calls(text)
            if self.state == "whole" and self.tool_names:  # untagged: only calls of the tools
                known = [c for c in calls if c[0] in self.tool_names]
                calls = known if self._named or len(known) == len(calls) else []
            if self._named and calls:  # llama3 streamed its first call already
                first = self.tool_calls[-1]
                if first.arguments != calls[0][1]:
                    rest = calls[0][1][len(first.arguments):] if calls[0][1].startswith(first.arguments) else ""
                    if rest:
                        first.arguments += rest
                        delta.tool_calls.append(ToolCallDelta(len(self.tool_calls) - 1, None, None, rest))
                calls = calls[1:]
            elif self._named and not calls:
                calls = []
            if not calls and not self._named:
                # not a call after all: give the text back as content
                marker = "<tool_call>" if self.state == "call" else ""
                self.state = "content"
                self._emit_text(delta, marker + text + ("</tool_call>" if marker and not final else ""))
                self._call_text = ""
                self.state = "done" if self.tool_calls else "content"
                return
            for name, args in calls:
                self.tool_calls.append(ToolCall(new_call_id(), name, args))
                i = len(self.tool_calls) - 1
                delta.tool_calls.append(ToolCallDelta(i, self.tool_calls[i].id, name, args))
            if after:  # text after the calls (a model writing on without the grammar)
                self._emit_text(delta, after)
        elif self._scanner is not None and self.tool_calls and self.tool_calls[-1].arguments:
            args = self.tool_calls[-1].arguments
            try:  # normalise to compact JSON only if it parses; partial stays as written
                json.loads(args)
            except json.JSONDecodeError:
                pass
        self._call_text = ""
        self._named = False
        self._scanner = None
        self.state = "done" if self.state == "whole" else "content"
        self._at_start = False


def _decode_call(dec: json.JSONDecoder, text: str, i: int) -> Tuple[Any, int]:
    """The JSON value at text[i:] and where it ends; an object in doubled braces ({{...}}, never
    JSON, as Qwen 2.5's template shows a call) is the object inside (its second closing brace
    optional)."""
    j = i + 1
    if text.startswith("{", i):
        while j < len(text) and text[j] in " \t\r\n":
            j += 1
        if text.startswith("{", j):
            v, k = dec.raw_decode(text, j)
            end = k
            while end < len(text) and text[end] in " \t\r\n":
                end += 1
            return v, (end + 1 if text.startswith("}", end) else k)
    return dec.raw_decode(text, i)


def _parse_calls(text: str) -> Tuple[List[Tuple[str, str]], str]:
    """(name, arguments JSON) pairs from a whole-output call text in any of the JSON shapes, and
    the text after the calls that is no call (a call cut short by max_tokens is dropped)."""
    text = text.strip()
    for head in ("<|python_tag|>", "[TOOL_CALLS]", "```json", "```"):
        if text.startswith(head):
            text = text[len(head):].strip()
    if text.endswith("```"):
        text = text[:-3].strip()
    values: List[Any] = []
    after = ""
    dec = json.JSONDecoder()
    i = 0
    while i < len(text):
        while i < len(text) and text[i] in " \t\r\n;,":
            i += 1
        if i >= len(text):
            break
        try:
            v, j = _decode_call(dec, text, i)
        except json.JSONDecodeError:
            if values:  # complete calls, then one cut short (max_tokens): keep the complete ones
                after = "" if text[i] in "{[" else text[i:]
                break
            return [], ""
        values.append(v)
        i = j
    out: List[Tuple[str, str]] = []

    def add(obj: Any) -> bool:
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", obj.get("parameters", {}))
            if isinstance(args, str):
                try:
                    json.loads(args)
                except json.JSONDecodeError:
                    args = json.dumps(args)
                out.append((obj["name"], args if isinstance(args, str) else ""))
                if not isinstance(args, str):
                    out[-1] = (obj["name"], json.dumps(args, ensure_ascii=False))
                return True
            out.append((obj["name"], json.dumps(args, ensure_ascii=False)))
            return True
        return False

    for v in values:
        if isinstance(v, list):
            if not all(add(x) for x in v):
                return [], ""
        elif isinstance(v, dict) and ("tool_calls" in v or "tool_call" in v):
            inner = v.get("tool_calls", v.get("tool_call"))
            inner = inner if isinstance(inner, list) else [inner]
            if not all(add(x) for x in inner):
                return [], ""
        elif not add(v):
            return [], ""
    return out, after
