"""The Anthropic Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`), driven by the
official `anthropic` SDK, unmodified.

Three parts:
- over a scripted stand-in engine (no model): the request -> chat-message translation, every
  refusal in Anthropic's error envelope, content blocks / stop reasons / usage built from the
  chat API's ChatDeltas, the SSE event sequence, auth by x-api-key;
- against the real `edgellm serve` with Qwen2.5-Coder-0.5B (`real_model`): a message, a system
  prompt, streaming, stop sequences, max_tokens, count_tokens, a forced tool call round trip;
- a tiny generated model with a thinking template: the `thinking` switch end to end.
"""
import asyncio
import json
import threading
import time
from pathlib import Path
from typing import List, Optional

import httpx
import pytest

edgellm = pytest.importorskip("edgellm", reason="edgellm._core is not built (scripts/dev-build.sh)")
anthropic = pytest.importorskip("anthropic")
pytest.importorskip("uvicorn")


import edgellm.llm  # noqa: E402
from edgellm.chat_output import ChatDelta, ToolCallDelta  # noqa: E402
from edgellm.llm import CompletionChunk, Usage  # noqa: E402
from edgellm.server import ServerConfig, create_app  # noqa: E402
from edgellm.server import anthropic_api as api  # noqa: E402
from edgellm.server.errors import APIError  # noqa: E402
from server_helpers import AppServer, free_port  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
KEY = "test-key"


# --- a scripted stand-in engine ------------------------------------------------------------------

class ScriptedLLM:
    """The shared chat API's contract: `chat_stream_chunks(...)` yields CompletionChunks whose
    `.delta` is a ChatDelta; the last one has finish_reason, usage and stop_reason. What it
    yields is `self.script` (ChatDeltas) and `self.finish` = (finish_reason, stop_reason)."""

    n_ctx = 4096
    n_vocab = 1000
    isa = "fake"

    def __init__(self):
        self.script: List[ChatDelta] = [ChatDelta(content="Hello"), ChatDelta(content=" there")]
        self.finish = ("stop", 2)
        self.cached = 0
        self.fail_after: Optional[int] = None  # raise after this many chunks
        self.delay = 0.001  # seconds per chunk
        self.calls: list = []
        self.aborted = 0

    def chat_prompt_ids(self, messages, tools=None, chat_template_kwargs=None):
        text = json.dumps([messages, tools, chat_template_kwargs])
        return list(range(len(text) // 10 + 1))

    def chat_stream_chunks(self, messages, params=None, tools=None, tool_choice=None,
                           parallel_tool_calls=None, chat_template_kwargs=None):
        self.calls.append(dict(messages=messages, params=params, tools=tools,
                               tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls,
                               chat_template_kwargs=chat_template_kwargs))
        n_prompt = len(self.chat_prompt_ids(messages, None if tool_choice == "none" else tools,
                                            chat_template_kwargs))
        if params.max_tokens is not None and n_prompt + params.max_tokens > self.n_ctx:
            raise edgellm.ContextLengthError(f"{n_prompt} + {params.max_tokens} > n_ctx")
        if n_prompt >= self.n_ctx:  # as the engine checks
            raise edgellm.ContextLengthError(f"prompt has {n_prompt} tokens: no room")
        return self._run(n_prompt, list(self.script), self.finish)

    async def _run(self, n_prompt, script, finish):
        done = False
        try:
            for i, d in enumerate(script):
                await asyncio.sleep(self.delay)
                if self.fail_after is not None and i == self.fail_after:
                    raise RuntimeError("engine exploded")
                last = i == len(script) - 1
                text = d.content + d.reasoning + "".join(t.arguments for t in d.tool_calls)
                yield CompletionChunk(
                    text=text, token_ids=[7], delta=d,
                    finish_reason=finish[0] if last else None,
                    stop_reason=finish[1] if last else None,
                    usage=Usage(n_prompt, len(script), n_prompt + len(script), self.cached)
                    if last else None)
            done = True
        finally:
            if not done:
                self.aborted += 1

    def stats(self):
        return {}

    def close(self):
        pass


class InProcessServer(AppServer):
    def __init__(self, engine=None, loader=None, **cfg):
        self.engine = engine or ScriptedLLM()
        port = free_port()
        config = ServerConfig(model="fake-model", alias="fake", port=port, **cfg)
        app = create_app(config, loader=loader or (lambda c: self.engine),
                         params_factory=edgellm.llm.SamplingParams)
        self.start(app, port)
        self.wait_started()

    def client(self, **kw):
        kw.setdefault("api_key", KEY)
        return anthropic.Anthropic(base_url=self.url, max_retries=0, **kw)


@pytest.fixture
def fake():
    s = InProcessServer(api_key=KEY).wait_ready()
    yield s
    s.stop()


USER = [{"role": "user", "content": "hi"}]


def _bad(client, words, kind="invalid_request_error", **body):
    body.setdefault("model", "fake")
    body.setdefault("max_tokens", 16)
    body.setdefault("messages", USER)
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(**body)
    err = info.value
    assert err.body["type"] == "error", err.body
    assert err.body["error"]["type"] == kind, err.body
    assert words in err.body["error"]["message"], err.body
    return err


# --- the translation (no server) -----------------------------------------------------------------

def test_history_becomes_chat_messages():
    req = api.parse_messages({
        "model": "m", "max_tokens": 64,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": "Be kind."}],
        "messages": [
            {"role": "user", "content": "What is 6*7?"},
            {"role": "user", "content": [{"type": "text", "text": "Use the tool."}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call mul.", "signature": "sig"},
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "toolu_1", "name": "mul", "input": {"a": 6, "b": 7}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "42"}]},
                {"type": "text", "text": "Thanks"}]},
            {"role": "assistant", "content": "It is 42."},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "boom",
                 "is_error": True}]},
        ]})
    assert req.messages == [
        {"role": "system", "content": "Be brief.\nBe kind."},
        {"role": "user", "content": "What is 6*7?\nUse the tool."},  # consecutive turns merge
        {"role": "assistant", "content": "Calling.", "reasoning_content": "I should call mul.",
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "mul", "arguments": '{"a": 6, "b": 7}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "name": "mul", "content": "42"},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "It is 42."},
        {"role": "tool", "tool_call_id": "toolu_1", "name": "mul", "content": "Error: boom"},
    ]
    assert req.sampling == {"max_tokens": 64}  # the rest keeps SamplingParams' defaults
    assert req.chat_kwargs() == {}


def test_tools_tool_choice_thinking_and_sampling():
    tools = [{"name": "get_weather", "description": "Weather of a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}},
             {"name": "noop", "input_schema": {"type": "object"}, "type": "custom"}]
    base = {"model": "m", "max_tokens": 2048, "messages": USER, "tools": tools}
    req = api.parse_messages({**base, "tool_choice": {"type": "tool", "name": "get_weather",
                                                      "disable_parallel_tool_use": True},
                              "thinking": {"type": "enabled", "budget_tokens": 1024},
                              "temperature": 0, "top_p": 0.5, "top_k": 3,
                              "stop_sequences": ["END"], "metadata": {"user_id": "u1"}})
    assert req.tools == [
        {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                          "parameters": tools[0]["input_schema"]}},
        {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}}]
    assert req.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert req.parallel_tool_calls is False
    assert req.chat_template_kwargs == {"enable_thinking": True}
    assert req.sampling == {"max_tokens": 2048, "temperature": 0.0, "top_p": 0.5, "top_k": 3,
                            "stop": ["END"]}
    for choice, want, parallel in [({"type": "auto"}, "auto", True),
                                   ({"type": "any", "disable_parallel_tool_use": False},
                                    "required", True),
                                   ({"type": "none"}, "none", True)]:
        req = api.parse_messages({**base, "tool_choice": choice})
        assert (req.tool_choice, req.parallel_tool_calls) == (want, parallel)
    req = api.parse_messages(base)  # no tool_choice: the chat API's default (auto), parallel
    assert (req.tool_choice, req.parallel_tool_calls) == (None, True)
    assert api.parse_messages({**base, "tools": []}).chat_kwargs() == {}
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    req = api.parse_messages({**base, "output_config": {
        "format": {"type": "json_schema", "schema": schema}}})
    assert req.sampling == {"max_tokens": 2048, "json_schema": schema}
    req = api.parse_messages({**base, "thinking": {"type": "disabled"}})
    assert req.chat_template_kwargs == {"enable_thinking": False} and req.show_thinking
    req = api.parse_messages({**base, "thinking": {"type": "adaptive", "display": "omitted"}})
    assert req.chat_template_kwargs == {"enable_thinking": True} and not req.show_thinking


@pytest.mark.parametrize("body, param, words", [
    ({"max_tokens": None}, "max_tokens", "is required"),
    ({"model": None}, "model", "is required"),
    ({"temprature": 0.5}, "temprature", "unknown field"),
    ({"temperature": 1.5}, "temperature", "<= 1"),
    ({"max_tokens": 0}, "max_tokens", ">= 1"),
    ({"stop_sequences": "END"}, "stop_sequences", "array of strings"),
    ({"messages": []}, "messages", "must not be empty"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role", "top-level 'system'"),
    ({"messages": [{"role": "user", "content": "x", "name": "bob"}]}, "messages[0].name",
     "unknown field"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0].type", "image blocks are not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages[0].content[0].type", "document blocks are not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "colour": 1}]}]},
     "messages[0].content[0].colour", "unknown field"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "The"}]},
     "messages[1]", "prefill"),
    ({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}]}]},
     "messages[0].content[0].tool_use_id", "answers no tool_use"),
    ({"messages": [{"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]},
                   {"role": "user", "content": "x"}]}, "messages[0].content[0].type",
     "redacted_thinking"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f",
                                                  "input": {}}]}]},
     "messages[0].content[0].type", "not allowed in a user message"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type",
     "server tools"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object"}, "strict": True}]},
     "tools[0].strict", "unknown field"),
    ({"tools": [{"name": "bad name", "input_schema": {"type": "object"}}]}, "tools[0].name",
     "must match"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema", "is required"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "tool", "name": "g"}}, "tool_choice.name", "not one of the tools"),
    ({"tool_choice": {"type": "any"}}, "tool_choice", "needs 'tools'"),
    ({"thinking": {"type": "enabled", "budget_tokens": 0}}, "thinking.budget_tokens", ">= 1"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2000}}, "thinking.budget_tokens",
     "less than 'max_tokens'"),
    ({"metadata": {"user_id": "u", "session": 1}}, "metadata.session", "unknown field"),
    ({"system": [{"type": "image"}]}, "system[0].type", "not supported"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x",
                                                  "cache_control": {"type": "forever"}}]}]},
     "messages[0].content[0].cache_control.type", "ephemeral"),
])
def test_bad_requests_name_the_field(body, param, words):
    full = {"model": "m", "max_tokens": 1500, "messages": USER, **body}
    full = {k: v for k, v in full.items() if v is not None}
    with pytest.raises(APIError) as info:
        api.parse_messages(full)
    assert info.value.status == 400 and info.value.param == param, info.value.message
    assert words in info.value.message


def test_builder_blocks_stop_reasons_and_usage():
    req = api.parse_messages({"model": "m", "max_tokens": 5, "messages": USER,
                              "stop_sequences": ["STOP"]})

    def run(deltas, finish, stop=None, out_tokens=3):
        b = api.MessageBuilder("served", req, 10)
        events = [e for d in deltas for e in b.add(d)]
        events += b.finish(CompletionChunk("", [], finish_reason=finish, stop_reason=stop,
                                           usage=Usage(10, out_tokens, 10 + out_tokens, 4)))
        return b, events

    b, events = run([ChatDelta(reasoning="Let me"), ChatDelta(reasoning=" think."),
                     ChatDelta(content="\n\n"),
                     ChatDelta(tool_calls=[ToolCallDelta(0, "call_abc", "mul", "")]),
                     ChatDelta(tool_calls=[ToolCallDelta(0, None, None, '{"a": ')]),
                     ChatDelta(tool_calls=[ToolCallDelta(0, None, None, '6}')])], "tool_calls")
    msg = b.message()
    assert msg["content"] == [
        {"type": "thinking", "thinking": "Let me think.", "signature": ""},
        {"type": "tool_use", "id": "toolu_abc", "name": "mul", "input": {"a": 6}}]
    assert msg["stop_reason"] == "tool_use" and msg["model"] == "served"
    assert msg["usage"] == {"input_tokens": 6, "output_tokens": 3,
                            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4}
    assert [e["type"] for e in events] == [
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    assert [e["delta"] for e in events if e["type"] == "content_block_delta"][2:] == [
        {"type": "input_json_delta", "partial_json": '{"a": '},
        {"type": "input_json_delta", "partial_json": "6}"}]
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}

    b, _ = run([ChatDelta(content="a STOP")], "stop", "STOP")
    assert (b.stop_reason, b.stop_sequence) == ("stop_sequence", "STOP")
    b, _ = run([ChatDelta(content="a")], "stop", 151643)  # end-of-generation token id
    assert (b.stop_reason, b.stop_sequence) == ("end_turn", None)
    b, _ = run([ChatDelta(content="a")], "length", out_tokens=5)
    assert b.stop_reason == "max_tokens"
    b, _ = run([ChatDelta(content="a")], "length", out_tokens=2)  # the context filled up first
    assert b.stop_reason == "model_context_window_exceeded"
    b, _ = run([ChatDelta(content="text "), ChatDelta(tool_calls=[ToolCallDelta(0, "x", "f", "{")])],
               "length", out_tokens=5)  # a call cut off by max_tokens
    assert b.message()["content"][1]["input"] == {} and b.stop_reason == "max_tokens"
    b, _ = run([], "stop")
    assert b.message()["content"] == [] and b.stop_reason == "end_turn"
    with pytest.raises(APIError) as info:
        run([ChatDelta(content="a")], "cancelled")
    assert info.value.status == 503


def test_error_envelope_types():
    cases = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
             429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
             504: "timeout_error"}
    for status, kind in cases.items():
        assert api.error_body(APIError(status, "m")) == {
            "type": "error", "error": {"type": kind, "message": "m"}}


# --- the SDK against the app over the stand-in -----------------------------------------------------

def test_sdk_message_with_thinking_text_and_tool_use(fake):
    fake.engine.script = [ChatDelta(reasoning="Need the weather."),
                          ChatDelta(content="Checking."),
                          ChatDelta(tool_calls=[ToolCallDelta(0, "call_1", "get_weather", "")]),
                          ChatDelta(tool_calls=[ToolCallDelta(0, None, None, '{"city": "Oslo"}')])]
    fake.engine.finish = ("tool_calls", None)
    fake.engine.cached = 3
    tools = [{"name": "get_weather", "description": "d",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    msg = fake.client().messages.create(
        model="any-model-name", max_tokens=2000, messages=USER, tools=tools,
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        thinking={"type": "enabled", "budget_tokens": 1024}, system="sys",
        metadata={"user_id": "me"},
        extra_body={"temperature": 0.2, "top_k": 5})  # this SDK no longer has them as arguments
    assert msg.id.startswith("msg_") and msg.type == "message" and msg.role == "assistant"
    assert msg.model == "fake"
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use"]
    assert msg.content[0].thinking == "Need the weather."
    assert msg.content[1].text == "Checking."
    call = msg.content[2]
    assert call.id == "toolu_1" and call.name == "get_weather" and call.input == {"city": "Oslo"}
    assert msg.stop_reason == "tool_use" and msg.stop_sequence is None
    n_prompt = msg.usage.input_tokens + msg.usage.cache_read_input_tokens
    assert msg.usage.cache_read_input_tokens == 3 and msg.usage.output_tokens == 4
    assert msg._request_id and msg._request_id.startswith("req_")
    sent = fake.engine.calls[-1]
    assert sent["messages"] == [{"role": "system", "content": "sys"},
                                {"role": "user", "content": "hi"}]
    assert sent["tools"][0]["function"]["name"] == "get_weather"
    assert sent["tool_choice"] == "auto" and sent["parallel_tool_calls"] is False
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}
    p = sent["params"]
    assert (p.max_tokens, p.temperature, p.top_k) == (2000, 0.2, 5)
    # count_tokens renders the same prompt
    count = fake.client().messages.count_tokens(
        model="x", messages=USER, tools=tools, system="sys",
        thinking={"type": "enabled", "budget_tokens": 1024})
    assert count.input_tokens == n_prompt


def test_sdk_stream_events_and_final_message(fake):
    fake.engine.script = [ChatDelta(reasoning="hm"), ChatDelta(content="One"),
                          ChatDelta(content=" two"), ChatDelta(content=" three")]
    client = fake.client()
    with client.messages.stream(model="x", max_tokens=50, messages=USER) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert pieces == ["One", " two", " three"]
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[1].text == "One two three" and final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 4 and final.usage.input_tokens > 0

    # the raw wire: named events in Anthropic's order
    r = httpx.post(fake.url + "/v1/messages", headers={"x-api-key": KEY},
                   json={"model": "x", "max_tokens": 50, "messages": USER, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = []
    for raw in r.text.strip().split("\n\n"):
        name, data = raw.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        body = json.loads(data[len("data: "):])
        assert body["type"] == name[len("event: "):]
        events.append(body)
    assert [e["type"] for e in events] == [
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == final.usage.input_tokens  # known up front
    assert events[2]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert events[3]["delta"] == {"type": "thinking_delta", "thinking": "hm"}
    assert events[5] == {"type": "content_block_start", "index": 1,
                         "content_block": {"type": "text", "text": ""}}
    assert events[-2]["delta"]["stop_reason"] == "end_turn"
    assert events[-2]["usage"]["output_tokens"] == 4


def test_sdk_stream_tool_use(fake):
    fake.engine.script = [ChatDelta(tool_calls=[ToolCallDelta(0, "call_9", "add", "")]),
                          ChatDelta(tool_calls=[ToolCallDelta(0, None, None, '{"x": 1,')]),
                          ChatDelta(tool_calls=[ToolCallDelta(0, None, None, ' "y": 2}')])]
    fake.engine.finish = ("tool_calls", None)
    tools = [{"name": "add", "input_schema": {"type": "object"}}]
    with fake.client().messages.stream(model="x", max_tokens=50, messages=USER, tools=tools,
                                       tool_choice={"type": "any"}) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert "input_json" in kinds
    assert final.content[0].type == "tool_use" and final.content[0].input == {"x": 1, "y": 2}
    assert final.stop_reason == "tool_use"
    assert fake.engine.calls[-1]["tool_choice"] == "required"
    assert fake.engine.calls[-1]["parallel_tool_calls"] is True  # Anthropic's default


def test_stop_sequence_and_max_tokens_over_http(fake):
    client = fake.client()
    fake.engine.script = [ChatDelta(content="a b")]
    fake.engine.finish = ("stop", "b")
    msg = client.messages.create(model="x", max_tokens=9, messages=USER, stop_sequences=["b"])
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "b")
    assert fake.engine.calls[-1]["params"].stop == ["b"]
    fake.engine.script = [ChatDelta(content="a"), ChatDelta(content="b")]
    fake.engine.finish = ("length", None)
    msg = client.messages.create(model="x", max_tokens=2, messages=USER)
    assert msg.stop_reason == "max_tokens"


def test_max_tokens_is_a_cap_beyond_the_context(fake):
    """As Anthropic's API: max_tokens larger than the room left runs until the context is full."""
    client = fake.client()
    fake.engine.n_ctx = 40
    fake.engine.finish = ("length", None)
    with client.messages.stream(model="x", max_tokens=32000, messages=USER) as stream:
        msg = stream.get_final_message()  # (the SDK refuses such a max_tokens unstreamed)
    assert fake.engine.calls[-1]["params"].max_tokens is None
    assert msg.stop_reason == "model_context_window_exceeded"
    msg = client.messages.create(model="x", max_tokens=2, messages=USER)  # fits: kept
    assert fake.engine.calls[-1]["params"].max_tokens == 2 and msg.stop_reason == "max_tokens"
    _bad(client, "no room", max_tokens=10, messages=[{"role": "user", "content": "x" * 400}])


def test_refusals_use_anthropic_envelope(fake):
    client = fake.client()
    _bad(client, "unknown field 'frequency_penalty'", extra_body={"frequency_penalty": 1})
    _bad(client, "'output_config.effort'", output_config={"effort": "high"})
    _bad(client, "image blocks are not supported",
         messages=[{"role": "user", "content": [
             {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": "iVBORw0KGgo="}}]}])
    r = httpx.post(fake.url + "/v1/messages", headers={"x-api-key": KEY},
                   json={"model": "x", "messages": USER})
    assert r.status_code == 400 and "'max_tokens' is required" in r.json()["error"]["message"]
    r = httpx.post(fake.url + "/v1/messages", headers={"x-api-key": KEY}, content=b"{nope")
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(fake.url + "/v1/messages/nothing", headers={"x-api-key": KEY}, json={})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.get(fake.url + "/v1/messages", headers={"x-api-key": KEY})
    assert r.status_code == 405 and r.json()["type"] == "error"
    assert fake.engine.calls == []  # none reached the engine


def test_x_api_key_auth(fake):
    msg = fake.client().messages.create(model="x", max_tokens=5, messages=USER)
    assert msg.content[0].text == "Hello there"
    with pytest.raises(anthropic.AuthenticationError) as info:
        fake.client(api_key="wrong").messages.create(model="x", max_tokens=5, messages=USER)
    assert info.value.status_code == 401
    assert info.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                          "message": "invalid API key"}}
    r = httpx.post(fake.url + "/v1/messages", json={"model": "x", "max_tokens": 5,
                                                    "messages": USER})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    # Bearer (auth_token) works too, with the anthropic-version header the SDK sends
    bearer = anthropic.Anthropic(base_url=fake.url, auth_token=KEY, max_retries=0)
    assert bearer.messages.create(model="x", max_tokens=5, messages=USER).content
    # the OpenAI routes keep OpenAI's envelope, and take x-api-key as well
    r = httpx.post(fake.url + "/v1/chat/completions", json={"messages": USER},
                   headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and set(r.json()) == {"error"}
    r = httpx.post(fake.url + "/tokenize", json={"content": "a"}, headers={"x-api-key": KEY})
    assert r.status_code != 401


def test_engine_failure_mid_stream_is_an_error_event(fake):
    fake.engine.script = [ChatDelta(content="a"), ChatDelta(content="b"), ChatDelta(content="c")]
    fake.engine.fail_after = 2
    r = httpx.post(fake.url + "/v1/messages", headers={"x-api-key": KEY},
                   json={"model": "x", "max_tokens": 50, "messages": USER, "stream": True})
    last = r.text.strip().split("\n\n")[-1]
    assert last.startswith("event: error\n")
    body = json.loads(last.split("\n")[1][len("data: "):])
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    # and before the first chunk, a real status
    fake.engine.fail_after = 0
    with pytest.raises(anthropic.InternalServerError) as info:
        fake.client().messages.create(model="x", max_tokens=5, messages=USER)
    assert info.value.body["error"]["type"] == "api_error"


def test_loading_and_full_queue_statuses():
    release = threading.Event()
    engine = ScriptedLLM()

    def slow_loader(config):
        release.wait(10)
        return engine

    s = InProcessServer(engine=engine, loader=slow_loader, parallel=1, max_queue=0)
    try:
        with pytest.raises(anthropic.APIStatusError) as info:
            s.client().messages.create(model="x", max_tokens=5, messages=USER)
        assert info.value.status_code == 503
        assert info.value.body["error"]["type"] == "overloaded_error"
        assert info.value.response.headers["retry-after"] == "1"
        with pytest.raises(anthropic.APIStatusError) as info:
            s.client().messages.count_tokens(model="x", messages=USER)
        assert info.value.status_code == 503
        release.set()
        s.wait_ready()
        engine.script = [ChatDelta(content="x")] * 100  # a long answer holds the one slot
        engine.delay = 0.05
        held = httpx.Client(timeout=30)
        with held.stream("POST", s.url + "/v1/messages",
                         json={"model": "x", "max_tokens": 500, "messages": USER,
                               "stream": True}) as r:
            chunks = r.iter_bytes()  # kept: a dropped iterator closes the stream
            assert next(chunks).startswith(b"event: message_start")
            with pytest.raises(anthropic.RateLimitError) as info:
                s.client().messages.create(model="x", max_tokens=5, messages=USER)
            assert info.value.body["error"]["type"] == "rate_limit_error"
        held.close()
        deadline = time.monotonic() + 5
        while engine.aborted < 1:  # leaving early aborted the engine request
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        release.set()
        s.stop()


def test_timeout_is_504_or_an_error_event_and_aborts():
    s = InProcessServer(timeout=0.4).wait_ready()
    try:
        s.engine.script = [ChatDelta(content="x")] * 50
        s.engine.delay = 0.05
        with pytest.raises(anthropic.APIStatusError) as info:
            s.client(api_key="unused").messages.create(model="x", max_tokens=99, messages=USER)
        assert info.value.status_code == 504
        assert info.value.body["error"]["type"] == "timeout_error"
        r = httpx.post(s.url + "/v1/messages", timeout=10,
                       json={"model": "x", "max_tokens": 99, "messages": USER, "stream": True})
        events = r.text.strip().split("\n\n")
        assert events[0].startswith("event: message_start")
        assert events[-1].startswith("event: error\n") and "timeout_error" in events[-1]
        deadline = time.monotonic() + 5
        while s.engine.aborted < 2:  # the stream's engine request is aborted on close
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        s.stop()


def test_count_tokens_follows_tool_choice_none(fake):
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    client = fake.client()
    with_tools = client.messages.count_tokens(model="x", messages=USER, tools=tools).input_tokens
    plain = client.messages.count_tokens(model="x", messages=USER).input_tokens
    none = client.messages.count_tokens(model="x", messages=USER, tools=tools,
                                        tool_choice={"type": "none"}).input_tokens
    assert with_tools > plain == none
    r = httpx.post(fake.url + "/v1/messages/count_tokens", headers={"x-api-key": KEY},
                   json={"model": "x", "messages": USER, "max_tokens": 5})
    assert r.status_code == 400 and "unknown field 'max_tokens'" in r.json()["error"]["message"]


# --- the real server with Qwen2.5-Coder-0.5B -------------------------------------------------------

from test_server import ServerProcess as _RealServer  # noqa: E402


class ServerProcess(_RealServer):
    """The real `edgellm serve` subprocess (tests/test_server.py) with the anthropic SDK."""

    def __init__(self, model: Path, *args: str):
        super().__init__(model, *args, api_key=KEY)

    def wait_ready(self, timeout=180):
        return super().wait_ready(timeout)

    def client(self, **kw):
        kw.setdefault("api_key", KEY)
        return anthropic.Anthropic(base_url=self.url, max_retries=0, timeout=120, **kw)


@pytest.fixture(scope="module")
def qwen_server(qwen_path):
    pytest.importorskip("edgellm._core", reason="edgellm._core is not built")
    s = ServerProcess(qwen_path, "--ctx-size", "4096", "--parallel", "4", "--alias", "qwen")
    try:
        yield s.wait_ready()
    finally:
        s.stop()


GREEDY = dict(extra_body={"temperature": 0})  # SDK 2.x has no temperature argument


def _text(msg) -> str:
    return "".join(b.text for b in msg.content if b.type == "text")


@pytest.mark.real_model
@pytest.mark.slow
def test_real_message_and_system_prompt(qwen_server):
    client = qwen_server.client()
    msg = client.messages.create(model="qwen", max_tokens=40, **GREEDY,
                                 messages=[{"role": "user", "content": "What is the capital of France? "
                                                                       "Answer in one word."}])
    assert msg.type == "message" and msg.model == "qwen"
    assert "paris" in _text(msg).lower(), msg
    assert msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) > 10
    assert 0 < msg.usage.output_tokens < 40
    pirate = client.messages.create(
        model="qwen", max_tokens=60, **GREEDY,
        system="You are a calculator. Reply with only the number, no words.",
        messages=[{"role": "user", "content": "12 + 30 ="}])
    assert "42" in _text(pirate) and len(_text(pirate)) < 20, pirate
    count = client.messages.count_tokens(model="qwen", messages=[{"role": "user", "content": "12 + 30 ="}],
                                         system="You are a calculator. Reply with only the number, no words.")
    assert count.input_tokens == pirate.usage.input_tokens + (pirate.usage.cache_read_input_tokens or 0)


@pytest.mark.real_model
@pytest.mark.slow
def test_real_streaming_matches_non_streaming(qwen_server):
    client = qwen_server.client()
    body = dict(model="qwen", max_tokens=48, **GREEDY,
                messages=[{"role": "user", "content": "Write a Python function that adds two numbers."}])
    whole = client.messages.create(**body)
    with client.messages.stream(**body) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 3
    assert "".join(pieces) == _text(final) == _text(whole)
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens


@pytest.mark.real_model
@pytest.mark.slow
def test_real_stop_sequences_and_max_tokens(qwen_server):
    client = qwen_server.client()
    count = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
    msg = client.messages.create(model="qwen", max_tokens=80, **GREEDY, messages=count,
                                 stop_sequences=["7"])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "7", msg
    assert "6" in _text(msg) and "7" not in _text(msg)
    msg = client.messages.create(model="qwen", max_tokens=5, **GREEDY, messages=count)
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 5
    # max_tokens beyond the 4096-token context is a cap, as in Anthropic's API, not a 400
    with client.messages.stream(model="qwen", max_tokens=64000, **GREEDY,
                                messages=[{"role": "user", "content": "Say hello."}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and _text(final)


@pytest.mark.real_model
@pytest.mark.slow
def test_real_auth(qwen_server):
    with pytest.raises(anthropic.AuthenticationError) as info:
        qwen_server.client(api_key="nope").messages.create(
            model="qwen", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 401
    assert info.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.BadRequestError) as info:
        qwen_server.client().messages.create(model="qwen", max_tokens=5, messages=[
            {"role": "user", "content": [{"type": "document", "source": {
                "type": "text", "media_type": "text/plain", "data": "x"}}]}])
    assert "document blocks are not supported" in info.value.body["error"]["message"]


WEATHER = {"name": "get_weather", "description": "Get the current weather of a city.",
           "input_schema": {"type": "object",
                            "properties": {"city": {"type": "string", "description": "City name"},
                                           "unit": {"type": "string",
                                                    "enum": ["celsius", "fahrenheit"]}},
                            "required": ["city"], "additionalProperties": False}}


def _valid(value, schema) -> bool:
    """Enough of JSON Schema for WEATHER's input_schema."""
    if not isinstance(value, dict) or not all(k in value for k in schema.get("required", [])):
        return False
    props = schema["properties"]
    if schema.get("additionalProperties") is False and set(value) - set(props):
        return False
    for k, v in value.items():
        p = props[k]
        if p["type"] == "string" and not isinstance(v, str):
            return False
        if "enum" in p and v not in p["enum"]:
            return False
    return True


@pytest.mark.real_model
@pytest.mark.slow
def test_real_forced_tool_use_round_trip(qwen_server):
    client = qwen_server.client()
    question = {"role": "user", "content": "What is the weather like in Paris right now?"}
    msg = client.messages.create(model="qwen", max_tokens=120, **GREEDY, messages=[question],
                                 tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"})
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert len(calls) == 1, msg
    call = calls[0]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    assert _valid(call.input, WEATHER["input_schema"]), call.input
    assert "paris" in call.input["city"].lower()
    assert msg.stop_reason == "tool_use"
    counted = client.messages.count_tokens(model="qwen", messages=[question], tools=[WEATHER],
                                           tool_choice={"type": "tool", "name": "get_weather"})
    assert counted.input_tokens == msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0)
    assert counted.input_tokens > client.messages.count_tokens(
        model="qwen", messages=[question]).input_tokens + 50  # the tool definitions

    # streamed, the SDK assembles the same call from input_json_delta events
    with client.messages.stream(model="qwen", max_tokens=120, **GREEDY, messages=[question],
                                tools=[WEATHER],
                                tool_choice={"type": "tool", "name": "get_weather"}) as stream:
        kinds = {e.type for e in stream}
        final = stream.get_final_message()
    assert "input_json" in kinds
    assert [b.input for b in final.content if b.type == "tool_use"] == [call.input]

    # The result goes back as a tool_result. tool_choice none: under auto this 0.5B model only
    # ever calls the tool again; the point here is that the history round-trips.
    answer = client.messages.create(
        model="qwen", max_tokens=60, **GREEDY, tools=[WEATHER], tool_choice={"type": "none"},
        messages=[question,
                  {"role": "assistant", "content": msg.content},  # as the SDK's docs do
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": "Sunny, 24 degrees celsius."}]}])
    text = _text(answer)
    assert answer.stop_reason == "end_turn", answer
    assert [b.type for b in answer.content] == ["text"]
    assert "24" in text or "sunny" in text.lower(), text  # it read the tool's answer


# --- the whole path on a tiny generated model with a thinking template (no download) -------------

THINK_TEMPLATE = (  # Qwen 3 style: the generation prompt opens <think>; enable_thinking false closes it
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}")


def test_thinking_switch_end_to_end_on_a_tiny_model(tmp_path):
    pytest.importorskip("gguf")
    from tiny_vocab_model import write_tiny_vocab_model

    path = write_tiny_vocab_model(tmp_path / "think.gguf", chat_template=THINK_TEMPLATE)
    s = InProcessServer(loader=lambda c: edgellm.AsyncLLM(str(path), n_threads=1)).wait_ready()
    try:
        client = s.client()
        body = dict(model="tiny", max_tokens=1100, messages=USER, extra_body={"temperature": 0})
        # max_tokens 1100 > the 1024-token context: a cap, so this runs until the model ends
        # or the context is full
        with client.messages.stream(**body, thinking={"type": "adaptive"}) as stream:
            thought = stream.get_final_message()
        assert thought.stop_reason in ("end_turn", "model_context_window_exceeded")
        assert thought.content and thought.content[0].type == "thinking", thought.content
        assert thought.content[0].thinking  # the template opened <think>: the parser says so
        assert "<think>" not in "".join(getattr(b, "text", "") for b in thought.content)
        plain = client.messages.create(model="tiny", max_tokens=12, messages=USER,
                                       extra_body={"temperature": 0},
                                       thinking={"type": "disabled"})
        assert [b.type for b in plain.content] == ["text"], plain.content
        assert plain.stop_reason == "max_tokens" and plain.usage.output_tokens == 12
        hidden = client.messages.create(model="tiny", max_tokens=12, messages=USER,
                                        extra_body={"temperature": 0},
                                        thinking={"type": "adaptive", "display": "omitted"})
        assert hidden.content[0].type == "thinking" and hidden.content[0].thinking == ""
        # the switch reached the template: count_tokens sees the closed think block
        n_on = client.messages.count_tokens(model="tiny", messages=USER).input_tokens
        n_off = client.messages.count_tokens(model="tiny", messages=USER,
                                             thinking={"type": "disabled"}).input_tokens
        assert n_off > n_on
    finally:
        s.stop()
