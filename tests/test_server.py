"""`edgellm serve` end to end: the real server as a subprocess with SmolLM2, driven by the
official `openai` package (unmodified) and by plain HTTP for the failure cases.

The stand-in-engine tests (tests/test_server_unit.py) cover the same routes in detail; these
check that the real engine behind them batches, aborts and answers as promised.
"""
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")
try:
    import edgellm.llm  # noqa: F401
except ImportError as e:  # the engine's Python API lands separately
    pytest.skip(f"edgellm.llm is not importable yet ({e})", allow_module_level=True)
openai = pytest.importorskip("openai")

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
KEY = "test-key"

from server_helpers import free_port, openai_error  # noqa: E402


class ServerProcess:
    def __init__(self, model: Path, *args: str, api_key: str = KEY):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.headers = {"Authorization": f"Bearer {api_key}"}
        env = dict(os.environ)
        if env.get("EDGELLM_BUILD_DIR"):  # a development build: the package comes from the checkout
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"),
                                                              env.get("PYTHONPATH")]))
            env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
        self.log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"edgellm-serve-{self.port}.log",
                        "w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgellm", "serve", str(model), "--port", str(self.port),
             "--api-key", api_key, "--threads", "2", "--log-level", "warning", *args],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"server not ready:\n{self.output()}"
            time.sleep(0.1)

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def client(self, **kw):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=KEY, max_retries=0, **kw)

    def post(self, path, body, **kw):
        kw.setdefault("timeout", 60)
        return httpx.post(self.url + path, json=body, headers=self.headers, **kw)

    def metrics(self) -> dict:
        text = httpx.get(self.url + "/metrics", headers=self.headers, timeout=10).text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self):  # `with ServerProcess(...) as s:` -- ready, and stopped at the end
        try:
            return self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = ServerProcess(smollm2_path, "--parallel", "16", "--ctx-size", "2048", "--alias", "smol")
    try:
        yield s.wait_ready()
    finally:
        s.stop()


MESSAGES = [{"role": "user", "content": "Name three colours."}]
GREEDY = dict(temperature=0, max_tokens=16)


_error = openai_error


# --- the OpenAI client ---------------------------------------------------------------------------

def test_chat_non_streaming_and_streaming_agree(server):
    client = server.client()
    out = client.chat.completions.create(model="smol", messages=MESSAGES, **GREEDY)
    text = out.choices[0].message.content
    assert text.strip() and out.model == "smol"
    assert out.choices[0].finish_reason in ("stop", "length")
    assert out.usage.completion_tokens <= 16
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    chunks = list(client.chat.completions.create(model="smol", messages=MESSAGES, stream=True,
                                                 stream_options={"include_usage": True},
                                                 **GREEDY))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == out.usage.completion_tokens
    assert chunks[0].choices[0].delta.role == "assistant"


def test_completions_and_models(server):
    client = server.client()
    out = client.completions.create(model="smol", prompt="The capital of France is",
                                    temperature=0, max_tokens=8, extra_body={"ignore_eos": True})
    assert out.choices[0].finish_reason == "length" and out.usage.completion_tokens == 8
    assert out.choices[0].text
    assert [m.id for m in client.models.list()] == ["smol"]
    raw = server.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 8,
                                          "temperature": 0, "ignore_eos": True}).json()
    assert raw["choices"][0]["text"] == out.choices[0].text  # greedy is deterministic
    assert raw["timings"]["predicted_n"] == 8 and raw["timings"]["predicted_per_second"] > 0


def test_logprobs(server):
    out = server.client().chat.completions.create(
        model="smol", messages=MESSAGES, logprobs=True, top_logprobs=3, **GREEDY)
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens
    for item in content:
        assert item.logprob <= 0 and len(item.top_logprobs) == 3
        tops = [t.logprob for t in item.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert item.top_logprobs[0].token == item.token  # greedy picks the most likely token
        assert item.logprob == pytest.approx(tops[0], abs=1e-4)
    assert "".join(c.token for c in content) == out.choices[0].message.content
    comp = server.post("/v1/completions", {"prompt": "1, 2, 3,", "max_tokens": 4,
                                           "temperature": 0, "logprobs": 2}).json()
    lp = comp["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == 4
    assert all(len(t) == 2 for t in lp["top_logprobs"])


def test_json_schema_response(server):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Give a person as JSON."}],
        "temperature": 0, "max_tokens": 64,
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}})
    if r.status_code != 200:
        pytest.xfail(f"constrained decoding not available yet: {r.status_code} {r.text[:200]}")
    jsonschema = pytest.importorskip("jsonschema")
    choice = r.json()["choices"][0]
    if choice["finish_reason"] == "length":
        pytest.xfail("the model ran out of max_tokens inside the JSON")
    jsonschema.validate(json.loads(choice["message"]["content"]), schema)


def test_tokenize_round_trip(server):
    ids = server.post("/tokenize", {"content": "Hello world"}).json()["tokens"]
    assert ids and all(isinstance(i, int) for i in ids)
    assert server.post("/detokenize", {"tokens": ids}).json()["content"] == "Hello world"


# --- batching --------------------------------------------------------------------------------------

PROMPTS = ["Count from one to ten.", "What is the sky's colour?", "Write a haiku about rain.",
           "Say hello in French.", "List two fruits.", "What is 2 + 2?",
           "Describe a cat in one line.", "Name a planet."]


def _body(prompt, stream):
    return {"messages": [{"role": "user", "content": prompt}], "temperature": 0,
            "max_tokens": 24, "stream": stream}


def test_32_concurrent_streams_match_single_runs(server):
    alone = {p: server.post("/v1/chat/completions", _body(p, False)).json()
             ["choices"][0]["message"]["content"] for p in PROMPTS}
    running_seen = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            running_seen.append(server.metrics().get("edgellm_requests_running", 0))
            time.sleep(0.05)

    async def one(client, prompt):
        text = []
        async with client.stream("POST", "/v1/chat/completions", json=_body(prompt, True)) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    ev = json.loads(line[6:])
                    text.append(ev["choices"][0]["delta"].get("content") or "")
        return prompt, "".join(text)

    async def run_all():
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=120,
                                     limits=limits) as client:
            return await asyncio.gather(*(one(client, PROMPTS[i % len(PROMPTS)])
                                          for i in range(32)))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        results = asyncio.run(run_all())
    finally:
        stop.set()
        poller.join()
    assert len(results) == 32
    for prompt, text in results:
        assert text == alone[prompt], prompt
    assert max(running_seen) > 1, running_seen


def test_disconnects_free_every_page(server):
    async def leave_early(client):
        body = {"messages": MESSAGES, "max_tokens": 400, "ignore_eos": True, "stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    return  # closing the stream drops the connection

    async def run():
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers,
                                     timeout=60) as client:
            await asyncio.gather(*(leave_early(client) for _ in range(10)))

    asyncio.run(run())
    deadline = time.monotonic() + 20
    while True:
        m = server.metrics()
        if m["edgellm_requests_running"] == 0 and m["edgellm_kv_pages_in_use_requests"] == 0:
            break
        assert time.monotonic() < deadline, {k: v for k, v in m.items() if "pages" in k or "requests" in k}
        time.sleep(0.1)
    assert m["edgellm_requests_waiting"] == 0
    assert m.get('edgellm_requests_total{endpoint="chat",status="499"}', 0) >= 10
    out = server.client().chat.completions.create(model="smol", messages=MESSAGES, **GREEDY)
    assert out.choices[0].message.content


# --- failures ----------------------------------------------------------------------------------------

def test_auth(server):
    r = httpx.post(server.url + "/v1/chat/completions", json=_body("hi", False))
    assert "missing API key" in _error(r, 401)["message"]
    r = httpx.post(server.url + "/v1/chat/completions", json=_body("hi", False),
                   headers={"Authorization": "Bearer nope"})
    assert _error(r, 401)["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0).models.list()
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


def test_bad_requests(server):
    r = httpx.post(server.url + "/v1/chat/completions", content=b'{"messages": [',
                   headers={**server.headers, "content-type": "application/json"})
    assert "not valid JSON" in _error(r, 400)["message"]
    err = _error(server.post("/v1/chat/completions", {**_body("hi", False), "temperature": "x"}), 400)
    assert err["param"] == "temperature" and "number" in err["message"]
    err = _error(server.post("/v1/chat/completions", {**_body("hi", False), "wat": 1}), 400)
    assert err["param"] == "wat"
    with pytest.raises(openai.BadRequestError):
        server.client().chat.completions.create(model="smol", messages=MESSAGES, n="two")


def test_context_overflow_is_400_with_the_numbers(server):
    r = server.post("/v1/chat/completions", {**_body("hi", False), "max_tokens": 4000})
    err = _error(r, 400)
    assert err["code"] == "context_length_exceeded"
    assert "2048" in err["message"] and "4000" in err["message"] and " by " in err["message"]
    r = server.post("/v1/completions", {"prompt": "word " * 3000, "max_tokens": 4})
    assert "2048" in _error(r, 400)["message"]


@pytest.fixture(scope="module")
def tight_server(smollm2_path):
    # no speculative decoding: with it, SmolLM2's looping continuation of a short prompt ran
    # 4000 tokens inside the deadline on a fast CI host
    s = ServerProcess(smollm2_path, "--parallel", "1", "--max-queue", "1", "--ctx-size", "4096",
                      "--timeout", "4", "--spec", "off")
    try:
        yield s.wait_ready()
    finally:
        s.stop()


def test_full_queue_429_and_timeouts(tight_server):
    s = tight_server
    # far more tokens than any CPU makes in --timeout 4 s (1000 tokens/s of SmolLM2 on one stream)
    slow = {"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": True}
    queued = {}
    with httpx.Client(base_url=s.url, headers=s.headers, timeout=60) as c1, \
            httpx.Client(base_url=s.url, headers=s.headers, timeout=60) as c2:
        with c1.stream("POST", "/v1/completions", json={**slow, "stream": True}) as r1:
            assert r1.status_code == 200
            lines = r1.iter_lines()
            next(lines)
            # r2 waits in the engine queue behind r1 (--parallel 1)
            t = threading.Thread(target=lambda: queued.update(
                r=c2.post("/v1/completions", json=slow)))
            t.start()
            deadline = time.monotonic() + 10
            while s.metrics().get("edgellm_http_requests_active", 0) < 2:
                assert time.monotonic() < deadline, "the second request was not admitted"
                time.sleep(0.05)
            r3 = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})
            err = _error(r3, 429)
            assert int(r3.headers["Retry-After"]) >= 1 and "2 request slots" in err["message"]
            # r1 outlives --timeout: the deadline error arrives in-band, then the stream ends
            tail = [line for line in lines if line.startswith("data: ")]
            assert tail and tail[-1] != "data: [DONE]", f"finished before the deadline: {tail[-2:]}"
            assert json.loads(tail[-1][6:])["error"]["code"] == "timeout"
        t.join(30)
    err = _error(queued["r"], 504)  # timed out while queued or running: aborted either way
    assert err["type"] == "timeout_error" and "4 s" in err["message"]
    deadline = time.monotonic() + 10
    while (m := s.metrics())["edgellm_requests_running"] or m["edgellm_kv_pages_in_use_requests"]:
        assert time.monotonic() < deadline, m
        time.sleep(0.1)


def test_sigterm_exits_cleanly(smollm2_path):
    s = ServerProcess(smollm2_path, "--ctx-size", "1024", "--shutdown-grace", "1").wait_ready()
    try:
        body = {"prompt": "Once upon a time", "max_tokens": 800, "ignore_eos": True, "stream": True}
        with httpx.Client(base_url=s.url, headers=s.headers, timeout=30) as c:
            with c.stream("POST", "/v1/completions", json=body) as r:
                lines = r.iter_lines()
                next(lines)
                s.proc.send_signal(signal.SIGTERM)
                received = []
                try:
                    for line in lines:
                        if line.startswith("data: {"):
                            received.append(line)
                except httpx.HTTPError:
                    pass  # the server cut the stream after its grace period
        assert s.proc.wait(20) == 0, s.output()
        # the 1 s grace cut the stream: not the whole 800 tokens (counted, not timed)
        assert len(received) < 800 and not any('"length"' in x for x in received)
        with pytest.raises(httpx.TransportError):
            httpx.get(s.url + "/health", timeout=2)
    finally:
        s.stop()
