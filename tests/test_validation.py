"""One validator for request parameters (issue 17, items 6 and 8): the library
(SamplingParams, LLM) and the server (edgellm.server.protocol) accept and refuse the same
values, with an InvalidRequestError naming the field -- never a truncation, a silent
bool(...) or a pybind TypeError / MemoryError."""
import math
import warnings

import pytest

import edgellm
from edgellm import ContextLengthError, InvalidRequestError, SamplingParams
from edgellm import validation

try:
    from edgellm.server import protocol
    from edgellm.server.errors import APIError
except ImportError:  # the server's extras are not installed
    protocol = None

BIG_ID = 1099511627776  # 2^40: does not fit the engine's int32 token ids


# ---- SamplingParams: what is refused, naming the field -------------------------------------

BAD = [
    ("temperature", -1), ("temperature", "hot"), ("temperature", math.nan), ("temperature", math.inf),
    ("top_p", 2), ("top_p", -0.1), ("min_p", 1.5), ("typical_p", 0), ("typical_p", 1.01),
    ("max_tokens", 2.9), ("max_tokens", 0), ("max_tokens", -1), ("max_tokens", True),
    ("max_tokens", "8"), ("max_tokens", 2**40),
    ("ignore_eos", "no"), ("ignore_eos", 1), ("return_progress", "yes"),
    ("n", 0), ("n", True), ("n", 1.5), ("n", 10**6),
    ("top_k", 1.5), ("top_k", False),
    ("logprobs", 21), ("logprobs", -1), ("logprobs", True), ("prompt_logprobs", 2.5),
    ("seed", 1.5), ("seed", "42"), ("seed", 2**70),
    ("repetition_penalty", 0), ("repetition_penalty", math.nan), ("repeat_last_n", -2),
    ("presence_penalty", math.inf), ("frequency_penalty", "1"), ("min_tokens", -1),
    ("stop", [1]), ("stop", ""), ("stop", ["x"] * 17), ("stop", "x" * 5000), ("stop", 5),
    ("stop_token_ids", [BIG_ID]), ("stop_token_ids", [-1]), ("stop_token_ids", "1"),
    ("logit_bias", {BIG_ID: 1.0}), ("logit_bias", {"x": 1}), ("logit_bias", {-3: 1}),
    ("logit_bias", {5: math.nan}), ("logit_bias", {5: math.inf}), ("logit_bias", {True: 1}), ("logit_bias", [5, 1]),
    ("grammar", 5), ("regex", ["a"]), ("json_schema", 5), ("response_format", {"type": "yaml"}),
    ("response_format", {"type": "json_schema"}), ("response_format", "json"),
    ("grammar_triggers", "x"),
]


@pytest.mark.parametrize("field, value", BAD, ids=[f"{f}={v!r}"[:40] for f, v in BAD])
def test_sampling_params_refuses_bad_values_naming_the_field(field, value):
    with pytest.raises(InvalidRequestError) as e:
        SamplingParams(**{field: value})
    assert field in str(e.value) and e.value.param.startswith(field), str(e.value)
    # a value set after construction is caught when the request is built
    p = SamplingParams()
    setattr(p, field, value)
    with pytest.raises(InvalidRequestError, match=field):
        p.to_core()


GOOD = [
    ("temperature", 0), ("temperature", 5.0), ("top_k", 0), ("top_k", -1), ("top_p", 0),
    ("top_p", 1), ("min_p", 0), ("typical_p", 1), ("max_tokens", None), ("max_tokens", 3.0),
    ("seed", -1), ("seed", 2**64 - 1), ("n", 4), ("logprobs", 0), ("logprobs", 20),
    ("presence_penalty", -5.0), ("frequency_penalty", 3), ("repeat_last_n", -1),
    ("stop", "END"), ("stop", ["a", "b", "c", "d"]), ("stop", []), ("logit_bias", {5: -100, "7": 2.5}),
    ("logit_bias", {5: -math.inf}),
    ("stop_token_ids", [2, 3]), ("json_schema", {"type": "object"}), ("json_schema", True),
    ("response_format", {"type": "json_object"}),
]


@pytest.mark.parametrize("field, value", GOOD, ids=[f"{f}={v!r}"[:40] for f, v in GOOD])
def test_sampling_params_accepts_what_openai_and_llama_server_accept(field, value):
    SamplingParams(**{field: value}).to_core()


def test_values_are_normalized_never_truncated():
    p = SamplingParams(max_tokens=3.0, temperature=1, logit_bias={"7": 1}, seed=-1)
    core = p.to_core()
    assert p.max_tokens == 3 and type(p.max_tokens) is int and core.max_tokens == 3
    assert type(p.temperature) is float
    assert core.logit_bias == [(7, 1.0)] and core.seed == 2**64 - 1
    assert not SamplingParams(ignore_eos=False).to_core().ignore_eos


def _nested(depth):
    d = {"type": "string"}
    for _ in range(depth):
        d = {"type": "array", "items": d}
    return d


def test_deeply_nested_schema_is_refused_not_a_recursion_error():
    with pytest.raises(InvalidRequestError, match="nested more than"):
        SamplingParams(json_schema=_nested(10_000))
    with pytest.raises(InvalidRequestError, match="nested more than"):
        SamplingParams(response_format={"type": "json_schema", "json_schema": {"schema": _nested(10_000)}})
    SamplingParams(json_schema=_nested(20)).to_core()


def test_min_tokens_above_max_tokens_is_refused():
    with pytest.raises(InvalidRequestError, match="min_tokens"):
        SamplingParams(min_tokens=9, max_tokens=4)


# ---- the server applies the same rules ------------------------------------------------------

# SamplingParams field -> the OpenAI chat request field that carries it
_WIRE = {"repetition_penalty": "repeat_penalty"}
_SERVER_FIELDS = sorted({f for f, _ in BAD + GOOD} - {"prompt_logprobs", "stop_token_ids",
                                                          "regex", "grammar_triggers", "logprobs",
                                                          "return_progress"})


def _server_verdict(field, value):
    body = {"messages": [{"role": "user", "content": "x"}], _WIRE.get(field, field): value}
    if field == "max_tokens" and value is None:
        del body["max_tokens"]
    try:
        protocol.parse_chat(body)
        return "ok"
    except APIError as e:
        assert e.status == 400 and e.param.startswith(_WIRE.get(field, field)), (e.status, e.param)
        return "refused"


def _library_verdict(field, value):
    try:
        SamplingParams(**{field: value})
        return "ok"
    except InvalidRequestError:
        return "refused"


@pytest.mark.skipif(protocol is None, reason="server extras not installed")
@pytest.mark.parametrize("field", _SERVER_FIELDS)
def test_server_and_library_agree(field):
    cases = [v for f, v in BAD + GOOD if f == field]
    # JSON cannot carry NaN/inf, int dict keys or a max_tokens of -1 (the wire's "no limit")
    cases = [v for v in cases if not (isinstance(v, float) and not math.isfinite(v))
             and not (isinstance(v, dict) and any(not isinstance(k, str) for k in v))
             and not (field == "max_tokens" and v == -1)]
    verdicts = {repr(v): (_library_verdict(field, v), _server_verdict(field, v)) for v in cases}
    assert all(lib == srv for lib, srv in verdicts.values()), verdicts


@pytest.mark.skipif(protocol is None, reason="server extras not installed")
def test_server_names_the_request_field():
    with pytest.raises(APIError) as e:
        protocol.parse_chat({"messages": [{"role": "user", "content": "x"}], "repeat_penalty": 0})
    assert e.value.param == "repeat_penalty" and "'repeat_penalty' must be > 0" in e.value.message
    with pytest.raises(APIError) as e:
        protocol.parse_completion({"prompt": "x", "max_tokens": 2.9})
    assert e.value.param == "max_tokens" and "must be an integer" in e.value.message
    # the wire's -1 is "no limit", as llama-server's n_predict
    assert protocol.parse_completion({"prompt": "x", "max_tokens": -1}).sampling["max_tokens"] is None


# ---- chat messages -------------------------------------------------------------------------

BAD_MESSAGES = [
    ([], "messages"), ("hi", "messages"), ({"role": "user", "content": "x"}, "messages"),
    (["hi"], "messages[0]"), ([{"content": "x"}], "messages[0].role"),
    ([{"role": "robot", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": "x"}, {"role": "user"}], "messages[1].content"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": ["text"]}], "messages[0].content[0]"),
]


@pytest.mark.parametrize("messages, param", BAD_MESSAGES)
def test_validate_messages_names_the_message(messages, param):
    with pytest.raises(InvalidRequestError) as e:
        validation.validate_messages(messages)
    assert e.value.param == param and param in str(e.value)


def test_validate_messages_accepts_openai_shapes():
    validation.validate_messages([
        {"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "u"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function":
                                                               {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"}])


# ---- real model: token ids, chat, n_ctx ------------------------------------------------------

@pytest.fixture(scope="module")
def smollm(smollm2_path):
    llm = edgellm.LLM(str(smollm2_path), n_threads=2)
    yield llm
    llm.close()


@pytest.mark.real_model
@pytest.mark.parametrize("call", ["generate", "detokenize", "eval_logits", "logit_bias", "stop_token_ids",
                                  "generate_many", "stream"])
def test_token_ids_beyond_int32_name_the_id_and_the_vocabulary(smollm, call):
    with pytest.raises(InvalidRequestError) as e:
        if call == "generate":
            smollm.generate([1, BIG_ID], SamplingParams(max_tokens=1))
        elif call == "generate_many":
            smollm.generate([[1, 2], [BIG_ID]], SamplingParams(max_tokens=1))
        elif call == "stream":
            list(smollm.stream([BIG_ID], SamplingParams(max_tokens=1)))
        elif call == "detokenize":
            smollm.detokenize([2**40])
        elif call == "eval_logits":
            smollm.eval_logits([BIG_ID])
        elif call == "logit_bias":
            smollm.generate([1], SamplingParams(max_tokens=1, logit_bias={smollm.n_vocab: 1.0}))
        else:
            smollm.generate([1], SamplingParams(max_tokens=1, stop_token_ids=[smollm.n_vocab + 5]))
    msg = str(e.value)
    assert str(smollm.n_vocab) in msg, msg
    if call in ("generate", "generate_many", "stream", "detokenize", "eval_logits"):
        assert str(2**40) in msg, msg


@pytest.mark.real_model
def test_token_ids_must_be_ints(smollm):
    with pytest.raises(InvalidRequestError, match="integer"):
        smollm.generate([1, 2.5], SamplingParams(max_tokens=1))
    with pytest.raises(InvalidRequestError, match="integer"):
        smollm.detokenize([True])
    assert smollm.detokenize([]) == ""


@pytest.mark.real_model
@pytest.mark.parametrize("messages", [[], [{"role": "robot", "content": "x"}], "hi", [None]])
def test_chat_refuses_malformed_conversations(smollm, messages):
    with pytest.raises(InvalidRequestError, match="messages"):
        smollm.chat(messages, SamplingParams(max_tokens=1))
    with pytest.raises(InvalidRequestError, match="messages"):
        next(iter(smollm.chat_stream_chunks(messages, SamplingParams(max_tokens=1))))


@pytest.mark.real_model
@pytest.mark.parametrize("kwargs, words", [
    ({"n_ctx": 0}, "'n_ctx' must be >= 1"), ({"n_ctx": -5}, "'n_ctx' must be >= 1"),
    ({"n_ctx": 1.5}, "'n_ctx' must be an integer"), ({"n_ctx": "4096"}, "'n_ctx' must be an integer"),
    ({"n_ctx": True}, "'n_ctx' must be an integer"), ({"n_ctx": 2**40}, "'n_ctx' must be <= 2147483647"),
    ({"n_threads": 2.5}, "'n_threads' must be an integer"), ({"max_seqs": "4"}, "'max_seqs'"),
    ({"kv_memory": -1}, "'kv_memory'"), ({"prefix_cache": "no"}, "'prefix_cache' must be a boolean"),
    ({"page_size": 2**40}, "'page_size'"), ({"max_batch_tokens": 0}, "'max_batch_tokens'"),
])
def test_llm_arguments_are_checked(smollm2_path, kwargs, words):
    with pytest.raises(InvalidRequestError, match=words):
        edgellm.LLM(str(smollm2_path), **kwargs)


@pytest.mark.real_model
@pytest.mark.parametrize("n_ctx", [10**7, 10**9])  # ~0.46 TB and ~46 TB of f16 KV for SmolLM2
def test_n_ctx_beyond_memory_says_so_with_the_numbers(smollm2_path, n_ctx):
    with pytest.raises(ContextLengthError) as e:  # was MemoryError (std::bad_alloc)
        edgellm.LLM(str(smollm2_path), n_ctx=n_ctx, n_threads=2)
    msg = str(e.value)
    assert f"n_ctx {n_ctx} is beyond what memory allows" in msg and "23040 bytes per token" in msg \
        and "of memory are available" in msg, msg


def test_kv_memory_beyond_memory_and_n_ctx_beyond_the_maximum(smollm2_path):
    with pytest.raises(ContextLengthError, match=r"kv_memory 1125899906842624 bytes: the KV cache needs"):
        edgellm.LLM(str(smollm2_path), kv_memory=2**50, n_threads=2)
    # a small KV pool fits memory, but the context itself is beyond the engine's maximum
    with pytest.raises(ContextLengthError, match=rf"n_ctx {validation.MAX_N_CTX + 1} is beyond the "
                                                 rf"largest context the engine allows \({validation.MAX_N_CTX}"):
        edgellm.LLM(str(smollm2_path), n_ctx=validation.MAX_N_CTX + 1, kv_memory=1 << 26, n_threads=2)


@pytest.mark.real_model
def test_n_ctx_above_the_trained_length_warns(smollm2_path):
    with edgellm.ModelFile(smollm2_path) as f:
        trained = f.metadata["llama.context_length"]
    with pytest.warns(UserWarning, match=f"trained context {trained}"):
        with edgellm.LLM(str(smollm2_path), n_ctx=trained + 64, n_threads=2, kv_memory=1 << 24) as llm:
            assert llm.n_ctx == trained + 64
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        edgellm.LLM(str(smollm2_path), n_ctx=256, n_threads=2).close()


@pytest.mark.real_model
@pytest.mark.skipif(protocol is None, reason="server extras not installed")
def test_server_answers_huge_token_ids_with_400(smollm2_path):
    from starlette.testclient import TestClient

    from edgellm.server import ServerConfig, create_app

    config = ServerConfig(model=str(smollm2_path), alias="smollm2", ctx_size=256, threads=2,
                          parallel=2)
    with TestClient(create_app(config)) as client:
        for _ in range(600):
            if client.get("/health").status_code == 200:
                break
            import time
            time.sleep(0.1)
        r = client.post("/v1/completions", json={"prompt": [BIG_ID], "max_tokens": 1})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert str(BIG_ID) in err["message"] and "49152" in err["message"], err
        r = client.post("/v1/completions", json={"prompt": "x", "logit_bias": {str(BIG_ID): 1}})
        assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias", r.text
        r = client.post("/detokenize", json={"tokens": [5, BIG_ID]})
        assert r.status_code == 400 and str(BIG_ID) in r.text, r.text
        r = client.post("/v1/chat/completions", json={"messages": [], "max_tokens": 1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
