"""OpenAI's request bodies (chat, legacy completions) and llama-server's tokenize / detokenize as
pydantic models (wire.py: strict, an unknown field a 400 naming it, null = absent), and their
mapping to SamplingParams.

As llama-server: a field left out is not sent to SamplingParams, so llama.cpp's defaults apply
(temperature 0.8, ...), not OpenAI's (1.0); an absent `max_tokens` means "until the end or the
context is full", not SamplingParams' 128. A misspelt `temprature` is a 400, never a silent
default. Every field of OpenAI's chat schema is accepted: honoured, or with no meaning here
ignored (marked below; docs/SERVER.md).
"""
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import Field, WithJsonSchema, create_model, model_validator
from typing_extensions import Annotated

from .. import sampling_fields
from .. import validation as V
from .errors import invalid
from .wire import Refusal, Wire, bad_type, parse, rule

JSON = Dict[str, Any]
_INT, _NUM, _STR = {"type": "integer"}, {"type": "number"}, {"type": "string"}
_OBJ, _ANY = {"type": "object"}, {}
_STRINGS = {"anyOf": [_STR, {"type": "array", "items": _STR}]}


def checked(check, schema: JSON) -> Any:
    """A field checked by one of edgellm.validation's rules (their words in the 400), documented
    in /openapi.json as `schema`."""
    return Annotated[Any, rule(check), WithJsonSchema(schema)]


def _max_tokens(v, name):  # on the wire -1 is "no limit", as llama-server's n_predict
    return None if v == -1 and type(v) is int else sampling_fields.SAMPLING_RULES["max_tokens"](v, name)


def _response_format(v, name):
    v = sampling_fields.SAMPLING_RULES["response_format"](v, name)
    return None if v.get("type") == "text" else v


# --- sampling fields: the wire name -> (SamplingParams field, JSON schema) ------------------------
# edgellm.sampling_fields' OpenAI names (OpenAI's fields and llama-server's extras)
SAMPLING: Dict[str, tuple] = {w: (f, sampling_fields.BY_NAME[f].json_schema)
                              for w, f in sampling_fields.wire_names("openai").items()}
_CHECKS = {"max_tokens": _max_tokens, "response_format": _response_format}
Sampling = create_model("Sampling", __base__=Wire, **{
    name: (checked(_CHECKS.get(name) or sampling_fields.SAMPLING_RULES[target], schema), None)
    for name, (target, schema) in SAMPLING.items()})


class StreamOptions(Wire):
    include_usage: bool = False
    continuous_usage_stats: bool = False
    include_obfuscation: Optional[bool] = None  # no padding is added to stream chunks


class OpenAIBody(Sampling):
    """The fields chat and legacy completions share."""
    model: Optional[str] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    cache_prompt: Optional[bool] = None  # the prefix cache is always on (llama-server clients)
    return_progress: bool = False  # streams: prompt_progress chunks while the prompt is prefilled
    # OpenAI's, no effect here
    user: Optional[str] = None
    safety_identifier: Optional[str] = None
    prompt_cache_key: Optional[str] = None  # the prefix cache finds shared prefixes by itself
    prompt_cache_retention: Optional[str] = None
    store: Optional[bool] = None
    metadata: Any = None
    service_tier: Any = None
    # llama-server's names on the OpenAI routes
    n_predict: checked(_max_tokens, _INT) = None
    id_slot: checked(V.integer(-1), _INT) = None
    backend_sampling: Optional[bool] = None

    @model_validator(mode="after")
    def _agree(self):
        if self.stream_options is not None and not self.stream:
            raise invalid("'stream_options' is only allowed when 'stream' is true",
                          "stream_options", "invalid_value")
        if "n_predict" in self.model_fields_set:
            if "max_tokens" in self.model_fields_set and self.max_tokens != self.n_predict:
                raise invalid("'max_tokens' and 'n_predict' disagree; send one", "n_predict",
                              "invalid_value")
            self.max_tokens = self.n_predict  # None = no limit (-1)
            self.model_fields_set.add("max_tokens")
        return self

    def sampling(self) -> JSON:
        sent = self.model_fields_set
        kw = {target: getattr(self, name) for name, (target, _) in SAMPLING.items() if name in sent}
        kw.setdefault("max_tokens", None)
        if {"repeat_penalty", "repetition_penalty"} <= sent \
                and self.repeat_penalty != self.repetition_penalty:
            raise invalid("'repeat_penalty' and 'repetition_penalty' disagree; send one",
                          "repetition_penalty", "invalid_value")
        try:
            sampling_fields.validate_sampling(kw)  # the rules across fields (min_tokens <= max_tokens)
        except V.InvalidRequestError as e:
            raise invalid(str(e), getattr(e, "param", None), getattr(e, "code", "invalid_value"))
        if self.stream and self.return_progress:
            kw["return_progress"] = True  # llama-server: in stream mode only
        return kw


_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content",
                 "refusal", "function_call",
                 "annotations", "audio")  # answers' own fields sent back in the history: ignored


def _legacy(msg: Any) -> Any:
    """A message with its null keys dropped (null = absent, as at the top level), the legacy
    function API's shapes as tools': `role: function` a tool result, `function_call` a call."""
    if not isinstance(msg, dict):
        return msg
    msg = {k: x for k, x in msg.items() if x is not None}
    if msg.get("role") == "function":
        msg["role"] = "tool"
    call = msg.pop("function_call", None)
    if call is not None and "tool_calls" not in msg:
        msg["tool_calls"] = [{"id": "call_0", "type": "function", "function": call}]
    return msg


def _messages(v, where, images: bool = False):
    """Messages with text parts joined; with `images` (a model loaded with its projector) an
    image_url part stays, {"type": "image_url", "image_url": {"url": ...}} (edgellm.vision)."""
    if isinstance(v, list):
        v = [_legacy(m) for m in v]
    V.validate_messages(v, where)  # the library's rules (LLM.chat applies them too)
    out = []
    for i, msg in enumerate(v):
        at = f"{where}[{i}]"
        for key in msg:
            if key not in _MESSAGE_KEYS:
                raise Refusal(f"unknown field '{at}.{key}'", "unknown_field", f"{at}.{key}")
        content = msg.get("content")
        if isinstance(content, list):
            texts, parts = [], []
            for j, part in enumerate(content):
                kind, w = part.get("type"), f"{at}.content[{j}]"
                if kind == "image_url" and images:
                    img = part.get("image_url")
                    url = img.get("url") if isinstance(img, dict) else None
                    if not isinstance(url, str):
                        raise bad_type(url, "a string (a data: URI)", f"{w}.image_url.url")
                    parts.append({"type": "image_url", "image_url": {"url": url}})
                    continue
                if kind != "text":
                    raise Refusal(f"'{w}.type' is {V.short(kind)}: only text content parts are "
                                  "supported (this model takes no images or audio)", param=f"{w}.type")
                if not isinstance(part.get("text"), str):
                    raise bad_type(part.get("text"), "a string", f"{w}.text")
                texts.append(part["text"])
                parts.append({"type": "text", "text": part["text"]})
            content = parts if len(parts) > len(texts) else "\n".join(texts)
        out.append({**msg, "content": content})
    return out


def _tools(v, where):
    if not isinstance(v, list):
        raise bad_type(v, "an array", where)
    for i, tool in enumerate(v):
        at = f"{where}[{i}]"
        if not isinstance(tool, dict):
            raise bad_type(tool, "an object", at)
        if tool.get("type", "function") != "function":
            raise Refusal(f"'{at}.type' must be 'function'", param=f"{at}.type")
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise Refusal(f"'{at}.function' must be an object with a 'name' string",
                          param=f"{at}.function")
    return v or None


def _tool_choice(v, where):
    if isinstance(v, str) and v not in ("none", "auto", "required"):
        raise Refusal(f"'{where}' must be 'none', 'auto', 'required' or an object naming a "
                      f"function, got {v!r}")
    if not isinstance(v, (str, dict)):
        raise bad_type(v, "an object", where)
    return v


_MESSAGES = {"type": "array", "items": {"type": "object", "properties": {
    "role": {"enum": [*V.MESSAGE_ROLES, "function"]},
    "content": {"anyOf": [_STR, {"type": "array", "items": _OBJ}, {"type": "null"}]}},
    "required": ["role"]}, "minItems": 1}
_TOOLS = {"type": "array", "items": _OBJ}
_TOOL_CHOICE = {"anyOf": [{"enum": ["none", "auto", "required"]}, _OBJ]}
_PROMPT = {"anyOf": [_STR, {"type": "array"}]}
_TOP, _N = sampling_fields.SAMPLING_RULES["logprobs"], sampling_fields.SAMPLING_RULES["n"]


class ChatBody(OpenAIBody):
    """POST /v1/chat/completions."""
    messages: checked(_messages, _MESSAGES)
    max_completion_tokens: checked(_max_tokens, _INT) = None
    logprobs: bool = False
    top_logprobs: checked(_TOP, _INT) = None
    tools: checked(_tools, _TOOLS) = None
    tool_choice: checked(_tool_choice, _TOOL_CHOICE) = None
    parallel_tool_calls: Optional[bool] = None
    chat_template_kwargs: Optional[Dict[str, Any]] = None  # llama-server: extra template variables
    # llama-server / vLLM prompt shaping and diagnostics
    add_generation_prompt: Optional[bool] = None
    continue_final_message: Optional[bool] = None
    verbose: Optional[bool] = None  # answer with "__verbose": {"prompt": the rendered prompt}
    timings_per_token: Optional[bool] = None  # streamed chunks carry running "timings"
    # OpenAI's: the template's reasoning effort (as llama-server), text output only
    reasoning_effort: Optional[Literal["none", "minimal", "low", "medium", "high", "xhigh"]] = None
    modalities: Optional[List[Literal["text", "audio"]]] = None
    audio: Any = None  # output voice and format: only with "audio" in modalities
    # OpenAI's, no effect here
    verbosity: Optional[Literal["low", "medium", "high"]] = None
    prediction: Any = None
    web_search_options: Any = None
    # OpenAI's legacy function calling: the same as tools, answered as `function_call`
    functions: Optional[List[Dict[str, Any]]] = None
    function_call: Any = None

    @model_validator(mode="before")
    @classmethod
    def _functions(cls, v: Any) -> Any:
        if not isinstance(v, dict) or ("functions" not in v and "function_call" not in v):
            return v
        if v.get("tools") is not None or v.get("tool_choice") is not None:
            raise invalid("send 'tools' / 'tool_choice' or the legacy 'functions' / "
                          "'function_call', not both", "functions", "invalid_value")
        v = dict(v)
        fns, choice = v.get("functions"), v.get("function_call")
        if isinstance(fns, list):
            v["tools"] = [{"type": "function", "function": f} for f in fns]
        if choice is not None:
            v["tool_choice"] = ({"type": "function", "function": choice}
                                if isinstance(choice, dict) else choice)
        return v

    @model_validator(mode="after")
    def _rules(self):
        if "audio" in (self.modalities or ()):
            raise invalid("'modalities' may only be [\"text\"]: this server answers no audio",
                          "modalities", "unsupported")
        if "max_completion_tokens" in self.model_fields_set:
            if "max_tokens" in self.model_fields_set \
                    and self.max_tokens != self.max_completion_tokens:
                raise invalid("'max_tokens' and 'max_completion_tokens' disagree; send one",
                              "max_completion_tokens", "invalid_value")
            self.max_tokens = self.max_completion_tokens
            self.model_fields_set.add("max_tokens")
        if self.top_logprobs is not None and not self.logprobs:
            raise invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
        choice = self.tool_choice
        if choice is not None and choice not in ("none", "auto") and not self.tools:
            raise invalid(f"'tool_choice' {V.short(choice)} needs 'tools'", "tool_choice",
                          "invalid_value")
        if isinstance(choice, dict):
            fn = choice.get("function")
            if choice.get("type") != "function" or not isinstance(fn, dict) \
                    or not isinstance(fn.get("name"), str):
                raise invalid("'tool_choice' must be 'none', 'auto', 'required' or "
                              "{'type': 'function', 'function': {'name': ...}}", "tool_choice",
                              "invalid_value")
            names = [t["function"]["name"] for t in self.tools]
            if fn["name"] not in names:
                raise invalid(f"'tool_choice' names function {fn['name']!r}, which is not in "
                              f"'tools' ({', '.join(names)})", "tool_choice", "invalid_value")
        return self


def _prompts(v, where):
    """OpenAI's prompt shapes: "text", ["text", ...], [id, ...], [[id, ...], ...]."""
    def ids(xs) -> bool:
        return all(type(x) is int and x >= 0 for x in xs)

    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and v:
        if ids(v):
            return [list(v)]
        if all(isinstance(p, str) for p in v):
            return list(v)
        if all(isinstance(p, list) and p and ids(p) for p in v):
            return [list(p) for p in v]
    raise bad_type(v, "a string, an array of strings, an array of token ids or an array of "
                      "token id arrays", where)


class CompletionBody(OpenAIBody):
    """POST /v1/completions."""
    prompt: checked(_prompts, _PROMPT)
    logprobs: checked(_TOP, _INT) = None
    echo: bool = False
    best_of: checked(_N, _INT) = None
    suffix: Any = None

    @model_validator(mode="after")
    def _rules(self):
        if self.suffix:
            raise invalid("'suffix' (fill-in-the-middle) is not supported", "suffix",
                          "unsupported")
        if self.best_of is not None and self.best_of != (self.n or 1):
            raise invalid(f"'best_of' ({self.best_of}) must equal 'n' ({self.n or 1}): ranking "
                          "candidates is not supported", "best_of", "unsupported")
        if self.echo and not all(isinstance(p, str) for p in self.prompt):
            raise invalid("'echo' needs text prompts", "echo", "unsupported")
        return self


def _image_messages(v, where):
    return _messages(v, where, images=True)


class ImageChatBody(ChatBody):
    """POST /v1/chat/completions to a model that takes images: image_url parts kept."""
    messages: checked(_image_messages, _MESSAGES)


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
    legacy_functions: bool = False        # chat: calls answered as `function_call`
    # completions
    prompts: Optional[List[Union[str, List[int]]]] = None
    echo: bool = False
    extra: JSON = field(default_factory=dict)


def _request(m: OpenAIBody, sampling: JSON, **kw) -> GenerationRequest:
    return GenerationRequest(sampling=sampling, stream=m.stream, n=sampling.get("n", 1),
                             include_usage=bool(m.stream_options and m.stream_options.include_usage),
                             **kw)


def parse_chat(body: Any, images: bool = False) -> GenerationRequest:
    """images: the model takes images (image_url parts are kept, not refused)."""
    m = parse(ImageChatBody if images else ChatBody, body)
    sampling = m.sampling()
    if m.logprobs:
        sampling["logprobs"] = m.top_logprobs or 0
    template = m.chat_template_kwargs
    if m.reasoning_effort is not None:  # as llama-server: a template variable
        template = {"enable_thinking": m.reasoning_effort != "none",
                    "reasoning_effort": m.reasoning_effort, **(template or {})}
    return _request(m, sampling, messages=m.messages, tools=m.tools, tool_choice=m.tool_choice,
                    parallel_tool_calls=False if m.functions is not None else m.parallel_tool_calls,
                    chat_template_kwargs=template,
                    logprobs=m.logprobs, legacy_functions=m.functions is not None,
                    extra={k: getattr(m, k) for k in ("add_generation_prompt",
                                                      "continue_final_message", "verbose",
                                                      "timings_per_token")
                           if getattr(m, k) is not None})


def parse_completion(body: Any) -> GenerationRequest:
    m = parse(CompletionBody, body)
    sampling = m.sampling()
    if m.logprobs is not None:
        sampling["logprobs"] = m.logprobs
    return _request(m, sampling, prompts=m.prompt, echo=m.echo)


class TokenizeBody(Wire):
    """POST /tokenize (llama-server's defaults: no BOS unless asked, special tokens written as
    text are parsed)."""
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False
    model: Optional[str] = None


_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}


def _ids(v, where):
    if not isinstance(v, list) or not all(type(t) is int and t >= 0 for t in v):
        raise bad_type(v, "an array of token ids (non-negative integers)", where)
    return v


class DetokenizeBody(Wire):
    """POST /detokenize."""
    tokens: checked(_ids, _IDS) = Field(default_factory=list)
    model: Optional[str] = None
