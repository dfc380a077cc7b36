"""Every field of OpenAI's current chat-completions request schema is accepted (honoured, or
ignored where it has no meaning here, as docs/SERVER.md says), unknown fields stay a 400, and a
null key in a message means absent, as at the top level -- the history the OpenAI SDK sends back
(`message.model_dump()`: annotations, audio, function_call, refusal all null) included."""
import json

import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

from edgellm.server.errors import APIError  # noqa: E402
from edgellm.server.protocol import parse_chat  # noqa: E402

ASK = [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]
WEATHER = {"name": "get_weather", "description": "Weather forecast for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
# OpenAI's fields that have no engine meaning here, with values the SDK sends
IGNORED = {"prompt_cache_key": "user-42", "prompt_cache_retention": "24h",
           "safety_identifier": "hash-of-user", "verbosity": "low", "user": "u",
           "store": False, "metadata": {"a": "b"}, "service_tier": "auto",
           "modalities": ["text"], "audio": None,
           "prediction": {"type": "content", "content": "It will be sunny."},
           "web_search_options": {}}


def _error(body) -> APIError:
    with pytest.raises(APIError) as info:
        parse_chat(body)
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize("name", sorted(IGNORED))
def test_documented_fields_are_accepted(name):
    req = parse_chat({"messages": ASK, name: IGNORED[name]})
    assert req.messages[0]["content"] == ASK[0]["content"]


def test_stream_options_include_obfuscation_is_accepted():
    req = parse_chat({"messages": ASK, "stream": True,
                      "stream_options": {"include_usage": True, "include_obfuscation": False}})
    assert req.include_usage


def test_unknown_fields_stay_a_400():
    e = _error({"messages": ASK, "prompt_cache_kee": "x"})
    assert e.code == "unknown_field" and e.param == "prompt_cache_kee"
    e = _error({"messages": ASK, "stream": True, "stream_options": {"include_obfuscations": True}})
    assert e.code == "unknown_field" and e.param == "stream_options.include_obfuscations"
    e = _error({"messages": [{**ASK[0], "colour": "red"}]})
    assert e.code == "unknown_field" and e.param == "messages[0].colour"


def test_wrong_values_of_the_new_fields_name_them():
    assert _error({"messages": ASK, "verbosity": "loud"}).param == "verbosity"
    assert _error({"messages": ASK, "reasoning_effort": 3}).param == "reasoning_effort"
    e = _error({"messages": ASK, "modalities": ["text", "audio"]})
    assert e.param == "modalities" and e.code == "unsupported" and "audio" in e.message


def test_reasoning_effort_is_the_templates():
    req = parse_chat({"messages": ASK, "reasoning_effort": "low"})
    assert req.chat_template_kwargs == {"enable_thinking": True, "reasoning_effort": "low"}
    req = parse_chat({"messages": ASK, "reasoning_effort": "none",
                      "chat_template_kwargs": {"enable_thinking": True}})
    assert req.chat_template_kwargs == {"enable_thinking": True, "reasoning_effort": "none"}


def test_legacy_functions_are_tools():
    req = parse_chat({"messages": ASK, "functions": [WEATHER],
                      "function_call": {"name": "get_weather"}})
    assert req.tools == [{"type": "function", "function": WEATHER}]
    assert req.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert req.legacy_functions and req.parallel_tool_calls is False
    assert parse_chat({"messages": ASK, "functions": [WEATHER], "function_call": "auto"}
                      ).tool_choice == "auto"
    e = _error({"messages": ASK, "functions": [WEATHER], "tools": [{"type": "function",
                                                                     "function": WEATHER}]})
    assert e.param == "functions"
    assert _error({"messages": ASK, "function_call": {"name": "nope"},
                   "functions": [WEATHER]}).param == "tool_choice"


SDK_HISTORY = [  # what the OpenAI SDK's message.model_dump() sends back
    ASK[0],
    {"role": "assistant", "content": "Sunny.", "refusal": None, "annotations": None,
     "audio": None, "function_call": None, "tool_calls": None, "name": None},
    {"role": "user", "content": "And tomorrow?", "name": None},
]


def test_null_message_keys_are_absent():
    req = parse_chat({"messages": SDK_HISTORY})
    assert req.messages[1] == {"role": "assistant", "content": "Sunny."}
    assert req.messages[2] == {"role": "user", "content": "And tomorrow?"}
    # answers' own fields with values (citations, an audio id) are accepted and not rendered
    req = parse_chat({"messages": [ASK[0], {"role": "assistant", "content": "Sunny.",
                                            "annotations": [], "audio": {"id": "a1"}}]})
    assert req.messages[1]["content"] == "Sunny."


def test_legacy_function_messages_are_tool_messages():
    req = parse_chat({"messages": [
        ASK[0], {"role": "assistant", "content": None,
                 "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"role": "function", "name": "get_weather", "content": "sunny"}]})
    assert req.messages[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert req.messages[2]["role"] == "tool" and req.messages[2]["name"] == "get_weather"


# --- through the real server and the official SDK -----------------------------------------------
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client(qwen_path):
    from test_server import ServerProcess

    s = ServerProcess(qwen_path).wait_ready()
    yield s.client(timeout=120)
    s.proc.terminate()
    s.proc.wait(timeout=30)


@pytest.mark.real_model
@pytest.mark.slow
def test_sdk_fields_and_history_round_trip(client):
    r = client.chat.completions.create(
        model="m", messages=ASK, max_tokens=8, temperature=0, prompt_cache_key="k",
        safety_identifier="s", verbosity="low", reasoning_effort="low", modalities=["text"],
        stream_options=None)
    history = [*ASK, r.choices[0].message.model_dump(), {"role": "user", "content": "Thanks"}]
    r2 = client.chat.completions.create(model="m", messages=history, max_tokens=4, temperature=0)
    assert r2.choices[0].message.content is not None
    chunks = list(client.chat.completions.create(
        model="m", messages=ASK, max_tokens=4, temperature=0, stream=True,
        stream_options={"include_usage": True, "include_obfuscation": False}))
    assert chunks[-1].usage is not None


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_sdk_legacy_functions(client, stream):
    kw = dict(model="m", messages=ASK, functions=[WEATHER], function_call={"name": "get_weather"},
              temperature=0, max_tokens=60)
    if not stream:
        choice = client.chat.completions.create(**kw).choices[0]
        call, finish = choice.message.function_call, choice.finish_reason
        assert choice.message.tool_calls is None
        name, args = call.name, call.arguments
    else:
        name, args, finish = "", "", None
        for c in client.chat.completions.create(stream=True, **kw):
            d = c.choices[0].delta if c.choices else None
            assert d is None or d.tool_calls is None
            if d is not None and d.function_call is not None:
                name += d.function_call.name or ""
                args += d.function_call.arguments or ""
            finish = (c.choices[0].finish_reason if c.choices else None) or finish
    assert finish == "function_call" and name == "get_weather"
    assert json.loads(args)["city"] == "Paris"
