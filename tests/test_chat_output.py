"""Tool-call and reasoning parsing (edgellm.chat_output) and the tool-call grammars, with no model:
every format detected from template text, the streaming parser fed in random piece sizes (the
assembled deltas must equal the whole-text parse, and no marker may leak into content), and the
GBNF each format builds checked with the grammar engine on calls that must and must not pass."""
import json
import random
import zlib

import pytest

core = pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

from edgellm.chat_output import (GENERIC, HERMES, LLAMA3, MISTRAL, ChatDelta,  # noqa: E402
                                 ChatFormat, check_tools)
from edgellm.chat_template import prepare_messages, render_chat  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["city", "days"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
TOOLS = [WEATHER, ADD]


def feed_random(parser, text, rng):
    deltas = []
    i = 0
    while i < len(text):
        k = rng.randint(1, 7)
        deltas.append(parser.feed(text[i:i + k]))
        i += k
    deltas.append(parser.finish())
    total = ChatDelta()
    for d in deltas:
        total.extend(d)
    return total


def calls_of(delta):
    out = {}
    for d in delta.tool_calls:
        if d.id is not None:
            assert d.name, "a call's first delta names the function"
            out[d.index] = [d.name, d.arguments]
        else:
            out[d.index][1] += d.arguments
    return [tuple(out[i]) for i in sorted(out)]


def test_detect_from_template_text():
    assert ChatFormat.detect("{% if tools %}<tool_call>{% endif %}").tool_format == HERMES
    assert ChatFormat.detect("{{ '[TOOL_CALLS]' }}{{ tools }}").tool_format == MISTRAL
    llama = "<|start_header_id|>{% for t in tools %}{{ t }}{% endfor %} \"parameters\" <|python_tag|>"
    assert ChatFormat.detect(llama).tool_format == LLAMA3
    plain = ChatFormat.detect("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert plain.tool_format == GENERIC and not plain.template_takes_tools
    assert ChatFormat.detect("<think>{{ x }}</think>").think == ("<think>", "</think>")
    assert ChatFormat.detect("no thinking here").think is None


@pytest.mark.parametrize("seed", range(20))
def test_hermes_stream_equals_whole(seed):
    rng = random.Random(seed)
    args = {"city": 'Pa"ris\\', "days": rng.randint(1, 14), "nested": [1, {"x": "}"}]}
    text = ("Let me check.\n<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": args})
            + "\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}"
            + "\n</tool_call>")
    p = ChatFormat(HERMES, True).parser(TOOLS, "auto")
    total = feed_random(p, text, rng)
    assert total.content == p.content == "Let me check."
    assert "<tool_call>" not in total.content and "</tool_call>" not in total.content
    got = calls_of(total)
    assert [n for n, _ in got] == ["get_weather", "add"]
    assert json.loads(got[0][1]) == args and json.loads(got[1][1]) == {"a": 1, "b": 2}
    assert [(c.name, c.arguments) for c in p.tool_calls] == got
    assert len({c.id for c in p.tool_calls}) == 2


@pytest.mark.parametrize("fmt,text", [
    (HERMES, '{"name": "add", "arguments": {"a": 3, "b": 4}}'),
    (HERMES, '```json\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n```'),
    (LLAMA3, '{"name": "add", "parameters": {"a": 3, "b": 4}}'),
    (LLAMA3, '<|python_tag|>{"name": "add", "parameters": {"a": 3, "b": 4}}'),
    (MISTRAL, '[TOOL_CALLS][{"name": "add", "arguments": {"a": 3, "b": 4}}]'),
    (MISTRAL, '[{"name": "add", "arguments": {"a": 3, "b": 4}}]'),
    (GENERIC, '{"tool_calls": [{"name": "add", "arguments": {"a": 3, "b": 4}}]}'),
])
def test_whole_output_calls(fmt, text):
    for seed in range(5):
        p = ChatFormat(fmt, True).parser(TOOLS, "auto")
        total = feed_random(p, text, random.Random(seed))
        assert total.content == "" and p.content == ""
        assert [(n, json.loads(a)) for n, a in calls_of(total)] == [("add", {"a": 3, "b": 4})]
    if fmt in (HERMES, LLAMA3) and "python_tag" not in text:  # arguments stream in pieces
        p = ChatFormat(fmt, True).parser(TOOLS, "auto")
        n = sum(1 for ch in text if p.feed(ch).tool_calls)
        assert n > 5


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL, GENERIC])
def test_plain_text_stays_content(fmt):
    text = 'Here is JSON: {"name": "x"} and a list [1, 2] and <tool_ca'
    p = ChatFormat(fmt, True).parser(TOOLS, "auto")
    total = feed_random(p, text, random.Random(1))
    assert total.content == text and not p.tool_calls


def test_no_tools_means_no_calls():
    text = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    p = ChatFormat(HERMES, True).parser(None, None)
    assert feed_random(p, text, random.Random(0)).content == text
    p = ChatFormat(HERMES, True).parser(TOOLS, "none")
    assert feed_random(p, text, random.Random(0)).content == text


def test_call_cut_short_keeps_complete_calls():
    text = '{"name": "add", "arguments": {"a": 1, "b": 2}}\n{"name": "add", "arguments": {"a'
    p = ChatFormat(HERMES, True).parser(TOOLS, "auto")
    feed_random(p, text, random.Random(2))
    assert [(c.name, json.loads(c.arguments)) for c in p.tool_calls][0] == ("add", {"a": 1, "b": 2})


@pytest.mark.parametrize("seed", range(10))
def test_reasoning_split(seed):
    fmt = ChatFormat(HERMES, True, ("<think>", "</think>"))
    text = "<think>\nThe user wants 2+2.\n</think>\n\nIt is 4."
    p = fmt.parser(None, None)
    total = feed_random(p, text, random.Random(seed))
    assert (total.reasoning, total.content) == ("The user wants 2+2.", "It is 4.")
    assert (p.reasoning_content, p.content) == ("The user wants 2+2.", "It is 4.")
    # the template opened the block itself: output starts inside the reasoning
    p = fmt.parser(None, None, prompt="<|im_start|>assistant\n<think>\n")
    total = feed_random(p, "hmm, 4.\n</think>\nFour.", random.Random(seed))
    assert (total.reasoning, total.content) == ("hmm, 4.", "Four.")
    # reasoning, then a call
    p = fmt.parser(TOOLS, "auto")
    total = feed_random(p, '<think>add them</think>\n<tool_call>\n{"name": "add", "arguments": '
                           '{"a": 2, "b": 2}}\n</tool_call>', random.Random(seed))
    assert total.reasoning == "add them" and total.content == ""
    assert calls_of(total) == [("add", '{"a": 2, "b": 2}')]


def whole_parse(text, tools=TOOLS, fmt=HERMES):
    p = ChatFormat(fmt, True).parser(tools, "auto")
    p.feed(text)
    p.finish()
    return p.content, [(c.name, json.loads(c.arguments)) for c in p.tool_calls]


def streamed_parse(pieces, tools=TOOLS, fmt=HERMES):
    p = ChatFormat(fmt, True).parser(tools, "auto")
    total = ChatDelta()
    for piece in pieces:
        total.extend(p.feed(piece))
    total.extend(p.finish())
    assert total.content == p.content
    calls = [(n, json.loads(a)) for n, a in calls_of(total)]
    assert calls == [(c.name, json.loads(c.arguments)) for c in p.tool_calls]
    return total.content, calls


ADD34 = ("add", {"a": 3, "b": 4})
# Qwen 2.5's template shows a call as {{"name": <function-name>, "arguments": <args-json-object>}}
# and its models answer so, tagged or bare; what is not a call stays content
QWEN_OUTPUTS = [
    ('{{"name": "add", "arguments": {"a": 3, "b": 4}}}', "", [ADD34]),
    ('{{ "name": "add", "arguments": {"a": 3, "b": 4} }}', "", [ADD34]),
    ('\n{{"name": "add", "arguments": {"a": 3, "b": 4}}}\n', "", [ADD34]),
    ('{{"name": "add", "arguments": {"a": 3, "b": 4}}', "", [ADD34]),  # one brace short
    ('<tool_call>\n{{"name": "add", "arguments": {"a": 3, "b": 4}}}\n</tool_call>', "", [ADD34]),
    ('I will add them.\n<tool_call>\n{{"name": "add", "arguments": {"a": 3, "b": 4}}}\n</tool_call>',
     "I will add them.", [ADD34]),
    ('{{"name": "add", "arguments": {"a": 3, "b": 4}}}\n{{"name": "get_weather", "arguments": '
     '{"city": "Rome", "days": 2}}}', "", [ADD34, ("get_weather", {"city": "Rome", "days": 2})]),
    ('{"name": "add", "arguments": {"a": 3, "b": 4}}', "", [ADD34]),
    ('{{"name": "add", "arguments": {"a": 3, "b": 4}}}\nDone.', "Done.", [ADD34]),
    # not calls: prose before a bare object, a template, JSON naming no tool
    ('Call it so: {{"name": "add", "arguments": {"a": 3, "b": 4}}}',
     'Call it so: {{"name": "add", "arguments": {"a": 3, "b": 4}}}', []),
    ("{{ user.name }} is {{ user.age }}", "{{ user.name }} is {{ user.age }}", []),
    ('{"name": "Paris", "temperature_c": 22}', '{"name": "Paris", "temperature_c": 22}', []),
    ('{{"name": "subtract", "arguments": {"a": 3}}}', '{{"name": "subtract", "arguments": {"a": 3}}}', []),
]


@pytest.mark.parametrize("text,content,calls", QWEN_OUTPUTS)
def test_qwen_call_format(text, content, calls):
    assert whole_parse(text) == (content, calls)
    # streamed: one character at a time, and split in two at every position
    assert streamed_parse(list(text)) == (content, calls)
    for k in range(len(text) + 1):
        assert streamed_parse([text[:k], text[k:]]) == (content, calls), k


def test_qwen_call_streams_its_arguments():
    text = '{{"name": "add", "arguments": {"a": 3, "b": 4}}}'
    p = ChatFormat(HERMES, True).parser(TOOLS, "auto")
    pieces = [p.feed(ch) for ch in text]
    named = [i for i, d in enumerate(pieces) if any(c.name for c in d.tool_calls)]
    assert named and named[0] < text.index("{\"a\"")  # the name goes out before the arguments
    assert sum(1 for d in pieces if d.tool_calls) > 5


def _grammar(fmt, tools, choice, parallel=False, answer=None):
    gbnf, triggers = ChatFormat(fmt, True).tool_grammar(core.json_schema_to_gbnf, tools, choice,
                                                        parallel, answer=answer)
    return core.Grammar.from_gbnf(gbnf), triggers


def test_named_grammar_accepts_only_valid_arguments():
    g, triggers = _grammar(HERMES, TOOLS, {"type": "function", "function": {"name": "get_weather"}})
    assert triggers == []  # named: the whole output is the call
    ok = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
    assert g.accepts(ok)
    assert g.accepts('{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius", "days": 14}}')
    for bad in ['{"name": "add", "arguments": {"a": 1, "b": 2}}',                       # other tool
                '{"name": "get_weather", "arguments": {"city": "paris", "days": 3}}',  # pattern
                '{"name": "get_weather", "arguments": {"city": "Paris", "days": 15}}',  # maximum
                '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin", "days": 1}}',
                '{"name": "get_weather", "arguments": {"city": "Paris"}}',             # required
                ok + "\n" + ok]:                                                        # not parallel
        assert not g.accepts(bad), bad


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL, GENERIC])
def test_auto_grammar_triggers_and_parallel(fmt):
    g, triggers = _grammar(fmt, TOOLS, "auto", parallel=True)
    assert triggers, "auto: the grammar switches on at a trigger"
    key = "parameters" if fmt == LLAMA3 else "arguments"
    one = '{"name": "add", "%s": {"a": 1, "b": 2}}' % key
    two = '{"name": "get_weather", "%s": {"city": "Rome", "days": 2}}' % key
    whole = {HERMES: f"<tool_call>\n{one}\n</tool_call>\n<tool_call>\n{two}\n</tool_call>",
             LLAMA3: f"{one}; {two}", MISTRAL: f"[{one}, {two}]",
             GENERIC: '{"tool_calls": [' + one + ", " + two + "]}"}[fmt]
    assert g.accepts(whole)
    # each trigger (without its anchor) is where a sentence of the grammar may begin
    assert any(whole.startswith(t.lstrip("^")) for t in triggers)


def test_auto_grammar_takes_the_qwen_call_format():
    g, triggers = _grammar(HERMES, TOOLS, "auto")
    for text in ['{{"name": "add", "arguments": {"a": 1, "b": 2}}}',
                 '<tool_call>\n{{"name": "add", "arguments": {"a": 1, "b": 2}}}\n</tool_call>']:
        assert g.accepts(text), text
        # the lazy grammar switches on where the call begins
        assert any(text.startswith(t.lstrip("^")) for t in triggers), (text, triggers)
    for bad in ['{{"name": "add", "arguments": {"a": "x", "b": 2}}}',   # arguments checked
                '{{"name": "sub", "arguments": {"a": 1, "b": 2}}}',     # a tool's name
                '{{{"name": "add", "arguments": {"a": 1, "b": 2}}}}']:
        assert not g.accepts(bad), bad


ANSWER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "temperature_c": {"type": "integer"}},
          "required": ["city", "temperature_c"], "additionalProperties": False}


@pytest.mark.parametrize("fmt", [HERMES, LLAMA3, MISTRAL, GENERIC])
def test_tools_with_an_answer_schema_offer_both(fmt):
    """tools + response_format under auto: the whole output is a checked call or the answer."""
    g, triggers = _grammar(fmt, TOOLS, "auto", answer=core.json_schema_to_gbnf(json.dumps(ANSWER)))
    assert triggers == []  # constrained from the first token: the answer must fit too
    key = "parameters" if fmt == LLAMA3 else "arguments"
    one = '{"name": "add", "%s": {"a": 1, "b": 2}}' % key
    call = {HERMES: f"<tool_call>\n{one}\n</tool_call>", LLAMA3: one, MISTRAL: f"[{one}]",
            GENERIC: '{"tool_calls": [' + one + "]}"}[fmt]
    assert g.accepts(call)
    assert g.accepts('{"city": "Paris", "temperature_c": 22}')
    for bad in ["It is sunny in Paris.",                               # neither
                '{"city": "Paris"}',                                   # the answer's schema
                '{"city": "Paris", "temperature_c": 22, "x": 1}',
                call.replace('"a": 1', '"a": "one"')]:                 # the call's schema
        assert not g.accepts(bad), bad
    if fmt == HERMES:
        assert g.accepts('{{"name": "add", "arguments": {"a": 1, "b": 2}}}')
    # the answer is content, the call a call
    assert whole_parse('{"city": "Paris", "temperature_c": 22}', fmt=fmt) == \
        ('{"city": "Paris", "temperature_c": 22}', [])
    assert whole_parse(call, fmt=fmt) == ("", [("add", {"a": 1, "b": 2})])


def test_answer_alternative_keeps_the_reasoning_block():
    fmt = ChatFormat(HERMES, True, ("<think>", "</think>"))
    gbnf, triggers = fmt.tool_grammar(core.json_schema_to_gbnf, TOOLS, "auto", False,
                                      answer=core.json_schema_to_gbnf(json.dumps(ANSWER)))
    g = core.Grammar.from_gbnf(gbnf)
    assert triggers == []
    assert g.accepts('<think>hot?</think>\n{"city": "Rome", "temperature_c": 30}')
    assert g.accepts('<think>look it up</think>\n<tool_call>\n{"name": "add", "arguments": '
                     '{"a": 1, "b": 2}}\n</tool_call>')


def test_lazy_constraint_through_the_engine_api():
    p = core.SamplingParams()
    p.grammar = 'root ::= "<x>" [0-9]+ "</x>"'
    p.grammar_triggers = ["<x>"]
    assert p.grammar_triggers == ["<x>"]


def test_check_tools_errors():
    with pytest.raises(core.InvalidRequestError, match="not in 'tools'"):
        check_tools(TOOLS, {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(core.InvalidRequestError, match="needs 'tools'"):
        check_tools(None, "required")
    with pytest.raises(core.InvalidRequestError, match=r"tools\[0\]"):
        check_tools([{"type": "function", "function": {}}], "auto")
    with pytest.raises(core.InvalidRequestError, match="tool_choice"):
        check_tools(TOOLS, "sometimes")


def test_history_arguments_rendered_once():
    """OpenAI sends arguments as a JSON string; the template must see an object, so that
    `tojson` writes it once (double encoding made Qwen repeat its call)."""
    msgs = prepare_messages([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"}])
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1, "b": 2}
    assert msgs[1]["content"] == ""
    tmpl = ("{% for m in messages %}{% for c in m.tool_calls or [] %}"
            "{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}")
    assert render_chat(msgs, tmpl) == '{"a": 1, "b": 2}'


def test_random_arguments_roundtrip():
    """Random JSON arguments (strings with braces, quotes, unicode) survive streaming."""
    rng = random.Random(zlib.crc32(b"args"))
    alphabet = ['a', '{', '}', '"', '\\', ' ', 'é', '[', ']', ',', ':', '\n', '€']
    for _ in range(50):
        args = {"s": "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))),
                "n": rng.randint(-99, 99), "l": [rng.random() for _ in range(rng.randint(0, 3))]}
        text = "<tool_call>\n" + json.dumps({"name": "f", "arguments": args}, ensure_ascii=False) \
            + "\n</tool_call>"
        p = ChatFormat(HERMES, True).parser([{"type": "function", "function": {"name": "f"}}], "auto")
        total = feed_random(p, text, rng)
        (name, a), = calls_of(total)
        assert name == "f" and json.loads(a) == args and total.content == ""
