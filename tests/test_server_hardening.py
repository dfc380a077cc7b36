"""Issue 17, the server's side: what one careless or hostile client must not be able to do.

- a request body over --max-body-size is answered 413 (with the envelope) without being read
  into memory, declared (Content-Length) or chunked;
- a connection that does not deliver its request headers within --read-timeout is closed, a
  body that trickles in slower than that is answered 408, and /health answers all the while;
- `--api-key ""` is refused like an empty key file;
- JSON nested 100,000 deep, token ids outside the vocabulary or >= 2^31, huge numbers, and any
  ValueError / OverflowError / RecursionError / MemoryError a route meets become 4xx (507 for
  memory) in the envelope, never a 500 or plain text;
- tokenizing a big input does not stall the event loop.

Most of it runs over the stand-in engine of tests/test_server_unit.py, through the real
`edgellm serve` process (--engine-factory) where the HTTP layer's wiring matters; the token id
and wrong-typed-field tables also run against SmolLM2 (real_model).
"""
import json
import math
import socket
import threading
import time

import httpx
import pytest

pytest.importorskip("edgellm", reason="edgellm._core is not built (scripts/dev-build.sh)")
pytest.importorskip("uvicorn")

from server_helpers import AppServer, free_port  # noqa: E402
from test_server_unit import (CHAT, FakeAsyncLLM, RunningServer, SamplingParams,  # noqa: E402
                              _first_health, _serve)

LIMIT = 1 << 20          # --max-body-size of the CLI fixture
READ_TIMEOUT = 2.0       # --read-timeout of the CLI fixture
# How long a test waits for the server to close a connection its read timeout should close: a
# hang guard only, far beyond READ_TIMEOUT, never a bound on how fast the server is (issue 43
# item 11); what is asserted is that the server closed a connection the client kept feeding.
CLOSE_WAIT = READ_TIMEOUT + 30.0


def assert_envelope(r, status=None):
    """OpenAI's error envelope (llama-server's context numbers may ride along)."""
    assert r.headers.get("content-type", "").startswith("application/json"), (r.status_code, r.text)
    if status is not None:
        assert r.status_code == status, r.text
    assert 400 <= r.status_code < 600, r.text
    err = r.json()["error"]
    assert {"message", "type", "param", "code"} <= set(err), err
    assert isinstance(err["message"], str) and err["message"]
    return err


def assert_anthropic_envelope(r, status=None):
    assert r.headers.get("content-type", "").startswith("application/json"), (r.status_code, r.text)
    if status is not None:
        assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    return body["error"]


@pytest.fixture(scope="module")
def cli():
    """`edgellm serve` over the stand-in engine with test-sized limits."""
    proc, url = _serve("--max-body-size", "1M", "--read-timeout", str(READ_TIMEOUT),
                       "--api-key", "k")
    try:
        _first_health(proc, url)
        deadline = time.monotonic() + 20
        while httpx.get(url + "/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except Exception:  # noqa: BLE001
            proc.kill()
            proc.wait()


H = {"Authorization": "Bearer k"}


def _addr(url):
    host, port = url.rsplit("//", 1)[1].split(":")
    return host, int(port)


# --- --max-body-size ----------------------------------------------------------------------------

def test_declared_body_over_the_limit_is_413_with_the_envelope(cli):
    body = json.dumps({**CHAT, "messages": [{"role": "user", "content": "x" * (LIMIT + 10)}]})
    r = httpx.post(cli + "/v1/chat/completions", content=body, timeout=30,
                   headers={**H, "content-type": "application/json"})
    err = assert_envelope(r, 413)
    assert err["code"] == "request_too_large" and "--max-body-size" in err["message"]
    assert r.headers["connection"] == "close"
    # the Anthropic routes answer in Anthropic's envelope
    r = httpx.post(cli + "/v1/messages", content=body, timeout=30,
                   headers={**H, "content-type": "application/json"})
    assert assert_anthropic_envelope(r, 413)["type"] == "request_too_large"


def test_chunked_body_over_the_limit_is_413(cli):
    sent = []

    def chunks():
        yield b'{"content": "'
        for _ in range(64):  # 4 MiB in 64 KiB pieces: the server stops holding them at 1 MiB
            sent.append(1)
            yield b"a" * 65536
        yield b'"}'

    r = httpx.post(cli + "/tokenize", content=chunks(), headers=H, timeout=30)
    err = assert_envelope(r, 413)
    assert err["code"] == "request_too_large"


def test_body_under_the_limit_is_served(cli):
    r = httpx.post(cli + "/tokenize", json={"content": "é" * (LIMIT // 4)}, headers=H, timeout=30)
    assert r.status_code == 200, r.text
    assert len(r.json()["tokens"]) == 2 * (LIMIT // 4)


def test_default_limit_is_8_mib_and_0_is_unlimited():
    big = {"content": "a" * (9 << 20)}
    s = RunningServer().wait_ready()
    try:
        assert_envelope(httpx.post(s.url + "/tokenize", json=big, timeout=60), 413)
        assert httpx.post(s.url + "/tokenize", json={"content": "a" * (7 << 20)},
                          timeout=60).status_code == 200
    finally:
        s.stop()
    s = RunningServer(max_body_size=0).wait_ready()
    try:
        r = httpx.post(s.url + "/tokenize", json=big, timeout=60)
        assert r.status_code == 200 and len(r.json()["tokens"]) == 9 << 20
    finally:
        s.stop()


# --- --read-timeout -----------------------------------------------------------------------------

def _closed_by_server(sock, until: float) -> bool:
    """True when the server closes `sock` (EOF or reset) before `until`."""
    while time.monotonic() < until:
        sock.settimeout(max(0.01, min(0.2, until - time.monotonic())))
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            return True
        if not data:
            return True
    return False


def test_trickling_header_sockets_are_closed_and_health_answers_meanwhile(cli):
    """200 clients sending one header byte every 0.5 s (slowloris): each is closed within the
    read timeout (+ slack), while /health keeps answering at once."""
    host, port = _addr(cli)
    socks = [socket.create_connection((host, port)) for _ in range(200)]
    opened = time.monotonic()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
    stop = threading.Event()
    closed_at = {}

    def trickle():
        i = 0
        while not stop.is_set() and len(closed_at) < len(socks):
            for k, s in enumerate(socks):
                if k in closed_at:
                    continue
                try:
                    s.send(request[i:i + 1])
                except OSError:
                    closed_at[k] = time.monotonic()
            i += 1
            stop.wait(0.5)

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    worst = 0.0
    try:
        with httpx.Client(timeout=10) as c:
            while time.monotonic() - opened < READ_TIMEOUT + 1.0:
                t0 = time.monotonic()
                assert c.get(cli + "/health").status_code == 200
                worst = max(worst, time.monotonic() - t0)
                time.sleep(0.1)
        until = opened + CLOSE_WAIT
        still_open = [k for k, s in enumerate(socks) if not _closed_by_server(s, until)]
        assert not still_open, f"{len(still_open)} of {len(socks)} trickling sockets still open " \
                               f"{time.monotonic() - opened:.1f} s after connecting"
    finally:
        stop.set()
        t.join(5)
        for s in socks:
            s.close()
    # every /health above was answered (200) while the trickling sockets were held open: the
    # server kept serving (no latency bound: `worst` is only reported)
    print(f"slowest /health while trickling: {worst:.2f} s")


def test_silent_connection_is_closed(cli):
    s = socket.create_connection(_addr(cli))
    try:
        assert _closed_by_server(s, time.monotonic() + CLOSE_WAIT)
    finally:
        s.close()


def test_trickling_next_request_on_a_kept_alive_connection_is_closed(cli):
    host, port = _addr(cli)
    s = socket.create_connection((host, port))
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(5)
        assert b"200 OK" in s.recv(65536)
        closed = False
        for b in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaa":
            try:
                s.send(bytes([b]))
            except OSError:
                closed = True
                break
            if _closed_by_server(s, time.monotonic() + 0.4):
                closed = True
                break
        # closed while the client was still sending it (not once the bytes ran out)
        assert closed, "the trickled second request kept the connection open"
    finally:
        s.close()


def test_trickling_body_is_cut_with_408(cli):
    host, port = _addr(cli)
    s = socket.create_connection((host, port))
    try:
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n")
        t0 = time.monotonic()
        answer = b""
        s.settimeout(0.5)
        while time.monotonic() - t0 < CLOSE_WAIT and b"\r\n\r\n" not in answer:  # hang guard
            try:
                s.send(b" ")
            except OSError:
                break
            try:
                answer += s.recv(65536)
            except socket.timeout:
                pass
            except OSError:
                break
        s.settimeout(2)
        try:
            while True:
                more = s.recv(65536)
                if not more:
                    break
                answer += more
        except OSError:
            pass
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), answer[:300]
        # the 408 came while the client was still sending body bytes: the read timeout cut it
        assert json.loads(body)["error"]["code"] == "request_timeout"
    finally:
        s.close()


# --- --api-key "" ----------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["", "   "])
def test_empty_api_key_is_refused(key):
    proc, _ = _serve("--api-key", key)
    try:
        assert proc.wait(30) == 2
        out = proc.stdout.read()
        assert "--api-key" in out and "empty" in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- typed errors, never a 500 ---------------------------------------------------------------------

DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000 + b"1" + b"}" * 100_000

POST_ROUTES = ["/v1/chat/completions", "/v1/completions", "/completion", "/infill", "/tokenize",
               "/detokenize", "/v1/embeddings", "/embedding", "/v1/responses",
               "/apply-template", "/v1/chat/completions/input_tokens", "/v1/messages",
               "/v1/messages/count_tokens"]


@pytest.mark.parametrize("path", [p for p in POST_ROUTES if "embedding" not in p])
def test_deeply_nested_json_is_400_naming_the_nesting(cli, path):
    # (the stand-in computes no embeddings: 501 before the body is read; SmolLM2's test below
    # covers those routes)
    for raw in (DEEP, DEEP_OBJECT):
        r = httpx.post(cli + path, content=raw, timeout=30,
                       headers={**H, "content-type": "application/json"})
        if path.startswith("/v1/messages"):
            assert "nest" in assert_anthropic_envelope(r, 400)["message"]
        else:
            err = assert_envelope(r, 400)
            assert err["type"] == "invalid_request_error" and "nest" in err["message"], err


class EmbeddingLLM(FakeAsyncLLM):
    """The stand-in with embeddings (a 4-wide vector per prompt), so those routes are reached."""

    n_embd = 4

    def chat_prompt_ids(self, messages, tools=None, chat_template_kwargs=None):
        return self.tokenize(self.apply_chat_template(messages, tools=tools))

    async def embeddings(self, prompts, normalize=2, pooling=None):
        import numpy as np
        from types import SimpleNamespace

        return SimpleNamespace(prompt_tokens=sum(map(len, prompts)),
                               data=[np.full(4, 0.5, dtype=np.float32) for _ in prompts])


class RaisingLLM(FakeAsyncLLM):
    """A stand-in whose tokenizer raises what a hostile input can make Python raise."""

    def __init__(self, exc):
        super().__init__()
        self.exc = exc

    def tokenize(self, text, add_special=True, parse_special=False):
        if "boom" in text:
            raise self.exc
        return super().tokenize(text, add_special, parse_special)

    def apply_chat_template(self, messages, add_generation_prompt=True, tools=None):
        text = super().apply_chat_template(messages, add_generation_prompt, tools)
        if "boom" in text:
            raise self.exc
        return text

    def chat_prompt_ids(self, messages, **kw):  # what Anthropic's count_tokens asks for
        return self.tokenize(self.apply_chat_template(messages))


@pytest.mark.parametrize("exc, status", [
    (RecursionError("maximum recursion depth exceeded"), 400),
    (OverflowError("int too large to convert to float"), 400),
    (ValueError("not a valid thing"), 400),
    (MemoryError(), 507),
])
def test_python_errors_in_a_route_are_typed(exc, status):
    s = RunningServer(engine=RaisingLLM(exc)).wait_ready()
    try:
        for path, body in (("/tokenize", {"content": "boom"}),
                           ("/v1/chat/completions", {**CHAT, "messages": [
                               {"role": "user", "content": "boom"}]}),
                           ("/v1/completions", {"prompt": "boom", "max_tokens": 2}),
                           ("/completion", {"prompt": "boom", "n_predict": 2})):
            err = assert_envelope(httpx.post(s.url + path, json=body, timeout=10), status)
            assert err["type"] == ("invalid_request_error" if status == 400 else "server_error")
        r = httpx.post(s.url + "/v1/messages/count_tokens", timeout=10, json={
            "model": "m", "messages": [{"role": "user", "content": "boom"}]})
        assert_anthropic_envelope(r, status)
    finally:
        s.stop()


class Served(AppServer):
    """create_app over the stand-in engine with its own SamplingParams factory, on a socket."""

    def __init__(self, params_factory, engine=None):
        from edgellm.server import ServerConfig, create_app

        self.engine = engine or FakeAsyncLLM()
        port = free_port()
        app = create_app(ServerConfig(model="fake", port=port), loader=lambda c: self.engine,
                         params_factory=params_factory)
        self.start(app, port, log_level="critical")
        self.wait_ready()


@pytest.mark.parametrize("exc, status", [(RecursionError("deep schema"), 400),
                                         (OverflowError("huge"), 400), (MemoryError(), 507),
                                         (KeyError("a bug"), 500)])
def test_an_exception_escaping_a_route_is_the_envelope(exc, status):
    """What SamplingParams raises for e.g. a json_schema nested 10,000 deep, on every route
    that builds them; a real bug (KeyError) is still a 500, but in the envelope."""
    def params(**kw):
        if kw.get("seed") == 4242:
            raise exc
        return SamplingParams(**kw)

    s = Served(params)
    try:
        for path, body in (("/v1/chat/completions", {**CHAT, "seed": 4242}),
                           ("/v1/completions", {"prompt": "a", "max_tokens": 2, "seed": 4242}),
                           ("/completion", {"prompt": "a", "n_predict": 2, "seed": 4242}),
                           ("/infill", {"input_prefix": "a", "n_predict": 2, "seed": 4242})):
            r = httpx.post(s.url + path, json=body, timeout=10)
            if path == "/infill" and r.status_code == 400 and "infill" in r.text:
                continue  # the stand-in has no FIM tokens: refused before SamplingParams
            err = assert_envelope(r, status)
            assert err["type"] == ("invalid_request_error" if status == 400 else "server_error")
    finally:
        s.stop()


class BrokenMetadataLLM(FakeAsyncLLM):
    """A stand-in whose metadata cannot be read: GET /v1/models has no handler of its own for
    that, so what it raises escapes the route."""

    def __init__(self, exc):
        super().__init__()
        self.exc = exc

    @property
    def metadata(self):
        raise self.exc


@pytest.mark.parametrize("exc, status, kind", [(MemoryError(), 507, "server_error"),
                                               (KeyError("a bug"), 500, "server_error"),
                                               (ValueError("bad"), 400, "invalid_request_error")])
def test_the_catch_all_answers_in_the_envelope(exc, status, kind):
    s = RunningServer(engine=BrokenMetadataLLM(exc)).wait_ready()
    try:
        err = assert_envelope(httpx.get(s.url + "/v1/models", timeout=10), status)
        assert err["type"] == kind
        assert httpx.get(s.url + "/health", timeout=10).status_code == 200  # still serving
    finally:
        s.stop()


BIG = 1 << 40  # 1099511627776


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": [BIG], "max_tokens": 1}),
    ("/v1/completions", {"prompt": [1, 2 ** 31], "max_tokens": 1}),
    ("/v1/completions", {"prompt": [[5], [BIG]], "max_tokens": 1}),
    ("/v1/completions", {"prompt": [1000], "max_tokens": 1}),      # == n_vocab of the stand-in
    ("/completion", {"prompt": [BIG], "n_predict": 1}),
    ("/completion", {"prompt": ["a", 2 ** 31], "n_predict": 1}),
    ("/completion", {"prompt": [5000], "n_predict": 1}),
    ("/v1/embeddings", {"input": [BIG]}),
    ("/v1/embeddings", {"input": [[1, 2 ** 31]]}),
    ("/embedding", {"content": [5000]}),
    ("/detokenize", {"tokens": [BIG]}),
    ("/detokenize", {"tokens": [2 ** 31]}),
])
def test_token_ids_outside_the_vocabulary_are_400(path, body):
    s = RunningServer(engine=EmbeddingLLM()).wait_ready()
    try:
        err = assert_envelope(httpx.post(s.url + path, json=body, timeout=10), 400)
        assert err["type"] == "invalid_request_error"
        assert "vocabulary" in err["message"] or "out of range" in err["message"], err
    finally:
        s.stop()


# --- the table: wrong-typed fields on every route -----------------------------------------------

BASES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    "/v1/completions": {"prompt": "hi", "max_tokens": 1},
    "/completion": {"prompt": "hi", "n_predict": 1},
    "/infill": {"input_prefix": "def f(", "input_suffix": ")", "n_predict": 1},
    "/tokenize": {"content": "hi"},
    "/detokenize": {"tokens": [1, 2]},
    "/v1/embeddings": {"input": "hi"},
    "/embedding": {"content": "hi"},
    "/v1/messages": {"model": "x", "max_tokens": 1,
                     "messages": [{"role": "user", "content": "hi"}]},
    "/v1/messages/count_tokens": {"model": "x", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"input": "hi", "max_output_tokens": 16},
    "/apply-template": {"messages": [{"role": "user", "content": "hi"}]},
    "/v1/chat/completions/input_tokens": {"messages": [{"role": "user", "content": "hi"}]},
}
WRONG = {"string": "x", "huge": BIG, "2^31": 2 ** 31, "negative": -5, "nan": math.nan,
         "inf": math.inf, "list of dicts": [{"a": 1}], "nested": [[[[1]]]],
         "object": {"a": {"b": 1}}, "bool": True, "10^400": 10 ** 400, "1e308": 1e308,
         "token lists": [[BIG], [-1]]}
EXTRA_FIELDS = ["prompt", "tokens", "content", "input", "messages", "seed", "temperature",
                "top_k", "top_p", "n", "max_tokens", "n_predict", "logit_bias", "stop",
                "n_probs", "input_extra", "stream", "logprobs", "top_logprobs", "tools",
                "response_format", "json_schema", "grammar", "min_p", "repeat_last_n"]


def _table():
    for path, base in BASES.items():
        for field in dict.fromkeys(list(base) + EXTRA_FIELDS):
            for name, value in WRONG.items():
                body = dict(base)
                body[field] = value
                yield path, f"{field}={name}", body


def run_table(url, headers=None):
    """Every wrong-typed body on every route: a 2xx (accepted: the value was meaningful) or a 4xx
    with the route's envelope -- never a 5xx, never plain text. Returns the failures."""
    bad = []
    with httpx.Client(timeout=60, headers=headers or {}) as c:
        for path, what, body in _table():
            raw = json.dumps(body, allow_nan=True)
            r = c.post(url + path, content=raw, headers={"content-type": "application/json"})
            if r.status_code < 300:
                continue
            try:
                if path.startswith("/v1/messages"):
                    assert_anthropic_envelope(r)
                else:
                    assert_envelope(r)
                ok = r.status_code < 500
            except (AssertionError, ValueError, KeyError, TypeError):
                ok = False
            if not ok:
                bad.append(f"{path} {what}: {r.status_code} {r.text[:160]}")
    return bad


@pytest.mark.slow
def test_wrong_typed_fields_on_every_route_are_4xx_envelopes():
    s = RunningServer(engine=EmbeddingLLM()).wait_ready()
    try:
        bad = run_table(s.url)
    finally:
        s.stop()
    assert not bad, f"{len(bad)} answers were not 4xx envelopes:\n" + "\n".join(bad[:40])


# --- big inputs are tokenized off the event loop --------------------------------------------------

class BlockingTokenizerLLM(EmbeddingLLM):
    """Tokenizing blocks until the test lets it go, as a 50 MB prompt keeps the tokenizer busy
    for seconds. If it ran on the event loop, nothing else could be answered meanwhile."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def _busy(self):
        self.entered.set()
        self.release.wait(15)

    def tokenize(self, text, add_special=True, parse_special=False):
        if "long" in text:
            self._busy()
        return super().tokenize(text, add_special, parse_special)

    def detokenize(self, ids):
        self._busy()
        return super().detokenize(ids)

    def chat_prompt_ids(self, messages, **kw):
        self._busy()
        return self.tokenize(self.apply_chat_template(messages))


@pytest.mark.parametrize("path, body", [
    ("/tokenize", {"content": "a long text"}),
    ("/detokenize", {"tokens": [100, 101]}),
    ("/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": "x"}]}),
    ("/completion", {"prompt": "a long text", "n_predict": 1}),
    ("/v1/embeddings", {"input": "a long text"}),
    ("/v1/chat/completions/input_tokens", {"messages": [{"role": "user", "content": "x"}]}),
])
def test_tokenizing_does_not_block_health(path, body):
    engine = BlockingTokenizerLLM()
    s = RunningServer(engine=engine).wait_ready()
    try:
        result = {}

        def slow():
            result["r"] = httpx.post(s.url + path, json=body, timeout=30)

        t = threading.Thread(target=slow)
        t.start()
        try:
            assert engine.entered.wait(10), "the request never reached the tokenizer"
            try:  # the tokenizer is busy now: the server must still answer
                health = httpx.get(s.url + "/health", timeout=4).status_code
            except httpx.TimeoutException:
                health = "no answer while the tokenizer ran"
        finally:
            engine.release.set()
            t.join(30)
        assert health == 200, f"/health while {path} tokenized: {health}"
        assert result["r"].status_code == 200, result["r"].text
    finally:
        s.stop()


# --- against SmolLM2 -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smol(smollm2_path):
    pytest.importorskip("edgellm._core")
    from test_server import ServerProcess

    s = ServerProcess(smollm2_path, "--parallel", "4", "--ctx-size", "512")
    try:
        yield s.wait_ready()
    finally:
        s.stop()


@pytest.mark.real_model
@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": [BIG], "max_tokens": 1}),
    ("/v1/completions", {"prompt": [2 ** 31], "max_tokens": 1}),
    ("/v1/completions", {"prompt": [[1], [BIG]], "max_tokens": 1}),
    ("/v1/completions", {"prompt": [49152], "max_tokens": 1}),       # SmolLM2's n_vocab
    ("/completion", {"prompt": [BIG], "n_predict": 1}),
    ("/completion", {"prompt": [2 ** 31 - 1], "n_predict": 1}),
    ("/v1/embeddings", {"input": [BIG]}),
    ("/embedding", {"content": [[2 ** 31]]}),
    ("/detokenize", {"tokens": [BIG]}),
])
def test_real_engine_token_ids_out_of_range_are_400(smol, path, body):
    err = assert_envelope(smol.post(path, body), 400)
    assert "vocabulary" in err["message"] or "out of range" in err["message"], err


@pytest.mark.real_model
@pytest.mark.slow
def test_real_engine_wrong_typed_fields_are_4xx_envelopes(smol):
    bad = run_table(smol.url, smol.headers)
    assert not bad, f"{len(bad)} answers were not 4xx envelopes:\n" + "\n".join(bad[:40])


@pytest.mark.real_model
def test_real_engine_deep_json_is_400(smol):
    for path in POST_ROUTES:
        r = httpx.post(smol.url + path, content=DEEP, timeout=30,
                       headers={**smol.headers, "content-type": "application/json"})
        assert r.status_code == 400, (path, r.status_code, r.text[:200])
        assert "nest" in r.text

