"""Issue 39, defect 10: text the engine cannot take is a 400 before any work, never a 500.

- a lone UTF-16 surrogate (JSON's "\\ud800" escape unpaired) anywhere in a JSON body -- `stop`,
  `grammar`, a slot file name -- is a 400 naming the field (server/limits.check_unicode; it
  was a pybind TypeError, answered 500);
- a tool whose parameters schema matches nothing (a `$ref` cycle) is refused up front under any
  tool_choice, as the same schema in response_format is (chat_output.check_tool_schemas; under
  tool_choice "required" it failed mid-generation with "no token can be sampled", a 500).
"""
import json

import httpx
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

from edgellm import InvalidRequestError, _core  # noqa: E402
from edgellm.chat_output import GENERIC, HERMES, ChatFormat  # noqa: E402
from edgellm.server.errors import APIError  # noqa: E402
from edgellm.server.limits import check_unicode  # noqa: E402

CYCLES = [{"$ref": "#"},
          {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}]


def _tool(params, name="f"):
    return {"type": "function", "function": {"name": name, "parameters": params}}


# --- without a model ----------------------------------------------------------------------------

def _refusal(body: dict) -> APIError:
    raw = json.dumps(body).encode()  # ensure_ascii: a lone surrogate is sent as its escape
    with pytest.raises(APIError) as e:
        check_unicode(raw, json.loads(raw))
    return e.value


def test_lone_surrogates_are_named():
    err = _refusal({"prompt": "hi", "stop": ["END", "x\ud800"]})
    assert (err.status, err.param, err.code) == (400, "stop[1]", "invalid_unicode")
    assert "\\ud800" in err.message
    assert _refusal({"messages": [{"role": "user", "content": "\udfff"}]}).param == \
        "messages[0].content"
    assert _refusal({"a": {"b\udc00": 1}}).message.startswith("a key of 'a'")
    # paired surrogates (an emoji sent with ensure_ascii) and plain text pass
    for body in ({"content": "smile \U0001F600"}, {"stop": ["\\ud800 as text"]}):
        raw = json.dumps(body).encode()
        check_unicode(raw, json.loads(raw))


@pytest.mark.parametrize("fmt", [GENERIC, HERMES])
@pytest.mark.parametrize("schema", CYCLES)
def test_a_tool_schema_matching_nothing_is_refused_up_front(fmt, schema):
    for choice in ("required", "auto", {"type": "function", "function": {"name": "f"}}):
        with pytest.raises(InvalidRequestError, match="tool 'f'.*matches nothing"):
            ChatFormat(fmt).tool_grammar(_core.json_schema_to_gbnf, [_tool(schema)], choice,
                                         False)
    # the same schema as response_format is refused at once too
    with pytest.raises(InvalidRequestError, match="matches nothing"):
        _core.Grammar.from_json_schema(json.dumps(schema))
    # a usable tool beside it still builds when tool_choice names only that one
    ok = _tool({"type": "object", "properties": {"x": {"type": "string"}}}, "g")
    gbnf, _ = ChatFormat(fmt).tool_grammar(_core.json_schema_to_gbnf, [_tool(schema), ok],
                                           {"type": "function", "function": {"name": "g"}}, False)
    assert "root ::=" in gbnf


def test_several_models_router_refuses_a_lone_surrogate():
    """The router reads the body to pick the model and writes it again without keep_alive:
    that write of a lone surrogate failed with a codec error naming no field (a bare 400)."""
    from test_server_models import ModelsServer

    s = ModelsServer()
    try:
        raw = json.dumps({"model": "a", "keep_alive": "1m", "max_tokens": 2, "stop": ["\ud800"],
                          "messages": [{"role": "user", "content": "hi"}]}).encode()
        r = httpx.post(s.url + "/v1/chat/completions", content=raw, timeout=10,
                       headers={"content-type": "application/json"})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "invalid_unicode" and not s.loads.count
    finally:
        s.stop()


# --- SmolLM2 behind `edgellm serve` -----------------------------------------------------------

@pytest.fixture(scope="module")
def smol(smollm2_path, tmp_path_factory):
    from test_server import ServerProcess

    slots = tmp_path_factory.mktemp("slots")
    with ServerProcess(smollm2_path, "--parallel", "2", "--ctx-size", "512",
                       "--slot-save-path", str(slots)) as s:
        yield s


def _error(r, status=400):
    assert r.status_code == status, r.text
    return r.json()["error"]


@pytest.mark.real_model
@pytest.mark.parametrize("path, body, param", [
    ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "stop": ["\ud800"]}, "stop[0]"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                              "stop": "a\udbff"}, "stop"),
    ("/completion", {"prompt": "hi", "n_predict": 2, "grammar": 'root ::= "\ud800"'}, "grammar"),
    ("/completion", {"prompt": "hi", "n_predict": 2, "stop": ["\udc00"]}, "stop[0]"),
    ("/slots/0?action=save", {"filename": "a\ud800.bin"}, "filename"),
])
def test_lone_surrogates_are_400_on_the_real_server(smol, path, body, param):
    raw = json.dumps(body).encode()  # (httpx's json= cannot encode a lone surrogate)
    err = _error(httpx.post(smol.url + path, content=raw, timeout=60,
                            headers={**smol.headers, "content-type": "application/json"}))
    assert err["code"] == "invalid_unicode" and err["param"] == param, err


@pytest.mark.real_model
@pytest.mark.parametrize("schema", CYCLES)
def test_a_cyclic_tool_schema_is_400_before_generation(smol, schema):
    for choice in ("required", "auto"):
        err = _error(smol.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
            "tools": [_tool(schema)], "tool_choice": choice}))
        assert "tool 'f'" in err["message"] and "matches nothing" in err["message"], err
    # as the same schema in response_format is
    err = _error(smol.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x",
                                                                    "schema": schema}}}))
    assert "matches nothing" in err["message"]
    assert httpx.get(smol.url + "/health").status_code == 200


@pytest.mark.real_model
@pytest.mark.parametrize("path", ["/embeddings", "/embedding", "/v1/embeddings"])
def test_an_embd_normalize_past_int32_is_400(smol, path):
    # found by tests/test_server_openapi.py's schemathesis run: a 500 pybind TypeError before
    err = _error(smol.post(path, {"input": "x", "embd_normalize": 2 ** 80}))
    assert err["param"] == "embd_normalize", err
