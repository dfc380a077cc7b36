"""The OpenAI Responses API (`POST /v1/responses`, GET/DELETE `/v1/responses/{id}`).

Three layers:
- the translation (request items -> chat messages, tools, text.format, reasoning; rejections)
  and the output builder (ChatDeltas -> output items and stream events), no server;
- the routes over a scripted stand-in engine whose chunks carry ChatDeltas (reasoning, text and
  tool-call pieces), driven by the unmodified `openai` SDK: shapes, event order, storage;
- the real `edgellm serve` subprocess on Qwen2.5-Coder-0.5B with the SDK (marked real_model).
"""
import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

edgellm = pytest.importorskip("edgellm", reason="edgellm._core is not built (scripts/dev-build.sh)")
openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")


import edgellm.llm  # noqa: E402
from edgellm.chat_output import ChatDelta, ToolCallDelta  # noqa: E402
from edgellm.llm import CompletionChunk, Usage  # noqa: E402
from edgellm.server import ServerConfig, create_app  # noqa: E402
from edgellm.server.errors import APIError  # noqa: E402
from server_helpers import THINK_TEMPLATE, AppServer, free_port  # noqa: E402
from edgellm.server.responses_api import (  # noqa: E402
    OutputBuilder, ResponseStore, StoredResponse, conversation, parse_request)

REPO = Path(__file__).resolve().parent.parent
WEATHER = {"type": "function", "name": "get_weather",
           "description": "Get the current weather for a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}


def _rejects(body, param, code=None):
    with pytest.raises(APIError) as info:
        parse_request(body)
    assert info.value.status == 400
    assert info.value.param == param, info.value.message
    if code:
        assert info.value.code == code
    return info.value.message


# --- translation ------------------------------------------------------------------------------

def test_string_input_and_instructions():
    req = parse_request({"model": "m", "input": "hi", "instructions": "be brief",
                         "max_output_tokens": 7, "temperature": 0.5, "top_p": 0.9})
    assert req.input_messages == [{"role": "user", "content": "hi"}]
    assert conversation(req, []) == [{"role": "system", "content": "be brief"},
                                     {"role": "user", "content": "hi"}]
    assert req.sampling == {"max_tokens": 7, "temperature": 0.5, "top_p": 0.9}
    assert req.stream is False and req.store is True
    assert req.chat_tools is None and req.chat_tool_choice is None
    assert req.parallel_tool_calls is True  # OpenAI's default
    # absent max_output_tokens: until end of generation, as the chat route
    assert parse_request({"input": "x"}).sampling == {"max_tokens": None}


def test_items_become_chat_messages():
    req = parse_request({"input": [
        {"role": "developer", "content": "dev rules"},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "thinking"}]},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "let me look", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "get_weather",
         "arguments": '{"city": "Paris"}', "status": "completed"},
        {"type": "function_call", "call_id": "call_b", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_b",
         "output": [{"type": "input_text", "text": "noon"}]},
        {"role": "user", "content": "thanks"},
    ]})
    assert req.input_messages == [
        {"role": "system", "content": "dev rules"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "let me look", "reasoning_content": "thinking",
         "tool_calls": [
             {"id": "call_a", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
             {"id": "call_b", "type": "function",
              "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny", "name": "get_weather"},
        {"role": "tool", "tool_call_id": "call_b", "content": "noon", "name": "get_time"},
        {"role": "user", "content": "thanks"},
    ]


def test_function_call_after_a_tool_result_starts_a_new_assistant_turn():
    req = parse_request({"input": [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
    ]})
    roles = [m["role"] for m in req.input_messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert req.input_messages[1]["content"] == "" and len(req.input_messages[3]["tool_calls"]) == 1


def test_previous_conversation_is_prepended_and_names_tool_results():
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": "", "tool_calls": [
                   {"id": "call_x", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"}}]}]
    req = parse_request({"input": [{"type": "function_call_output", "call_id": "call_x",
                                    "output": "rain"}], "instructions": "new rules",
                         "previous_response_id": "resp_1"})
    assert req.previous_response_id == "resp_1"
    assert conversation(req, history) == [
        {"role": "system", "content": "new rules"}, *history,
        {"role": "tool", "tool_call_id": "call_x", "content": "rain", "name": "get_weather"}]


def test_tools_and_tool_choice_translate_to_chat_style():
    req = parse_request({"input": "x", "tools": [WEATHER, {"type": "function", "name": "noop"}],
                         "tool_choice": {"type": "function", "name": "get_weather"},
                         "parallel_tool_calls": False})
    assert req.chat_tools == [
        {"type": "function", "function": {"name": "get_weather",
                                          "description": WEATHER["description"],
                                          "parameters": WEATHER["parameters"]}},
        {"type": "function", "function": {"name": "noop",
                                          "parameters": {"type": "object", "properties": {}}}}]
    assert req.chat_tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert req.parallel_tool_calls is False
    assert req.echo["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert req.echo["tools"][0] == {**WEATHER, "strict": True}
    assert req.echo["parallel_tool_calls"] is False
    for choice in ("auto", "none", "required"):
        assert parse_request({"input": "x", "tools": [WEATHER],
                              "tool_choice": choice}).chat_tool_choice == choice
    strict = parse_request({"input": "x", "tools": [{**WEATHER, "strict": False}]})
    assert strict.chat_tools[0]["function"]["strict"] is False


def test_text_format_and_reasoning():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = parse_request({"input": "x", "text": {"format": {"type": "json_schema", "name": "s",
                                                           "schema": schema, "strict": True}}})
    assert req.sampling["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}
    req = parse_request({"input": "x", "text": {"format": {"type": "json_object"}}})
    assert req.sampling["response_format"] == {"type": "json_object"}
    req = parse_request({"input": "x", "text": {"format": {"type": "text"}}})
    assert "response_format" not in req.sampling
    assert parse_request({"input": "x"}).template_kwargs is None
    req = parse_request({"input": "x", "reasoning": {"effort": "none"}})
    assert req.template_kwargs == {"enable_thinking": False, "reasoning_effort": "none"}
    req = parse_request({"input": "x", "reasoning": {"effort": "high", "summary": "auto"}})
    assert req.template_kwargs == {"enable_thinking": True, "reasoning_effort": "high"}
    assert req.echo["reasoning"] == {"effort": "high", "summary": "auto"}


def test_accepted_inert_fields_are_echoed():
    req = parse_request({"input": "x", "store": False, "metadata": {"k": "v"}, "user": "u",
                         "truncation": "disabled", "background": False,
                         "include": ["reasoning.encrypted_content"],
                         "safety_identifier": "s", "prompt_cache_key": "p",
                         "service_tier": "auto", "stream": True,
                         "stream_options": {"include_obfuscation": False},
                         "text": {"verbosity": "medium"}, "instructions": None})
    assert req.store is False and req.stream is True
    assert req.echo["metadata"] == {"k": "v"} and req.echo["user"] == "u"
    assert req.echo["store"] is False and req.echo["safety_identifier"] == "s"


@pytest.mark.parametrize("body, param, code", [
    ({"input": "x", "temprature": 1}, "temprature", "unknown_field"),
    ({}, "input", "missing_field"),
    ({"input": 5}, "input", "invalid_type"),
    ({"input": []}, "input", "invalid_value"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
     "input[0].content[0].type", "unsupported"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input[0].content[0].type", "unsupported"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "invalid_value"),
    ({"input": [{"role": "user", "content": "x", "colour": 1}]}, "input[0].colour",
     "unknown_field"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]},
     "input[0].arguments", "invalid_type"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output",
     "missing_field"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type", "unsupported"),
    ({"input": [{"type": "web_search_call", "id": "w"}]}, "input[0].type", "unsupported"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type", "unsupported"),
    ({"input": "x", "tools": [{"type": "file_search", "vector_store_ids": []}]},
     "tools[0].type", "unsupported"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name", "invalid_value"),
    ({"input": "x", "tools": [WEATHER, WEATHER]}, "tools[1].name", "invalid_value"),
    ({"input": "x", "tools": [{**WEATHER, "function": {}}]}, "tools[0].function",
     "unknown_field"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice", "invalid_value"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice",
     "invalid_value"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}},
     "tool_choice.name", "invalid_value"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "web_search_preview"}},
     "tool_choice.type", "unsupported"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
    ({"input": "x", "temperature": 3}, "temperature", "invalid_value"),
    ({"input": "x", "top_p": 0}, "top_p", "invalid_value"),
    ({"input": "x", "truncation": "auto"}, "truncation", "unsupported"),
    ({"input": "x", "include": ["message.output_text.logprobs"]}, "include[0]",
     "unsupported"),
    ({"input": "x", "include": ["reasoning.encrypted_content", "file_search_call.results"]},
     "include[1]", "unsupported"),
    ({"input": "x", "background": True}, "background", "unsupported"),
    ({"input": "x", "conversation": "conv_1"}, "conversation", "unsupported"),
    ({"input": "x", "top_logprobs": 2}, "top_logprobs", "unsupported"),
    ({"input": "x", "stream_options": {"include_obfuscation": False}}, "stream_options",
     "invalid_value"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}},
     "text.format.schema", "invalid_type"),
    ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type", "invalid_value"),
    ({"input": "x", "text": {"verbosity": "high"}}, "text.verbosity", "unsupported"),
    ({"input": "x", "reasoning": {"effort": "extreme"}}, "reasoning.effort", "invalid_value"),
    ({"input": "x", "metadata": {"k": 1}}, "metadata.k", "invalid_type"),
    ({"input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "invalid_value"),
    ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "xx"}]},
     "input[0].encrypted_content", "unsupported"),
])
def test_rejections_name_the_field(body, param, code):
    _rejects(body, param, code)


def test_images_are_refused_clearly():
    msg = _rejects({"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "what is this?"},
        {"type": "input_image", "image_url": "https://example.com/a.png"}]}]},
        "input[0].content[1].type")
    assert "image" in msg and "text only" in msg


def test_open_chat_passes_what_the_chat_api_takes():
    from edgellm.server.responses_api import open_chat

    seen = {}

    class NewAPI:
        def chat_stream_chunks(self, messages, params=None, tools=None, tool_choice=None,
                               parallel_tool_calls=None, chat_template_kwargs=None):
            seen.update(tools=tools, tool_choice=tool_choice, parallel=parallel_tool_calls,
                        kwargs=chat_template_kwargs)

    class OldAPI:  # tools only: "none" then renders no tools at all
        def chat_stream_chunks(self, messages, params=None, tools=None):
            seen.update(old_tools=tools)

    req = parse_request({"input": "x", "tools": [WEATHER], "tool_choice": "none",
                         "reasoning": {"effort": "none"}})
    open_chat(NewAPI(), [], None, req)
    assert seen["tools"] == req.chat_tools and seen["tool_choice"] == "none"
    assert seen["parallel"] is True and seen["kwargs"]["enable_thinking"] is False
    open_chat(OldAPI(), [], None, req)
    assert seen["old_tools"] is None


def test_store_drops_the_least_recently_used():
    store = ResponseStore(capacity=2)
    for rid in ("a", "b"):
        store.put(rid, StoredResponse({"id": rid}, []))
    assert store.get("a") is not None  # a is now the most recent
    store.put("c", StoredResponse({"id": "c"}, []))
    assert store.get("b") is None and store.get("a") is not None and store.get("c") is not None
    assert store.delete("a") and not store.delete("a") and len(store) == 1


# --- the output builder --------------------------------------------------------------------------

def _types(events):
    return [e["type"] for e in events]


def test_builder_items_and_events_in_order():
    b = OutputBuilder()
    events = []
    for d in [ChatDelta(reasoning="hmm"), ChatDelta(reasoning=" ok"), ChatDelta(content="\n\n"),
              ChatDelta(content="Answer"), ChatDelta(content=" here\n"),
              ChatDelta(tool_calls=[ToolCallDelta(0, "call_1", "get_weather", "")]),
              ChatDelta(tool_calls=[ToolCallDelta(0, None, None, '{"city": ')]),
              ChatDelta(tool_calls=[ToolCallDelta(0, None, None, '"Oslo"}')]),
              ChatDelta(content="\n"),
              ChatDelta(tool_calls=[ToolCallDelta(1, "call_2", "get_time", "{}")])]:
        events += b.feed(d)
    events += b.finish("completed")
    assert _types(events) == [
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done"]
    out = b.output()
    assert [o["type"] for o in out] == ["reasoning", "message", "function_call", "function_call"]
    assert out[0]["content"] == [{"type": "reasoning_text", "text": "hmm ok"}]
    # the blank lines between the reasoning and the text belong to neither
    assert out[1]["content"][0]["text"] == "Answer here\n"
    assert out[2]["call_id"] == "call_1" and out[2]["name"] == "get_weather"
    assert json.loads(out[2]["arguments"]) == {"city": "Oslo"}
    assert out[3]["call_id"] == "call_2" and out[3]["arguments"] == "{}"
    assert all(o["status"] == "completed" for o in out)
    assert all(not k.startswith("_") for o in out for k in o)
    # every item's added event shows it empty and in progress, its done event shows it whole
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added[1]["item"]["content"] == [] and added[1]["item"]["status"] == "in_progress"
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["item"] for e in done] == out and [e["output_index"] for e in done] == [0, 1, 2, 3]
    # the deltas assemble to the final texts
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == out[1]["content"][0]["text"]
    assert b.assistant_message() == {
        "role": "assistant", "content": "Answer here\n", "reasoning_content": "hmm ok",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
                       {"id": "call_2", "type": "function",
                        "function": {"name": "get_time", "arguments": "{}"}}]}


def test_builder_whitespace_before_a_call_is_dropped_and_empty_answers_get_a_message():
    b = OutputBuilder()
    b.feed(ChatDelta(content="\n"))
    b.feed(ChatDelta(tool_calls=[ToolCallDelta(0, "call_1", "f", "{}")]))
    b.finish("completed")
    assert [o["type"] for o in b.output()] == ["function_call"]

    b = OutputBuilder()  # an answer's own leading whitespace is kept
    b.feed(ChatDelta(content="\n"))
    b.feed(ChatDelta(content="  x"))
    b.finish("completed")
    assert b.output()[0]["content"][0]["text"] == "\n  x"

    b = OutputBuilder()
    events = b.finish("completed")
    assert [o["type"] for o in b.output()] == ["message"]
    assert b.output()[0]["content"][0]["text"] == ""
    assert "response.output_text.done" in _types(events)

    b = OutputBuilder()
    b.feed(ChatDelta(content="cut"))
    b.finish("incomplete")
    assert b.output()[0]["status"] == "incomplete"


# --- the routes over a scripted engine ---------------------------------------------------------

class ScriptedLLM:
    """Streams the ChatDeltas in `script` one chunk each (one token id per chunk), as the chat
    API does: `chunk.delta` carries the parsed piece, the last chunk the finish reason and
    usage. Records what each call asked for."""

    n_ctx = 4096
    n_vocab = 1000
    isa = "fake"

    def __init__(self):
        self.script = [ChatDelta(content="Hello"), ChatDelta(content=" world")]
        self.calls = []
        self.raise_on_open = None
        self.fail_after = None     # raise after this many chunks
        self.delay = 0.001         # seconds per chunk
        self.finished = 0
        self.aborted = 0

    def stats(self):
        return {}

    def close(self):
        pass

    def chat_stream_chunks(self, messages, params=None, tools=None, tool_choice=None,
                           parallel_tool_calls=None, chat_template_kwargs=None):
        self.calls.append({"messages": messages, "params": params, "tools": tools,
                           "tool_choice": tool_choice, "parallel_tool_calls": parallel_tool_calls,
                           "chat_template_kwargs": chat_template_kwargs})
        if self.raise_on_open is not None:
            raise self.raise_on_open
        return self._run(list(self.script), params)

    async def _run(self, script, params):
        limit = params.max_tokens
        prompt = 11
        calls = any(d.tool_calls for d in script)
        done = False
        try:
            for i, d in enumerate(script):
                await asyncio.sleep(self.delay)
                if self.fail_after is not None and i >= self.fail_after:
                    raise RuntimeError("engine exploded")
                n = i + 1
                cut = limit is not None and n >= limit and n < len(script)
                last = cut or n == len(script)
                finish = None
                if last:
                    finish = "length" if cut else ("tool_calls" if calls else "stop")
                chunk = CompletionChunk(text=d.content, token_ids=[100 + i], finish_reason=finish,
                                        usage=Usage(prompt, n, prompt + n, 3) if last else None)
                chunk.delta = d
                yield chunk
                if last:
                    done = True
                    return
        finally:
            if done:
                self.finished += 1
            else:
                self.aborted += 1


class RunningServer(AppServer):
    def __init__(self, engine, **cfg):
        self.engine = engine
        port = free_port()
        config = ServerConfig(model="fake-model", alias="fake", port=port, **cfg)
        self.app = create_app(config, loader=lambda c: engine,
                              params_factory=edgellm.llm.SamplingParams)
        self.start(self.app, port)
        self.wait_ready()

    def client(self):
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0)


@pytest.fixture
def fake():
    s = RunningServer(ScriptedLLM())
    yield s
    s.stop()


def _raw_events(text: str):
    """(event line, data) pairs of an SSE body; checks the two name the same type."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        data = json.loads(lines[1][len("data: "):])
        assert lines[0][len("event: "):] == data["type"]
        out.append(data)
    return out


THINK_TEXT_CALL = [ChatDelta(reasoning="The user"), ChatDelta(reasoning=" wants weather."),
                   ChatDelta(content="Checking."),
                   ChatDelta(tool_calls=[ToolCallDelta(0, "call_abc", "get_weather", "")]),
                   ChatDelta(tool_calls=[ToolCallDelta(0, None, None, '{"city":')]),
                   ChatDelta(tool_calls=[ToolCallDelta(0, None, None, ' "Oslo"}')])]


def test_sdk_parses_reasoning_text_and_function_call(fake):
    fake.engine.script = THINK_TEXT_CALL
    c = fake.client()
    r = c.responses.create(model="fake", input="Weather in Oslo?", instructions="be useful",
                           tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                           reasoning={"effort": "low"}, metadata={"k": "v"}, user="u1",
                           temperature=0.2, max_output_tokens=50)
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert [o.type for o in r.output] == ["reasoning", "message", "function_call"]
    assert r.output[0].content[0].text == "The user wants weather."
    assert r.output_text == "Checking."
    call = r.output[2]
    assert call.call_id == "call_abc" and call.name == "get_weather" and call.id.startswith("fc_")
    assert json.loads(call.arguments) == {"city": "Oslo"}
    assert r.usage.input_tokens == 11 and r.usage.output_tokens == 6
    assert r.usage.total_tokens == 17 and r.usage.input_tokens_details.cached_tokens == 3
    assert r.usage.output_tokens_details.reasoning_tokens == 2
    assert r.instructions == "be useful" and r.metadata == {"k": "v"} and r.user == "u1"
    assert r.tool_choice == "required" and r.tools[0].name == "get_weather"
    assert r.parallel_tool_calls is False and r.temperature == 0.2
    assert r.max_output_tokens == 50 and r.reasoning.effort == "low"
    assert r.incomplete_details is None and r.error is None
    call_args = fake.engine.calls[-1]
    assert call_args["messages"] == [{"role": "system", "content": "be useful"},
                                     {"role": "user", "content": "Weather in Oslo?"}]
    assert call_args["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": WEATHER["description"],
        "parameters": WEATHER["parameters"]}}]
    assert call_args["tool_choice"] == "required"
    assert call_args["parallel_tool_calls"] is False
    assert call_args["chat_template_kwargs"] == {"enable_thinking": True,
                                                 "reasoning_effort": "low"}
    assert call_args["params"].max_tokens == 50 and call_args["params"].temperature == 0.2
    # the output passed back as input (SDK objects): one assistant turn with its reasoning
    c.responses.create(model="fake", tools=[WEATHER], input=[
        {"role": "user", "content": "Weather in Oslo?"}, *r.output,
        {"type": "function_call_output", "call_id": "call_abc", "output": "cold"}])
    assert fake.engine.calls[-1]["messages"] == [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "The user wants weather.",
         "tool_calls": [{"id": "call_abc", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_abc", "content": "cold", "name": "get_weather"}]


def test_stream_events_in_order_with_sequence_numbers(fake):
    fake.engine.script = THINK_TEXT_CALL
    r = httpx.post(fake.url + "/v1/responses", json={"input": "x", "stream": True,
                                                     "tools": [WEATHER]}, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _raw_events(r.text)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["id"] == events[0]["response"]["id"]
    assert [o["type"] for o in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][2]["arguments"] == '{"city": "Oslo"}'


def test_sdk_stream_helper_assembles_the_response(fake):
    fake.engine.script = [ChatDelta(content=w) for w in ["One", " two", " three"]]
    c = fake.client()
    deltas = []
    with c.responses.stream(model="fake", input="count") as stream:
        for ev in stream:
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        final = stream.get_final_response()
    assert deltas == ["One", " two", " three"]
    assert final.output_text == "One two three" and final.status == "completed"
    # stream=True through create: typed events
    kinds = [ev.type for ev in c.responses.create(model="fake", input="count", stream=True)]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


def test_max_output_tokens_makes_it_incomplete(fake):
    fake.engine.script = [ChatDelta(content=w) for w in ["a", "b", "c", "d"]]
    c = fake.client()
    r = c.responses.create(model="fake", input="x", max_output_tokens=2)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output_text == "ab" and r.output[0].status == "incomplete"
    kinds = [ev.type for ev in c.responses.create(model="fake", input="x", max_output_tokens=2,
                                                  stream=True)]
    assert kinds[-1] == "response.incomplete"


def test_previous_response_id_store_retrieve_delete(fake):
    c = fake.client()
    fake.engine.script = [ChatDelta(content="Noted.")]
    r1 = c.responses.create(model="fake", input="My name is Ada.", instructions="first rules")
    fake.engine.script = [ChatDelta(content="Ada.")]
    r2 = c.responses.create(model="fake", input="My name?", previous_response_id=r1.id,
                            instructions="second rules")
    assert r2.previous_response_id == r1.id
    # the earlier turn comes back; its instructions do not (as OpenAI does)
    assert fake.engine.calls[-1]["messages"] == [
        {"role": "system", "content": "second rules"},
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "My name?"}]
    got = c.responses.retrieve(r2.id)
    assert got.id == r2.id and got.output_text == "Ada."
    # streamed responses are kept too
    with c.responses.stream(model="fake", input="again", previous_response_id=r2.id) as s:
        final = s.get_final_response()
    assert c.responses.retrieve(final.id).output_text == "Ada."
    assert [m["content"] for m in fake.engine.calls[-1]["messages"]] == [
        "My name is Ada.", "Noted.", "My name?", "Ada.", "again"]
    c.responses.delete(r1.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r1.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.delete(r1.id)
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model="fake", input="x", previous_response_id=r1.id)
    assert info.value.body["param"] == "previous_response_id"
    assert info.value.body["code"] == "previous_response_not_found"
    # store: false keeps nothing
    r3 = c.responses.create(model="fake", input="secret", store=False)
    assert r3.store is False
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r3.id)


def test_input_items_are_listed(fake):
    c = fake.client()
    r = c.responses.create(model="fake", input=[
        {"role": "user", "content": "q1"},
        {"type": "message", "role": "assistant", "id": "msg_given",
         "content": [{"type": "output_text", "text": "a1"}]},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]}])
    items = list(c.responses.input_items.list(r.id, order="asc"))
    assert [i.type for i in items] == ["message", "message", "function_call",
                                       "function_call_output", "message"]
    assert items[0].content[0].type == "input_text" and items[0].content[0].text == "q1"
    assert items[1].id == "msg_given" and items[1].content[0].text == "a1"
    assert items[2].call_id == "call_1" and items[3].output == "42"
    assert items[4].role == "developer"
    assert len({i.id for i in items}) == 5
    # newest first by default; pages of 2 follow the cursor
    pages = c.responses.input_items.list(r.id, limit=2)
    assert [i.id for i in pages] == [i.id for i in reversed(items)]
    first = c.responses.input_items.list(r.id, limit=2)
    assert len(first.data) == 2 and first.has_more
    # a string input is one user message; only this response's input, not the earlier turns
    r2 = c.responses.create(model="fake", input="next", previous_response_id=r.id)
    items2 = list(c.responses.input_items.list(r2.id))
    assert len(items2) == 1 and items2[0].role == "user" and items2[0].content[0].text == "next"
    for query, param in (("limit=0", "limit"), ("order=up", "order"), ("after=nope", "after"),
                         ("colour=1", "colour")):
        resp = httpx.get(fake.url + f"/v1/responses/{r.id}/input_items?{query}")
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param
    with pytest.raises(openai.NotFoundError):
        c.responses.input_items.list("resp_missing")


def test_tool_round_trip_reaches_the_engine_as_chat_messages(fake):
    c = fake.client()
    fake.engine.script = [ChatDelta(tool_calls=[ToolCallDelta(0, "call_9", "get_weather",
                                                              '{"city": "Rome"}')])]
    r1 = c.responses.create(model="fake", input="Weather in Rome?", tools=[WEATHER])
    assert [o.type for o in r1.output] == ["function_call"]
    fake.engine.script = [ChatDelta(content="Sunny in Rome.")]
    r2 = c.responses.create(model="fake", previous_response_id=r1.id, tools=[WEATHER], input=[
        {"type": "function_call_output", "call_id": r1.output[0].call_id, "output": "sunny"}])
    assert r2.output_text == "Sunny in Rome."
    assert fake.engine.calls[-1]["messages"] == [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_9", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "sunny", "name": "get_weather"}]
    # the client may also send the whole conversation itself, output items included
    r3 = c.responses.create(model="fake", tools=[WEATHER], input=[
        {"role": "user", "content": "Weather in Rome?"},
        *r1.output,  # the SDK's own objects, as OpenAI's cookbook passes them back
        {"type": "function_call_output", "call_id": "call_9", "output": "sunny"}])
    assert r3.status == "completed"
    assert fake.engine.calls[-1]["messages"] == fake.engine.calls[-2]["messages"]


def test_errors_use_the_envelope(fake):
    c = fake.client()
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model="fake", input="x", tools=[{"type": "web_search"}])
    assert info.value.body["param"] == "tools[0].type"
    r = httpx.post(fake.url + "/v1/responses", json={"input": "x", "temprature": 1}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["param"] == "temprature"
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    fake.engine.raise_on_open = edgellm.ContextLengthError("prompt has 9000 tokens")
    r = httpx.post(fake.url + "/v1/responses", json={"input": "x", "stream": True}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    r = httpx.get(fake.url + "/v1/responses/resp_missing", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "response_not_found"
    fake.engine.raise_on_open = None
    rid = httpx.post(fake.url + "/v1/responses", json={"input": "x"}, timeout=10).json()["id"]
    assert httpx.get(fake.url + f"/v1/responses/{rid}?stream=false").status_code == 200
    r = httpx.get(fake.url + f"/v1/responses/{rid}?stream=true&starting_after=3")
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported"


def test_failure_mid_stream_is_reported_in_band_and_not_stored(fake):
    fake.engine.script = [ChatDelta(content=w) for w in ["a", "b", "c", "d"]]
    fake.engine.fail_after = 2
    r = httpx.post(fake.url + "/v1/responses", json={"input": "x", "stream": True}, timeout=10)
    assert r.status_code == 200
    events = _raw_events(r.text)
    kinds = [e["type"] for e in events]
    assert kinds[-6:] == ["response.output_text.delta", "response.output_text.done",
                          "response.content_part.done", "response.output_item.done", "error",
                          "response.failed"]
    assert events[-2]["code"] == "internal_error" and "exploded" in events[-2]["message"]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["output"][0]["content"][0]["text"] == "ab"
    assert failed["output"][0]["status"] == "incomplete"
    assert httpx.get(fake.url + f"/v1/responses/{failed['id']}").status_code == 404
    # the SDK's stream helper sees the failure as an event, not as a parse error
    with fake.client().responses.stream(model="fake", input="x") as stream:
        kinds = [ev.type for ev in stream]
    assert kinds[-2:] == ["error", "response.failed"]
    # not streamed: a 500 in the envelope
    r = httpx.post(fake.url + "/v1/responses", json={"input": "x"}, timeout=10)
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"


def test_timeout_and_disconnect_abort_the_engine_request():
    engine = ScriptedLLM()
    engine.script = [ChatDelta(content="x")] * 200
    engine.delay = 0.02
    s = RunningServer(engine, timeout=0.3)
    try:
        r = httpx.post(s.url + "/v1/responses", json={"input": "x"}, timeout=10)
        assert r.status_code == 504 and r.json()["error"]["type"] == "timeout_error"
        r = httpx.post(s.url + "/v1/responses", json={"input": "x", "stream": True}, timeout=10)
        events = _raw_events(r.text)
        assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
        assert events[-2]["code"] == "timeout"
        assert engine.aborted == 2
        # a client that goes away mid-stream
        with httpx.stream("POST", s.url + "/v1/responses", json={"input": "x", "stream": True},
                          timeout=10) as resp:
            for line in resp.iter_lines():
                if "output_text.delta" in line:
                    break
        deadline = time.monotonic() + 5
        while engine.aborted < 3:
            assert time.monotonic() < deadline, "the engine request was not aborted"
            time.sleep(0.02)
        assert engine.finished == 0
    finally:
        s.stop()


# --- the real server on Qwen2.5-Coder-0.5B -----------------------------------------------------

from test_server import KEY as _KEY, ServerProcess as _RealServer  # noqa: E402


class ServerProcess(_RealServer):
    """The real `edgellm serve` subprocess (tests/test_server.py); its client is the SDK's."""

    def client(self):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=_KEY, max_retries=0,
                             timeout=120)


@pytest.fixture(scope="module")
def qwen(qwen_path):
    s = ServerProcess(qwen_path, "--ctx-size", "4096", "--parallel", "4")
    try:
        yield s.wait_ready()
    finally:
        s.stop()


GREEDY = dict(model="qwen", temperature=0, max_output_tokens=40)


@pytest.mark.real_model
@pytest.mark.slow
def test_real_string_input(qwen):
    r = qwen.client().responses.create(input="What is the capital of France? One word.",
                                       **GREEDY)
    assert r.status == "completed" and "Paris" in r.output_text
    assert [o.type for o in r.output] == ["message"]
    assert r.usage.input_tokens > 10 and 0 < r.usage.output_tokens <= 40
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


@pytest.mark.real_model
@pytest.mark.slow
def test_real_instructions_steer_the_answer(qwen):
    c = qwen.client()
    ins = "Whatever the user says, reply with exactly one word: BANANA."
    r = c.responses.create(input="Tell me about the sea.", instructions=ins, **GREEDY)
    assert "BANANA" in r.output_text and r.instructions == ins
    control = c.responses.create(input="Tell me about the sea.", **GREEDY)
    assert "BANANA" not in control.output_text


@pytest.mark.real_model
@pytest.mark.slow
def test_real_item_input(qwen):
    c = qwen.client()
    r = c.responses.create(input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is 2+3? Answer with just the number."}]}], **GREEDY)
    assert r.output_text.strip() == "5"
    # an earlier exchange written out as items is seen by the model
    r = c.responses.create(input=[
        {"role": "user", "content": "My favourite colour is teal."},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Noted: teal."}]},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "What is my favourite colour? One word."}]}],
        **GREEDY)
    assert "teal" in r.output_text.lower()


@pytest.mark.real_model
@pytest.mark.slow
def test_real_max_output_tokens_is_incomplete(qwen):
    r = qwen.client().responses.create(input="Count from 1 to 100, comma separated.",
                                       model="qwen", temperature=0, max_output_tokens=5)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5 and r.output[0].status == "incomplete"
    assert r.output_text


@pytest.mark.real_model
@pytest.mark.slow
def test_real_streaming_events(qwen):
    c = qwen.client()
    kinds, deltas, seqs = [], [], []
    with c.responses.stream(input="Say hello in five words.", **GREEDY) as stream:
        for ev in stream:
            kinds.append(ev.type)
            seqs.append(ev.sequence_number)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        final = stream.get_final_response()
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"} and len(deltas) > 1
    assert seqs == list(range(len(seqs)))
    assert "".join(deltas) == final.output_text and final.output_text
    # the stored streamed response
    assert c.responses.retrieve(final.id).output_text == final.output_text


@pytest.mark.real_model
@pytest.mark.slow
def test_real_previous_response_id_recalls_the_earlier_turn(qwen):
    c = qwen.client()
    r1 = c.responses.create(input="My name is Zorblax. Remember it.", **GREEDY)
    r2 = c.responses.create(input="What is my name?", previous_response_id=r1.id, **GREEDY)
    assert "Zorblax" in r2.output_text and r2.previous_response_id == r1.id
    assert r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens
    control = c.responses.create(input="What is my name?", **GREEDY)
    assert "Zorblax" not in control.output_text
    with pytest.raises(openai.BadRequestError):
        c.responses.create(input="x", previous_response_id="resp_unknown", **GREEDY)


def _check_against_schema(args: dict, schema: dict):
    assert isinstance(args, dict)
    for key in schema.get("required", []):
        assert key in args, (key, args)
    for key, value in args.items():
        assert key in schema["properties"], (key, args)
        want = {"string": str, "integer": int, "number": (int, float)}[schema["properties"][key]["type"]]
        assert isinstance(value, want), (key, value)


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_weather"}])
def test_real_function_tool_round_trip(qwen, choice):
    c = qwen.client()
    r1 = c.responses.create(input="What's the weather in Paris?", tools=[WEATHER],
                            tool_choice=choice, model="qwen", temperature=0,
                            max_output_tokens=60)
    calls = [o for o in r1.output if o.type == "function_call"]
    assert calls, r1.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.status == "completed"
    args = json.loads(call.arguments)
    _check_against_schema(args, WEATHER["parameters"])
    assert "paris" in args["city"].lower()
    # the result goes back; with tool_choice "none" the model answers in text
    result = json.dumps({"temperature_c": 21, "sky": "sunny"})
    r2 = c.responses.create(previous_response_id=r1.id, tools=[WEATHER], tool_choice="none",
                            input=[{"type": "function_call_output", "call_id": call.call_id,
                                    "output": result}], model="qwen", temperature=0,
                            max_output_tokens=60)
    assert [o.type for o in r2.output] == ["message"], r2.output
    assert "21" in r2.output_text, r2.output_text  # the tool's answer reached the model


@pytest.mark.real_model
@pytest.mark.slow
def test_real_parallel_tool_calls(qwen):
    c = qwen.client()
    ask = dict(input="What's the weather in Paris and in Rome?", tools=[WEATHER],
               tool_choice="required", model="qwen", temperature=0, max_output_tokens=100)
    r = c.responses.create(**ask)  # parallel_tool_calls defaults to true, as OpenAI's
    assert r.parallel_tool_calls is True
    cities = [json.loads(o.arguments)["city"] for o in r.output if o.type == "function_call"]
    assert cities == ["Paris", "Rome"], r.output
    assert len({o.call_id for o in r.output}) == 2
    one = c.responses.create(parallel_tool_calls=False, **ask)
    assert [o.type for o in one.output] == ["function_call"] and one.parallel_tool_calls is False


@pytest.mark.real_model
@pytest.mark.slow
def test_real_streamed_function_call(qwen):
    c = qwen.client()
    arg_deltas = []
    with c.responses.stream(input="What's the weather in Rome?", tools=[WEATHER],
                            tool_choice="required", model="qwen", temperature=0,
                            max_output_tokens=60) as stream:
        for ev in stream:
            if ev.type == "response.function_call_arguments.delta":
                arg_deltas.append(ev.delta)
        final = stream.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    assert "".join(arg_deltas) == "".join(o.arguments for o in calls)
    assert "rome" in json.loads(calls[0].arguments)["city"].lower()


@pytest.mark.real_model
@pytest.mark.slow
def test_real_json_schema_output(qwen):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}
    r = qwen.client().responses.create(
        input="Give a person named Ann aged 30 as JSON.", model="qwen", temperature=0,
        max_output_tokens=60, text={"format": {"type": "json_schema", "name": "person",
                                               "schema": schema, "strict": True}})
    data = json.loads(r.output_text)
    _check_against_schema(data, schema)
    assert data["name"] == "Ann" and data["age"] == 30
    assert r.text.format.type == "json_schema"


@pytest.fixture(scope="module")
def qwen_thinking(qwen_path, tmp_path_factory):
    tmpl = tmp_path_factory.mktemp("tmpl") / "think.jinja"
    tmpl.write_text(THINK_TEMPLATE)
    s = ServerProcess(qwen_path, "--ctx-size", "2048", "--parallel", "2",
                      "--chat-template", str(tmpl))
    try:
        yield s.wait_ready()
    finally:
        s.stop()


@pytest.mark.real_model
@pytest.mark.slow
def test_real_thinking_template_gives_a_reasoning_item(qwen_thinking):
    """The template opens <think>: what the model writes until </think> is a reasoning item;
    reasoning effort "none" closes the block in the template (enable_thinking false)."""
    c = qwen_thinking.client()
    ask = dict(input="What is 2+2?", model="qwen", temperature=0, max_output_tokens=40)
    r = c.responses.create(reasoning={"effort": "medium"}, **ask)
    assert r.output[0].type == "reasoning", r.output
    thought = r.output[0].content[0].text
    assert thought.strip() and "<think>" not in thought and "</think>" not in thought
    assert "</think>" not in r.output_text
    assert 0 < r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens
    kinds, deltas = [], []
    with c.responses.stream(reasoning={"effort": "medium"}, **ask) as stream:
        for ev in stream:
            kinds.append(ev.type)
            if ev.type == "response.reasoning_text.delta":
                deltas.append(ev.delta)
        final = stream.get_final_response()
    assert "response.reasoning_text.done" in kinds
    assert "".join(deltas) == final.output[0].content[0].text == thought
    plain = c.responses.create(reasoning={"effort": "none"}, **ask)
    assert [o.type for o in plain.output] == ["message"] and plain.output_text.strip()
    assert plain.usage.output_tokens_details.reasoning_tokens == 0
