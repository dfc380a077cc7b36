"""Ollama's native API on the wire (its docs/api.md and docs/openapi.yaml): the request bodies,
checked field by field with wire.py's conventions (strict types, an unknown field a 400 naming
it, null read as absent), and the bodies it answers with. What they mean for the engine is
ollama_api.py's.

`options` holds Ollama's sampling names -- edgellm.sampling_fields' `ollama` column, one
declaration per field -- plus the load settings Ollama puts there too (num_ctx, num_thread,
...). Ollama's own defaults differ from the OpenAI routes' in one place: `stream` is true unless
the body says false.
"""
import time
from datetime import datetime, timezone
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import Field, ValidationError, create_model, field_validator
from starlette.responses import JSONResponse
from typing_extensions import Annotated

from .. import sampling_fields
from .. import validation as V
from .errors import APIError, api_error
from .protocol import checked
from .wire import Int, Refusal, Wire, bad_type, shape

JSON = Dict[str, Any]
_INT = {"type": "integer"}

# --- options ---------------------------------------------------------------------------------------

# Ollama's `options` name -> SamplingParams field (edgellm.sampling_fields' Ollama column)
SAMPLING = sampling_fields.wire_names("ollama")


def _num_predict(v, name):  # Ollama: -1 no limit, -2 until the context is full
    if type(v) is int and v in (-1, -2):
        return None
    return sampling_fields.SAMPLING_RULES["max_tokens"](v, name)


def _seed(v, name):  # Ollama: -1 random
    return None if v == -1 and type(v) is int else sampling_fields.SAMPLING_RULES["seed"](v, name)


_CHECKS = {"max_tokens": _num_predict, "seed": _seed}

# Ollama's load settings in `options`: the context and thread count are applied
# (ollama_api.py), the rest are the server's to choose and are accepted as hints.
LOAD = {"num_ctx": (checked(V.integer(1, V.MAX_N_CTX), _INT), None),
        "num_thread": (checked(V.integer(1, 1024), _INT), None),
        "num_batch": (Optional[Int], None), "num_gpu": (Optional[Int], None),
        "main_gpu": (Optional[Int], None), "use_mmap": (Optional[bool], None),
        "use_mlock": (Optional[bool], None), "numa": (Optional[bool], None),
        "low_vram": (Optional[bool], None), "vocab_only": (Optional[bool], None),
        "f16_kv": (Optional[bool], None), "logits_all": (Optional[bool], None),
        "embedding_only": (Optional[bool], None), "penalize_newline": (Optional[bool], None)}

# Ollama samplers edgellm lacks: accepted at their off value only (the switch), their settings
# accepted and unused while it is off.
_OFF = {"mirostat": 0, "tfs_z": 1.0}


def _off(name: str):
    def check(v, where):
        if v is not None and v != _OFF[name]:
            raise Refusal(f"'{{where}}' {V.short(v)}: the {name} sampler is not supported "
                          f"(only {_OFF[name]}, off)", "unsupported")
        return v
    return check


Options = create_model("OllamaOptions", __base__=Wire, **{
    wire: (checked(_CHECKS.get(field) or sampling_fields.SAMPLING_RULES[field],
                   sampling_fields.BY_NAME[field].json_schema), None)
    for wire, field in SAMPLING.items()}, **LOAD, **{
    name: (checked(_off(name), {"type": "number"}), None) for name in _OFF},
    mirostat_tau=(Optional[float], None), mirostat_eta=(Optional[float], None))


def parse_options(values: Any, where: str = "options") -> Wire:
    """A created model's parameters (or a Modelfile's PARAMETER lines) as Options: a 400 names
    a bad one."""
    if not isinstance(values, dict):
        raise bad_type(values, "an object", where)
    try:
        return Options.model_validate(values)
    except ValidationError as e:
        err = api_error(e)
        err.message, err.param = f"'{where}': {err.message}", f"{where}.{err.param}"
        raise err from None


def sampling(options: Optional[Wire]) -> JSON:
    """SamplingParams keyword arguments of the options the request set."""
    if options is None:
        return {}
    return {field: getattr(options, wire) for wire, field in SAMPLING.items()
            if wire in options.model_fields_set}


# --- the requests ----------------------------------------------------------------------------------

KeepAlive = Union[float, str]  # seconds, or a duration such as "5m" (config.parse_keep_alive)
Think = Union[bool, Literal["high", "medium", "low", "max"]]


def _format(v, where):
    """"json", a JSON schema object, or "" (none)."""
    if isinstance(v, str):
        if v not in ("", "json"):
            raise Refusal(f"'{where}' must be \"json\" or a JSON schema object, got {V.short(v)}")
        return v or None
    if not isinstance(v, dict):
        raise bad_type(v, "\"json\" or a JSON schema object", where)
    return V.json_schema(v, where)


Format = checked(_format, {"anyOf": [{"type": "string"}, {"type": "object"}]})
Images = Optional[List[str]]


class OllamaToolFunctionCall(Wire):
    name: str
    arguments: Dict[str, Any] = {}
    index: Optional[Int] = None
    description: Optional[str] = None


class OllamaToolCall(Wire):
    function: OllamaToolFunctionCall
    id: Optional[str] = None
    type: Optional[Literal["function"]] = None


class OllamaMessage(Wire):
    role: str
    content: str = ""
    images: Images = None
    thinking: Optional[str] = None
    tool_calls: Optional[List[OllamaToolCall]] = None
    tool_name: Optional[str] = None
    tool_call_id: Optional[str] = None

    @field_validator("role")
    @classmethod
    def _known(cls, v):
        if v not in ("system", "user", "assistant", "tool"):
            raise Refusal(f"'{{where}}' must be one of system, user, assistant, tool, got "
                          f"{V.short(v)}")
        return v


class OllamaToolSpec(Wire):
    name: Annotated[str, Field(min_length=1)]
    description: Optional[str] = None
    parameters: Dict[str, Any] = {}


class OllamaTool(Wire):
    type: Literal["function"] = "function"
    function: OllamaToolSpec


class OllamaGeneration(Wire):
    """What /api/generate and /api/chat share."""
    model: Annotated[str, Field(min_length=1)]
    format: Format = None
    options: Optional[Options] = None
    stream: bool = True
    think: Optional[Think] = None
    keep_alive: Optional[KeepAlive] = None  # the many-model router takes it (model_router.py)
    logprobs: bool = False
    top_logprobs: Annotated[Optional[Int], Field(ge=0, le=V.MAX_TOP_LOGPROBS)] = None
    truncate: Optional[bool] = None
    shift: Optional[bool] = None


class OllamaGenerateBody(OllamaGeneration):
    """POST /api/generate."""
    prompt: str = ""
    suffix: Optional[str] = None
    system: Optional[str] = None
    template: Optional[str] = None
    raw: bool = False
    images: Images = None
    context: Optional[List[Int]] = None


class OllamaChatBody(OllamaGeneration):
    """POST /api/chat."""
    messages: List[OllamaMessage] = []
    tools: Optional[List[OllamaTool]] = None


class OllamaEmbedBody(Wire):
    """POST /api/embed."""
    model: Annotated[str, Field(min_length=1)]
    input: Union[str, List[str]]
    truncate: bool = True
    dimensions: Annotated[Optional[Int], Field(ge=1)] = None
    keep_alive: Optional[KeepAlive] = None
    options: Optional[Options] = None


class OllamaEmbeddingsBody(Wire):
    """POST /api/embeddings (the legacy one: one prompt, one unnormalised vector)."""
    model: Annotated[str, Field(min_length=1)]
    prompt: str = ""
    keep_alive: Optional[KeepAlive] = None
    options: Optional[Options] = None


class OllamaNamed(Wire):
    """A body naming one model: `model`, or `name` as older clients send it."""
    model: Optional[str] = None
    name: Optional[str] = None


class OllamaShowBody(OllamaNamed):
    """POST /api/show."""
    verbose: bool = False
    system: Optional[str] = None
    template: Optional[str] = None
    options: Optional[Options] = None


class OllamaDeleteBody(OllamaNamed):
    """DELETE /api/delete."""


class OllamaPullBody(OllamaNamed):
    """POST /api/pull."""
    insecure: bool = False
    stream: bool = True
    username: Optional[str] = None
    password: Optional[str] = None


class OllamaCopyBody(Wire):
    """POST /api/copy."""
    source: Annotated[str, Field(min_length=1)]
    destination: Annotated[str, Field(min_length=1)]


class OllamaCreateBody(OllamaNamed):
    """POST /api/create: `from` (a model of this server, or a GGUF file on the server's disk)
    with a system prompt, template and parameters -- or, as older clients send it, a
    `modelfile` text (FROM, PARAMETER, SYSTEM, TEMPLATE)."""
    from_: Optional[str] = Field(None, alias="from")
    modelfile: Optional[str] = None
    path: Optional[str] = None
    files: Optional[Dict[str, str]] = None
    adapters: Optional[Dict[str, str]] = None
    template: Optional[str] = None
    system: Optional[str] = None
    parameters: Optional[Dict[str, Any]] = None
    license: Optional[Union[str, List[str]]] = None
    messages: Optional[List[OllamaMessage]] = None
    quantize: Optional[str] = None
    stream: bool = True


# --- the answers -----------------------------------------------------------------------------------

Details = shape("Details", parent_model=(str, ""), format=(str, "gguf"), family=(str, ""),
                families=(Optional[List[str]], None), parameter_size=(str, ""),
                quantization_level=(str, ""))
ModelCard = shape("ModelCard", name=str, model=str, modified_at=str, size=int, digest=str,
                  details=Details)
Running = shape("Running", name=str, model=str, size=int, digest=str, details=Details,
                expires_at=str, size_vram=(int, 0), context_length=(Optional[int], None))
Show = shape("Show", license=(Optional[str], None), modelfile=str, parameters=str,
             template=str, system=(Optional[str], None), details=Details, model_info=JSON,
             capabilities=List[str], modified_at=str)
Progress = shape("Progress", status=str, digest=(Optional[str], None),
                 total=(Optional[int], None), completed=(Optional[int], None))
OutFunction = shape("OutFunction", name=str, arguments=JSON, index=(Optional[int], None))
OutToolCall = shape("OutToolCall", function=OutFunction)
TokenLogprob = shape("TokenLogprob", token=str, logprob=float, bytes=List[int])
Logprob = shape("Logprob", TokenLogprob, top_logprobs=(List[TokenLogprob], []))
OutMessage = shape("OutMessage", role=(str, "assistant"), content=(str, ""),
                   thinking=(Optional[str], None), tool_calls=(Optional[List[OutToolCall]], None))
Stats = shape("Stats", done_reason=str, total_duration=int, load_duration=int,
              prompt_eval_count=int, prompt_eval_duration=int, eval_count=int, eval_duration=int)
ErrorBody = shape("ErrorBody", error=str)


def dump(m) -> JSON:
    """An answer as JSON: the fields left unset (None) are left out, as Ollama's omitempty."""
    return m.model_dump(exclude_none=True)


# --- the conventions of every answer ----------------------------------------------------------------

NDJSON = "application/x-ndjson"  # what Ollama streams: one JSON object a line


def is_ollama_path(path: str) -> bool:
    return path.startswith("/api/")


def error_body(e: APIError) -> JSON:
    """Ollama's error: {"error": "..."}, with the status the other routes give."""
    return ErrorBody(error=e.message).model_dump()


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(error_body(e), status_code=e.status, headers=e.headers)


def now_iso(t: Optional[float] = None) -> str:
    when = datetime.fromtimestamp(time.time() if t is None else t, timezone.utc)
    return when.isoformat(timespec="microseconds").replace("+00:00", "Z")


def tagged(name: str) -> str:
    """Ollama's spelling of a name: with its tag (`smollm2` -> `smollm2:latest`)."""
    return name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"


def name_key(name: str) -> str:
    """The key of a name: `Smollm2` and `smollm2:latest` are one."""
    return tagged(name.strip().lower())
