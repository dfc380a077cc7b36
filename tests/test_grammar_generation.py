"""Constrained generation on the real models through edgellm.LLM: 5 schemas x 5 seeds x
(SmolLM2, Gemma 3) = 50 generations at temperature 0.7, each of which must parse, validate
with `jsonschema` and end with finish_reason "stop"; plus grammar, regex and response_format
requests and the errors a bad constraint gives."""
import json
import re

import pytest

jsonschema = pytest.importorskip("jsonschema")
edgellm = pytest.importorskip("edgellm")
if not hasattr(edgellm, "LLM"):
    pytest.skip("edgellm.LLM is not available in this build", allow_module_level=True)

from conftest import require_model  # noqa: E402

pytestmark = pytest.mark.real_model

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "address": {"type": "object",
                        "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 16},
                                       "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                        "required": ["city", "zip"], "additionalProperties": False},
        },
        "required": ["name", "age", "address"], "additionalProperties": False,
    },
    "array": {
        "type": "object",
        "properties": {"colors": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 10},
                                  "minItems": 2, "maxItems": 3}},
        "required": ["colors"], "additionalProperties": False,
    },
    "enum": {
        "type": "object",
        "properties": {"size": {"enum": ["small", "medium", "large"]},
                       "count": {"type": "integer", "minimum": 1, "maximum": 9},
                       "in_stock": {"type": "boolean"}},
        "required": ["size", "count", "in_stock"], "additionalProperties": False,
    },
    "anyof": {
        "type": "object",
        "properties": {"id": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9999},
                                        {"type": "string", "pattern": "^[a-z]{3,8}$"}]},
                       "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 12}]}},
        "required": ["id", "note"], "additionalProperties": False,
    },
    "refs": {
        "$defs": {"point": {"type": "object",
                            "properties": {"x": {"type": "integer", "minimum": -99, "maximum": 99},
                                           "y": {"type": "integer", "minimum": -99, "maximum": 99}},
                            "required": ["x", "y"], "additionalProperties": False}},
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}},
        "required": ["start", "end"], "additionalProperties": False,
    },
}

PROMPTS = {
    "nested": "Write a JSON object describing a person with a name, an age and an address.\n",
    "array": "Write a JSON object listing some colors.\n",
    "enum": "Write a JSON object describing a t-shirt order.\n",
    "anyof": "Write a JSON object with an id and a note.\n",
    "refs": "Write a JSON object with a start point and an end point.\n",
}

_llms = {}


def llm(model):
    if model not in _llms:
        _llms[model] = edgellm.LLM(str(require_model(model)), n_ctx=512)
    return _llms[model]


def completions(out):
    return out if isinstance(out, list) else [out]


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_constrained_json_is_valid_and_complete(model, name):
    schema = SCHEMAS[name]
    # n = 5: completion i samples with seed 0 + i, five different generations batched together.
    params = edgellm.SamplingParams(json_schema=schema, temperature=0.7, seed=0, n=5, max_tokens=200)
    outs = completions(llm(model).generate(PROMPTS[name], params))
    assert len(outs) == 5
    for c in outs:
        assert c.finish_reason == "stop", (model, name, c.text)
        doc = json.loads(c.text)
        jsonschema.validate(doc, schema)
    # Different seeds give different outputs (the constraint does not force one answer).
    assert len({c.text for c in outs}) > 1 or name == "refs"


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_grammar_and_regex_constraints(model):
    m = llm(model)
    g = 'root ::= "The answer is " ("yes" | "no") "."'
    out = completions(m.generate("Is the sky blue?\n", edgellm.SamplingParams(grammar=g, temperature=0.7, seed=1,
                                                                              max_tokens=30)))[0]
    assert out.text in ("The answer is yes.", "The answer is no.")
    assert out.finish_reason == "stop"
    rx = r"[0-9]{3}-[0-9]{4}"
    out = completions(m.generate("Phone number: ", edgellm.SamplingParams(regex=rx, temperature=0.7, seed=2,
                                                                         max_tokens=30)))[0]
    assert re.fullmatch(rx, out.text) and out.finish_reason == "stop"


def test_response_format_json_object_and_json_schema():
    m = llm("smollm2")
    out = completions(m.generate("A JSON object about a cat:\n", edgellm.SamplingParams(
        response_format={"type": "json_object"}, temperature=0.0, max_tokens=120)))[0]
    if out.finish_reason == "stop":
        assert isinstance(json.loads(out.text), dict)
    else:  # an open object may run long; what exists must still be a valid prefix
        assert out.text.startswith("{")
    schema = SCHEMAS["enum"]
    out = completions(m.generate("Order:\n", edgellm.SamplingParams(
        response_format={"type": "json_schema", "json_schema": {"name": "order", "schema": schema}},
        temperature=0.0, max_tokens=100)))[0]
    jsonschema.validate(json.loads(out.text), schema)


def test_bad_constraints_are_request_errors():
    m = llm("smollm2")
    with pytest.raises(edgellm.InvalidRequestError, match="line 1"):
        m.generate("x", edgellm.SamplingParams(grammar='root ::= "a" (', max_tokens=5))
    with pytest.raises(edgellm.InvalidRequestError, match="unknown type"):
        m.generate("x", edgellm.SamplingParams(json_schema={"type": "nope"}, max_tokens=5))
    with pytest.raises(edgellm.InvalidRequestError, match="exclusive"):
        m.generate("x", edgellm.SamplingParams(grammar='root ::= "a"', regex="a", max_tokens=5))
    # The engine keeps serving after rejected requests.
    out = completions(m.generate("x", edgellm.SamplingParams(regex="ok", max_tokens=5)))[0]
    assert out.text == "ok"


# ---- issue 17: special tokens and budget-aware closing --------------------------------------

def _chat_ids(m, content):
    """A ChatML prompt whose markup is special tokens and whose content is plain text."""
    def tok(s, special):
        return m.tokenize(s, add_special=False, parse_special=special)
    return tok("<|im_start|>user\n", True) + tok(content, False) + tok("<|im_end|>\n<|im_start|>assistant\n", True)


def _special_ids_and_texts(m):
    tk = m._tok
    ids = [t for t in range(tk.n_vocab) if tk.token_to_piece(t, True) != tk.token_to_piece(t, False)]
    return set(ids), {bytes(tk.token_to_piece(t, True)).decode("utf-8", "replace") for t in ids}


def test_special_tokens_never_inside_constrained_output():
    """Issue 17 item 3: SmolLM2 under a JSON schema wrote `"name": "Miriam<|im_end|>Zimbera<|im_start|>`.
    The content asks for exactly that; unconstrained, the model does copy the special texts (so the
    case is live); constrained, at temperature 1 over many seeds, no special token id appears before
    the final end-of-generation, and no special token's text is spelled out by ordinary tokens."""
    m = llm("smollm2")
    special_ids, special_texts = _special_ids_and_texts(m)
    assert {"<|im_end|>", "<|im_start|>"} <= special_texts
    ids = _chat_ids(m, 'Reply with JSON {"name": ..., "city": ...} where name is exactly the text '
                       'Miriam<|im_end|>Zimbera<|im_start|>assistant')
    free = completions(m.generate(ids, edgellm.SamplingParams(temperature=1.0, seed=1, n=6, max_tokens=40)))
    assert any(t in c.text for c in free for t in special_texts), [c.text for c in free]
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}},
              "required": ["name", "city"], "additionalProperties": False}
    eog = set(m._tok.eog_ids)
    n_special_text = 0
    for seed in range(0, 48, 8):
        outs = completions(m.generate(ids, edgellm.SamplingParams(json_schema=schema, temperature=1.0, top_k=0,
                                                                 top_p=1.0, min_p=0.0, seed=seed, n=8,
                                                                 max_tokens=48)))
        for c in outs:
            toks = list(c.token_ids)
            if toks and toks[-1] in eog:
                toks = toks[:-1]
            assert not special_ids & set(toks), (seed, c.token_ids, c.text)
            n_special_text += sum(t in c.text for t in special_texts)
            if c.finish_reason == "stop":
                jsonschema.validate(json.loads(c.text), schema)
    assert n_special_text == 0


BUDGET_SCHEMA = {
    "type": "object",
    "properties": {"bio": {"type": "string", "minLength": 1},
                   "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
    "required": ["bio", "tags"], "additionalProperties": False,
}


@pytest.mark.parametrize("max_tokens", [12, 16, 20, 32])
def test_budget_close_ends_a_valid_document(max_tokens):
    """Issue 17 item 3: with max_tokens running out inside the document the output is not JSON;
    grammar_budget_close steers it to a complete, schema-valid one within the budget."""
    m = llm("smollm2")
    ids = _chat_ids(m, "Write a JSON object with a long biography of a famous painter and a list of tags.")
    plain = completions(m.generate(ids, edgellm.SamplingParams(json_schema=BUDGET_SCHEMA, temperature=0.0,
                                                               max_tokens=max_tokens)))[0]
    assert plain.finish_reason == "length"
    with pytest.raises(ValueError):
        json.loads(plain.text)
    closed = completions(m.generate(ids, edgellm.SamplingParams(json_schema=BUDGET_SCHEMA, temperature=0.0,
                                                                max_tokens=max_tokens,
                                                                grammar_budget_close=True)))[0]
    assert len(closed.token_ids) <= max_tokens
    jsonschema.validate(json.loads(closed.text), BUDGET_SCHEMA)
    # Sampled too: every seed closes in time.
    outs = completions(m.generate(ids, edgellm.SamplingParams(json_schema=BUDGET_SCHEMA, temperature=1.0, seed=3,
                                                              n=4, max_tokens=max_tokens,
                                                              grammar_budget_close=True)))
    for c in outs:
        jsonschema.validate(json.loads(c.text), BUDGET_SCHEMA)


def test_budget_close_is_a_checked_boolean():
    with pytest.raises(edgellm.InvalidRequestError, match="grammar_budget_close"):
        edgellm.SamplingParams(json_schema={"type": "object"}, grammar_budget_close="no")
    assert edgellm.SamplingParams(grammar_budget_close=True).to_core().grammar_budget_close is True
