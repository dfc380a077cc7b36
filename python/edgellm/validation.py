"""What a request parameter may be: one definition for the library and the server.

The sampling fields' rules are built from these primitives in edgellm.sampling_fields (the one
table of sampling fields: `SAMPLING_RULES`, `validate_sampling`), which `SamplingParams` and the
OpenAI / Anthropic / llama-server request parsers apply alike, so `temperature=-1` is refused the
same way whether it comes from Python or from JSON. Every failure is an `edgellm.InvalidRequestError` whose message names
the field, with `.param` (the field's name, as the caller spelt it) and `.code`
("invalid_type" or "invalid_value") set; the server answers it as a 400 in OpenAI's envelope.

Types are strict: a bool is not an int (True is not 1) and a string is not a bool ("no" is not
False); an integer may be written as a float only when it has no fractional part (JSON has one
number type, so 3.0 is 3, but 2.9 is an error, never truncated); NaN and infinities are refused.
The rules, field by field, are in README.md ("Sampling parameters") and docs/SERVER.md.
"""
from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Callable, Dict, List, Mapping, Optional

from ._core import InvalidRequestError

__all__ = [
    "InvalidRequestError", "fail", "integer", "number", "boolean", "string", "optional",
    "token_id", "token_ids", "logit_bias", "stop_strings", "response_format", "json_schema",
    "bias_value", "validate_messages", "MESSAGE_ROLES",
    "MAX_N", "MAX_STOP", "MAX_STOP_CHARS", "MAX_TOP_LOGPROBS", "MAX_TOKEN_ID", "MAX_N_CTX",
    "SPECULATIVE_MODES", "MAX_SPECULATIVE_TOKENS", "check_speculative",
]

MAX_N = 64                 # completions per request
MAX_STOP = 16              # stop strings per request (OpenAI allows 4; llama-server any number)
MAX_STOP_CHARS = 4096      # characters in one stop string
MAX_STOP_TOKEN_IDS = 1024  # stop_token_ids entries (edgellm.sampling_fields)
MAX_TOP_LOGPROBS = 20      # OpenAI's limit; llama-server's n_probs is capped the same here
MAX_TOKEN_ID = 2**31 - 1   # the engine stores token ids as int32
MAX_INT32 = 2**31 - 1
MAX_N_CTX = 1 << 24        # tokens per sequence (the engine's kMaxContext), after the memory check
SPECULATIVE_MODES = ("auto", "ngram", "draft", "off")  # speculative decoding (LLM(speculative=))
MAX_SPECULATIVE_TOKENS = 64  # tokens drafted per step
Check = Callable[[Any, str], Any]


# ---- failures -------------------------------------------------------------------------------

def fail(message: str, param: Optional[str], code: str = "invalid_value") -> InvalidRequestError:
    """An InvalidRequestError carrying the field's name (`param`) and an OpenAI-style `code`."""
    e = InvalidRequestError(message)
    e.param = param
    e.code = code
    return e


def type_name(v: Any) -> str:
    if v is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "array", tuple: "array", dict: "object"}.get(type(v), type(v).__name__)


def short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def bad_type(name: str, v: Any, want: str) -> InvalidRequestError:
    return fail(f"'{name}' must be {want}, got {type_name(v)} {short(v)}", name, "invalid_type")


def _num(x) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _range(name: str, v, lo, hi) -> None:
    if lo is not None and v < lo:
        raise fail(f"'{name}' must be >= {_num(lo)}, got {_num(v)}", name)
    if hi is not None and v > hi:
        raise fail(f"'{name}' must be <= {_num(hi)}, got {_num(v)}", name)


# ---- primitive rules: each is check(value, name) -> the value to use --------------------------

def _as_int(v: Any, name: str) -> int:
    if isinstance(v, bool):
        raise bad_type(name, v, "an integer")
    if isinstance(v, float):
        if not v.is_integer():  # also NaN and infinities
            raise bad_type(name, v, "an integer")
        return int(v)
    try:
        return operator.index(v)  # int, numpy integers
    except TypeError:
        raise bad_type(name, v, "an integer") from None


def integer(lo: Optional[int] = None, hi: Optional[int] = None) -> Check:
    """An integer in [lo, hi] (a float without a fractional part counts; a bool does not)."""
    def check(v, name):
        v = _as_int(v, name)
        _range(name, v, lo, hi)
        return v
    return check


def number(lo: Optional[float] = None, hi: Optional[float] = None, lo_open: bool = False) -> Check:
    """A finite number in [lo, hi] ((lo, hi] with lo_open), returned as a float."""
    def check(v, name):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise bad_type(name, v, "a number")
        v = float(v)
        if not math.isfinite(v):
            raise fail(f"'{name}' must be finite, got {v}", name)
        if lo_open and lo is not None and v <= lo:
            raise fail(f"'{name}' must be > {_num(lo)}, got {_num(v)}", name)
        _range(name, v, None if lo_open else lo, hi)
        return v
    return check


def boolean(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise bad_type(name, v, "a boolean")
    return v


def string(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise bad_type(name, v, "a string")
    return v


def optional(check: Check) -> Check:
    """None passes through; anything else must satisfy `check`."""
    def run(v, name):
        return None if v is None else check(v, name)
    return run


def token_id(v: Any, name: str, n_vocab: Optional[int] = None) -> int:
    """A token id: an integer in [0, n_vocab) (in [0, 2^31) when the vocabulary is unknown)."""
    t = _as_int(v, name) if type(v) is not int else v
    hi = n_vocab if n_vocab is not None else MAX_TOKEN_ID + 1
    if t < 0 or t >= hi:
        where = f"the vocabulary [0, {n_vocab})" if n_vocab is not None else \
            "the token id range [0, 2^31)"
        raise fail(f"'{name}': token id {t} is outside {where}", name)
    return t


def token_ids(ids: Any, n_vocab: Optional[int] = None, name: str = "prompt") -> List[int]:
    """A sequence of token ids as a list of ints, each in [0, n_vocab). One pass of C-level
    min/max over a list of plain ints; other element types are checked one by one."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise bad_type(name, ids, "a list of token ids")
    out = ids if type(ids) is list else list(ids)
    if not all(type(t) is int for t in out):
        out = [token_id(t, f"{name}[{i}]", n_vocab) for i, t in enumerate(out)]
    if out:
        hi = n_vocab if n_vocab is not None else MAX_TOKEN_ID + 1
        lo_v, hi_v = min(out), max(out)
        if lo_v < 0 or hi_v >= hi:
            i = next(i for i, t in enumerate(out) if t < 0 or t >= hi)
            token_id(out[i], f"{name}[{i}]", n_vocab)
    return out


def logit_bias(v: Any, name: str) -> Dict[int, float]:
    """{token id: finite bias, or -inf to ban the token}; ids may be ints or decimal strings
    (JSON object keys)."""
    if not isinstance(v, Mapping):
        raise bad_type(name, v, "an object mapping token ids to biases")
    out: Dict[int, float] = {}
    for key, bias in v.items():
        if isinstance(key, str):
            k = key.strip()
            if not (k.isascii() and k.isdigit()):
                raise fail(f"'{name}' keys must be token ids (non-negative integers, in JSON "
                           f"written as strings), got {key!r}", name)
            tid = int(k)
        elif isinstance(key, bool):
            raise fail(f"'{name}' keys must be token ids, got {key!r}", name)
        else:
            tid = _as_int(key, name)
        token_id(tid, name)
        out[tid] = bias_value(bias, f"{name}[{key}]")
    return out


def bias_value(v: Any, name: str) -> float:
    """A logit bias: a finite number, or -inf to ban the token (llama.cpp's; llama-server's
    `false`). NaN and +inf are refused, on every route."""
    if isinstance(v, float) and v == -math.inf:
        return v
    return number()(v, name)


def stop_strings(v: Any, name: str) -> Optional[List[str]]:
    """A string or a list of strings (at most MAX_STOP, none empty or longer than
    MAX_STOP_CHARS); an empty list is None."""
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
        raise bad_type(name, v, "a string or an array of strings")
    if len(v) > MAX_STOP:
        raise fail(f"'{name}' has {len(v)} strings, at most {MAX_STOP} are allowed", name)
    for s in v:
        if s == "":
            raise fail(f"'{name}' contains an empty string", name)
        if len(s) > MAX_STOP_CHARS:
            raise fail(f"'{name}' has a string of {len(s)} characters, at most "
                       f"{MAX_STOP_CHARS} are allowed", name)
    return list(v) or None


def response_format(v: Any, name: str) -> Mapping:
    """OpenAI's response_format: {"type": "text" | "json_object" | "json_schema", ...}."""
    if not isinstance(v, Mapping):
        raise bad_type(name, v, "an object")
    kind = v.get("type")
    if kind not in ("text", "json_object", "json_schema"):
        raise fail(f"'{name}.type' must be 'text', 'json_object' or 'json_schema', got "
                   f"{short(kind)}", f"{name}.type")
    if kind == "json_schema":
        js = v.get("json_schema")
        if not isinstance(js, Mapping) or not isinstance(js.get("schema", {}), (Mapping, bool)):
            raise fail(f"'{name}.json_schema' must be an object with a 'schema' object",
                       f"{name}.json_schema")
        json_schema(js.get("schema", {}), f"{name}.json_schema.schema")
    if kind == "json_object" and "schema" in v:
        if not isinstance(v["schema"], (Mapping, bool)):
            raise bad_type(f"{name}.schema", v["schema"], "an object")
        json_schema(v["schema"], f"{name}.schema")
    return v


MAX_SCHEMA_DEPTH = 128  # nesting of objects/arrays in a JSON schema given as a dict


def _nesting_depth(v: Any, limit: int) -> int:
    """Depth of nested dicts/lists (iterative, so a 10,000-deep dict cannot overflow the
    stack); stops counting past `limit`."""
    deepest, stack = 0, [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (Mapping, list, tuple)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((y, d + 1) for y in (x.values() if isinstance(x, Mapping) else x))
    return deepest


def json_schema(v: Any, name: str):
    """A JSON schema: a dict (nested at most MAX_SCHEMA_DEPTH deep), a JSON string, or a bool."""
    if not isinstance(v, (Mapping, str, bool)):
        raise bad_type(name, v, "an object or a string")
    if isinstance(v, Mapping) and _nesting_depth(v, MAX_SCHEMA_DEPTH) > MAX_SCHEMA_DEPTH:
        raise fail(f"'{name}' is nested more than {MAX_SCHEMA_DEPTH} levels deep", name)
    return v


# ---- chat messages --------------------------------------------------------------------------

MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool")


def validate_messages(messages: Any, name: str = "messages") -> None:
    """A chat conversation: a non-empty list of message dicts, each with a known role and a
    content that is a string, a list of content parts (dicts), or -- for an assistant message
    that makes tool calls -- None. Raises InvalidRequestError naming the message at fault."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, (list, tuple)):
        raise bad_type(name, messages, "a list of message dicts")
    if not messages:
        raise fail(f"'{name}' must not be empty", name)
    for i, msg in enumerate(messages):
        where = f"{name}[{i}]"
        if not isinstance(msg, Mapping):
            raise bad_type(where, msg, "a message dict with 'role' and 'content'")
        role = msg.get("role")
        if role not in MESSAGE_ROLES:
            raise fail(f"'{where}.role' must be one of {', '.join(MESSAGE_ROLES)}, got "
                       f"{short(role)}", f"{where}.role")
        content = msg.get("content")
        if content is None:
            if role != "assistant" or not msg.get("tool_calls"):
                raise fail(f"'{where}.content' is missing", f"{where}.content")
        elif isinstance(content, (list, tuple)):
            for j, part in enumerate(content):
                if not isinstance(part, Mapping):
                    raise bad_type(f"{where}.content[{j}]", part, "a content part dict")
        elif not isinstance(content, str):
            raise bad_type(f"{where}.content", content, "a string or a list of content parts")


# ---- LLM(...) arguments ---------------------------------------------------------------------

def check_engine_args(**args: Any) -> Dict[str, Any]:
    """LLM's engine arguments, checked before anything reaches the bindings (where an int too
    large for C++ would be a TypeError). None (and 0, llama.cpp's "default") keeps a default:
    n_ctx min(trained, 4096), n_threads the physical cores, kv_memory two full contexts. The
    memory the KV cache needs is checked by the engine once the model's geometry is known."""
    def opt(check: Check, name: str, zero_ok: bool = False):
        v = args[name]
        if v is None:
            return 0
        if zero_ok and v == 0 and not isinstance(v, bool):
            return 0
        return check(v, name)

    out = {
        # up to int32 here; the engine says what memory and its maximum (MAX_N_CTX) allow
        "n_ctx": opt(integer(1, MAX_INT32), "n_ctx"),
        "n_threads": opt(integer(1, 4096), "n_threads", zero_ok=True),
        "kv_memory": opt(integer(1, 2**63 - 1), "kv_memory", zero_ok=True),
        "kv_type": string(args["kv_type"], "kv_type"),
        "max_seqs": integer(1, 256)(args["max_seqs"], "max_seqs"),
        "max_batch_tokens": integer(1, MAX_INT32)(args["max_batch_tokens"], "max_batch_tokens"),
        "page_size": integer(16, 64)(args["page_size"], "page_size"),
        "n_gpu_layers": integer(-1, MAX_INT32)(args["n_gpu_layers"], "n_gpu_layers"),
        "prefix_cache": boolean(args["prefix_cache"], "prefix_cache"),
        "context_shift": boolean(args.get("context_shift", False), "context_shift"),
        "cache_dir": _cache_dir(args.get("cache_dir")),
        "cache_max_bytes": opt(integer(1, 2**63 - 1), "cache_max_bytes", zero_ok=True)
        if "cache_max_bytes" in args else 0,
    }
    if out["cache_dir"] and not out["prefix_cache"]:
        raise fail("cache_dir needs the prefix cache: leave prefix_cache on, or give no cache_dir",
                   "cache_dir")
    out.update(check_speculative(args.get("speculative", "auto"),
                                 args.get("num_speculative_tokens"),
                                 args.get("draft_model"), args.get("spec_adaptive", True)))
    return out


def _cache_dir(v: Any) -> str:
    """cache_dir: None / "" for none, else a path (str or os.PathLike)."""
    import os
    if v is None:
        return ""
    if not isinstance(v, (str, os.PathLike)) or isinstance(v, bool):
        raise bad_type("cache_dir", v, "a directory path")
    v = os.fspath(v)
    if isinstance(v, bytes) or "\0" in v:
        raise fail("'cache_dir' must be a text path without NUL characters", "cache_dir")
    if v and os.path.exists(v) and not os.path.isdir(v):
        raise fail(f"'cache_dir' {short(v)} exists and is not a directory", "cache_dir")
    return v


def check_speculative(speculative: Any = "auto", num_speculative_tokens: Any = None,
                      draft_model: Any = None, spec_adaptive: Any = True) -> Dict[str, Any]:
    """Speculative decoding's engine arguments. speculative: "auto" (the n-gram proposer, plus
    the draft model when one is given), "ngram", "draft" (needs draft_model) or "off" (a draft
    model given with "off" or "ngram" is accepted and not loaded); num_speculative_tokens:
    1..64 tokens drafted per step, None for the engine's default (0 to the engine)."""
    mode = string(speculative, "speculative").strip().lower()
    if mode not in SPECULATIVE_MODES:
        raise fail(f"'speculative' must be one of {', '.join(SPECULATIVE_MODES)}, got "
                   f"{short(speculative)}", "speculative")
    if draft_model is not None and not isinstance(draft_model, str):
        import os
        if not isinstance(draft_model, os.PathLike):
            raise bad_type("draft_model", draft_model, "a path or a model name")
        draft_model = os.fspath(draft_model)
    if draft_model is not None and not draft_model.strip():
        raise fail("'draft_model' is empty: give a GGUF path or a known model name, or leave it "
                   "out", "draft_model")
    if mode == "draft" and draft_model is None:
        raise fail("speculative='draft' needs a draft model: give draft_model= (a GGUF path or a "
                   "known model name with the same vocabulary, e.g. qwen2.5-coder-0.5b for "
                   "qwen2.5-coder-1.5b), or use speculative='ngram' or 'auto'", "draft_model")
    k = optional(integer(1, MAX_SPECULATIVE_TOKENS))(num_speculative_tokens,
                                                     "num_speculative_tokens")
    return {"speculative": mode, "num_speculative_tokens": k or 0, "draft_model": draft_model,
            "spec_adaptive": boolean(spec_adaptive, "spec_adaptive")}
