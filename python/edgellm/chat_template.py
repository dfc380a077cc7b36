"""Chat templates: turn OpenAI-style `messages` into the prompt text a model was trained on.

The model's own Jinja template (GGUF `tokenizer.chat_template`) is rendered the way Hugging Face
`apply_chat_template` renders it: a sandboxed jinja2 environment with trim_blocks/lstrip_blocks,
the loopcontrols extension, `raise_exception`, `strftime_now` and a `tojson` that keeps non-ASCII
text as is. Models without a template get a built-in one chosen by the special tokens of their
vocabulary (`choose_template`). Built-in templates emit no BOS: tokenizing the
prompt with add_special=True adds it, exactly once.

    tmpl = choose_template(tok.chat_template, tok.tokens)
    prompt = render_chat(messages, tmpl, bos_token="<s>", eos_token="</s>")
"""
from __future__ import annotations

import functools
import json
import os
import re
import threading
import time
from datetime import datetime
from functools import lru_cache
from typing import Any, Container, Iterable, Mapping, Optional, Sequence

from ._core import InvalidRequestError

__all__ = ["BUILTIN_TEMPLATES", "ChatTemplateError", "ContentShield", "choose_template", "render_chat", "builtin_names"]


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

# Phi-3 / Phi-3.5 / Phi-4-mini: every turn <|role|>, newline, content, <|end|>, newline.
_PHI3 = (
    "{%- for message in messages -%}"
    "{{- '<|' + message.role + '|>\\n' + message.content + '<|end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"
)

# gpt-oss (harmony, llama.cpp's "gpt-oss" built-in): <|start|>ROLE<|message|>TEXT, ended by <|end|>
# (an assistant turn of the history by <|return|>); the prompt ends with <|start|>assistant so the
# model writes its own <|channel|> header. The model's output is parsed by edgellm.harmony.
_GPT_OSS = (
    "{%- for message in messages -%}"
    "{{- '<|start|>' + message.role + '<|message|>' + message.content -}}"
    "{{- '<|return|>' if message.role == 'assistant' else '<|end|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}"
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
    "gpt-oss": _GPT_OSS,
    "llama3": _LLAMA3,
    "llama2": _LLAMA2,
    "phi3": _PHI3,
    "zephyr": _ZEPHYR,
}
_ALIASES = {"llama-3": "llama3", "llama-2": "llama2", "gemma3": "gemma", "gemma2": "gemma", "qwen": "chatml",
            "phi-3": "phi3", "phi4-mini": "phi3", "harmony": "gpt-oss", "openai-moe": "gpt-oss"}


def builtin_names() -> list:
    return sorted(BUILTIN_TEMPLATES)


def _builtin_name(name: str) -> Optional[str]:
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    return key if key in BUILTIN_TEMPLATES else None


def choose_template(metadata_template: Optional[str],
                    vocab_tokens: Optional[Container] = None, override: Optional[str] = None) -> str:
    """The template to render with: a built-in name or a Jinja source string.

    `override` (a user's --chat-template: a built-in name, a path to a .jinja file, or Jinja
    text) wins; then the file's own template; then a built-in picked by the vocabulary's special
    tokens (the architecture name is not consulted: Gemma vocabularies carry <start_of_turn>); chatml when nothing matches (as llama.cpp does).
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
    # any container answers `marker in tokens` (LLM passes a lookup, not the whole vocabulary);
    # other iterables are made a set once
    tokens = vocab_tokens if vocab_tokens is not None else ()
    if not hasattr(tokens, "__contains__") or isinstance(tokens, (list, tuple)):
        tokens = set(tokens)
    if "<|start|>" in tokens and "<|message|>" in tokens and "<|channel|>" in tokens:  # gpt-oss's harmony
        return "gpt-oss"
    if "<|assistant|>" in tokens and "<|end|>" in tokens:  # Phi-3's turns end with <|end|>
        if "<|im_start|>" not in tokens:
            return "phi3"
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


def prepare_messages(messages: Iterable[Mapping], reasoning_field: Optional[str] = None) -> list:
    """OpenAI chat messages as Hugging Face templates expect them: a tool call's `arguments`
    as an object (OpenAI sends a JSON string; rendering that string with `tojson` would encode
    it twice) and an assistant message without content as empty text. `reasoning_field`: the
    name the template reads an assistant's reasoning under when it is not `reasoning_content`
    (gpt-oss's harmony template: "thinking"); the caller's reasoning_content is given that name."""
    out = []
    for m in messages:
        if not isinstance(m, Mapping):
            out.append(m)
            continue
        msg = dict(m)
        if reasoning_field and msg.get("role") == "assistant" and reasoning_field not in msg \
                and isinstance(msg.get("reasoning_content"), str):
            msg[reasoning_field] = msg["reasoning_content"]
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


# ---- content stays text ---------------------------------------------------------------------

_MARKS = [(chr(0xFDD0 + 2 * i), chr(0xFDD1 + 2 * i)) for i in range(16)]  # Unicode noncharacters
_ANY_MARK = re.compile("[\uFDD0-\uFDEF]")


class ContentShield:
    """Keeps caller-supplied text (message content, roles, names, tool calls and results, tool
    definitions, template kwargs) from becoming control tokens in a chat prompt.

    `protect(obj)` copies messages / tools / kwargs, replacing every control-token text inside
    their strings with a placeholder (`find` gives the UTF-8 byte ranges of those texts, e.g.
    Tokenizer.find_control_tokens). The template renders the placeholders like any text.
    `restore(prompt)` puts the original texts back and returns the prompt with the UTF-8 byte
    ranges they occupy, for Tokenizer.encode(..., plain_ranges=): those are tokenized as text,
    the template's own markup as control tokens. A conversation without control-token text in
    it renders and tokenizes exactly as before (no placeholder is made).
    """

    def __init__(self, find):
        self._find = find
        self._originals: list = []
        self._open, self._close = _MARKS[0]
        self._pattern = None

    def _scan(self, s: str) -> str:
        spans = self._find(s)
        if not spans:
            return s
        raw = s.encode("utf-8")
        out, last = [], 0
        for b, e in spans:
            out.append(raw[last:b].decode("utf-8"))
            out.append(f"{self._open}{len(self._originals)}{self._close}")
            self._originals.append(raw[b:e].decode("utf-8"))
            last = e
        out.append(raw[last:].decode("utf-8"))
        return "".join(out)

    def _walk(self, obj: Any, fn):
        if isinstance(obj, str):
            return fn(obj)
        if isinstance(obj, Mapping):
            return {self._walk(k, fn) if isinstance(k, str) else k: self._walk(v, fn)
                    for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._walk(v, fn) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self._walk(v, fn) for v in obj)
        return obj

    def pick_marks(self, *objs: Any) -> None:
        """Choose placeholder marks that occur in none of these (call before protect)."""
        seen = set()

        def note(s: str) -> str:
            for ch in _ANY_MARK.findall(s):
                seen.add(_MARKS[(ord(ch) - 0xFDD0) // 2])
            return s
        for obj in objs:
            self._walk(obj, note)
        for pair in _MARKS:
            if pair not in seen:
                self._open, self._close = pair
                return
        raise ChatTemplateError("message text uses every Unicode noncharacter U+FDD0..U+FDEF")

    def protect(self, obj: Any) -> Any:
        return self._walk(obj, self._scan)

    def restore(self, text: str):
        """-> (prompt, plain byte ranges)."""
        if not self._originals:
            return text, []
        pattern = re.compile(re.escape(self._open) + r"(\d+)" + re.escape(self._close))
        out, ranges, pos, last = [], [], 0, 0
        for m in pattern.finditer(text):
            k = int(m.group(1))
            if k >= len(self._originals):
                continue
            before = text[last:m.start()]
            out.append(before)
            pos += len(before.encode("utf-8"))
            original = self._originals[k]
            out.append(original)
            n = len(original.encode("utf-8"))
            ranges.append((pos, pos + n))
            pos += n
            last = m.end()
        out.append(text[last:])
        return "".join(out), ranges


# ---- rendering ----------------------------------------------------------------------------------

# Limits of one render (a chat template is code: a model file or a --chat-template can loop,
# recurse or build gigabytes). Time: wall clock. Output: characters of the rendered prompt, by
# default DEFAULT_MAX_OUTPUT plus twice the characters the caller supplied (so any conversation
# that could fit a context renders). Work: characters produced by the template's string and list
# operations, calls, filters, outputs and loop bodies, together -- it bounds what a render can
# allocate -- WORK_FACTOR times the output limit.
DEFAULT_TIME_LIMIT = 2.0
DEFAULT_MAX_OUTPUT = 8 << 20
WORK_FACTOR = 16
_MAX_ITEMS = 1 << 20        # list / tuple length a template may build
_MAX_INT_BITS = 1 << 16     # integers a template may compute (10**10**8 is refused)
_BIG_WIDTH = re.compile(r"\d{7,}")  # a width or precision of 10**6 or more in a format string


class _Limits(threading.local):
    active = None  # the _Budget of the render running on this thread, if any


_limits = _Limits()


class _Budget:
    __slots__ = ("deadline", "time_limit", "max_output", "work_left", "max_work")

    def __init__(self, time_limit: float, max_output: int):
        self.time_limit = time_limit
        self.deadline = time.monotonic() + time_limit
        self.max_output = max_output
        self.max_work = self.work_left = max_output * WORK_FACTOR

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise ChatTemplateError(f"chat template exceeded its time limit ({self.time_limit:g} s)")

    def charge(self, n: int) -> None:
        self.work_left -= n
        if self.work_left < 0:
            raise ChatTemplateError(
                f"chat template exceeded its memory limit ({self.max_work:,} characters built "
                "by its string operations)")
        if time.monotonic() > self.deadline:
            self.tick()

    def size_ok(self, n: int, what: str) -> None:
        if n > self.max_output:
            raise ChatTemplateError(
                f"chat template exceeded its output size limit ({self.max_output:,} characters): "
                f"{what} of {n:,}")
        self.charge(n)


def _size(value: Any, limit: int) -> int:
    """Characters `value` is (or prints as), counted up to about `limit`."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple, dict)):
        total = 2
        items = value.items() if isinstance(value, dict) else value
        for item in items:
            total += _size(item, limit - total) + 2
            if total > limit:
                break
        return total
    return 8


def _check_result(b: "_Budget", value: Any, what: str) -> Any:
    if isinstance(value, (str, list, tuple, dict)):
        if isinstance(value, (list, tuple)) and len(value) > _MAX_ITEMS:
            raise ChatTemplateError(f"chat template exceeded its size limit: {what} gives a list "
                                    f"of {len(value):,} items (at most {_MAX_ITEMS:,})")
        b.size_ok(_size(value, b.max_output) if isinstance(value, str) else len(value), what)
    elif isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        raise ChatTemplateError(f"chat template exceeded its size limit: {what} gives an integer of "
                                f"{value.bit_length():,} bits")
    return value


def _seq_len(x: Any) -> Optional[int]:
    return len(x) if isinstance(x, (str, list, tuple)) else None


def _precheck_binop(b: "_Budget", op: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be too big before Python computes it."""
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            size = _seq_len(seq)
            if size is not None and isinstance(n, int) and not isinstance(n, bool) and n > 0:
                if isinstance(seq, str) and size * n > b.max_output:
                    raise ChatTemplateError(
                        f"chat template exceeded its output size limit ({b.max_output:,} characters): "
                        f"a repetition of {size:,} x {n:,}")
                if not isinstance(seq, str) and size * n > _MAX_ITEMS:
                    raise ChatTemplateError(f"chat template exceeded its size limit: a list of "
                                            f"{size:,} x {n:,} items (at most {_MAX_ITEMS:,})")
        if isinstance(left, int) and isinstance(right, int) and \
                left.bit_length() + right.bit_length() > _MAX_INT_BITS:
            raise ChatTemplateError("chat template exceeded its size limit: integer product too large")
    elif op == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1 and \
                right * left.bit_length() > _MAX_INT_BITS:
            raise ChatTemplateError(f"chat template exceeded its size limit: {left} ** {right} is too large")
    elif op == "+":
        sl, sr = _seq_len(left), _seq_len(right)
        if isinstance(left, str) and isinstance(right, str):
            b.size_ok(sl + sr, "a concatenation")
        elif sl is not None and sr is not None and sl + sr > _MAX_ITEMS:
            raise ChatTemplateError(f"chat template exceeded its size limit: a list of "
                                    f"{sl + sr:,} items (at most {_MAX_ITEMS:,})")
    elif op == "%" and isinstance(left, str) and _BIG_WIDTH.search(left):
        raise ChatTemplateError("chat template exceeded its output size limit: a format width of "
                                "a million or more")


def _precheck_args(b: "_Budget", args, kwargs, what: str) -> None:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and a > b.max_output:
            raise ChatTemplateError(f"chat template exceeded its output size limit "
                                    f"({b.max_output:,} characters): {what} with argument {a:,}")


def _precheck_method(b: "_Budget", obj: Any, args) -> None:
    """str.join / str.replace: the size of the result is known before it is built."""
    owner = getattr(obj, "__self__", None)
    name = getattr(obj, "__name__", "")
    if isinstance(owner, str) and name == "join" and args and isinstance(args[0], (list, tuple)):
        items = args[0]
        total = len(owner) * max(0, len(items) - 1)
        for x in items:
            total += len(x) if isinstance(x, str) else 0
            if total > b.max_output:
                break
        b.size_ok(total, "a join")
    elif isinstance(owner, str) and name == "replace" and len(args) >= 2 and \
            isinstance(args[0], str) and isinstance(args[1], str):
        count = owner.count(args[0]) if args[0] else len(owner) + 1
        b.size_ok(len(owner) + count * (len(args[1]) - len(args[0])), "a replace")


def _literal_size(nodes_: Iterable) -> int:
    """Characters of template text directly in these nodes (not in loops or macros inside
    them, which are charged on their own)."""
    from jinja2 import nodes

    total = 0
    stack = list(nodes_)
    while stack:
        n = stack.pop()
        if isinstance(n, nodes.TemplateData):
            total += len(n.data)
        elif isinstance(n, nodes.Const) and isinstance(n.value, str):
            total += len(n.value)
        if isinstance(n, (nodes.For, nodes.Macro, nodes.CallBlock)):
            continue
        stack.extend(n.iter_child_nodes())
    return total


def _guard_tree(tree, environment):
    """Instrument a parsed template: every loop iteration checks the deadline and charges its
    body's text; every macro or call-block body charges its text; `~` concatenation is checked."""
    from jinja2 import nodes
    from jinja2.visitor import NodeTransformer

    def env_call(name, args, lineno):
        return nodes.Call(nodes.EnvironmentAttribute(name, lineno=lineno), args, [], None, None,
                          lineno=lineno)

    class Guard(NodeTransformer):
        def visit_Concat(self, node):
            node = self.generic_visit(node)
            return env_call("edgellm_concat", [nodes.List(node.nodes, lineno=node.lineno)], node.lineno)

        def visit_For(self, node):
            cost = _literal_size(node.body)
            node = self.generic_visit(node)
            node.iter = env_call("edgellm_iter", [node.iter, nodes.Const(cost)], node.lineno)
            return node

        def _charge_body(self, node):
            cost = _literal_size(node.body)
            node = self.generic_visit(node)
            node.body.insert(0, nodes.ExprStmt(env_call("edgellm_charge", [nodes.Const(cost)],
                                                        node.lineno), lineno=node.lineno))
            return node

        visit_Macro = visit_CallBlock = _charge_body

    tree = Guard().visit(tree)
    tree.set_environment(environment)
    return tree


def _raise_exception(message: str):
    from jinja2.exceptions import TemplateError
    raise TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators=None, sort_keys: bool = False) -> str:
    b = _limits.active
    if b is not None:
        b.size_ok(_size(value, b.max_output), "tojson")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _guard_filter(name: str, fn):
    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        b = _limits.active
        if b is None:
            return fn(*args, **kwargs)
        b.tick()
        # the first argument (after a context/environment the filter asks for) is the value
        _precheck_args(b, args[2:] if getattr(fn, "jinja_pass_arg", None) else args[1:], kwargs,
                       f"filter {name!r}")
        if name == "join":
            value = args[1] if getattr(fn, "jinja_pass_arg", None) else args[0]
            if isinstance(value, (list, tuple)):
                b.size_ok(sum(_size(x, b.max_output) for x in value[:b.max_output]), "a join")
        elif name == "format" and args and isinstance(args[0], str) and _BIG_WIDTH.search(args[0]):
            raise ChatTemplateError("chat template exceeded its output size limit: a format width "
                                    "of a million or more")
        return _check_result(b, fn(*args, **kwargs), f"filter {name!r}")
    return guarded


@lru_cache(maxsize=1)
def _environment():
    import jinja2
    from jinja2.runtime import LoopContext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class LenientUndefined(jinja2.Undefined):
        """An undefined variable renders empty (Jinja's default) and, as in llama.cpp's template
        engine, adds as nothing: `"text" + undefined` is "text" (firefunction-v2's template
        concatenates a `functions` variable that clients never send)."""
        __slots__ = ()

        def __add__(self, other):
            return other

        __radd__ = __add__

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        """The sandbox plus the limits of the render running on this thread (_Budget)."""
        intercepted_binops = frozenset(["*", "**", "+", "%", "//", "/"])

        def _parse(self, source, name, filename):
            return _guard_tree(super()._parse(source, name, filename), self)

        def call_binop(self, context, operator, left, right):
            b = _limits.active
            if b is None:
                return super().call_binop(context, operator, left, right)
            _precheck_binop(b, operator, left, right)
            return _check_result(b, super().call_binop(context, operator, left, right),
                                 f"operator {operator!r}")

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - as the base class
            b = _limits.active
            if b is None:
                return super().call(__context, __obj, *args, **kwargs)
            b.tick()
            if isinstance(__obj, LoopContext) and args:  # a recursive loop's next level
                args = (__self.edgellm_iter(args[0], 0),) + args[1:]
            what = f"call of {getattr(__obj, '__name__', type(__obj).__name__)!r}"
            _precheck_args(b, args, kwargs, what)
            _precheck_method(b, __obj, args)
            return _check_result(b, super().call(__context, __obj, *args, **kwargs), what)

        def getattr(self, obj, attribute):
            if isinstance(obj, str) and attribute in ("format", "format_map") and \
                    _limits.active is not None and _BIG_WIDTH.search(obj):
                raise ChatTemplateError("chat template exceeded its output size limit: a format "
                                        "width of a million or more")
            return super().getattr(obj, attribute)

        @staticmethod
        def edgellm_iter(iterable, cost):
            b = _limits.active
            if b is None:
                yield from iterable
                return
            for item in iterable:
                b.charge(cost + 1)
                if time.monotonic() > b.deadline:
                    b.tick()
                yield item

        @staticmethod
        def edgellm_charge(cost):
            b = _limits.active
            if b is not None:
                b.charge(cost + 1)
            return None

        @staticmethod
        def edgellm_concat(items):
            b = _limits.active
            if b is not None:
                b.size_ok(sum(_size(x, b.max_output) for x in items), "a `~` concatenation")
            return "".join(x if isinstance(x, str) else str(x) for x in items)

    def finalize(value):
        b = _limits.active
        if b is not None and not isinstance(value, str):
            b.size_ok(_size(value, b.max_output), "an output")
        s = value if isinstance(value, str) else str(value)
        if b is not None:
            b.charge(len(s))
        return s

    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True,
                             extensions=["jinja2.ext.loopcontrols"],
                             undefined=LenientUndefined, finalize=finalize)
    for name, fn in list(env.filters.items()):
        env.filters[name] = _guard_filter(name, fn)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=32)
def _compile(source: str):
    import jinja2
    # Jinja folds constant expressions (e.g. `'x' | center(10**9)`) while compiling: the limits
    # hold then too (a folded call over them is left to run, and fail, at render time).
    outer = _limits.active
    _limits.active = _Budget(DEFAULT_TIME_LIMIT, DEFAULT_MAX_OUTPUT)
    try:
        return _environment().from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template is not valid Jinja (line {e.lineno}): {e.message}") from e
    except RecursionError:
        raise ChatTemplateError("chat template is nested too deeply to compile") from None
    finally:
        _limits.active = outer


def _flatten_content(content: Any, index: int) -> Any:
    """OpenAI content parts -> text (templates written for plain strings concatenate it). A
    content with {"type": "image"} parts (edgellm.vision) stays a list of image and text parts,
    as Hugging Face templates of vision models take it."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Sequence) and any(isinstance(p, Mapping) and p.get("type") == "image" for p in content):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "image":
                parts.append({"type": "image"})
            else:
                parts.append({"type": "text", "text": _flatten_content([part], index)})
        return parts
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
                *, time_limit: Optional[float] = None, max_output: Optional[int] = None,
                **extra: Any) -> str:
    """Render `messages` with `template` (a built-in name, Jinja source, or None for chatml).

    Template errors -- including `raise_exception(...)` calls in the template, e.g. "roles must
    alternate" -- raise ChatTemplateError (an InvalidRequestError) with the template's message;
    so does any other exception the template causes (TypeError, OverflowError, RecursionError,
    MemoryError, ...), and going past a limit: `time_limit` seconds (DEFAULT_TIME_LIMIT),
    `max_output` characters of prompt (DEFAULT_MAX_OUTPUT plus twice what the caller supplied)
    and WORK_FACTOR times that built by the template's string operations.
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
    if max_output is None:
        supplied = _size(msgs, 1 << 40) + _size(tools or [], 1 << 40) + _size(list(extra.values()), 1 << 40)
        max_output = DEFAULT_MAX_OUTPUT + 2 * supplied
    budget = _Budget(DEFAULT_TIME_LIMIT if time_limit is None else float(time_limit), int(max_output))
    outer = _limits.active
    _limits.active = budget
    try:
        parts, size = [], 0
        for chunk in compiled.generate(**context):
            size += len(chunk)
            if size > budget.max_output:
                raise ChatTemplateError(f"chat template exceeded its output size limit "
                                        f"({budget.max_output:,} characters)")
            parts.append(chunk)
            budget.tick()
        return "".join(parts)
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template error: {e}") from e
    except RecursionError:
        raise ChatTemplateError("chat template error: recursion too deep (a macro or recursive "
                                "loop that does not end)") from None
    except MemoryError:
        raise ChatTemplateError("chat template error: it ran out of memory") from None
    except Exception as e:  # noqa: BLE001 - whatever a template does wrong is the template's error
        raise ChatTemplateError(f"chat template error: {type(e).__name__}: {e}") from e
    finally:
        _limits.active = outer
