"""OpenAI request bodies: check every field's type and range, and map them to SamplingParams.

Parameters follow llama-server: a field the client leaves out is not sent to SamplingParams, so
its defaults (llama.cpp's: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, ...) apply, not
OpenAI's (temperature 1.0). One exception: an absent `max_tokens` means "until end of generation
or the context is full", as in both llama-server and OpenAI, not SamplingParams' 128.

Unknown fields are rejected (400) rather than ignored, so a misspelt `temprature` never silently
falls back to a default. Accepted-but-inert OpenAI fields (`user`, `store`, `metadata`, ...) are
listed as such.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

from .. import sampling_fields
from .. import validation as V
from ..validation import InvalidRequestError
from .errors import APIError, invalid

JSON = Dict[str, Any]

MAX_N = V.MAX_N                    # choices per request
MAX_STOP = V.MAX_STOP              # stop strings per request
MAX_TOP_LOGPROBS = V.MAX_TOP_LOGPROBS


# --- field checks -------------------------------------------------------------------------
# Each takes (value, param name) and returns the value to use or raises a 400 naming the field.
# The rules are edgellm.validation's -- the same ones SamplingParams applies in the library --
# with their InvalidRequestError turned into the server's APIError.

_type_name = V.type_name
_short = V.short


def _api_error(e: InvalidRequestError, name: Optional[str]) -> APIError:
    return invalid(str(e), getattr(e, "param", None) or name, getattr(e, "code", "invalid_value"))


def _served(check: Callable) -> Callable:
    def run(v, name):
        try:
            return check(v, name)
        except InvalidRequestError as e:
            raise _api_error(e, name) from None
    return run


def _bad_type(name: str, v: Any, want: str) -> APIError:
    return _api_error(V.bad_type(name, v, want), name)


def integer(lo: Optional[int] = None, hi: Optional[int] = None) -> Callable:
    return _served(V.integer(lo, hi))


def number(lo: Optional[float] = None, hi: Optional[float] = None, lo_open: bool = False) -> Callable:
    return _served(V.number(lo, hi, lo_open))


boolean = _served(V.boolean)
string = _served(V.string)
json_schema = _served(V.json_schema)
logit_bias = _served(V.logit_bias)
bias_value = _served(V.bias_value)      # one logit bias: finite, or -inf (a ban)
stop_strings = _served(V.stop_strings)


def obj(v, name):
    if not isinstance(v, dict):
        raise _bad_type(name, v, "an object")
    return v


def anything(v, name):
    return v


def sampling_rule(target: str) -> Callable:
    """The check of SamplingParams field `target`, answering with a 400."""
    return _served(sampling_fields.SAMPLING_RULES[target])


def max_tokens(v, name):
    # on the wire -1 is "no limit", as llama-server's n_predict; SamplingParams' is None
    if isinstance(v, int) and not isinstance(v, bool) and v == -1:
        return None
    return sampling_rule("max_tokens")(v, name)


def response_format(v, name):
    v = sampling_rule("response_format")(v, name)
    return None if v.get("type") == "text" else v


def stream_options(v, name):
    obj(v, name)
    for key, val in v.items():
        if key in ("include_usage", "continuous_usage_stats"):
            boolean(val, f"{name}.{key}")
        else:
            raise invalid(f"unknown field '{name}.{key}'", f"{name}.{key}", "unknown_field")
    return v


def tools(v, name):
    if not isinstance(v, list):
        raise _bad_type(name, v, "an array")
    for i, tool in enumerate(v):
        where = f"{name}[{i}]"
        obj(tool, where)
        if tool.get("type", "function") != "function":
            raise invalid(f"'{where}.type' must be 'function'", f"{where}.type", "invalid_value")
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise invalid(f"'{where}.function' must be an object with a 'name' string",
                          f"{where}.function", "invalid_value")
    return v or None


def tool_choice(v, name):
    if isinstance(v, str):
        if v not in ("none", "auto", "required"):
            raise invalid(f"'{name}' must be 'none', 'auto', 'required' or an object naming a "
                          f"function, got {v!r}", name, "invalid_value")
        return v
    return obj(v, name)


# --- the fields of each endpoint ------------------------------------------------------------

# name in the request -> (check, SamplingParams field): edgellm.sampling_fields' OpenAI names
# (OpenAI's fields and llama-server's extras), with the wire's own forms of two of them.
_SAMPLING: Dict[str, tuple] = {
    **{w: (sampling_rule(f), f) for w, f in sampling_fields.wire_names("openai").items()},
    "max_tokens": (max_tokens, "max_tokens"),                 # -1: no limit
    "response_format": (response_format, "response_format"),  # "text": none
}

# Accepted and used by the server, not by the sampler.
_COMMON: Dict[str, Callable] = {
    "model": string,
    "stream": boolean,
    "stream_options": stream_options,
    "cache_prompt": boolean,   # the engine's prefix cache is always on; accepted for llama-server clients
}

# OpenAI fields with no effect here; accepted so stock clients never get a 400 for them.
_INERT: Dict[str, Callable] = {
    "user": string,
    "store": boolean,
    "metadata": anything,
    "service_tier": anything,
}

_CHAT_ONLY: Dict[str, Callable] = {
    "messages": anything,  # checked by _messages
    "max_completion_tokens": max_tokens,
    "logprobs": boolean,
    "top_logprobs": sampling_rule("logprobs"),
    "tools": tools,
    "tool_choice": tool_choice,
    "parallel_tool_calls": boolean,
    "chat_template_kwargs": obj,   # llama-server: extra template variables (enable_thinking, ...)
    # llama-server / vLLM prompt shaping and diagnostics
    "add_generation_prompt": boolean,
    "continue_final_message": boolean,
    "verbose": boolean,            # answer with "__verbose": {"prompt": the rendered prompt}
    "timings_per_token": boolean,  # streamed chunks carry running "timings"
    "return_progress": boolean,    # streams: "prompt_progress" chunks while the prompt is prefilled
}

_COMPLETION_ONLY: Dict[str, Callable] = {
    "prompt": anything,  # checked by _prompts
    "logprobs": sampling_rule("logprobs"),
    "echo": boolean,
    "best_of": sampling_rule("n"),
    "suffix": anything,
    "return_progress": boolean,    # streams: "prompt_progress" chunks while the prompt is prefilled
}


@dataclass
class GenerationRequest:
    """A checked request: what to run, how to sample, how to answer."""
    sampling: JSON                        # SamplingParams keyword arguments
    stream: bool = False
    include_usage: bool = False
    n: int = 1
    # chat
    messages: Optional[List[JSON]] = None
    tools: Optional[list] = None
    tool_choice: Any = None               # "none" | "auto" | "required" | {"type": "function", ...}
    parallel_tool_calls: Optional[bool] = None
    chat_template_kwargs: Optional[JSON] = None
    logprobs: bool = False                # chat: return logprobs.content
    # completions
    prompts: Optional[List[Union[str, List[int]]]] = None
    echo: bool = False
    extra: JSON = field(default_factory=dict)


def check_fields(body: JSON, allowed: Dict[str, Callable], name_type: bool = True) -> JSON:
    """A request body's fields, each checked by allowed[name] (unknown fields are a 400, null
    ones absent). name_type: the 400 for a body that is no object names what it is."""
    if not isinstance(body, dict):
        got = f", got {_type_name(body)}" if name_type else ""
        raise invalid(f"the request body must be a JSON object{got}", None, "invalid_type")
    out = {}
    for key, value in body.items():
        check = allowed.get(key)
        if check is None:
            raise invalid(f"unknown field '{key}'", key, "unknown_field")
        if value is None:
            continue  # null = absent, as OpenAI's SDKs send it
        out[key] = check(value, key)
    return out


def _sampling(fields: JSON) -> JSON:
    kw: JSON = {}
    for key, (_, target) in _SAMPLING.items():
        if key in fields:
            kw[target] = fields[key]
    if "max_tokens" not in fields:
        kw["max_tokens"] = None
    if "repeat_penalty" in fields and "repetition_penalty" in fields \
            and fields["repeat_penalty"] != fields["repetition_penalty"]:
        raise invalid("'repeat_penalty' and 'repetition_penalty' disagree; send one",
                      "repetition_penalty", "invalid_value")
    try:
        sampling_fields.validate_sampling(kw)  # the rules across fields (min_tokens <= max_tokens)
    except InvalidRequestError as e:
        raise _api_error(e, None) from None
    return kw


def _stream_flags(fields: JSON):
    stream = fields.get("stream", False)
    opts = fields.get("stream_options")
    if opts is not None and not stream:
        raise invalid("'stream_options' is only allowed when 'stream' is true",
                      "stream_options", "invalid_value")
    return stream, bool(opts and opts.get("include_usage"))


_ROLES = V.MESSAGE_ROLES


def _messages(v: Any) -> List[JSON]:
    if not isinstance(v, list):
        raise _bad_type("messages", v, "an array of message objects")
    _served(V.validate_messages)(v, "messages")  # the library's rules (LLM.chat applies them too)
    out = []
    for i, msg in enumerate(v):
        where = f"messages[{i}]"
        obj(msg, where)
        content = msg.get("content")
        if isinstance(content, list):
            content = _text_parts(content, f"{where}.content")
        for key in msg:
            if key not in ("role", "content", "name", "tool_calls", "tool_call_id",
                           "reasoning_content", "refusal"):
                raise invalid(f"unknown field '{where}.{key}'", f"{where}.{key}", "unknown_field")
        clean = dict(msg)
        clean["content"] = content
        out.append(clean)
    return out


def _text_parts(parts: list, where: str) -> str:
    texts = []
    for j, part in enumerate(parts):
        w = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise _bad_type(w, part, "a content part object")
        kind = part.get("type")
        if kind != "text":
            raise invalid(f"'{w}.type' is {_short(kind)}: only text content parts are supported "
                          f"(this model takes no images or audio)", f"{w}.type", "invalid_value")
        if not isinstance(part.get("text"), str):
            raise _bad_type(f"{w}.text", part.get("text"), "a string")
        texts.append(part["text"])
    return "\n".join(texts)


def _prompts(v: Any) -> List[Union[str, List[int]]]:
    """OpenAI's prompt shapes: "text", ["text", ...], [id, ...], [[id, ...], ...]."""
    bad = _bad_type("prompt", v, "a string, an array of strings, an array of token ids or an "
                                 "array of token id arrays")
    if isinstance(v, str):
        return [v]
    if not isinstance(v, list) or not v:
        raise bad

    def ids(xs) -> bool:
        return all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in xs)

    if ids(v):
        return [list(v)]
    if all(isinstance(p, str) for p in v):
        return list(v)
    if all(isinstance(p, list) and p and ids(p) for p in v):
        return [list(p) for p in v]
    raise bad


# --- llama-server's own fields on the OpenAI routes (llamacpp_api.py owns its native routes) ---
# llama-server takes `n_predict` as max_tokens there; `id_slot` and `backend_sampling` mean
# nothing here (no slot pinning, CPU sampling) and are accepted for llama.cpp clients.
_LLAMACPP: Dict[str, Callable] = {
    "n_predict": max_tokens,
    "id_slot": integer(-1),
    "backend_sampling": boolean,
}


def _llamacpp_fields(fields: JSON) -> JSON:
    fields.pop("id_slot", None)
    fields.pop("backend_sampling", None)
    if "n_predict" in fields:
        n = fields.pop("n_predict")
        if "max_tokens" in fields and fields["max_tokens"] != n:
            raise invalid("'max_tokens' and 'n_predict' disagree; send one", "n_predict",
                          "invalid_value")
        fields["max_tokens"] = n  # None = no limit (-1)
    return fields


def parse_chat(body: Any) -> GenerationRequest:
    fields = _llamacpp_fields(check_fields(body, {**{k: c for k, (c, _) in _SAMPLING.items()},
                                                   **_COMMON, **_INERT, **_CHAT_ONLY,
                                                   **_LLAMACPP}))
    if "messages" not in fields:
        raise invalid("'messages' is required", "messages", "missing_field")
    messages = _messages(fields["messages"])
    if "max_completion_tokens" in fields:
        if "max_tokens" in fields and fields["max_tokens"] != fields["max_completion_tokens"]:
            raise invalid("'max_tokens' and 'max_completion_tokens' disagree; send one",
                          "max_completion_tokens", "invalid_value")
        fields["max_tokens"] = fields["max_completion_tokens"]
    sampling = _sampling(fields)
    want_logprobs = fields.get("logprobs", False)
    if "top_logprobs" in fields and not want_logprobs:
        raise invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
    if want_logprobs:
        sampling["logprobs"] = fields.get("top_logprobs", 0)
    stream, include_usage = _stream_flags(fields)
    if stream and fields.get("return_progress"):
        sampling["return_progress"] = True  # llama-server: in stream mode only
    tool_list = fields.get("tools")
    choice = fields.get("tool_choice")
    if choice is not None and choice != "none" and choice != "auto" and not tool_list:
        raise invalid(f"'tool_choice' {_short(choice)} needs 'tools'", "tool_choice", "invalid_value")
    if isinstance(choice, dict):
        fn = choice.get("function")
        if choice.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str):
            raise invalid("'tool_choice' must be 'none', 'auto', 'required' or "
                          "{'type': 'function', 'function': {'name': ...}}", "tool_choice",
                          "invalid_value")
        names = [t["function"]["name"] for t in tool_list]
        if fn["name"] not in names:
            raise invalid(f"'tool_choice' names function {fn['name']!r}, which is not in 'tools' "
                          f"({', '.join(names)})", "tool_choice", "invalid_value")
    return GenerationRequest(sampling=sampling, stream=stream, include_usage=include_usage,
                             n=sampling.get("n", 1), messages=messages, tools=tool_list,
                             tool_choice=choice,
                             parallel_tool_calls=fields.get("parallel_tool_calls"),
                             chat_template_kwargs=fields.get("chat_template_kwargs"),
                             logprobs=want_logprobs,
                             extra={k: fields[k] for k in ("add_generation_prompt",
                                                           "continue_final_message", "verbose",
                                                           "timings_per_token") if k in fields})


def parse_completion(body: Any) -> GenerationRequest:
    fields = _llamacpp_fields(check_fields(body, {**{k: c for k, (c, _) in _SAMPLING.items()},
                                                   **_COMMON, **_INERT, **_COMPLETION_ONLY,
                                                   **_LLAMACPP}))
    if "prompt" not in fields:
        raise invalid("'prompt' is required", "prompt", "missing_field")
    prompts = _prompts(fields["prompt"])
    if fields.get("suffix"):
        raise invalid("'suffix' (fill-in-the-middle) is not supported", "suffix", "unsupported")
    sampling = _sampling(fields)
    n = sampling.get("n", 1)
    if "best_of" in fields and fields["best_of"] != n:
        raise invalid(f"'best_of' ({fields['best_of']}) must equal 'n' ({n}): ranking candidates "
                      "is not supported", "best_of", "unsupported")
    if "logprobs" in fields:
        sampling["logprobs"] = fields["logprobs"]
    stream, include_usage = _stream_flags(fields)
    if stream and fields.get("return_progress"):
        sampling["return_progress"] = True  # llama-server: in stream mode only
    echo = fields.get("echo", False)
    if echo and not all(isinstance(p, str) for p in prompts):
        raise invalid("'echo' needs text prompts", "echo", "unsupported")
    return GenerationRequest(sampling=sampling, stream=stream, include_usage=include_usage,
                             n=n, prompts=prompts, echo=echo)


def parse_tokenize(body: Any) -> JSON:
    fields = check_fields(body, {"content": string, "add_special": boolean,
                                  "parse_special": boolean, "with_pieces": boolean,
                                  "model": string})
    if "content" not in fields:
        raise invalid("'content' is required", "content", "missing_field")
    # llama-server's defaults: no BOS unless asked, special tokens written as text are parsed
    fields.setdefault("add_special", False)
    fields.setdefault("parse_special", True)
    fields.setdefault("with_pieces", False)
    return fields


def parse_detokenize(body: Any) -> List[int]:
    fields = check_fields(body, {"tokens": anything, "model": string})
    toks = fields.get("tokens", [])
    if not isinstance(toks, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in toks):
        raise _bad_type("tokens", toks, "an array of token ids (non-negative integers)")
    return toks
