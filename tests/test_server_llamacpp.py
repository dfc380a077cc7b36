"""llama-server's native endpoints (/completion, /infill, /apply-template, /props, /slots, the
llamacpp:* metrics), CORS, the llama-server options of `edgellm serve` and multi-address --host.

The first part runs over the stand-in engine of tests/test_server_unit.py; the second starts
the real server (SmolLM2, Qwen2.5-Coder for fill-in-the-middle), marked real_model.
"""
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("edgellm", reason="edgellm._core is not built (scripts/dev-build.sh)")
pytest.importorskip("uvicorn")

from test_server_unit import FakeAsyncLLM, RunningServer, WORDS  # noqa: E402

from edgellm.server import llamacpp_api  # noqa: E402
from edgellm.server.cors import CORS, origin_is_localhost  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


class StopFake(FakeAsyncLLM):
    """The stand-in, saying which stop string ended a completion (the engine's stop_reason:
    the string, or the end-of-generation token id)."""

    async def _run(self, ids, p):
        text = ""
        async for chunk in super()._run(ids, p):
            text += chunk.text
            if chunk.finish_reason == "stop":
                stops = [p.stop] if isinstance(p.stop, str) else (p.stop or [])
                hit = [x for x in stops if x in text + " " + WORDS[chunk.token_ids[0] - 100]]
                chunk.stop_reason = hit[0] if hit else 2
            yield chunk


@pytest.fixture
def server():
    s = RunningServer(engine=StopFake()).wait_ready()
    yield s
    s.stop()


def post(s, path, body, **kw):
    kw.setdefault("timeout", 10)
    return httpx.post(s.url + path, json=body, **kw)


def native_events(text: str):
    out = [json.loads(line[len("data: "):]) for line in text.split("\n\n")
           if line.startswith("data: ")]
    assert out, text
    return out


# --- /completion over the stand-in ------------------------------------------------------------

def test_completion_shape_and_limit(server):
    r = post(server, "/completion", {"prompt": "hello", "n_predict": 3})
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["content"] == "".join(" " + w for w in _words(server, 3))
    assert b["stop"] is True and b["stop_type"] == "limit" and b["stopping_word"] == ""
    assert b["tokens"] == []  # return_tokens is off
    assert b["tokens_predicted"] == 3 and b["tokens_evaluated"] == 6  # BOS + 5 bytes
    assert b["truncated"] is False and b["has_new_line"] is False
    assert b["generation_settings"]["n_predict"] == 3
    t = b["timings"]
    assert t["prompt_n"] == 6 and t["predicted_n"] == 3 and t["cache_n"] == 0
    # the generation rate is over predicted_n - 1 decode steps
    assert t["predicted_per_second"] == pytest.approx(1e3 * 2 / t["predicted_ms"])
    assert "completion_probabilities" not in b


def _words(server, n):
    ids = server.engine.last_prompt
    return [WORDS[(sum(ids) + i) % len(WORDS)] for i in range(n)]


def test_completion_return_tokens_and_probs(server):
    b = post(server, "/completion", {"prompt": "hello", "n_predict": 2, "return_tokens": True,
                                     "n_probs": 2}).json()
    assert len(b["tokens"]) == 2 and all(isinstance(t, int) for t in b["tokens"])
    probs = b["completion_probabilities"]
    assert len(probs) == 2
    assert set(probs[0]) == {"id", "token", "bytes", "logprob", "top_logprobs"}
    assert len(probs[0]["top_logprobs"]) == 2
    b = post(server, "/completion", {"prompt": "hello", "n_predict": 1, "n_probs": 1,
                                     "post_sampling_probs": True}).json()
    p = b["completion_probabilities"][0]
    assert 0 < p["prob"] <= 1 and "top_probs" in p and "logprob" not in p


def test_completion_stop_word(server):
    b = post(server, "/completion", {"prompt": "hello", "n_predict": 20,
                                     "stop": [_words_for(server, "hello", 2)[1]]}).json()
    assert b["stop_type"] == "word" and b["stopping_word"] != ""


def _words_for(server, prompt, n):
    ids = server.engine.tokenize(prompt)
    return [WORDS[(sum(ids) + i) % len(WORDS)] for i in range(n)]


def test_completion_eos(server):
    b = post(server, "/completion", {"prompt": "hello"}).json()  # the stand-in ends by itself
    assert b["stop_type"] == "eos" and b["tokens_predicted"] == 6


def test_completion_stream_matches_non_stream(server):
    whole = post(server, "/completion", {"prompt": "abc", "n_predict": 4}).json()
    r = post(server, "/completion", {"prompt": "abc", "n_predict": 4, "stream": True,
                                     "timings_per_token": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = native_events(r.text)
    assert all(isinstance(e["stop"], bool) for e in events)
    assert [e["stop"] for e in events] == [False] * 4 + [True]
    assert all(e["tokens"] for e in events[:-1]) and all("timings" in e for e in events)
    assert "".join(e["content"] for e in events) == whole["content"]
    last = events[-1]
    assert last["stop_type"] == "limit" and last["generation_settings"]["stream"] is True


def test_prompt_shapes(server):
    # two prompts -> a list, in order
    b = post(server, "/completion", {"prompt": ["ab", [1, 5, 6]], "n_predict": 2}).json()
    assert isinstance(b, list) and [x["index"] for x in b] == [0, 1]
    assert b[0]["tokens_evaluated"] == 3 and b[1]["tokens_evaluated"] == 3
    # token ids and text in one prompt -> one result; only a leading text piece gets BOS
    b = post(server, "/completion", {"prompt": [7, 8, "ab", 9], "n_predict": 1}).json()
    assert isinstance(b, dict) and server.engine.last_prompt == [7, 8, ord("a") + 3,
                                                                 ord("b") + 3, 9]
    b = post(server, "/completion", {"prompt": {"prompt_string": "ab"}, "n_predict": 1}).json()
    assert b["tokens_evaluated"] == 3
    r = post(server, "/completion", {"prompt": {"prompt_string": "a", "multimodal_data": ["x"]}})
    assert r.status_code == 400


@pytest.mark.parametrize("body, param", [
    ({"prompt": "x", "n_predictt": 3}, "n_predictt"),
    ({"prompt": "x", "mirostat": 2}, "mirostat"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "n_probs": 99}, "n_probs"),
    ({"prompt": "x", "lora": [{"id": 0, "scale": 1}]}, "lora"),
    ({"n_predict": 3}, "prompt"),
    ({"prompt": [True]}, "prompt"),
    ({"prompt": "x", "speculative.p_min": 1.5}, "speculative.p_min"),
    ({"prompt": "x", "speculative.n_max": -1}, "speculative.n_max"),
])
def test_completion_rejects_named_field(server, body, param):
    r = post(server, "/completion", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].split("[")[0] == param


def test_completion_accepts_llamacpp_client_fields(server):
    body = {"prompt": "x", "n_predict": 2, "mirostat": 0, "mirostat_tau": 5, "mirostat_eta": 0.1,
            "dry_multiplier": 0, "dry_base": 1.75, "xtc_probability": 0, "xtc_threshold": 0.1,
            "dynatemp_range": 0, "dynatemp_exponent": 1, "top_n_sigma": -1, "id_slot": -1,
            "n_keep": 0, "samplers": ["top_k", "temperature"], "cache_prompt": True,
            "t_max_predict_ms": 0, "return_progress": False, "lora": [], "min_keep": 0,
            "logit_bias": [[5, -1.0], ["a", False]], "seed": -1, "typical_p": 1,
            "speculative.n_max": 16, "speculative.n_min": 0, "speculative.p_min": 0.75}
    r = post(server, "/completion", body)
    assert r.status_code == 200, r.text
    p = server.engine.last_params
    assert p.seed is None and p.logit_bias == {5: -1.0, ord("a") + 3: -100.0}


@pytest.mark.parametrize("bias", [float("nan"), float("inf")])
@pytest.mark.parametrize("path, shape", [
    ("/completion", "pairs"), ("/completion", "object"), ("/v1/completions", "object"),
    ("/v1/chat/completions", "object")])
def test_logit_bias_one_rule_on_every_route(server, path, shape, bias):
    """Issue 39 defect 9: NaN and +inf biases are a 400 naming logit_bias on every route; -inf
    bans the token everywhere (as documented)."""
    def body(b):
        lb = [[5, b]] if shape == "pairs" else {"5": b}
        if path == "/v1/chat/completions":
            return {"messages": [{"role": "user", "content": "x"}], "logit_bias": lb,
                    "max_tokens": 2}
        return {"prompt": "x", "logit_bias": lb, "max_tokens": 2}

    def send(b):  # NaN / Infinity as Python's json writes (and the server's parser reads) them
        return httpx.post(server.url + path, content=json.dumps(body(b)), timeout=10,
                          headers={"content-type": "application/json"})

    r = send(bias)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].startswith("logit_bias")
    r = send(float("-inf"))
    assert r.status_code == 200, r.text
    assert server.engine.last_params.logit_bias == {5: float("-inf")}


@pytest.mark.parametrize("path", ["/completion", "/v1/completions", "/v1/chat/completions"])
def test_xtc_fields_accepted_and_range_checked(server, path):
    """XTC's fields (llama.cpp's names) on llama.cpp's route and as extra body fields on the
    OpenAI routes: they reach SamplingParams; out of range is a 400 naming the field."""
    def body(**kw):
        if path == "/v1/chat/completions":
            return {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, **kw}
        return {"prompt": "x", "max_tokens": 2, **kw}

    r = post(server, path, body(xtc_probability=0.5, xtc_threshold=0.2))
    assert r.status_code == 200, r.text
    p = server.engine.last_params
    assert (p.xtc_probability, p.xtc_threshold) == (0.5, 0.2)
    if path == "/completion":
        g = r.json()["generation_settings"]
        assert (g["xtc_probability"], g["xtc_threshold"]) == (0.5, 0.2)
        assert "xtc" in g["samplers"]
    for field, value in (("xtc_probability", 1.5), ("xtc_probability", -0.5),
                         ("xtc_threshold", 1.01), ("xtc_threshold", "high")):
        r = post(server, path, body(**{field: value}))
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == field


def test_completion_over_context(server):
    r = post(server, "/completion", {"prompt": "x" * 300})
    assert r.status_code == 400
    e = r.json()["error"]
    assert e["type"] == "exceed_context_size_error"
    assert e["n_prompt_tokens"] == 301 and e["n_ctx"] == 256
    assert "exceeds the available context size" in e["message"]


def test_completion_fills_context_and_says_truncated(server):
    # no n_predict with ignore_eos: generation runs until the context is full
    b = post(server, "/completion", {"prompt": "x" * 200, "ignore_eos": True}).json()
    assert b["tokens_predicted"] == 256 - 201 and b["truncated"] is True
    assert b["stop_type"] == "limit"


def test_response_fields(server):
    b = post(server, "/completion", {"prompt": "hi", "n_predict": 2,
                                     "response_fields": ["content", "generation_settings/n_predict",
                                                         "nope"]}).json()
    assert set(b) == {"content", "generation_settings/n_predict"}
    assert b["generation_settings/n_predict"] == 2


def test_n_predict_zero_answers_without_generating(server):
    b = post(server, "/completion", {"prompt": "hi", "n_predict": 0}).json()
    assert b["content"] == "" and b["tokens_predicted"] == 0 and b["tokens_evaluated"] == 3


def test_infill_needs_fim_tokens(server):
    r = post(server, "/infill", {"input_prefix": "a", "input_suffix": "b"})
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "prefix" in msg and "suffix" in msg and "middle" in msg
    assert "tokenizer.ggml.fim_pre_token_id" in msg


class FimFake(FakeAsyncLLM):
    """The stand-in with FIM tokens 900..904 in its GGUF metadata."""

    n_ctx = 2048  # the extra files get what is left beyond a batch (512) and 2 * n_predict

    metadata = {"general.architecture": "fake", "tokenizer.ggml.fim_pre_token_id": 900,
                "tokenizer.ggml.fim_suf_token_id": 901, "tokenizer.ggml.fim_mid_token_id": 902,
                "tokenizer.ggml.fim_rep_token_id": 903, "tokenizer.ggml.fim_sep_token_id": 904}


def test_infill_prompt_layout():
    s = RunningServer(engine=FimFake()).wait_ready()
    try:
        r = post(s, "/infill", {"input_prefix": "P", "input_suffix": "S", "prompt": "M",
                                "input_extra": [{"filename": "f", "text": "T"}], "n_predict": 2})
        assert r.status_code == 200, r.text
        t = lambda text: [b + 3 for b in text.encode()]  # noqa: E731 - the stand-in's tokenizer
        assert s.engine.last_prompt == (
            [903] + t("myproject\n") + [904] + t("f\n") + t("T") + [904] + t("filename\n")
            + [1] + [900] + t("P") + t("M") + [901] + t("S") + [902])
        for bad in ([{}], [{"filename": 1, "text": "x"}], [{"text": 5}], "x"):
            r = post(s, "/infill", {"input_prefix": "P", "input_suffix": "S", "input_extra": bad})
            assert r.status_code == 400, bad
        assert post(s, "/infill", {"input_suffix": "S"}).json()["error"]["param"] == "input_prefix"
    finally:
        s.stop()


# --- the other endpoints -----------------------------------------------------------------------

def test_apply_template(server):
    b = post(server, "/apply-template", {"messages": [{"role": "user", "content": "hi"}]}).json()
    assert b == {"prompt": "<user>hi<assistant>"}
    b = post(server, "/apply-template", {"messages": [{"role": "user", "content": "hi"}],
                                         "add_generation_prompt": False}).json()
    assert b == {"prompt": "<user>hi"}
    r = post(server, "/apply-template", {"messages": []})
    assert r.status_code == 400


def test_props_and_slots():
    s = RunningServer(parallel=3, seed=42, n_predict=16).wait_ready()
    try:
        p = httpx.get(s.url + "/props").json()
        assert p["total_slots"] == 3 and p["model_path"] == "/fake/model.gguf"
        dgs = p["default_generation_settings"]
        assert dgs["n_ctx"] == 256 and dgs["params"]["seed"] == 42
        assert dgs["params"]["n_predict"] == 16
        assert p["modalities"] == {"vision": False, "video": False, "audio": False}
        slots = httpx.get(s.url + "/slots").json()
        assert [x["id"] for x in slots] == [0, 1, 2]
        assert all(x["is_processing"] is False and "params" not in x for x in slots)
    finally:
        s.stop()


def test_slots_and_metrics_can_be_off():
    s = RunningServer(slots_endpoint=False, metrics_endpoint=False).wait_ready()
    try:
        for path in ("/slots", "/metrics"):
            r = httpx.get(s.url + path)
            assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
    finally:
        s.stop()


def test_llamacpp_metric_names(server):
    post(server, "/completion", {"prompt": "hello", "n_predict": 4})
    r = httpx.get(server.url + "/metrics")
    assert "Process-Start-Time-Unix" in r.headers
    text = r.text
    assert "edgellm_requests_running" in text  # ours stay
    types = {}
    values = {}
    for line in text.splitlines():
        if line.startswith("# TYPE llamacpp:"):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line.startswith("llamacpp:"):
            name, value = line.split(" ", 1)
            values[name] = float(value)
    for name in ("prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total",
                 "tokens_predicted_total", "tokens_predicted_seconds_total", "n_decode_total",
                 "n_tokens_max"):
        assert types[f"llamacpp:{name}"] == "counter"
        assert f"# HELP llamacpp:{name} " in text
    for name in ("prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing",
                 "requests_deferred", "n_busy_slots_per_decode"):
        assert types[f"llamacpp:{name}"] == "gauge"
    assert values["llamacpp:n_tokens_max"] == 6 + 4
    assert values["llamacpp:prompt_seconds_total"] == pytest.approx(0.002)


def test_server_defaults_n_predict_seed_temperature():
    s = RunningServer(n_predict=3, seed=7, temperature=0.0).wait_ready()
    try:
        b = post(s, "/completion", {"prompt": "hi", "ignore_eos": True}).json()
        assert b["tokens_predicted"] == 3  # --n-predict when the request sets none
        p = s.engine.last_params
        assert p.seed == 7 and p.temperature == 0.0
        b = post(s, "/completion", {"prompt": "hi", "seed": 9, "temperature": 0.5,
                                    "n_predict": 5}).json()
        p = s.engine.last_params
        assert p.seed == 9 and p.temperature == 0.5 and p.max_tokens == 5  # the request's win
        assert b["generation_settings"]["n_predict"] == 5
        post(s, "/completion", {"prompt": "hi", "n_predict": -1})
        assert s.engine.last_params.max_tokens == 3  # -1 = "not given", as llama-server
        # the OpenAI routes get the same defaults
        r = post(s, "/v1/completions", {"prompt": "hi", "ignore_eos": True})
        assert r.json()["usage"]["completion_tokens"] == 3
        assert s.engine.last_params.seed == 7
    finally:
        s.stop()


# --- CORS -----------------------------------------------------------------------------------------

PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization"}


def test_preflight_needs_no_key_and_errors_carry_cors():
    s = RunningServer(api_key="k", cors_origins="*").wait_ready()  # llama-server's default
    try:
        r = httpx.options(s.url + "/completion", headers={"Origin": "http://a.example", **PREFLIGHT})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "http://a.example"
        assert r.headers["access-control-allow-credentials"] == "true"
        assert r.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
        assert r.headers["access-control-allow-headers"] == "*"
        r = post(s, "/completion", {"prompt": "x"}, headers={"Origin": "http://a.example"})
        assert r.status_code == 401
        assert r.headers["access-control-allow-origin"] == "http://a.example"
        r = post(s, "/completion", {"prompt": "x", "n_predict": 1},
                 headers={"Authorization": "Bearer k", "Origin": "http://b.example"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://b.example"
    finally:
        s.stop()


@pytest.mark.parametrize("origin, ok", [
    ("http://localhost", True), ("http://localhost:8080", True), ("https://127.0.0.1:3000", True),
    ("http://[::1]:3000", True), ("http://[::1]", True), ("http://localhost.evil.com", False),
    ("http://notlocalhost", False), ("http://evil.com", False), ("localhost", False),
    ("http://localhost/x", False), ("http://localhost:abc", False),
])
def test_origin_is_localhost(origin, ok):
    assert origin_is_localhost(origin) is ok


def test_cors_origin_rules():
    assert CORS(None, "*").allow_origin("http://x") == "http://x"
    assert CORS(None, "*").allow_origin(None) == "*"
    assert CORS(None, "*", credentials=False).allow_origin("http://x") == "*"
    assert CORS(None, "localhost").allow_origin("http://evil.com") is None
    assert CORS(None, "localhost").allow_origin("http://127.0.0.1:5") == "http://127.0.0.1:5"
    lst = CORS(None, "http://a.example, http://b.example")
    assert lst.allow_origin("http://b.example") == "http://b.example"
    assert lst.allow_origin("http://c.example") is None


def test_cors_localhost_over_http():
    s = RunningServer(cors_origins="localhost").wait_ready()
    try:
        r = httpx.options(s.url + "/v1/chat/completions",
                          headers={"Origin": "http://evil.com", **PREFLIGHT})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        r = httpx.get(s.url + "/health", headers={"Origin": "http://localhost:3000"})
        assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
    finally:
        s.stop()


# --- the command line -------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def _env():
    """The child's environment: tests/ on the path (stand-in engines); the checkout's package
    only for a development build (EDGELLM_BUILD_DIR), else the installed one (CI)."""
    env = dict(os.environ)
    paths = [str(REPO / "tests"), env.get("PYTHONPATH")]
    if env.get("EDGELLM_BUILD_DIR"):
        paths.insert(0, str(REPO / "python"))
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    return env


def _wait(url, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "exited"
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "server not ready"
        time.sleep(0.1)


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback")
def test_serve_listens_on_every_host():
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgellm", "serve", "fake", "--engine-factory",
         "test_server_llamacpp:fake_engine", "--host", "127.0.0.1,::1", "--port", str(port),
         "--log-level", "warning", "--n-predict", "2", "--seed", "5"],
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for host in ("127.0.0.1", "[::1]"):
            url = f"http://{host}:{port}"
            _wait(url, proc)
            b = httpx.post(url + "/completion", json={"prompt": "hi"}, timeout=10).json()
            assert b["tokens_predicted"] == 2
            assert b["generation_settings"]["seed"] == 5
    finally:
        proc.terminate()
        proc.wait(10)


def fake_engine(config):
    return FakeAsyncLLM()


# --- the real server --------------------------------------------------------------------------------

def _real_server(model, *args):
    ts = pytest.importorskip("test_server")
    return ts.ServerProcess(model, *args).wait_ready()


def _model(name):
    from edgellm import models
    try:
        path = models.resolve(name)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"{name} is not available: {e}")
    return path


@pytest.mark.real_model
@pytest.mark.slow
def test_real_completion_and_props():
    s = _real_server(_model("smollm2"), "--ctx-size", "256", "--parallel", "2", "--n-predict",
                     "16", "--seed", "42", "--no-slots")
    try:
        b = s.post("/completion", {"prompt": "I believe the meaning of life is", "n_predict": 8,
                                   "temperature": 0, "return_tokens": True}).json()
        assert b["tokens_predicted"] == 8 and len(b["tokens"]) == 8
        assert b["timings"]["predicted_n"] == 8 and b["stop_type"] == "limit"
        assert b["content"] and b["generation_settings"]["n_predict"] == 8
        r = s.post("/completion", {"prompt": "I believe the meaning of life is", "n_predict": 8,
                                   "temperature": 0, "stream": True})
        events = native_events(r.text)
        assert "".join(e["content"] for e in events) == b["content"]
        assert events[-1]["stop"] is True
        # --n-predict when a request sets none
        b = s.post("/completion", {"prompt": "Once upon a time", "ignore_eos": True}).json()
        assert b["tokens_predicted"] == 16
        r = s.post("/completion", {"prompt": "word " * 300})
        assert r.status_code == 400
        assert r.json()["error"]["type"] == "exceed_context_size_error"
        p = httpx.get(s.url + "/props", headers=s.headers).json()
        assert p["model_path"].endswith(".gguf") and p["total_slots"] == 2
        assert p["default_generation_settings"]["params"]["seed"] == 42
        assert "<|im_start|>" in p["chat_template"]
        assert httpx.get(s.url + "/slots", headers=s.headers).status_code == 501
        t = s.post("/apply-template", {"messages": [{"role": "user", "content": "hi"}]}).json()
        assert t["prompt"].endswith("<|im_start|>assistant\n")
        r = s.post("/infill", {"input_prefix": "def f():\n", "input_suffix": "\n"})
        assert r.status_code == 400 and "FIM" in r.json()["error"]["message"]
        m = httpx.get(s.url + "/metrics", headers=s.headers).text
        assert "llamacpp:tokens_predicted_total" in m
    finally:
        s.stop()


@pytest.mark.real_model
@pytest.mark.slow
def test_real_xtc_removes_the_top_choices():
    """XTC on a real model (SmolLM2), against its semantics: with no truncation the candidates'
    probabilities are the row's (n_probs), so at temperature 0 with xtc_probability 1 and a
    threshold between the 2nd and 3rd token's probability, the 1st token is removed and the
    2nd -- the least likely top choice -- is chosen; sampled, the 1st never comes."""
    s = _real_server(_model("smollm2"), "--ctx-size", "256", "--parallel", "2", "--no-slots")
    try:
        base = {"prompt": "The capital of France is", "n_predict": 1, "top_k": 0, "top_p": 1.0,
                "min_p": 0.0, "return_tokens": True}
        b = s.post("/completion", {**base, "temperature": 0, "n_probs": 5}).json()
        top = b["completion_probabilities"][0]["top_logprobs"]
        p = [math.exp(t["logprob"]) for t in top]
        assert b["tokens"] == [top[0]["id"]] and p[0] >= p[1] > p[2]
        threshold = (p[1] + p[2]) / 2  # exactly two tokens reach it
        x = {"xtc_probability": 1.0, "xtc_threshold": threshold}
        b = s.post("/completion", {**base, "temperature": 0, **x}).json()
        assert b["tokens"] == [top[1]["id"]], (b, top)
        # the same through the OpenAI route's extra fields
        c = s.post("/v1/completions", {"prompt": base["prompt"], "max_tokens": 1, "top_k": 0,
                                       "top_p": 1.0, "min_p": 0.0, "temperature": 0, **x}).json()
        assert c["choices"][0]["text"] == top[1]["token"], (c, top)
        # sampled (temperature 1): the most likely token is never drawn
        drawn = [s.post("/completion", {**base, "temperature": 1.0, "seed": k, **x}).json()
                 ["tokens"][0] for k in range(8)]
        assert top[0]["id"] not in drawn
    finally:
        s.stop()


@pytest.mark.real_model
@pytest.mark.slow
def test_real_context_shift():
    """--context-shift with n_keep (llama-server's): a generation longer than the context goes on
    (truncated: true, as llama-server reports a shifted context); without the flag it is a 400."""
    prompt = "Once upon a time, in a small village by the sea, there lived an old fisherman who"
    s = _real_server(_model("smollm2"), "--ctx-size", "128", "--parallel", "1", "--context-shift")
    try:
        b = s.post("/completion", {"prompt": prompt, "n_predict": 300, "temperature": 0,
                                   "ignore_eos": True, "n_keep": -1, "return_tokens": True},
                   timeout=300).json()
        assert b["tokens_predicted"] == 300 and len(b["tokens"]) == 300, b
        assert b["stop_type"] == "limit" and b["truncated"] is True
        assert b["generation_settings"]["n_keep"] == -1
        assert b["timings"]["predicted_n"] == 300
        r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 300, "temperature": 0,
                                       "ignore_eos": True, "n_keep": 4}, timeout=300)
        assert r.status_code == 200, r.text
        c = r.json()
        assert c["usage"]["completion_tokens"] == 300 and c["choices"][0]["finish_reason"] == "length"
        assert c["timings"]["context_shifts"] >= 3
        r = s.post("/completion", {"prompt": prompt, "n_keep": -2})
        assert r.status_code == 400 and r.json()["error"]["param"] == "n_keep"
        b = s.post("/completion", {"prompt": prompt, "n_predict": 200, "temperature": 0,
                                   "ignore_eos": True, "n_keep": 2, "n_discard": 30},
                   timeout=300).json()
        assert b["tokens_predicted"] == 200 and b["truncated"] is True
        assert b["generation_settings"]["n_discard"] == 30
        r = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell a story"}],
                                            "max_tokens": 10, "n_discard": -1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "n_discard"
        r = s.post("/completion", {"prompt": "word " * 300})  # the prompt must still fit
        assert r.status_code == 400
        m = s.metrics()
        assert m["edgellm_context_shifts_total"] >= 6
    finally:
        s.stop()
    s = _real_server(_model("smollm2"), "--ctx-size", "128", "--parallel", "1")
    try:
        r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 300, "n_keep": 4})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        b = s.post("/completion", {"prompt": prompt, "n_predict": 300, "temperature": 0,
                                   "ignore_eos": True}, timeout=120).json()
        assert b["truncated"] is True and b["tokens_predicted"] < 128  # stopped at the full context
        assert s.metrics()["edgellm_context_shifts_total"] == 0
    finally:
        s.stop()


@pytest.mark.real_model
@pytest.mark.slow
def test_real_infill_qwen_coder():
    s = _real_server(_model("qwen2.5-coder-0.5b"), "--ctx-size", "1024", "--parallel", "1")
    try:
        r = s.post("/infill", {
            "input_extra": [{"filename": "math_utils.py", "text": "def square(x):\n    return x * x\n"}],
            "input_prefix": "from math_utils import square\n\ndef sum_of_squares(a, b):\n",
            "prompt": "    return ", "input_suffix": "\n\nprint(sum_of_squares(2, 3))\n",
            "n_predict": 16, "temperature": 0}, timeout=120)
        assert r.status_code == 200, r.text
        b = r.json()
        assert "square(" in b["content"], b["content"]
        assert b["tokens_evaluated"] > 20
    finally:
        s.stop()


def test_openai_routes_take_llamacpp_fields(server):
    r = post(server, "/v1/completions", {"prompt": "hi", "n_predict": 2, "id_slot": 0,
                                          "backend_sampling": False})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 2
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                               "n_predict": 3})
    assert r.json()["usage"]["completion_tokens"] == 3
    r = post(server, "/v1/completions", {"prompt": "hi", "n_predict": 2, "max_tokens": 3})
    assert r.status_code == 400 and r.json()["error"]["param"] == "n_predict"


def test_chat_stream_role_chunk_has_null_content():
    class EmptyFirst(FakeAsyncLLM):
        async def _run(self, ids, p):
            first = True
            async for chunk in super()._run(ids, p):
                if first:
                    chunk.text, first = "", False
                yield chunk

    s = RunningServer(engine=EmptyFirst()).wait_ready()
    try:
        r = post(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                              "max_tokens": 3, "stream": True})
        events = [json.loads(x[6:]) for x in r.text.split("\n\n")
                  if x.startswith("data: ") and x != "data: [DONE]"]
        delta = events[0]["choices"][0]["delta"]
        assert delta["role"] == "assistant" and delta.get("content") is None
        assert all(e["choices"][0]["delta"].get("content") != "" for e in events)
    finally:
        s.stop()


def test_chat_input_tokens(server):
    body = {"messages": [{"role": "user", "content": "hi"}]}
    for path in ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"):
        r = post(server, path, body)
        assert r.status_code == 200, r.text
        assert r.json() == {"input_tokens": 1 + len("<user>hi<assistant>")}
    assert post(server, "/chat/completions/input_tokens", {"messages": []}).status_code == 400


def test_templates_get_todays_date():
    import datetime
    from edgellm.chat_template import render_chat

    out = render_chat([{"role": "user", "content": "x"}], "{{ date_string }}|{{ datetime }}")
    now = datetime.date.today()
    assert out == f"{now.strftime('%d %b %Y')}|{now.strftime('%b %d %Y')}"
    assert render_chat([{"role": "user", "content": "x"}], "{{ date_string }}",
                       date_string="1 Jan 2000") == "1 Jan 2000"
    think = "{% if enable_thinking %}on{% else %}off{% endif %}"
    assert render_chat([{"role": "user", "content": "x"}], think) == "on"  # llama.cpp's default
    assert render_chat([{"role": "user", "content": "x"}], think, enable_thinking=False) == "off"


def test_aliases_and_tags():
    s = RunningServer(tags="chat,small").wait_ready()
    s.app.state.host.config.alias = "tiny,fim,code"  # RunningServer sets alias itself
    try:
        m = httpx.get(s.url + "/v1/models").json()["data"][0]
        assert m["id"] == "code" and m["aliases"] == ["code", "fim", "tiny"]
        assert m["tags"] == ["chat", "small"]
        assert post(s, "/completion", {"prompt": "x", "n_predict": 1}).json()["model"] == "code"
    finally:
        s.stop()


@pytest.mark.real_model
@pytest.mark.slow
def test_real_reasoning_off_reaches_the_template(tmp_path):
    tmpl = tmp_path / "think.jinja"
    tmpl.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}|"
                    "{% if enable_thinking %}think{% else %}nothink{% endif %}")
    body = {"messages": [{"role": "user", "content": "hi"}]}
    for flag, want in (("off", "hi|nothink"), ("auto", "hi|think")):
        s = _real_server(_model("smollm2"), "--ctx-size", "256", "--chat-template", str(tmpl),
                         "--reasoning", flag)
        try:
            assert s.post("/apply-template", body).json()["prompt"] == want
            r = s.post("/apply-template", {**body, "chat_template_kwargs": {"enable_thinking": True}})
            assert r.json()["prompt"] == "hi|think"  # a request's own kwargs win
        finally:
            s.stop()


def test_completion_disconnect_and_timeout_abort():
    engine = StopFake(token_delay=0.02)
    s = RunningServer(engine=engine, timeout=0.3).wait_ready()
    try:
        with httpx.Client(timeout=10) as c:
            with c.stream("POST", s.url + "/completion",
                          json={"prompt": "x", "n_predict": 200, "stream": True}) as r:
                assert next(r.iter_lines()).startswith("data: ")
        deadline = time.monotonic() + 5
        while engine.active:
            assert time.monotonic() < deadline, engine.active
            time.sleep(0.01)
        assert engine.aborted == 1
        r = post(s, "/completion", {"prompt": "x", "n_predict": 200})
        assert r.status_code == 504 and r.json()["error"]["type"] == "timeout_error"
        r = post(s, "/completion", {"prompt": "x", "n_predict": 200, "stream": True})
        assert native_events(r.text)[-1]["error"]["code"] == "timeout"
        # the stream is released after its last event is sent: the client may read that event
        # before the abort is recorded, so wait for it as for the disconnect above
        deadline = time.monotonic() + 5
        while engine.active:
            assert time.monotonic() < deadline, engine.active
            time.sleep(0.01)
        assert engine.active == {} and engine.aborted == 3
    finally:
        s.stop()


# --- the llama-server shim of scripts/llama-server-suite ----------------------------------------

SHIM = REPO / "scripts" / "llama-server-suite" / "shim.py"


def _shim(*args):
    env = _env()
    env["LLAMA_SHIM_DRY_RUN"] = "1"
    p = subprocess.run([sys.executable, str(SHIM), *args], env=env, capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout.strip().split("\0") if p.stdout.strip() else [], p.stderr


def test_shim_maps_flags_and_models(tmp_path):
    rc, cmd, err = _shim("--port", "9", "--temp", "0.8", "--seed", "42", "--host", "127.0.0.1",
                         "--offline", "--hf-repo", "ggml-org/test-model-stories260K",
                         "--batch-size", "32", "--no-slots", "--alias", "tinyllama-2",
                         "--ctx-size", "512", "--parallel", "2", "--n-predict", "64", "--no-jinja")
    assert rc == 0, err
    assert cmd[:2] == ["serve", "smollm2"]
    opts = dict(zip(cmd[2::1], cmd[3::1]))
    assert opts["--ctx-size"] == "256"  # llama-server's slots split the context
    assert opts["--parallel"] == "2" and opts["--max-batch-tokens"] == "32"
    assert opts["--temp"] == "0.8" and opts["--seed"] == "42" and opts["--n-predict"] == "64"
    assert "--no-slots" in cmd and "--no-metrics" in cmd  # llama-server's /metrics is opt-in
    assert "ignoring --offline" in err and "ignoring --no-jinja" in err
    rc, cmd, _ = _shim("--hf-repo", "ggml-org/test-model-stories260K", "--ctx-size", "256",
                       "--parallel", "4", "--kv-unified", "--metrics")
    assert cmd[cmd.index("--ctx-size") + 1] == "256" and "--no-metrics" not in cmd
    assert _shim("--hf-repo", "bartowski/Qwen2.5-Coder-3B-Instruct-GGUF:Q4_K_M")[1][1] \
        == "qwen2.5-coder-0.5b"
    assert _shim("--hf-repo", "ggml-org/test-model-stories260K-infill")[1][1] == "qwen2.5-coder-0.5b"
    rc, cmd, _ = _shim("--hf-repo", "ggml-org/test-model-stories260K", "--context-shift")
    assert rc == 0 and "--context-shift" in cmd  # llama-server's flag, now edgellm's too
    # speculative decoding: the draft model, the type, the longest draft
    draft = str(tmp_path / "draft.gguf")
    open(draft, "wb").close()  # the shim passes the path on; `edgellm serve` opens it
    rc, cmd, err = _shim("--hf-repo", "ggml-org/stories15M_MOE", "--model-draft", draft,
                         "--spec-type", "draft-simple", "--spec-draft-n-max", "8",
                         "--spec-draft-n-min", "4")
    assert rc == 0, err
    assert cmd[1] == "smollm2" and cmd[cmd.index("--draft") + 1] == draft
    assert cmd[cmd.index("--spec") + 1] == "draft" and cmd[cmd.index("--draft-max") + 1] == "8"
    assert "ignoring --spec-draft-n-min 4" in err
    rc, cmd, _ = _shim("--hf-repo", "ggml-org/test-model-stories260K", "--spec-type", "ngram-simple")
    assert rc == 0 and cmd[cmd.index("--spec") + 1] == "ngram" and "--draft" not in cmd
    rc, cmd, _ = _shim("--hf-repo", "ggml-org/test-model-stories260K", "--no-ui")
    assert rc == 0 and "--no-webui" in cmd  # edgellm's web chat page at /


@pytest.mark.parametrize("args, words", [
    (["--hf-repo", "ggml-org/tinygemma3-GGUF:Q8_0"], "no local stand-in"),
    (["--hf-repo", "ggml-org/test-model-stories260K", "--lora", "x.gguf"], "LoRA"),
    (["--hf-repo", "ggml-org/test-model-stories260K", "--frobnicate"], "unknown llama-server flag"),
    (["--hf-repo", "ggml-org/test-model-stories260K", "--spec-synth-rates", "1,1"], "synthetic"),
    (["--hf-repo", "ggml-org/test-model-stories260K", "--spec-type", "draft-simple"], "--model-draft"),
    (["--hf-repo", "ggml-org/test-model-stories260K", "--model-draft", "/nonexistent.gguf"],
     "no such file"),
])
def test_shim_refuses_what_edgellm_lacks(args, words):
    rc, cmd, err = _shim(*args)
    assert rc == 2 and cmd == [] and words in err
