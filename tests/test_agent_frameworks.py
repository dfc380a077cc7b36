"""Agent frameworks against `edgellm serve` on Qwen2.5-Coder-1.5B (issue 43 items 12 and 15):
openai-agents' Runner with a function tool over chat completions and over the Responses API,
and pydantic-ai with a tool and an output_type (as a tool, and as a native response_format).

Each run must call the tool with the right arguments and end with an answer built from the
tool's result (22 degrees is only in the result). The structured ones send tools together with
a response_format under tool_choice auto: before, the schema held from the first token and the
model could never call the tool (it invented the temperature). Temperature 0, short answers;
the instruction says what to do with the result (without one, this 1.5B model calls the tool
again after getting its result, under any server)."""
import asyncio
import json

import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")
openai = pytest.importorskip("openai")
agents = pytest.importorskip("agents")
pydantic_ai = pytest.importorskip("pydantic_ai")

from pydantic import BaseModel  # noqa: E402

from conftest import require_model  # noqa: E402
from test_server import KEY, ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

INSTRUCTIONS = ("You are a weather assistant. Look up the weather with get_weather, then tell the "
                "user what it returned.")
QUESTION = "What is the weather in Paris?"
MAX_TOKENS = 60


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                   "additionalProperties": False}}}


class Weather(BaseModel):
    city: str
    temperature_c: int


@pytest.fixture(scope="module")
def server():
    s = ServerProcess(require_model("qwen2.5-coder-1.5b"), "--parallel", "1", "-c", "2048")
    s.wait_ready(timeout=300)
    yield s
    s.stop()


@pytest.fixture
def calls():
    return []


def weather_tool(calls):
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"The weather in {city} is sunny, 22 degrees celsius."
    return get_weather


def streamed(client, **request):
    """One streamed chat completion: (content, the calls' names, their arguments joined, finish)."""
    content, args, names, finish = "", "", [], None
    for ch in client.chat.completions.create(model="m", temperature=0, max_tokens=MAX_TOKENS, stream=True,
                                             **request):
        for c in ch.choices:
            content += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                names += [tc.function.name] if tc.function.name else []
                args += tc.function.arguments or ""
            finish = c.finish_reason or finish
    return content, names, args, finish


def async_client(server):
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)


def run_openai_agents(server, calls, api, output_type=None):
    from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner,
                        function_tool, set_tracing_disabled)
    set_tracing_disabled(True)
    model_class = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
    agent = Agent(name="weather", instructions=INSTRUCTIONS, tools=[function_tool(weather_tool(calls))],
                  model=model_class(model="m", openai_client=async_client(server)),
                  model_settings=ModelSettings(temperature=0, max_tokens=MAX_TOKENS),
                  output_type=output_type)
    return asyncio.run(Runner.run(agent, QUESTION, max_turns=4)).final_output


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_openai_agents_function_tool(server, calls, api):
    out = run_openai_agents(server, calls, api)
    assert calls == ["Paris"]
    assert isinstance(out, str) and "22" in out and "{" not in out, out


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_openai_agents_tool_and_output_type(server, calls, api):
    # tools + response_format json_schema under auto: the model calls, then answers in the schema
    out = run_openai_agents(server, calls, api, output_type=Weather)
    assert calls == ["Paris"]
    assert out == Weather(city="Paris", temperature_c=22)


@pytest.mark.parametrize("native", [False, True], ids=["tool_output", "native_output"])
def test_pydantic_ai_tool_and_output_type(server, calls, native):
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    model = OpenAIChatModel("m", provider=OpenAIProvider(openai_client=async_client(server)))
    agent = Agent(model, instructions=INSTRUCTIONS, tools=[weather_tool(calls)],
                  output_type=NativeOutput(Weather) if native else Weather,
                  model_settings={"temperature": 0, "max_tokens": MAX_TOKENS})
    r = asyncio.run(agent.run(QUESTION, usage_limits=UsageLimits(request_limit=4)))
    assert calls == ["Paris"]
    assert r.output == Weather(city="Paris", temperature_c=22)


def test_sdk_tools_with_response_format_streamed(server):
    """The same exchange by hand, streamed: a call (its arguments checked), then the answer."""
    client = server.client(timeout=300)
    fmt = {"type": "json_schema", "json_schema": {"name": "Weather", "schema": Weather.model_json_schema()}}
    msgs = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": QUESTION}]

    def turn():
        return streamed(client, messages=msgs, tools=[WEATHER_TOOL], response_format=fmt)

    content, names, args, finish = turn()
    assert (content, names, json.loads(args), finish) == ("", ["get_weather"], {"city": "Paris"}, "tool_calls")
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
                 {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": args}}]},
             {"role": "tool", "tool_call_id": "call_1", "content": "The weather in Paris is sunny, 22 degrees celsius."}]
    content, names, args, finish = turn()
    assert names == [] and finish == "stop"
    assert Weather.model_validate_json(content) == Weather(city="Paris", temperature_c=22)


def test_the_models_own_call_format_is_a_call(server):
    """Given a tool's result under a bare instruction, this model writes its next call as its
    template shows the format, bare and in doubled braces ({{"name": ..., "arguments": ...}}):
    it must come back as a call (before, it was content, and agents ended on it as the answer)."""
    client = server.client(timeout=300)
    msgs = [{"role": "system", "content": "You are a helpful agent."},
            {"role": "user", "content": "What's the weather in Tokyo?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                "name": "get_weather", "arguments": '{"city": "Tokyo"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "The weather in Tokyo is sunny"}]
    r = client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER_TOOL], temperature=0,
                                       max_tokens=MAX_TOKENS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content, choice.message
    (call,) = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Tokyo"})
    content, names, args, finish = streamed(client, messages=msgs, tools=[WEATHER_TOOL])
    assert (content, names, json.loads(args), finish) == ("", ["get_weather"], {"city": "Tokyo"}, "tool_calls")
