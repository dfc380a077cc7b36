"""The server's HTTP behaviour over a stand-in engine (no model needed): request checking,
response shapes, streaming, every failure status, disconnects, metrics.

FakeAsyncLLM follows the AsyncLLM contract of python/edgellm/llm.py: async chunk streams that
abort (and count the abort) when closed or cancelled, a context limit that raises
edgellm.ContextLengthError, and stats() with page counts. The real engine is exercised by
tests/test_server.py.
"""
import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Union

import httpx
import pytest

edgellm = pytest.importorskip("edgellm", reason="edgellm._core is not built (scripts/dev-build.sh)")
pytest.importorskip("uvicorn")


from edgellm.server import ServerConfig, create_app  # noqa: E402
from edgellm.server import protocol  # noqa: E402
from edgellm.server.errors import APIError  # noqa: E402
from edgellm.server.metrics import Histogram  # noqa: E402
from edgellm.llm import CompletionChunk, TokenLogprob, TopLogprob, Usage  # noqa: E402
import edgellm.llm  # noqa: E402
from server_helpers import AppServer, free_port, openai_error  # noqa: E402


# --- a stand-in engine -------------------------------------------------------------------------

@dataclass
class SamplingParams(edgellm.llm.SamplingParams):
    """The real parameters, checked against the stand-in's 1000-token vocabulary."""

    def __post_init__(self):
        if self.top_k > 1000:
            raise edgellm.InvalidRequestError(f"top_k {self.top_k} exceeds n_vocab 1000")


WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
EOS_AFTER = 6  # without max_tokens / ignore_eos the fake "model" ends after this many tokens


class FakeAsyncLLM:
    """Token i of a completion is ' ' + WORDS[(seed + i) % 8], id 100 + that index."""

    n_ctx = 256
    n_vocab = 1000
    isa = "fake"
    model_path = "/fake/model.gguf"
    metadata = {"general.architecture": "fake"}
    chat_template = "chatml"

    def __init__(self, token_delay=0.002, prefill_delay=0.0):
        self.token_delay = token_delay
        self.prefill_delay = prefill_delay
        self.active: Dict[int, int] = {}   # request -> pages held
        self.finished = 0
        self.aborted = 0
        self.last_params = None
        self.last_tools = None
        self.last_prompt = None
        self._next = 0
        self.closed = False

    # the synchronous helpers
    def tokenize(self, text, add_special=True, parse_special=False):
        ids = [b + 3 for b in text.encode("utf-8")]
        return ([1] if add_special else []) + ids

    def detokenize(self, ids):
        return bytes(i - 3 for i in ids if i >= 3).decode("utf-8", "replace")

    def token_to_piece(self, i):
        return bytes([i - 3]) if i >= 3 else b""

    def render_chat_prompt(self, messages, tools=None, tool_choice=None, chat_template_kwargs=None,
                           **shaping):
        return self.apply_chat_template(messages, tools=tools)

    def apply_chat_template(self, messages, add_generation_prompt=True, tools=None):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return text + ("<assistant>" if add_generation_prompt else "")

    def stats(self):
        used = sum(self.active.values())
        return {"running": len(self.active), "waiting": 0, "pages_used": used,
                "pages_cached": 2, "pages_allocated": used + 2, "pages_total": 64, "prefix_cache_hits": 1,
                "prefix_cache_queries": 4, "prompt_tokens_total": 0,
                "generated_tokens_total": 0, "tokens_per_second": 12.5}

    def close(self):
        self.closed = True

    # the streams
    def stream_chunks(self, prompt, params=None):
        ids = prompt if isinstance(prompt, list) else self.tokenize(prompt)
        return self._run(ids, params or SamplingParams())

    def chat_stream_chunks(self, messages, params=None, tools=None, tool_choice=None,
                           parallel_tool_calls=None, chat_template_kwargs=None, **shaping):
        self.last_shaping = shaping
        self.last_tools, self.last_tool_choice = tools, tool_choice
        self.last_template_kwargs = chat_template_kwargs
        return self.stream_chunks(self.apply_chat_template(messages, tools=tools), params)

    async def _run(self, ids, p):
        self.last_params, self.last_prompt = p, ids
        if p.max_tokens is not None and len(ids) + p.max_tokens > self.n_ctx:
            total = len(ids) + p.max_tokens
            raise edgellm.ContextLengthError(
                f"prompt has {len(ids)} tokens, max_tokens {p.max_tokens}: {total} > n_ctx "
                f"{self.n_ctx} by {total - self.n_ctx}")
        rid, self._next = self._next, self._next + 1
        self.active[rid] = 1 + len(ids) // 32
        done = 0
        limit = p.max_tokens if p.max_tokens is not None else (
            self.n_ctx - len(ids) if p.ignore_eos else EOS_AFTER)
        try:
            await asyncio.sleep(self.prefill_delay)
            outs = [[] for _ in range(p.n)]
            finished = [False] * p.n
            step = 0
            while not all(finished):
                for j in range(p.n):
                    if finished[j]:
                        continue
                    w = (sum(ids) + j + step) % len(WORDS)
                    text = " " + WORDS[w]
                    outs[j].append(text)
                    reason = None
                    if p.stop and any(s in "".join(outs[j]) for s in
                                      ([p.stop] if isinstance(p.stop, str) else p.stop)):
                        reason, text = "stop", ""
                    elif len(outs[j]) >= limit:
                        reason = "length" if p.max_tokens is not None or p.ignore_eos else "stop"
                    lp = None
                    if p.logprobs is not None:
                        tops = [TopLogprob(100 + (w + k) % 8, " " + WORDS[(w + k) % 8],
                                           -0.5 * (k + 1), list((" " + WORDS[(w + k) % 8]).encode()))
                                for k in range(p.logprobs)]
                        lp = [TokenLogprob(100 + w, " " + WORDS[w], -0.25, list(text.encode()), tops)]
                    n_out = len(outs[j])
                    last = reason is not None
                    yield CompletionChunk(
                        text=text, token_ids=[100 + w], index=j, logprobs=lp,
                        finish_reason=reason,
                        usage=Usage(len(ids), n_out, len(ids) + n_out) if last else None,
                        timings={"prompt_n": len(ids), "prompt_ms": 2.0,
                                 "predicted_n": n_out, "predicted_ms": 4.0} if last else None)
                    if last:
                        finished[j] = True
                step += 1
                await asyncio.sleep(self.token_delay)
            done = 1
        finally:
            # count before leaving `active`: tests poll `active` from another thread
            if done:
                self.finished += 1
            else:
                self.aborted += 1
            del self.active[rid]


# --- running the app on a real socket -----------------------------------------------------------

class RunningServer(AppServer):
    def __init__(self, engine=None, loader=None, **cfg):
        self.engine = engine or FakeAsyncLLM()
        port = free_port()
        config = ServerConfig(model="fake-model", alias="fake", port=port, **cfg)
        self.app = create_app(config, loader=loader or (lambda c: self.engine),
                              params_factory=SamplingParams)
        self.start(self.app, port)
        self.wait_started()


@pytest.fixture
def server():
    s = RunningServer().wait_ready()
    yield s
    s.stop()


def post(s, path, body, **kw):
    kw.setdefault("timeout", 10)
    return httpx.post(s.url + path, json=body, **kw)


def sse_events(resp_text: str):
    events = [line[len("data: "):] for line in resp_text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]", events[-3:]
    return [json.loads(e) for e in events[:-1]]


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


# --- request checking (no server) ----------------------------------------------------------------

def test_absent_parameters_leave_sampling_defaults_except_max_tokens():
    req = protocol.parse_chat({"messages": [{"role": "user", "content": "x"}]})
    assert req.sampling == {"max_tokens": None}  # temperature etc. come from SamplingParams
    req = protocol.parse_chat({"messages": [{"role": "user", "content": "x"}], "temperature": 0,
                               "max_completion_tokens": 7, "repeat_penalty": 1.1, "top_k": 5,
                               "logit_bias": {"42": -100}, "stop": "END", "seed": 3,
                               "logprobs": True, "top_logprobs": 2, "user": "u"})
    assert req.sampling == {"max_tokens": 7, "temperature": 0.0, "repetition_penalty": 1.1,
                            "top_k": 5, "logit_bias": {42: -100.0}, "stop": ["END"], "seed": 3,
                            "logprobs": 2}


@pytest.mark.parametrize("body, param, words", [
    ({"temperature": "hot"}, "temperature", "must be a number, got string"),
    ({"max_tokens": 1.5}, "max_tokens", "must be an integer"),
    ({"n": True}, "n", "must be an integer, got boolean"),
    ({"top_p": 1.5}, "top_p", "must be <= 1"),  # 0 is valid (OpenAI, llama-server)
    ({"logit_bias": {"x": 1}}, "logit_bias", "token ids"),
    ({"temprature": 0.5}, "temprature", "unknown field"),
    ({"stop": [1]}, "stop", "string or an array of strings"),
    ({"top_logprobs": 3}, "top_logprobs", "needs 'logprobs': true"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed when"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content[0].type", "only text"),
])
def test_bad_chat_fields_name_the_parameter(body, param, words):
    full = {"messages": [{"role": "user", "content": "x"}], **body}
    with pytest.raises(APIError) as e:
        protocol.parse_chat(full)
    assert e.value.status == 400 and e.value.param == param and words in e.value.message


def test_completion_prompt_shapes():
    assert protocol.parse_completion({"prompt": "a"}).prompts == ["a"]
    assert protocol.parse_completion({"prompt": ["a", "b"]}).prompts == ["a", "b"]
    assert protocol.parse_completion({"prompt": [1, 2]}).prompts == [[1, 2]]
    assert protocol.parse_completion({"prompt": [[1], [2, 3]]}).prompts == [[1], [2, 3]]
    with pytest.raises(APIError):
        protocol.parse_completion({"prompt": [1, "a"]})
    assert protocol.parse_completion({"prompt": "a", "logprobs": 2}).sampling["logprobs"] == 2


def test_histogram_buckets_are_cumulative():
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.5, 0.5, 3.0):
        h.observe(v)
    lines = h.lines("x")
    assert lines[:3] == ['x_bucket{le="0.1"} 1', 'x_bucket{le="1"} 3', 'x_bucket{le="+Inf"} 4']
    assert lines[-1] == "x_count 4" and lines[-2] == "x_sum 4.05"


# --- responses ---------------------------------------------------------------------------------

def test_chat_response_shape(server):
    r = post(server, "/v1/chat/completions", {**CHAT, "temperature": 0, "seed": 9})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["model"] == "fake"
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length" and choice["logprobs"] is None
    assert len(choice["message"]["content"].split()) == 5
    assert body["usage"]["completion_tokens"] == 5
    prompt_n = len(server.engine.tokenize("<user>hi<assistant>"))
    assert body["usage"]["prompt_tokens"] == prompt_n
    assert body["usage"]["total_tokens"] == prompt_n + 5
    t = body["timings"]
    assert t["predicted_n"] == 5 and t["predicted_per_token_ms"] == pytest.approx(0.8)
    assert t["prompt_per_second"] == pytest.approx(prompt_n / 2.0 * 1e3)
    p = server.engine.last_params
    assert (p.temperature, p.seed, p.max_tokens, p.top_k) == (0.0, 9, 5, 40)


def test_absent_max_tokens_runs_to_end_of_generation(server):
    r = post(server, "/v1/chat/completions", {"messages": CHAT["messages"]})
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    assert server.engine.last_params.max_tokens is None


def test_chat_stream_and_usage(server):
    r = post(server, "/v1/chat/completions", {**CHAT, "stream": True,
                                              "stream_options": {"include_usage": True}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    # the first event says the role only (content null), as OpenAI and llama-server stream it
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert len({e["id"] for e in events}) == 1
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert len(text.split()) == 5
    assert events[-2]["choices"][0]["finish_reason"] == "length" and "timings" in events[-2]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 5
    assert all(e["usage"] is None for e in events[:-1])


def test_stream_text_equals_non_stream_text(server):
    whole = post(server, "/v1/chat/completions", CHAT).json()["choices"][0]["message"]["content"]
    events = sse_events(post(server, "/v1/chat/completions", {**CHAT, "stream": True}).text)
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events) == whole


def test_chat_logprobs(server):
    r = post(server, "/v1/chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 3})
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 5
    first = content[0]
    assert set(first) == {"token", "logprob", "bytes", "top_logprobs"}
    assert first["bytes"] == list(first["token"].encode()) and len(first["top_logprobs"]) == 3
    assert server.engine.last_params.logprobs == 3


def test_completions_batch_n_echo_and_legacy_logprobs(server):
    r = post(server, "/v1/completions", {"prompt": ["ab", "cd"], "n": 2, "max_tokens": 3,
                                         "echo": True, "logprobs": 1})
    body = r.json()
    assert body["object"] == "text_completion"
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    for c in body["choices"]:
        prompt = "ab" if c["index"] < 2 else "cd"
        assert c["text"].startswith(prompt)
        lp = c["logprobs"]
        assert len(lp["tokens"]) == 3 and lp["text_offset"][0] == len(prompt)
        assert lp["text_offset"][1] == len(prompt) + len(lp["tokens"][0])
        assert list(lp["top_logprobs"][0].values()) == [-0.5]
    # each prompt is counted once, every completion's tokens are
    assert body["usage"]["prompt_tokens"] == 2 * 3 and body["usage"]["completion_tokens"] == 12


def test_completions_stream_with_token_prompt(server):
    r = post(server, "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 2, "stream": True,
                                         "stream_options": {"include_usage": True}})
    events = sse_events(r.text)
    assert server.engine.last_prompt == [5, 6, 7]
    assert events[-1]["usage"]["prompt_tokens"] == 3
    assert events[-2]["choices"][0]["finish_reason"] == "length"


def test_tools_and_tool_choice_reach_the_template(server):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    post(server, "/v1/chat/completions", {**CHAT, "tools": tools})
    assert server.engine.last_tools == tools
    post(server, "/v1/chat/completions", {**CHAT, "tools": tools, "tool_choice": "none"})
    assert server.engine.last_tool_choice == "none"  # LLM.chat then renders no tools
    post(server, "/v1/chat/completions", {**CHAT, "tools": tools, "tool_choice": "required",
                                          "chat_template_kwargs": {"enable_thinking": False}})
    assert server.engine.last_tool_choice == "required"
    assert server.engine.last_template_kwargs == {"enable_thinking": False}
    r = post(server, "/v1/chat/completions", {**CHAT, "tools": tools, "tool_choice": {
        "type": "function", "function": {"name": "g"}}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    r = post(server, "/v1/chat/completions", {**CHAT, "tool_choice": "required"})
    assert r.status_code == 400 and "needs 'tools'" in r.json()["error"]["message"]


def test_models_tokenize_detokenize(server):
    models = httpx.get(server.url + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "fake"
    assert models["data"][0]["meta"]["n_ctx"] == 256
    r = post(server, "/tokenize", {"content": "hé"})
    assert r.json() == {"tokens": server.engine.tokenize("hé", add_special=False)}
    r = post(server, "/tokenize", {"content": "a", "add_special": True, "with_pieces": True})
    assert r.json() == {"tokens": [{"id": 1, "piece": ""}, {"id": 100, "piece": "a"}]}
    r = post(server, "/detokenize", {"tokens": server.engine.tokenize("hé", add_special=False)})
    assert r.json() == {"content": "hé"}
    r = post(server, "/detokenize", {"tokens": [5000]})
    assert r.status_code == 400 and "out of range" in r.json()["error"]["message"]


def test_openai_client_accepts_the_shapes(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    out = client.chat.completions.create(model="fake", messages=CHAT["messages"], max_tokens=4)
    assert out.choices[0].message.content and out.usage.completion_tokens == 4
    chunks = list(client.chat.completions.create(
        model="fake", messages=CHAT["messages"], max_tokens=4, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[-1].usage.completion_tokens == 4
    assert [m.id for m in client.models.list()] == ["fake"]
    comp = client.completions.create(model="fake", prompt="x", max_tokens=2)
    assert comp.choices[0].finish_reason == "length"


# --- failures -----------------------------------------------------------------------------------

_error = openai_error


def test_bad_json_and_wrong_types(server):
    r = httpx.post(server.url + "/v1/chat/completions", content=b"{not json",
                   headers={"content-type": "application/json"})
    err = _error(r, 400)
    assert err["type"] == "invalid_request_error" and "not valid JSON" in err["message"]
    err = _error(post(server, "/v1/chat/completions", {**CHAT, "max_tokens": "ten"}), 400)
    assert err["param"] == "max_tokens" and "integer" in err["message"]
    err = _error(post(server, "/v1/completions", {"prompt": "x", "bogus": 1}), 400)
    assert err["param"] == "bogus" and err["code"] == "unknown_field"
    err = _error(post(server, "/v1/chat/completions", [1, 2]), 400)
    assert "JSON object" in err["message"]
    err = _error(post(server, "/v1/chat/completions", {**CHAT, "top_k": 5000}), 400)
    assert "top_k 5000" in err["message"]  # the engine's own parameter check
    err = _error(httpx.get(server.url + "/v1/nothing"), 404)
    assert "/v1/nothing" in err["message"]


def test_context_overflow_says_by_how_much(server):
    err = _error(post(server, "/v1/chat/completions", {**CHAT, "max_tokens": 250}), 400)
    prompt_n = len(server.engine.tokenize("<user>hi<assistant>"))
    assert err["code"] == "context_length_exceeded"
    assert f"{prompt_n + 250} > n_ctx 256 by {prompt_n + 250 - 256}" in err["message"]
    # llama-server's type and numbers beside OpenAI's code
    assert err["type"] == "exceed_context_size_error"
    assert err["n_prompt_tokens"] == prompt_n and err["n_ctx"] == 256
    r = post(server, "/v1/chat/completions", {**CHAT, "max_tokens": 250, "stream": True})
    assert _error(r, 400)["code"] == "context_length_exceeded"  # before any event is sent
    assert server.engine.active == {}


def test_api_key():
    s = RunningServer(api_key="sekret").wait_ready()
    try:
        err = _error(post(s, "/v1/chat/completions", CHAT), 401)
        assert "missing API key" in err["message"]
        err = _error(post(s, "/v1/chat/completions", CHAT,
                          headers={"Authorization": "Bearer wrong"}), 401)
        assert err["message"] == "invalid API key" and err["type"] == "authentication_error"
        assert httpx.get(s.url + "/v1/models").status_code == 401
        assert httpx.get(s.url + "/health").status_code == 200  # open for probes
        ok = post(s, "/v1/chat/completions", CHAT, headers={"Authorization": "Bearer sekret"})
        assert ok.status_code == 200
    finally:
        s.stop()


def test_503_while_loading_then_ready():
    release = threading.Event()
    engine = FakeAsyncLLM()

    def slow_loader(config):
        release.wait(10)
        return engine

    s = RunningServer(engine=engine, loader=slow_loader)
    try:
        r = httpx.get(s.url + "/health")
        assert r.status_code == 503 and r.json() == {"status": "loading"}
        err = _error(post(s, "/v1/chat/completions", CHAT), 503)
        assert "loading" in err["message"] and err["type"] == "unavailable_error"
        assert "edgellm_model_ready" in httpx.get(s.url + "/metrics").text
        release.set()
        s.wait_ready()
        assert httpx.get(s.url + "/health").json() == {"status": "ok"}
        assert post(s, "/v1/chat/completions", CHAT).status_code == 200
    finally:
        release.set()
        s.stop()
    assert engine.closed  # shutdown closes the engine


def test_failed_load_reports_error():
    def broken(config):
        raise edgellm.ModelFormatError("fake.gguf: bad magic")

    s = RunningServer(loader=broken)
    try:
        deadline = time.monotonic() + 5
        while (r := httpx.get(s.url + "/health")).status_code == 503:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert r.status_code == 500 and "bad magic" in r.json()["message"]
    finally:
        s.stop()


def test_full_queue_gets_429_with_retry_after():
    engine = FakeAsyncLLM(token_delay=0.05)
    s = RunningServer(engine=engine, parallel=1, max_queue=1).wait_ready()
    try:
        slow = {**CHAT, "max_tokens": 40, "stream": True}
        with httpx.Client(timeout=10) as c1, httpx.Client(timeout=10) as c2:
            with c1.stream("POST", s.url + "/v1/chat/completions", json=slow) as r1, \
                    c2.stream("POST", s.url + "/v1/chat/completions", json=slow) as r2:
                assert r1.status_code == r2.status_code == 200
                err = _error(post(s, "/v1/chat/completions", CHAT), 429)
                r3 = post(s, "/v1/chat/completions", CHAT)
                assert int(r3.headers["Retry-After"]) >= 1
                assert err["type"] == "rate_limit_error" and "2 request slots" in err["message"]
        # both streams closed early: their slots are free again
        deadline = time.monotonic() + 5
        while engine.active:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert post(s, "/v1/chat/completions", CHAT).status_code == 200
        metrics = httpx.get(s.url + "/metrics").text
        assert metric(metrics, 'edgellm_requests_total{endpoint="chat",status="429"}') == 2
    finally:
        s.stop()


def test_timeout_aborts_the_request():
    engine = FakeAsyncLLM(token_delay=0.05)
    s = RunningServer(engine=engine, timeout=0.3).wait_ready()
    try:
        err = _error(post(s, "/v1/chat/completions", {**CHAT, "max_tokens": 100}), 504)
        assert err["type"] == "timeout_error" and "0.3 s" in err["message"]
        assert engine.active == {} and engine.aborted == 1
        # streaming: the deadline passes mid-stream, the error arrives in-band
        r = post(s, "/v1/chat/completions", {**CHAT, "max_tokens": 100, "stream": True})
        last = r.text.strip().split("\n\n")[-1]
        assert json.loads(last[len("data: "):])["error"]["code"] == "timeout"
        assert engine.active == {} and engine.aborted == 2
    finally:
        s.stop()


def test_disconnect_mid_stream_aborts_and_frees_pages():
    engine = FakeAsyncLLM(token_delay=0.02)
    s = RunningServer(engine=engine).wait_ready()
    try:
        for _ in range(3):
            with httpx.Client(timeout=10) as c:
                with c.stream("POST", s.url + "/v1/chat/completions",
                              json={**CHAT, "max_tokens": 200, "stream": True}) as r:
                    lines = r.iter_lines()
                    assert next(lines).startswith("data: ")
            # the client is gone
        deadline = time.monotonic() + 5
        while engine.active:
            assert time.monotonic() < deadline, engine.active
            time.sleep(0.01)
        assert engine.aborted == 3
        m = httpx.get(s.url + "/metrics").text
        assert metric(m, "edgellm_kv_pages_in_use_requests") == 0
        assert metric(m, "edgellm_kv_pages_used") == 2  # only the prefix cache's pages
        assert metric(m, "edgellm_requests_running") == 0
        assert metric(m, 'edgellm_requests_total{endpoint="chat",status="499"}') == 3
        assert post(s, "/v1/chat/completions", CHAT).status_code == 200
    finally:
        s.stop()


def test_disconnect_during_prefill_aborts_non_streaming_request():
    engine = FakeAsyncLLM(prefill_delay=30)
    s = RunningServer(engine=engine).wait_ready()
    try:
        with pytest.raises(httpx.ReadTimeout):
            post(s, "/v1/chat/completions", CHAT, timeout=0.3)
        deadline = time.monotonic() + 5
        while engine.active or engine.aborted != 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        s.stop()


def test_metrics_exposition(server):
    post(server, "/v1/chat/completions", {**CHAT, "stream": True})
    text = httpx.get(server.url + "/metrics").text
    for name in ("edgellm_requests_running", "edgellm_requests_waiting",
                 "edgellm_prompt_tokens_total", "edgellm_generation_tokens_total",
                 "edgellm_kv_pages_used", "edgellm_kv_pages_total",
                 "edgellm_kv_pages_in_use_requests", "edgellm_prefix_cache_hit_ratio",
                 "edgellm_tokens_per_second"):
        assert f"# TYPE {name} " in text
    assert metric(text, "edgellm_prefix_cache_hit_ratio") == 0.25
    assert metric(text, "edgellm_kv_pages_total") == 64
    assert metric(text, "edgellm_time_to_first_token_seconds_count") == 1
    assert metric(text, "edgellm_inter_token_latency_seconds_count") == 4  # 5 tokens, 4 gaps
    assert 'edgellm_time_to_first_token_seconds_bucket{le="+Inf"} 1' in text
    assert metric(text, 'edgellm_requests_finished_total{finish_reason="length"}') == 1


# --- the `edgellm serve` process ------------------------------------------------------------------

def cli_fake_engine(config):
    """--engine-factory target for the CLI tests; behaviour from FAKE_* environment variables."""
    import os

    time.sleep(float(os.environ.get("FAKE_LOAD_DELAY", "0")))
    if os.environ.get("FAKE_LOAD_FAIL"):
        raise edgellm.ModelFormatError(f"{config.model}: not a GGUF file (bad magic)")
    return FakeAsyncLLM(token_delay=float(os.environ.get("FAKE_TOKEN_DELAY", "0.002")))


def _serve(*args, **env_vars):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, **env_vars)
    # tests/ for the stand-in engine; python/ only for a development build (an installed package
    # carries its compiled _core, the checkout does not)
    paths = [str(root / "python")] if env.get("EDGELLM_BUILD_DIR") else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(root / "tests"), env.get("PYTHONPATH", "")])
    if env.get("EDGELLM_BUILD_DIR"):
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgellm", "serve", "fake.gguf", "--port", str(port),
         "--engine-factory", "test_server_unit:cli_fake_engine", "--log-level", "warning", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, f"http://127.0.0.1:{port}"


def _first_health(proc, url, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.stdout.read()
        try:
            return httpx.get(url + "/health", timeout=2)
        except httpx.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_cli_loads_in_background_and_exits_0_on_sigterm():
    import signal

    proc, url = _serve("--shutdown-grace", "1", FAKE_LOAD_DELAY="1.5", FAKE_TOKEN_DELAY="0.05")
    try:
        r = _first_health(proc, url)
        assert r.status_code == 503 and r.json() == {"status": "loading"}
        deadline = time.monotonic() + 10
        while httpx.get(url + "/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        body = {**CHAT, "max_tokens": 200, "stream": True}
        with httpx.Client(timeout=10) as c, c.stream("POST", url + "/v1/chat/completions",
                                                     json=body) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            proc.send_signal(signal.SIGTERM)
            received = []
            try:
                for line in lines:
                    if line.startswith("data: {"):
                        received.append(line)
            except httpx.HTTPError:
                pass
        assert proc.wait(15) == 0
        # the 1 s grace period cut the stream short of its 200 tokens (counted, not timed)
        assert len(received) < 200 and not any('"length"' in x for x in received)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_cli_exits_1_when_the_model_fails_to_load():
    proc, url = _serve(FAKE_LOAD_FAIL="1")
    try:
        assert proc.wait(30) == 1
        assert "bad magic" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_rejects_bad_options():
    proc, _ = _serve("--kv-memory", "lots")
    assert proc.wait(30) == 2 and "memory size" in proc.stdout.read()


# --- the OpenAPI document -----------------------------------------------------------------------

def test_openapi_document_names_every_route_and_its_body(server):
    doc = httpx.get(server.url + "/openapi.json").json()
    try:
        from openapi_spec_validator import validate
        validate(doc)
    except ImportError:
        pass
    for path, method in (("/v1/chat/completions", "post"), ("/v1/completions", "post"),
                         ("/v1/messages", "post"), ("/v1/responses", "post"),
                         ("/completion", "post"), ("/infill", "post"), ("/v1/embeddings", "post"),
                         ("/tokenize", "post"), ("/v1/models", "get"), ("/props", "get")):
        assert method in doc["paths"][path], path
    body = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    name = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    fields = doc["components"]["schemas"][name]["properties"]
    assert {"messages", "temperature", "max_tokens", "tools", "stream"} <= set(fields)
    assert doc["components"]["schemas"][name]["additionalProperties"] is False  # unknown: a 400
    page = httpx.get(server.url + "/docs")
    assert page.status_code == 200 and "/openapi.json" in page.text
