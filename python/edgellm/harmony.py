"""OpenAI's harmony chat format (gpt-oss): what its output means, and its tool-call grammar.

A harmony answer is a sequence of messages, each a header and a body:

    <|channel|>analysis<|message|>The user wants the weather.<|end|>
    <|start|>assistant<|channel|>final<|message|>It is sunny.            (then <|return|>)
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}
                                                                           (then <|call|>)

The generation prompt ends with `<|start|>assistant`, so the first header arrives without its
`<|start|>`. A header names the channel (`analysis`: reasoning; `final`, or `commentary` without
a recipient: what the user sees), may name a recipient (`to=functions.NAME`: a tool call whose
body is its JSON arguments; the recipient may also stand before the channel, as the template
writes past calls) and a content type (`<|constrain|>json`, or a bare `json`). `<|end|>` ends a
message and more follow; `<|return|>` and `<|call|>` end generation (they never reach the text).

The vocabulary renders these header tokens into the output text (tokenizer/vocab.cpp makes them
USER_DEFINED, as llama.cpp does), which is what this parser reads. `HarmonyParser` has the
interface of chat_output.ChatOutputParser: feed pieces as they stream, get ChatDeltas (content,
reasoning, tool-call fragments: name first, then arguments), `finish()` at the end.
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .chat_types import (HARMONY, ChatDelta, FormatHooks, ToolCall, ToolCallDelta, chosen_tools,
                         gbnf_literal, new_call_id, partial_suffix, prefix_rules, register_format, StreamingParser,
                         tool_name, tool_parameters)

START, CHANNEL, MESSAGE, END, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"
RETURN, CALL = "<|return|>", "<|call|>"
# What ends a message body (RETURN and CALL end generation and are normally not in the text).
_BODY_ENDS = (END, CALL, RETURN, START)
_HEADER_HEADS = (CHANNEL, START, " to=", "to=", CONSTRAIN)
_RECIPIENT = re.compile(r"(?:^|\s)to=(\S+?)(?=\s|<\||$)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"\s*([A-Za-z_]+)")


def is_harmony_template(source: str) -> bool:
    # gpt-oss's own templates write <|channel|>; the built-in one (chat_template "gpt-oss", as
    # llama.cpp's) only <|start|> and <|message|>, a pair no other format uses
    return (CHANNEL in source or START in source) and MESSAGE in source


class HarmonyHeader:
    """One message header: role, channel, recipient (None when absent), content type."""

    def __init__(self, text: str):
        self.text = text
        t = text[len(START):] if text.startswith(START) else text
        m = _RECIPIENT.search(t)
        self.recipient: Optional[str] = m.group(1) if m else None
        m = _CHANNEL.search(t)
        self.channel: Optional[str] = m.group(1) if m else None
        head = re.split(r"<\||\s", t.strip(), maxsplit=1)[0] if t.strip() else ""
        self.role = head if head and not head.startswith("to=") else "assistant"
        self.content_type = "json" if (CONSTRAIN + "json") in t or re.search(r"\bjson\b", t) else None

    @property
    def function(self) -> Optional[str]:
        """The called function's name when this message is a tool call."""
        r = self.recipient
        if not r or r in ("assistant", "user"):
            return None
        return r[len("functions."):] if r.startswith("functions.") else r


class HarmonyParser(StreamingParser):
    """Incremental parse of one harmony completion into content, reasoning and tool calls."""

    def __init__(self, use_tools: bool):
        super().__init__()
        self.use_tools = use_tools
        self.state = "start"      # start | header | body | plain | done
        self.header: Optional[HarmonyHeader] = None
        self.sink = "content"     # where the current body goes: content | reasoning | call

    def _close(self, delta: ChatDelta) -> None:
        if self.state == "body":
            self._end_body()
        # an answer cut inside a header leaves that header unread: a header is never content
        self.buf = ""

    # --- machinery ------------------------------------------------------------------------
    def _emit(self, delta, text: str) -> None:
        if not text:
            return
        if self.sink == "reasoning":
            self.reasoning_content += text
            delta.reasoning += text
        elif self.sink == "call":
            self.tool_calls[-1].arguments += text
            delta.tool_calls.append(ToolCallDelta(len(self.tool_calls) - 1, arguments=text))
        else:
            self.content += text
            delta.content += text

    def _begin_body(self, delta) -> None:
        h = self.header
        name = h.function if h is not None else None
        if name and self.use_tools:
            self.sink = "call"
            call = ToolCall(new_call_id(), name, "")
            self.tool_calls.append(call)
            delta.tool_calls.append(ToolCallDelta(len(self.tool_calls) - 1, call.id, name, ""))
        elif h is not None and h.channel == "analysis":
            self.sink = "reasoning"
        else:
            # final, commentary to the user (a preamble), or a message we cannot route: content
            self.sink = "content"
        self.state = "body"

    def _end_body(self) -> None:
        if self.sink == "call" and self.tool_calls:
            call = self.tool_calls[-1]
            args = call.arguments.strip()
            call.arguments = args
        self.sink = "content"

    def _run(self, delta, final: bool) -> None:
        while self.buf:
            if self.state == "start":
                lead = self.buf.lstrip()
                if not lead:
                    return
                if any(lead.startswith(h) for h in _HEADER_HEADS):
                    self.buf = lead
                    self.state = "header"
                    continue
                if not final and any(h.startswith(lead) for h in _HEADER_HEADS):
                    return  # could still be a header
                self.state = "plain"  # not harmony at all: the whole output is content
                continue
            if self.state == "done":
                self.buf = ""
                return
            if self.state == "plain":
                self.sink = "content"
                self._emit(delta, self.buf)
                self.buf = ""
                return
            if self.state == "header":
                at = self.buf.find(MESSAGE)
                if at < 0:
                    return  # the header is still arriving (or was cut: nothing to show)
                self.header = HarmonyHeader(self.buf[:at])
                self.buf = self.buf[at + len(MESSAGE):]
                self._begin_body(delta)
                continue
            # body
            hits = [(self.buf.find(m), m) for m in _BODY_ENDS]
            hits = [(i, m) for i, m in hits if i >= 0]
            if not hits:
                keep = 0 if final else partial_suffix(self.buf, _BODY_ENDS)
                self._emit(delta, self.buf[:len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep:]
                return
            at, mark = min(hits)
            self._emit(delta, self.buf[:at])
            self._end_body()
            self.buf = self.buf[at + len(mark):]
            if mark == START:
                self.buf = START + self.buf
            if mark in (CALL, RETURN):
                self.state = "done"  # generation ended: nothing after it is part of the answer
                continue
            self.state = "header"  # <|end|> is followed by <|start|>, which the header keeps


# ---- constraining -----------------------------------------------------------------------------

_lit = gbnf_literal


def tool_grammar(json_schema_to_gbnf, tools: Sequence[Dict[str, Any]], tool_choice: Any) -> Tuple[str, List[str]]:
    """(GBNF, triggers) for harmony tool calls (one call per answer: <|call|> ends generation).

    auto: the grammar switches on at " to=functions." and covers both header orders;
    required / named: the whole answer is an optional analysis message, then the call."""
    picked = chosen_tools(tools, tool_choice)
    rules: List[str] = []
    calls: List[str] = []
    for i, tool in enumerate(picked):
        body, root = prefix_rules(json_schema_to_gbnf(json.dumps(tool_parameters(tool))), f"t{i}-")
        rules.append(body)
        calls.append((_lit(tool_name(tool)), root))
    # recipient first (as the template writes past calls) or channel first (as the model often does)
    after_name = (f'( {_lit(" " + CONSTRAIN + "json")} | {_lit(" json")} | '
                  f'{_lit(CHANNEL + "commentary json")} | {_lit(CHANNEL + "commentary " + CONSTRAIN + "json")} | '
                  f'{_lit(CHANNEL + "commentary")} )? {_lit(MESSAGE)}')
    alts = [f"( {name} {after_name} {root} )" for name, root in calls]
    rules.append("call-body ::= " + " | ".join(alts))
    rules.append(f"call ::= {_lit(' to=functions.')} call-body")
    forced = tool_choice == "required" or isinstance(tool_choice, dict)
    if forced:
        rules.append('think-text ::= ( [^<] | "<" [^|] )*')
        analysis = f"{_lit(CHANNEL + 'analysis' + MESSAGE)} think-text {_lit(END + START + 'assistant')}"
        root = f"( {analysis} )? ( {_lit(CHANNEL + 'commentary')} )? call"
        rules.insert(0, f"root ::= {root}")
        return "\n".join(rules) + "\n", []
    rules.insert(0, "root ::= call")
    return "\n".join(rules) + "\n", [" to=functions."]


register_format(HARMONY, FormatHooks(detect=is_harmony_template, tool_grammar=tool_grammar,
                                      parser=HarmonyParser))
