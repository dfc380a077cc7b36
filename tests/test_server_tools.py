"""Tool calls, structured output and reasoning through the real server and real clients: the
official `openai` SDK and `langchain-openai` against `edgellm serve` on Qwen2.5-Coder-0.5B
(whose template is Hermes-style `<tool_call>`), plus a thinking template on SmolLM2."""
import json
import os
import random
from pathlib import Path

import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from server_helpers import THINK_TEMPLATE  # noqa: E402
from test_server import KEY, ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

WEATHER_PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[A-Z][a-z]+( [A-Z][a-z]+)?$"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast for a city",
                                      "parameters": WEATHER_PARAMS}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
                                      "parameters": {"type": "object", "properties": {
                                          "a": {"type": "integer"}, "b": {"type": "integer"}},
                                          "required": ["a", "b"]}}},
]
ASK = [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]


@pytest.fixture(scope="module")
def server(qwen_path):
    s = ServerProcess(qwen_path, "--parallel", "4").wait_ready()
    yield s
    s.proc.terminate()
    s.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def client(server):
    return server.client(timeout=120)


def _valid_weather(args: str):
    obj = json.loads(args)
    jsonschema.validate(obj, WEATHER_PARAMS)
    return obj


def test_auto_tool_call(client):
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0,
                                       max_tokens=100)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] == "Paris"
    assert not choice.message.content  # no marker or JSON text leaks into content


def test_required_tool_call(client):
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi there!"}],
                                       tools=TOOLS, tool_choice="required", temperature=0,
                                       max_tokens=120)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls and choice.message.tool_calls[0].function.name in ("get_weather", "add")


def test_named_tool_always_valid_over_seeds(client):
    """tool_choice naming a function at temperature 0.9: the grammar guarantees a call of that
    function whose arguments validate (pattern, enum, integer range, required, no extras)."""
    seen = set()
    for seed in range(16):
        r = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": random.Random(seed).choice(
                ["Weather in Rome?", "Will it rain in New York this week?", "hello", "2+2?"])}],
            tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
            temperature=0.9, seed=seed, max_tokens=150)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", (seed, choice)
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather"
        obj = _valid_weather(call.function.arguments)
        seen.add(obj["city"])
    assert len(seen) >= 2  # sampled, not one fixed answer


def test_streamed_tool_call(client):
    stream = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                            tool_choice="required", temperature=0, max_tokens=100,
                                            stream=True)
    first_role = None
    pieces, content, finish = [], [], None
    for chunk in stream:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        if first_role is None:
            first_role = d.role
        if d.content:
            content.append(d.content)
        for tc in d.tool_calls or []:
            pieces.append(tc)
        finish = chunk.choices[0].finish_reason or finish
    assert first_role == "assistant"
    assert finish == "tool_calls"
    assert not "".join(content), "no marker text in content"
    head = pieces[0]
    assert head.index == 0 and head.id and head.function.name == "get_weather"
    assert all(p.id is None and p.function.name is None for p in pieces[1:])
    assert len(pieces) > 2, "arguments arrive in pieces"
    args = "".join(p.function.arguments or "" for p in pieces)
    _valid_weather(args)


def test_tool_round_trip(client, server):
    r = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                       temperature=0, max_tokens=100)
    msg = r.choices[0].message
    call = msg.tool_calls[0]
    history = ASK + [msg.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id,
                      "content": json.dumps({"forecast": "sunny", "high_c": 24})}]
    # the rendered prompt carries the arguments once, as an object (not a JSON string)
    import httpx
    rendered = httpx.post(server.url + "/apply-template", headers=server.headers,
                          json={"messages": history, "tools": TOOLS}, timeout=30)
    if rendered.status_code == 200:
        prompt = rendered.json()["prompt"]
        assert '"arguments": {"city"' in prompt and '\\"city\\"' not in prompt
    # the tool result is answered in text once no further call is allowed
    r2 = client.chat.completions.create(model="m", messages=history, tools=TOOLS,
                                        tool_choice="none", temperature=0, max_tokens=60)
    assert r2.choices[0].finish_reason in ("stop", "length")
    assert r2.choices[0].message.tool_calls is None
    assert r2.choices[0].message.content
    # and with tools still offered, the answer is a valid assistant turn either way
    r3 = client.chat.completions.create(model="m", messages=history, tools=TOOLS, temperature=0,
                                        max_tokens=60)
    m3 = r3.choices[0].message
    assert m3.content or m3.tool_calls
    for tc in m3.tool_calls or []:
        json.loads(tc.function.arguments)


def test_named_tool_unknown_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    assert "nope" in str(e.value)


def test_response_format_json_object_with_schema(server):
    """llama-server's form {"type": "json_object", "schema": ...} is enforced, not ignored."""
    schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 100,
                                                          "maximum": 999}},
              "required": ["answer"]}
    r = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Give me a number."}], "temperature": 0.9,
        "seed": 4, "max_tokens": 40, "response_format": {"type": "json_object", "schema": schema}})
    assert r.status_code == 200, r.text
    obj = json.loads(r.json()["choices"][0]["message"]["content"])
    jsonschema.validate(obj, schema)


def test_langchain_bind_tools_and_structured_output(server):
    lc = pytest.importorskip("langchain_openai")
    from pydantic import BaseModel, Field

    llm = lc.ChatOpenAI(base_url=server.url + "/v1", api_key=KEY, model="m", temperature=0,
                        max_tokens=100, max_retries=0, timeout=120)

    def get_weather(city: str, unit: str, days: int) -> str:
        """Weather forecast for a city (unit: celsius or fahrenheit, days: 1-7)."""
        return "sunny"

    msg = llm.bind_tools([get_weather], tool_choice="get_weather").invoke(ASK[0]["content"])
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_weather"
    assert isinstance(msg.tool_calls[0]["args"], dict) and "city" in msg.tool_calls[0]["args"]

    class Person(BaseModel):
        """A person mentioned in the text."""
        name: str = Field(description="the person's first name")
        age: int = Field(description="age in years")

    out = llm.with_structured_output(Person, method="function_calling").invoke(
        "Alice is 31 years old. Extract the person.")
    assert isinstance(out, Person), out
    assert out.name and isinstance(out.age, int)


@pytest.fixture(scope="module")
def think_server(smollm2_path, tmp_path_factory):
    tmpl = tmp_path_factory.mktemp("tmpl") / "think.jinja"
    tmpl.write_text(THINK_TEMPLATE)
    s = ServerProcess(smollm2_path, "--chat-template", str(tmpl)).wait_ready()
    yield s
    s.proc.terminate()
    s.proc.wait(timeout=30)


def test_reasoning_content_split_and_streamed(think_server):
    """The template opens <think>: text up to </think> is reasoning_content, the rest content
    (a grammar pins the output's shape so the small model cannot wander)."""
    grammar = 'root ::= [a-z ]{3,30} "</think>" "\\n" [A-Za-z ]{1,30}'
    body = {"messages": [{"role": "user", "content": "Say hi."}], "grammar": grammar,
            "temperature": 0, "max_tokens": 60}
    r = think_server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert msg["reasoning_content"] and "</think>" not in msg["reasoning_content"]
    assert msg["content"] and "<think>" not in msg["content"] and "</think>" not in msg["content"]
    c = think_server.client(timeout=60)
    reasoning, content = "", ""
    for chunk in c.chat.completions.create(model="m", messages=body["messages"], temperature=0,
                                           max_tokens=60, stream=True,
                                           extra_body={"grammar": grammar}):
        if chunk.choices:
            d = chunk.choices[0].delta.model_dump()
            reasoning += d.get("reasoning_content") or ""
            content += d.get("content") or ""
    assert (reasoning, content) == (msg["reasoning_content"], msg["content"])


def test_chat_template_kwargs_reach_the_template(think_server):
    r = think_server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False}})
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    # thinking was closed by the template: nothing is reasoning
    assert not msg.get("reasoning_content")
    assert msg["content"]


def test_embeddings_with_openai_sdk(client):
    """The same Qwen2.5-Coder-0.5B server embeds too (float and base64), L2-normalised."""
    import math
    texts = ["def add(a, b): return a + b", "function sum(x, y) { return x + y; }",
             "The cat sat on the mat."]
    r = client.embeddings.create(model="m", input=texts)
    vecs = [d.embedding for d in r.data]
    assert [d.index for d in r.data] == [0, 1, 2] and len(vecs[0]) == 896
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-3 for v in vecs)
    cos = [sum(a * b for a, b in zip(vecs[0], v)) for v in vecs[1:]]
    assert cos[0] > cos[1]  # code is closer to code than to a sentence about a cat
    assert r.usage.prompt_tokens > 0
    import base64
    import struct
    b = client.embeddings.create(model="m", input=texts[0], encoding_format="base64")
    raw = base64.b64decode(b.data[0].embedding)  # asked for explicitly: the SDK hands it over
    dec = struct.unpack(f"<{len(raw) // 4}f", raw)
    assert len(dec) == 896 and max(abs(x - y) for x, y in zip(dec, vecs[0])) < 1e-5


def test_assistant_prefill_continue_final_message_and_verbose(server):
    """A conversation ending with an assistant message is continued (llama-server's prefill,
    vLLM's continue_final_message); "verbose" shows the rendered prompt."""
    convo = [{"role": "user", "content": "Name a fruit."},
             {"role": "assistant", "content": "My answer is: the ban"}]
    for extra in ({}, {"continue_final_message": True, "add_generation_prompt": False}):
        r = server.post("/v1/chat/completions", {"messages": convo, "max_tokens": 4,
                                                 "temperature": 0, "verbose": True, **extra})
        assert r.status_code == 200, r.text
        prompt = r.json()["__verbose"]["prompt"]
        assert prompt.endswith("<|im_start|>assistant\nMy answer is: the ban"), prompt
    r = server.post("/v1/chat/completions", {"messages": convo[:1], "max_tokens": 2,
                                             "verbose": True, "add_generation_prompt": False})
    assert not r.json()["__verbose"]["prompt"].endswith("<|im_start|>assistant\n")
    r = server.post("/v1/chat/completions", {"messages": convo[:1], "max_tokens": 2})
    assert "__verbose" not in r.json()
    bad = [({"messages": convo, "add_generation_prompt": True, "continue_final_message": True},
            "cannot both be true"),
           ({"messages": convo + [{"role": "assistant", "content": "x"}]}, "two assistant"),
           ({"messages": convo[:1], "continue_final_message": True}, "must be the assistant")]
    for body, text in bad:
        r = server.post("/v1/chat/completions", {**body, "max_tokens": 2})
        assert r.status_code == 400 and text in r.json()["error"]["message"], r.text


def test_timings_per_token_and_usage_timings(server):
    import httpx
    with httpx.stream("POST", server.url + "/v1/chat/completions", headers=server.headers,
                      timeout=60, json={"messages": [{"role": "user", "content": "Count to five."}],
                                        "max_tokens": 6, "temperature": 0, "stream": True,
                                        "stream_options": {"include_usage": True},
                                        "timings_per_token": True}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    assert "timings" not in events[0] and events[0]["choices"][0]["delta"]["role"] == "assistant"
    ns = [e["timings"]["predicted_n"] for e in events[1:] if e["choices"]]
    assert ns and ns == sorted(ns) and ns[-1] <= 6
    last = events[-1]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] <= 6
    assert last["timings"]["predicted_per_second"] > 0 and "prompt_per_second" in last["timings"]
