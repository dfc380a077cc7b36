"""Chat templates: turn OpenAI-style `messages` into the prompt text a model was trained on.

The model's own Jinja template (GGUF `tokenizer.chat_template`) is rendered the way Hugging Face
`apply_chat_template` renders it: a sandboxed jinja2 environment with trim_blocks/lstrip_blocks,
the loopcontrols extension, `raise_exception`, `strftime_now` and a `tojson` that keeps non-ASCII
text as is. Models without a template get a built-in one chosen by architecture or by the special
tokens of their vocabulary (`choose_template`). Built-in templates emit no BOS: tokenizing the
prompt with add_special=True adds it, exactly once.

    tmpl = choose_template(tok.chat_template, tok.arch, tok.tokens)
    prompt = render_chat(messages, tmpl, bos_token="<s>", eos_token="</s>")
"""
from __future__ import annotations

import json
import os
from datetime import datetime
from functools import lru_cache
from typing import Any, Container, Iterable, Mapping, Optional, Sequence

from ._core import InvalidRequestError

__all__ = ["BUILTIN_TEMPLATES", "ChatTemplateError", "choose_template", "render_chat", "builtin_names"]


class ChatTemplateError(InvalidRequestError):
    """The template could not be rendered for these messages (or is not valid Jinja)."""


# ---- built-in templates (same text layout as llama.cpp's built-ins of the same name) ---------

_CHATML = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Gemma has no system role: system text (trimmed) is merged into the next user turn, followed by a
# blank line; "assistant" is called "model".
_GEMMA = (
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}"
    "{%- set ns.system = ns.system + (message.content | trim) -%}"
    "{%- else -%}"
    "{%- set role = 'model' if message.role == 'assistant' else message.role -%}"
    "{{- '<start_of_turn>' + role + '\\n' -}}"
    "{%- if ns.system and role != 'model' -%}{{- ns.system + '\\n\\n' -}}{%- set ns.system = '' -%}{%- endif -%}"
    "{{- (message.content | trim) + '<end_of_turn>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)

_LLAMA3 = (
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + (message.content | trim) + '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)

# Llama-2 chat with a <<SYS>> block inside the first [INST].
_LLAMA2 = (
    "{%- set ns = namespace(inside=true) -%}"
    "{{- '[INST] ' -}}"
    "{%- for message in messages -%}"
    "{%- if not ns.inside -%}{{- '[INST] ' -}}{%- set ns.inside = true -%}{%- endif -%}"
    "{%- if message.role == 'system' -%}{{- '<<SYS>>\\n' + message.content + '\\n<</SYS>>\\n\\n' -}}"
    "{%- elif message.role == 'user' -%}{{- message.content + ' [/INST]' -}}"
    "{%- else -%}{{- message.content + '</s>' -}}{%- set ns.inside = false -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

_ZEPHYR = (
    "{%- for message in messages -%}"
    "{{- '<|' + message.role + '|>\\n' + message.content + '<|endoftext|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)

# Cohere Command-R: turns between <|START_OF_TURN_TOKEN|> and <|END_OF_TURN_TOKEN|>, the roles as
# SYSTEM / USER / CHATBOT tokens, content trimmed.
_COMMAND_R = (
    "{%- for message in messages -%}"
    "{%- set role = {'system': 'SYSTEM', 'user': 'USER', 'assistant': 'CHATBOT'}.get(message.role, 'USER') -%}"
    "{{- '<|START_OF_TURN_TOKEN|><|' + role + '_TOKEN|>' + (message.content | trim) + '<|END_OF_TURN_TOKEN|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' -}}{%- endif -%}"
)

BUILTIN_TEMPLATES = {
    "chatml": _CHATML,
    "command-r": _COMMAND_R,
    "gemma": _GEMMA,
    "llama3": _LLAMA3,
    "llama2": _LLAMA2,
    "zephyr": _ZEPHYR,
}
_ALIASES = {"llama-3": "llama3", "llama-2": "llama2", "gemma3": "gemma", "gemma2": "gemma", "qwen": "chatml"}


def builtin_names() -> list:
    return sorted(BUILTIN_TEMPLATES)


def _builtin_name(name: str) -> Optional[str]:
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    return key if key in BUILTIN_TEMPLATES else None


def choose_template(metadata_template: Optional[str], arch: Optional[str] = None,
                    vocab_tokens: Optional[Container] = None, override: Optional[str] = None) -> str:
    """The template to render with: a built-in name or a Jinja source string.

    `override` (a user's --chat-template: a built-in name, a path to a .jinja file, or Jinja
    text) wins; then the file's own template; then a built-in picked by architecture or by the
    vocabulary's special tokens; chatml when nothing matches (as llama.cpp does).
    """
    if override:
        name = _builtin_name(override)
        if name:
            return name
        if os.path.isfile(override):
            with open(override, encoding="utf-8") as f:
                return f.read()
        if "{{" in override or "{%" in override:
            return override
        raise ChatTemplateError(
            f"unknown chat template {override!r}: not a built-in ({', '.join(builtin_names())}), "
            "not an existing .jinja file and not Jinja text")
    if metadata_template:
        return metadata_template
    arch = (arch or "").lower()
    if arch.startswith("gemma"):
        return "gemma"
    tokens = vocab_tokens if vocab_tokens is not None else ()
    if not isinstance(tokens, (set, frozenset, dict)):
        tokens = set(tokens)
    for marker, name in (("<|im_start|>", "chatml"), ("<|start_header_id|>", "llama3"),
                         ("<start_of_turn>", "gemma"), ("<|assistant|>", "zephyr"), ("[INST]", "llama2")):
        if marker in tokens:
            return name
    return "chatml"


def template_source(template: Optional[str]) -> str:
    """The Jinja source of a template given as a built-in name or as source text."""
    if template is None:
        return BUILTIN_TEMPLATES["chatml"]
    name = _builtin_name(template) if len(template) < 40 else None
    return BUILTIN_TEMPLATES[name] if name else template


def prepare_messages(messages: Iterable[Mapping]) -> list:
    """OpenAI chat messages as Hugging Face templates expect them: a tool call's `arguments`
    as an object (OpenAI sends a JSON string; rendering that string with `tojson` would encode
    it twice) and an assistant message without content as empty text."""
    out = []
    for m in messages:
        if not isinstance(m, Mapping):
            out.append(m)
            continue
        msg = dict(m)
        calls = msg.get("tool_calls")
        if calls:
            fixed = []
            for c in calls:
                if isinstance(c, Mapping):
                    c = dict(c)
                    fn = c.get("function")
                    if isinstance(fn, Mapping):
                        fn = dict(fn)
                        args = fn.get("arguments")
                        if isinstance(args, str):
                            try:
                                fn["arguments"] = json.loads(args) if args.strip() else {}
                            except json.JSONDecodeError:
                                pass  # not JSON: the template gets the text as sent
                        c["function"] = fn
                fixed.append(c)
            msg["tool_calls"] = fixed
            if msg.get("content") is None:
                msg["content"] = ""
        out.append(msg)
    return out


# ---- rendering --------------------------------------------------------------------------------

def _raise_exception(message: str):
    from jinja2.exceptions import TemplateError
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators=None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


@lru_cache(maxsize=1)
def _environment():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class LenientUndefined(jinja2.Undefined):
        """An undefined variable renders empty (Jinja's default) and, as in llama.cpp's template
        engine, adds as nothing: `"text" + undefined` is "text" (firefunction-v2's template
        concatenates a `functions` variable that clients never send)."""
        __slots__ = ()

        def __add__(self, other):
            return other

        __radd__ = __add__

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"],
                                        undefined=LenientUndefined)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=32)
def _compile(source: str):
    import jinja2
    try:
        return _environment().from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template is not valid Jinja (line {e.lineno}): {e.message}") from e


def _flatten_content(content: Any, index: int) -> Any:
    """OpenAI content parts -> text (templates written for plain strings concatenate it)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                texts.append(part)
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ChatTemplateError(f"messages[{index}].content: content part of type {kind!r} is not supported")
        return "".join(texts)
    raise ChatTemplateError(f"messages[{index}].content must be a string or a list of text parts")


def _normalize(messages: Iterable[Mapping]) -> list:
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise ChatTemplateError(f"messages[{i}] must be an object with 'role' and 'content'")
        if "role" not in m:
            raise ChatTemplateError(f"messages[{i}] has no 'role'")
        msg = dict(m)
        msg["content"] = _flatten_content(msg.get("content"), i)
        out.append(msg)
    return out


def render_chat(messages: Iterable[Mapping], template: Optional[str] = None, bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True, tools: Optional[list] = None,
                **extra: Any) -> str:
    """Render `messages` with `template` (a built-in name, Jinja source, or None for chatml).

    Template errors -- including `raise_exception(...)` calls in the template, e.g. "roles must
    alternate" -- raise ChatTemplateError (an InvalidRequestError) with the template's message.
    """
    import jinja2

    msgs = _normalize(messages)
    if template is None:
        source = BUILTIN_TEMPLATES["chatml"]
    else:
        name = _builtin_name(template) if len(template) < 40 else None
        source = BUILTIN_TEMPLATES[name] if name else template
    compiled = _compile(source)
    now = datetime.now()
    # llama.cpp's extra template context: today's date, which Llama 3.x templates print
    # (without it they fall back to a fixed "26 Jul 2024"), and enable_thinking true (llama.cpp
    # passes it unless reasoning is switched off; chat_template_kwargs can say false)
    context = {"date_string": now.strftime("%d %b %Y"), "datetime": now.strftime("%b %d %Y"),
               "enable_thinking": True}
    context.update(extra)
    context.update(messages=msgs, bos_token=bos_token or "", eos_token=eos_token or "",
                   add_generation_prompt=add_generation_prompt)
    if tools is not None:
        context["tools"] = tools
    try:
        return compiled.render(**context)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template error: {e}") from e
    except (TypeError, KeyError, AttributeError, ValueError) as e:
        if isinstance(e, ChatTemplateError):
            raise
        raise ChatTemplateError(f"chat template error: {type(e).__name__}: {e}") from e
