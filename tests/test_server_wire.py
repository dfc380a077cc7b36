"""The request models' common rules (server/wire.py) and the one mapping from a validation error
to the 400 naming the field (errors.api_error): what every API's parser inherits."""
from typing import Dict, List, Literal, Optional, Union

import pytest
from pydantic import Field, field_validator
from typing_extensions import Annotated

pytest.importorskip("edgellm", reason="edgellm._core is not built (scripts/dev-build.sh)")

from edgellm.server.errors import APIError, Refusal  # noqa: E402
from edgellm.server.wire import Int, Wire, of_type, parse, shape, tagged, text_or  # noqa: E402

Part = of_type("text", Wire, text=str)
Call = of_type("call", Wire, name=str)


class Turn(Wire):
    role: Literal["user", "assistant"]
    content: text_or(Annotated[Union[Part, Call], tagged({"text": Part, "call": Call})], "parts")


class Body(Wire):
    turns: Annotated[List[Turn], Field(min_length=1)]
    n: Annotated[Int, Field(ge=1, le=8)] = 1
    t: Annotated[Optional[float], Field(gt=0.0)] = None
    stream: bool = False
    tags: Annotated[Dict[str, str], Field(max_length=2)] = {}
    inner: Optional[shape("Inner", Wire, a=str)] = None

    @field_validator("stream")
    @classmethod
    def _no_stream(cls, v):
        if v:
            raise Refusal("'{where}': streaming is not offered here", "unsupported")
        return v


def _error(body) -> APIError:
    with pytest.raises(APIError) as info:
        parse(Body, body)
    assert info.value.status == 400
    return info.value


OK = {"turns": [{"role": "user", "content": "hi"}]}


def test_valid_bodies_null_is_absent_and_integral_floats():
    b = parse(Body, {**OK, "n": 3.0, "t": 1, "stream": None, "inner": None})
    assert b.n == 3 and isinstance(b.n, int) and b.t == 1.0 and b.stream is False
    b = parse(Body, {"turns": [{"role": "assistant", "content": [{"type": "call", "name": "f"}]}]})
    assert b.turns[0].content[0].name == "f"


@pytest.mark.parametrize("body, param, code, words", [
    ({**OK, "colour": 1}, "colour", "unknown_field", "unknown field 'colour'"),
    ({"turns": [{"role": "user", "content": "x", "name": "b"}]}, "turns[0].name",
     "unknown_field", "unknown field"),
    ({}, "turns", "missing_field", "'turns' is required"),
    ({"turns": None}, "turns", "missing_field", "is required"),  # null = absent
    ({"turns": []}, "turns", "invalid_value", "must not be empty"),
    ({"turns": [{"role": "robot", "content": "x"}]}, "turns[0].role", "invalid_value",
     "must be 'user' or 'assistant'"),
    ({"turns": [{"role": "user", "content": 5}]}, "turns[0].content", "invalid_type",
     "a string or an array of parts"),
    ({"turns": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
     "turns[0].content[0].text", "invalid_type", "must be a string, got integer 1"),
    ({"turns": [{"role": "user", "content": [{"type": "image"}]}]},
     "turns[0].content[0].type", "invalid_value", "must be one of 'text', 'call'"),
    ({"turns": [{"role": "user", "content": [{"type": "call"}]}]},
     "turns[0].content[0].name", "missing_field", "is required"),
    ({**OK, "n": 9}, "n", "invalid_value", "'n' must be <= 8, got 9"),
    ({**OK, "n": 2.5}, "n", "invalid_type", "must be an integer"),
    ({**OK, "n": True}, "n", "invalid_type", "must be an integer, got boolean"),
    ({**OK, "n": "2"}, "n", "invalid_type", "got string"),
    ({**OK, "t": 0}, "t", "invalid_value", "'t' must be > 0"),
    ({**OK, "t": float("nan")}, "t", "invalid_value", "finite"),
    ({**OK, "stream": "yes"}, "stream", "invalid_type", "must be a boolean"),
    ({**OK, "stream": True}, "stream", "unsupported", "'stream': streaming is not offered"),
    ({**OK, "tags": {"a": 1}}, "tags.a", "invalid_type", "must be a string"),
    ({**OK, "tags": {"a": "1", "b": "2", "c": "3"}}, "tags", "invalid_value", "at most 2"),
    ({**OK, "inner": {"a": "x", "b": 1}}, "inner.b", "unknown_field", "unknown field"),
    # an unknown field is named first, whatever else is wrong
    ({"turns": [], "zzz": 1}, "zzz", "unknown_field", "unknown field"),
])
def test_errors_name_the_field(body, param, code, words):
    e = _error(body)
    assert (e.param, e.code) == (param, code), e.message
    assert words in e.message, e.message


def test_a_body_that_is_no_object():
    with pytest.raises(APIError) as info:
        parse(Body, [1, 2])
    assert info.value.code == "invalid_type" and "JSON object" in info.value.message


# --- random bodies: a 400 or a parsed request, never another exception --------------------------

_KEYS = ["model", "messages", "max_tokens", "system", "tools", "tool_choice", "thinking", "role",
         "content", "type", "text", "tool_use_id", "id", "name", "input", "input_schema",
         "budget_tokens", "display", "stop_sequences", "temperature", "top_k", "stream",
         "metadata", "output_config", "format", "schema", "cache_control", "citations",
         "instructions", "max_output_tokens", "call_id", "arguments", "output", "summary",
         "parameters", "strict", "reasoning", "effort", "include", "truncation", "refusal"]
_WORDS = ["user", "assistant", "text", "tool_use", "tool_result", "thinking", "image", "auto",
          "any", "tool", "none", "enabled", "ephemeral", "json_schema", "object", "function",
          "message", "function_call", "function_call_output", "reasoning", "input_text",
          "refusal", "required", "", "x"]
_GOOD = [{"type": "text", "text": "a"}, {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
         {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}]},
         {"role": "user", "content": "a"}, {"type": "function_call", "call_id": "c", "name": "f",
                                            "arguments": "{}"},
         {"type": "function_call_output", "call_id": "c", "output": "o"},
         {"type": "reasoning", "summary": [{"type": "summary_text", "text": "s"}]}]


def _random(rng, depth=0):
    r = rng.random()
    if depth > 4 or r < 0.25:
        return rng.choice(_WORDS)
    if r < 0.35:
        return rng.choice([0, 1, -1, 2.5, 3.0, 1e300, 2**70, True, None, float("nan")])
    if r < 0.45:
        return dict(rng.choice(_GOOD))
    if r < 0.7:
        return {rng.choice(_KEYS): _random(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return [_random(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def test_random_bodies_get_a_400_or_parse():
    import random

    from edgellm.server import anthropic_api, anthropic_models, responses_api

    rng = random.Random(38)
    parsers = [anthropic_api.parse_messages, responses_api.parse_request,
               lambda b: anthropic_api.parse_messages(b, anthropic_models.CountTokensBody)]
    for _ in range(3000):
        body = rng.choice([{"model": "m", "max_tokens": 16}, {"input": "hi"}, {}])
        for _ in range(rng.randint(1, 3)):
            body[rng.choice(_KEYS)] = _random(rng)
        if "input" in body and isinstance(body["input"], list):
            body["input"] = [dict(rng.choice(_GOOD))] + body["input"]
        for parse_body in parsers:
            try:
                parse_body(body)
            except APIError as e:
                assert e.status == 400 and e.message and e.code, (body, e.message)
