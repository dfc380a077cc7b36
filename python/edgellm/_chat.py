"""Chat prompts: the model's template, the conversation rendered and tokenized, tool-call
constraints, and the parse of what the model wrote (`LLM.chat*` and `AsyncLLM.chat*`).

`ChatRenderer` holds one model's template choice and chat format; edgellm.chat_template renders
(sandboxed, with `limits`), edgellm.chat_output detects the format and parses the output.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import _core
from ._core import InvalidRequestError
from .chat_types import check_tools
from .outputs import ChatCompletion, Completion, CompletionChunk
from .sampling_params import SamplingParams
from .validation import validate_messages

__all__ = ["ChatRenderer", "finish_chat", "parse_chunk"]


class _MarkerSet:
    """`marker in vocab` without listing the whole vocabulary: one special-token lookup."""

    def __init__(self, tok):
        self._tok = tok

    def __contains__(self, text) -> bool:
        ids = self._tok.encode(text, False, True)
        return len(ids) == 1 and self._tok.token_text(ids[0]) == text


class ChatRenderer:
    """One model's chat side. defaults: template variables every render gets unless a request's
    chat_template_kwargs say otherwise; limits: of one render (edgellm.chat_template.render_chat:
    time_limit seconds, max_output characters)."""

    def __init__(self, tok, override: Optional[str] = None):
        self.tok = tok
        self._override = override
        self.defaults: Dict[str, Any] = {}
        self.limits: Dict[str, Any] = {}
        self._template: Optional[str] = None
        self._format = None
        # edgellm.vision.VisionInput when the model was loaded with its projector (mmproj)
        self.vision = None

    @property
    def template(self) -> str:
        """The template in use: the override, the GGUF's, or a built-in picked by the vocabulary."""
        if self._template is None:
            from .chat_template import choose_template
            self._template = choose_template(self.tok.chat_template, _MarkerSet(self.tok), self._override)
        return self._template

    @property
    def stand_in(self) -> Optional[str]:
        """The built-in template's name when one stands in for a chat template the model file
        does not have (no override given): a base model, most likely; else None."""
        if self._override or self.tok.chat_template:
            return None
        return self.template

    @property
    def chat_format(self):
        if self._format is None:
            from .chat_output import ChatFormat
            from .chat_template import template_source
            self._format = ChatFormat.detect(template_source(self.template))
        return self._format

    def apply(self, messages, add_generation_prompt: bool, tools, chat_template_kwargs,
              shield=None, answer_hint: Optional[str] = None) -> str:
        """The rendered conversation (LLM.apply_chat_template); with `shield`, what the caller
        wrote has its control-token texts held (edgellm.chat_template.ContentShield).
        answer_hint: system text on the final answer's form (ChatFormat.answer_prompt)."""
        from .chat_template import prepare_messages, render_chat

        tok = self.tok
        bos = tok.token_text(tok.bos_id) if tok.bos_id is not None else ""
        eos = tok.token_text(tok.eos_id) if tok.eos_id is not None else ""
        from .chat_output import HARMONY

        harmony = self.chat_format.tool_format == HARMONY
        msgs = prepare_messages(messages, reasoning_field="thinking" if harmony else None)
        kwargs = {**self.defaults, **dict(chat_template_kwargs or {})}
        if shield is not None:  # what the caller wrote is text: its control-token texts are held
            msgs, tools, kwargs = shield.protect(msgs), shield.protect(tools), shield.protect(kwargs)
            answer_hint = shield.protect(answer_hint)
        for extra_system in (self.chat_format.tool_system_prompt(tools) if tools else None,
                             answer_hint):
            if extra_system:
                if msgs and msgs[0].get("role") in ("system", "developer"):
                    first = dict(msgs[0])
                    first["content"] = (first.get("content") or "") + "\n\n" + extra_system
                    msgs[0] = first
                else:
                    msgs.insert(0, {"role": "system", "content": extra_system})
        return render_chat(msgs, self.template, bos_token=bos, eos_token=eos,
                           add_generation_prompt=add_generation_prompt, tools=tools or None,
                           time_limit=self.limits.get("time_limit"),
                           max_output=self.limits.get("max_output"), **kwargs)

    def ids(self, text: str, plain_ranges=()) -> List[int]:
        """A rendered prompt's ids: markup as special tokens, plain_ranges as text, one BOS."""
        ids = list(self.tok.encode(text, True, True, list(plain_ranges)))
        bos = self.tok.bos_id
        if len(ids) >= 2 and bos is not None and ids[0] == bos and ids[1] == bos:
            ids = ids[1:]  # the template wrote BOS itself
        return ids

    def _shield(self, messages, tools, chat_template_kwargs, answer_hint=None):
        from .chat_template import ContentShield

        shield = ContentShield(self.tok.find_control_tokens)
        shield.pick_marks(messages, tools, chat_template_kwargs, answer_hint)
        return shield

    def prompt_ids(self, messages, tools=None, chat_template_kwargs=None) -> List[int]:
        """LLM.chat_prompt_ids (an image counts its block of tokens; nothing is encoded)."""
        messages, images = self._images(messages)
        shield = self._shield(messages, tools, chat_template_kwargs)
        text = self.apply(messages, True, tools, chat_template_kwargs, shield)
        if images:
            text = self.vision.expand(text, images)
        return self.ids(*shield.restore(text))

    def shielded_prompt(self, messages, tools=None, tool_choice=None, chat_template_kwargs=None,
                        add_generation_prompt=None, continue_final_message=None, answer_hint=None,
                        image_parts=None):
        """LLM.chat_prompt: (prompt text, plain ranges). image_parts: what _images(messages) gave,
        when the caller has it already (their frames are read once)."""
        messages, images = image_parts if image_parts is not None else self._images(messages)
        shield = self._shield(messages, tools, chat_template_kwargs, answer_hint)
        text = self.prompt_text(messages, tools, tool_choice, chat_template_kwargs,
                                add_generation_prompt, continue_final_message, shield, answer_hint)
        if images:
            text = self.vision.expand(text, images)
        return shield.restore(text)

    def _images(self, messages):
        """(messages with image parts as {"type": "image"}, the images' (URL, where)); a text-only
        model refuses image parts (edgellm.vision.ImageError)."""
        from . import vision

        if self.vision is None:
            vision.refuse_images(messages)
            return messages, []
        return self.vision.messages_for_template(messages)

    def prompt_text(self, messages, tools, tool_choice, chat_template_kwargs,
                    add_generation_prompt, continue_final_message, shield=None,
                    answer_hint=None) -> str:
        """LLM.render_chat_prompt (a conversation ending with the assistant's is continued)."""
        msgs = list(messages)
        last = msgs[-1] if msgs and isinstance(msgs[-1], Mapping) else {}
        ends_assistant = last.get("role") == "assistant"
        if continue_final_message and add_generation_prompt:
            raise InvalidRequestError("add_generation_prompt and continue_final_message cannot both be true")
        prefill = bool(continue_final_message) if continue_final_message is not None else \
            (ends_assistant and add_generation_prompt is None)
        use_tools = tools if (tools and tool_choice != "none") else None
        if not prefill:
            return self.apply(msgs, add_generation_prompt is not False, use_tools,
                              chat_template_kwargs, shield, answer_hint)
        if not ends_assistant:
            raise InvalidRequestError("continue_final_message: the last message must be the assistant's")
        if last.get("tool_calls"):
            raise InvalidRequestError("an assistant message with tool calls cannot be continued")
        if len(msgs) >= 2 and isinstance(msgs[-2], Mapping) and msgs[-2].get("role") == "assistant" \
                and continue_final_message is None:
            raise InvalidRequestError("the conversation ends with two assistant messages: only the "
                                      "last one can be continued")
        content = last.get("content") or ""
        if not isinstance(content, str):
            content = "\n\n".join(p.get("text", "") for p in content
                                   if isinstance(p, Mapping) and p.get("type") == "text")
        head = self.apply(msgs[:-1], True, use_tools, chat_template_kwargs, shield, answer_hint)
        return head + (shield.protect(content) if shield is not None else content)

    def _answer_constraint(self, params: SamplingParams, tool_choice) -> Tuple[str, Optional[str], bool]:
        """With tools: (the final answer's schema text or "", its GBNF or None, whether calls
        can be constrained). A regex answer, or a format with no answer alternative, keeps
        its own constraint alone: no call."""
        forced = tool_choice == "required" or isinstance(tool_choice, dict)
        schema = params._schema_text()  # json_schema or response_format's
        if (schema or params.grammar or params.regex) and forced:
            raise InvalidRequestError("tool_choice 'required' or a named function cannot be combined "
                                      "with response_format / json_schema / grammar")
        if not (schema or params.grammar or params.regex):
            return "", None, True
        if params.regex or not self.chat_format.combines_answer:
            return "", None, False
        return schema, (_core.json_schema_to_gbnf(schema) if schema else params.grammar), True

    def request(self, messages, params: Optional[SamplingParams], tools, tool_choice,
                parallel_tool_calls, chat_template_kwargs, add_generation_prompt=None,
                continue_final_message=None):
        """(prompt ids, params with the tool-call constraint, parser factory) for one chat.

        Under tool_choice auto the grammar switches on at a call's trigger. With a
        response_format / json_schema / GBNF grammar as well, the whole output is either the
        calls or the answer that constraint describes (OpenAI's API lets the model choose), and
        a schema is described to the model in the system text (ChatFormat.answer_prompt) so it
        can tell when to answer; a regex answer keeps only its own constraint."""
        validate_messages(messages)
        params = params or SamplingParams()
        tools = check_tools(tools, tool_choice)
        use_tools = bool(tools) and tool_choice != "none"
        fmt = self.chat_format
        schema, answer, calls = (self._answer_constraint(params, tool_choice) if use_tools
                                 else ("", None, False))
        hint = fmt.answer_prompt(schema) if schema else None
        image_parts = self._images(messages)
        text, plain = self.shielded_prompt(messages, tools, tool_choice, chat_template_kwargs,
                                           add_generation_prompt, continue_final_message, hint, image_parts)
        ids = self.ids(text, plain)
        images = image_parts[1]
        if images:
            ids = self.vision.attach(ids, images)  # edgellm.vision.PromptIds
        if calls:
            # llama-server's default: one call per turn unless parallel calls are asked for
            gbnf, triggers = fmt.tool_grammar(_core.json_schema_to_gbnf, tools, tool_choice,
                                              bool(parallel_tool_calls), prompt=text, answer=answer)
            params = dataclasses.replace(params, grammar=gbnf, grammar_triggers=triggers or None,
                                         json_schema=None, response_format=None)

        def new_parser():
            return fmt.parser(tools if use_tools else None, tool_choice, prompt=text)
        return ids, params, new_parser


def finish_chat(c: Completion, parser) -> ChatCompletion:
    """A Completion read by the chat-format parser: content, reasoning, tool calls."""
    parser.feed(c.text)
    parser.finish()
    fields = {f: getattr(c, f) for f in Completion.__dataclass_fields__}
    out = ChatCompletion(**fields)
    out.content = parser.content
    out.reasoning_content = parser.reasoning_content or None
    out.tool_calls = list(parser.tool_calls) or None
    if out.tool_calls and out.finish_reason == "stop":
        out.finish_reason = "tool_calls"
    return out


def parse_chunk(ch: CompletionChunk, parsers: Dict[int, Any], new_parser) -> CompletionChunk:
    """Attach the parsed ChatDelta of this chunk's text (one parser per choice index)."""
    parser = parsers.get(ch.index)
    if parser is None:
        parser = parsers[ch.index] = new_parser()
    delta = parser.feed(ch.text)
    if ch.finish_reason is not None:
        delta.extend(parser.finish())
        if parser.tool_calls and ch.finish_reason == "stop":
            ch.finish_reason = "tool_calls"
    ch.delta = delta
    return ch
