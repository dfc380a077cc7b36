"""Chat output parsing through the whole engine on tiny generated models (no download): a
Hermes-style template whose tool calls under tool_choice required / named must validate at any
temperature, the lazy (auto) constraint, and a template that thinks (Qwen 3 style: the generation
prompt opens <think>, `enable_thinking: false` closes it) splitting reasoning_content from content.
The weights are random, so a grammar pins the output's shape where the test needs one."""
import json

import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")
jsonschema = pytest.importorskip("jsonschema")

import edgellm  # noqa: E402
from edgellm import SamplingParams  # noqa: E402
from tiny_vocab_model import write_tiny_vocab_model  # noqa: E402

HERMES_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools:{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n"
    "Call them as <tool_call>\n{\"name\": ..., \"arguments\": ...}\n</tool_call><|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}\n<tool_call>\n{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
THINK_TEMPLATE = (
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}")
PARAMS = {"type": "object", "properties": {
    "city": {"type": "string", "pattern": "^[A-Z][a-z]{1,8}$"},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["city", "unit", "days"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}},
         {"type": "function", "function": {"name": "ping", "parameters": {
             "type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
             "required": ["n"], "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "weather?"}]


@pytest.fixture(scope="module")
def hermes_llm(tmp_path_factory):
    path = write_tiny_vocab_model(tmp_path_factory.mktemp("m") / "hermes.gguf",
                                  chat_template=HERMES_TEMPLATE)
    llm = edgellm.LLM(str(path), n_threads=1)
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def think_llm(tmp_path_factory):
    path = write_tiny_vocab_model(tmp_path_factory.mktemp("m") / "think.gguf",
                                  chat_template=THINK_TEMPLATE)
    llm = edgellm.LLM(str(path), n_threads=1)
    yield llm
    llm.close()


def test_named_tool_valid_at_any_temperature(hermes_llm):
    assert hermes_llm.chat_format.tool_format == "hermes"
    cities = set()
    for seed in range(24):
        r = hermes_llm.chat(ASK, SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0,
                                                seed=seed, max_tokens=200), tools=TOOLS,
                            tool_choice={"type": "function", "function": {"name": "get_weather"}})
        assert r.finish_reason == "tool_calls", (seed, r.text)
        (call,) = r.tool_calls
        assert call.name == "get_weather" and call.id.startswith("call_")
        args = json.loads(call.arguments)
        jsonschema.validate(args, PARAMS)
        cities.add(args["city"])
        assert r.content == ""
    assert len(cities) > 3  # a random model samples many different valid calls


def test_required_and_parallel(hermes_llm):
    for seed in range(8):
        r = hermes_llm.chat(ASK, SamplingParams(temperature=1.0, seed=seed, max_tokens=300),
                            tools=TOOLS, tool_choice="required", parallel_tool_calls=True)
        assert r.finish_reason == "tool_calls" and r.tool_calls, (seed, r.text)
        for c in r.tool_calls:
            schema = PARAMS if c.name == "get_weather" else TOOLS[1]["function"]["parameters"]
            jsonschema.validate(json.loads(c.arguments), schema)


ANSWER = {"type": "object", "properties": {"verdict": {"enum": ["sunny", "rainy"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 9}},
          "required": ["verdict", "days"], "additionalProperties": False}


@pytest.mark.parametrize("form", ["response_format", "json_schema"])
def test_tools_with_response_format_choose_call_or_answer(hermes_llm, form):
    """tools + a response_format under auto (OpenAI's semantics): the model may call a tool
    (the call checked by its schema) or answer in the response schema -- never anything else,
    and the schema no longer shuts the calls out. logit_bias leans the random model towards
    "<" (a <tool_call> block), then towards the answer's first key; whitespace is damped. One
    short tool: the schema is described in the prompt too, and these tokens are bytes."""
    ping = TOOLS[1]
    def tid(c):
        (t,) = hermes_llm.tokenize(c, add_special=False)
        return t
    damp = {tid(c): -6.0 for c in " \n\t"}
    leans = [{**damp, tid("<"): 9.0},
             {**damp, tid("<"): -9.0, tid("`"): -9.0, tid('"'): 5.0, tid("v"): 9.0}]
    extra = ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER}}}
             if form == "response_format" else {"json_schema": ANSWER})
    kinds = set()
    for bias in leans:
        for seed in range(6):
            r = hermes_llm.chat(ASK, SamplingParams(temperature=1.0, seed=seed, max_tokens=120,
                                                    logit_bias=bias, **extra), tools=[ping])
            if r.finish_reason == "length":
                continue
            if r.tool_calls:
                assert r.finish_reason == "tool_calls" and not r.content, (seed, r.text)
                (call,) = r.tool_calls
                assert call.name == "ping"
                jsonschema.validate(json.loads(call.arguments), ping["function"]["parameters"])
                kinds.add("call")
            else:
                assert r.finish_reason == "stop", (seed, r.text)
                jsonschema.validate(json.loads(r.content), ANSWER)
                kinds.add("answer")
    assert kinds == {"call", "answer"}
    with pytest.raises(edgellm.InvalidRequestError, match="cannot be combined"):
        hermes_llm.chat(ASK, SamplingParams(json_schema=ANSWER), tools=TOOLS, tool_choice="required")
    # the model is told the answer's schema (it cannot otherwise know a JSON answer is wanted)
    ids, params, _ = hermes_llm.chat_renderer.request(ASK, SamplingParams(json_schema=ANSWER), [ping],
                                                      "auto", False, None)
    assert json.dumps(ANSWER) in hermes_llm.detokenize(ids)
    assert params.grammar and not params.json_schema and not params.grammar_triggers
    ids, params, _ = hermes_llm.chat_renderer.request(ASK, SamplingParams(), [ping], "auto", False, None)
    assert "schema" not in hermes_llm.detokenize(ids) and params.grammar_triggers


def test_streamed_calls_equal_whole(hermes_llm):
    p = SamplingParams(temperature=1.0, seed=7, max_tokens=200)
    named = {"type": "function", "function": {"name": "get_weather"}}
    whole = hermes_llm.chat(ASK, p, tools=TOOLS, tool_choice=named)
    head, args, content, finish = None, "", "", None
    for ch in hermes_llm.chat_stream_chunks(ASK, p, tools=TOOLS, tool_choice=named):
        content += ch.delta.content
        for d in ch.delta.tool_calls:
            if d.id is not None:
                head = d
            args += d.arguments
        finish = ch.finish_reason or finish
    assert finish == "tool_calls" and content == ""
    assert head.name == "get_weather" and args == whole.tool_calls[0].arguments


def test_lazy_grammar_switches_on_at_the_trigger(hermes_llm):
    """The engine's lazy constraint (what tool_choice auto uses): free text until the trigger,
    then the grammar from the trigger's first byte to the end. logit_bias makes the random
    model write the trigger "#" early; after it only three digits and "!" may follow, then EOG."""
    import re
    hash_id = hermes_llm.tokenize("#", add_special=False)
    assert len(hash_id) == 1
    hits = 0
    for seed in range(12):
        p = SamplingParams(temperature=1.0, seed=seed, max_tokens=60, grammar='root ::= "#" [0-9]{3} "!"',
                           grammar_triggers=["#"], logit_bias={hash_id[0]: 4.0})
        r = hermes_llm.generate("x", p)
        if "#" not in r.text:
            assert r.finish_reason in ("length", "stop")
            continue
        head, _, tail = r.text.partition("#")
        if r.finish_reason == "length":  # the budget ran out inside the constrained part
            assert re.fullmatch(r"[0-9]{0,3}", tail), (seed, r.text)
            continue
        hits += 1
        assert re.fullmatch(r"[0-9]{3}!", tail), (seed, r.text)
        assert r.finish_reason == "stop"
    assert hits >= 6
    with pytest.raises(edgellm.InvalidRequestError, match="grammar_triggers needs"):
        hermes_llm.generate("x", SamplingParams(grammar_triggers=["#"]))


def test_thinking_template(think_llm):
    assert think_llm.chat_format.think == ("<think>", "</think>")
    prompt = think_llm.apply_chat_template(ASK)
    assert prompt.endswith("<think>\n")
    closed = think_llm.apply_chat_template(ASK, chat_template_kwargs={"enable_thinking": False})
    assert closed.endswith("</think>\n\n")
    g = 'root ::= [a-z]{2,6} " " [a-z]{2,6} "\\n</think>\\n\\n" [A-Z] [a-z]{2,6} "."'
    r = think_llm.chat(ASK, SamplingParams(temperature=1.0, seed=3, grammar=g, max_tokens=60))
    assert r.reasoning_content and " " in r.reasoning_content and "<" not in r.reasoning_content
    assert r.content and r.content[0].isupper() and r.content.endswith(".") and "think" not in r.content
    assert r.text == r.reasoning_content + "\n</think>\n\n" + r.content
    streamed = {"reasoning": "", "content": ""}
    for ch in think_llm.chat_stream_chunks(ASK, SamplingParams(temperature=1.0, seed=3, grammar=g,
                                                                max_tokens=60)):
        streamed["reasoning"] += ch.delta.reasoning
        streamed["content"] += ch.delta.content
    assert streamed == {"reasoning": r.reasoning_content, "content": r.content}
    # thinking switched off by the template: the same kind of output is all content
    g2 = 'root ::= [A-Z] [a-z]{2,6} "."'
    r = think_llm.chat(ASK, SamplingParams(temperature=1.0, seed=3, grammar=g2, max_tokens=20),
                       chat_template_kwargs={"enable_thinking": False})
    assert r.reasoning_content is None and r.content == r.text


def test_thinking_model_reasons_before_a_required_call(think_llm):
    """A template that opens <think>: under tool_choice required the grammar lets the model
    finish its reasoning, then forces the call (the reasoning is not taken for the call)."""
    named = {"type": "function", "function": {"name": "get_weather"}}
    done = 0
    for seed in range(6):
        bias = {think_llm.tokenize(c, add_special=False)[0]: 9.0 for c in "</"}
        r = think_llm.chat(ASK, SamplingParams(temperature=1.0, seed=seed, max_tokens=220,
                                               logit_bias=bias),
                           tools=TOOLS, tool_choice=named)
        if r.finish_reason == "length":
            continue  # reasoning may run long on a random model
        assert r.finish_reason == "tool_calls", r.text
        assert "</think>" in r.text and r.reasoning_content is not None
        jsonschema.validate(json.loads(r.tool_calls[0].arguments), PARAMS)
        assert not r.content
        done += 1
    assert done >= 2
