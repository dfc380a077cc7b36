"""Request and response bodies as pydantic models: the rules every API's wire shapes share.

A request model (`Wire`) is strict (no "1" for 1, no 1 for true; JSON's 3.0 is no integer),
forbids unknown fields (a misspelt `temprature` is a 400 naming it, never a silent default) and
reads null as absent, as the SDKs send it. `parse(Model, body)` answers a 400 APIError naming
the wrong field by its path (`messages[0].content[1].type`). A model's own rule raises
`errors.Refusal`, whose message and param may say `{where}`: the checked value's path.
Response bodies and stream events are plain pydantic models (`model_dump()` is the JSON); a
`Sparse` one leaves out the optional fields it was not given (OpenAI's delta keys).
"""
import json
import re
import uuid
from typing import Any, Callable, Dict, List, Literal, Optional, Type, TypeVar, Union

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, TypeAdapter, ValidationError,
                      ValidationInfo, create_model, model_serializer, model_validator)
from typing_extensions import Annotated

from .. import validation as V
from ..chat_output import ChatDelta
from ..validation import InvalidRequestError
from .errors import Refusal, api_error, invalid

M = TypeVar("M", bound=BaseModel)
JSON = Dict[str, Any]


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False,
                              populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, v: Any) -> Any:
        if isinstance(v, dict) and None in v.values():
            return {k: x for k, x in v.items() if x is not None}
        return v


class Sparse(BaseModel):
    """A response shape whose fields left unset and None stay out of its JSON; a None it was
    given is sent as null."""
    model_config = ConfigDict(populate_by_name=True)

    @model_serializer(mode="wrap")
    def _sparse(self, nxt, info) -> JSON:
        out, given = nxt(self), self.model_fields_set
        for name, f in type(self).model_fields.items():
            if name not in given and getattr(self, name) is None:
                out.pop(f.alias if info.by_alias and f.alias else name, None)
        return out


def _integral(v: Any) -> Any:
    return int(v) if isinstance(v, float) and v.is_integer() else v


# An integer; JSON has one number type, so 3.0 is 3 (2.9 is an error, never truncated).
Int = Annotated[int, BeforeValidator(_integral)]


def shape(name: str, base: type = BaseModel, /, **fields: Any) -> type:
    """A model in one line: each field a type (required) or (type, default)."""
    return create_model(name, __base__=base, **{
        k: v if isinstance(v, tuple) else (v, ...) for k, v in fields.items()})


def of_type(kind: str, base: type = BaseModel, /, **fields: Any) -> type:
    """A model whose `type` field is `kind` (a content block, a stream event, ...)."""
    name = "".join(w[:1].upper() + w[1:] for w in re.split(r"[._]", kind))
    return shape(name, base, type=(Literal[kind], kind), **fields)


def refuse(test: Callable[[Any], Any], message: str, code: str = "unsupported",
           param: str = "{where}", when: type = AfterValidator) -> Any:
    """A field validator refusing the values `test` picks (`{v}` in `message`: the value)."""
    def check(v: Any) -> Any:
        if test(v):
            raise Refusal(message.replace("{v}", V.short(v)), code, param)
        return v
    return when(check)


def rule(check: Callable[[Any, str], Any]) -> BeforeValidator:
    """One of edgellm.validation's checks as a field validator (the same rule, the same words)."""
    def run(v: Any) -> Any:
        try:
            return check(v, "{where}")
        except InvalidRequestError as e:
            raise Refusal(str(e), getattr(e, "code", "invalid_value"),
                          getattr(e, "param", None) or "{where}") from None
    return BeforeValidator(run)


def bad_type(v: Any, want: str, where: str = "{where}") -> Refusal:
    return Refusal(str(V.bad_type(where, v, want)), "invalid_type", where)


def tagged(kinds: Dict[Any, type], unknown: Optional[Callable[[Any], Refusal]] = None,
           tag: Callable[[JSON], Any] = lambda d: d.get("type")) -> BeforeValidator:
    """An object whose model its `type` (or `tag(obj)`) names; any other tag is `unknown(tag)`
    (default: a 400 listing the known ones). Used instead of pydantic's unions, whose error
    paths name the union member."""
    def pick(v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, BaseModel):
            return v
        if not isinstance(v, dict):
            raise bad_type(v, "an object")
        kind = tag(v)
        model = kinds.get(kind) if isinstance(kind, (str, type(None))) else None
        if model is None:
            names = ", ".join(repr(k) for k in kinds if k is not None)
            raise (unknown or (lambda k: Refusal(f"'{{where}}.type' must be one of {names}, got "
                                                 f"{V.short(k)}", param="{where}.type")))(kind)
        return model.model_validate(v, context=info.context)
    return BeforeValidator(pick)


def one_of(kinds: Dict[Any, type], unknown: Optional[Callable[[Any], Refusal]] = None,
           tag: Callable[[JSON], Any] = lambda d: d.get("type")) -> Any:
    """The union of `kinds`' models, picked by `tagged`."""
    return Annotated[Union[tuple(dict.fromkeys(kinds.values()))], tagged(kinds, unknown, tag)]


def text_or(item: Any, want: str) -> Any:
    """A string, or an array of `item`s (content parts, blocks)."""
    items = TypeAdapter(List[item])

    def check(v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, str):
            return v
        if not isinstance(v, list):
            raise bad_type(v, f"a string or an array of {want}")
        return items.validate_python(v, context=info.context)
    return Annotated[Union[str, List[item]], BeforeValidator(check)]


def parse(model: Type[M], body: Any, context: Optional[JSON] = None) -> M:
    """`body` as `model`, or the 400 naming what is wrong. `context` reaches every nested
    model's validators (ValidationInfo.context): {"images": True} where the model takes images
    (server/media.py)."""
    if not isinstance(body, dict):
        raise invalid(f"the request body must be a JSON object, got {V.type_name(body)}", None,
                      "invalid_type")
    try:
        return model.model_validate(body, context=context)
    except ValidationError as e:
        raise api_error(e) from None


def new_id(prefix: str, n: int = 32) -> str:
    """An answer's (or item's) id: `prefix` and `n` random hex digits."""
    return prefix + uuid.uuid4().hex[:n]


def chunk_delta(chunk) -> ChatDelta:
    """An engine chunk's parsed delta (its raw text as content where the chat API gives none),
    which every API re-shapes."""
    delta = getattr(chunk, "delta", None)
    return ChatDelta(content=chunk.text or "") if delta is None else delta


def named_event(ev: JSON) -> bytes:
    """A server-sent event named by its `type` (`event:` line), as Anthropic and the Responses
    API stream them."""
    data = json.dumps(ev, ensure_ascii=False, separators=(",", ":"))
    return f"event: {ev['type']}\ndata: {data}\n\n".encode()
