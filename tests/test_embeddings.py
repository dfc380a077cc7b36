"""Embeddings end to end with the real SmolLM2: LLM.embed / AsyncLLM.embed, the engine's
batching and pooling, an independent float reference for the hidden states, and the server's
OpenAI (`openai` SDK, float and base64) and llama-server native endpoints.

The engine itself (pooling arithmetic, chunking, preemption, prefix cache) is tested against
a fake model in cpp/tests/test_embedding_engine.cpp.
"""
import asyncio
import base64
import struct
import threading

import numpy as np
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

import edgellm  # noqa: E402
from edgellm import ContextLengthError, InvalidRequestError  # noqa: E402

REAL = pytest.mark.real_model  # tests with SmolLM2; the stand-in server tests at the end need none

TEXTS = [
    "The cat sat on the mat.",
    "Paris is the capital of France.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar.",
    "def add(a, b):\n    return a + b",
    "I would like a cup of coffee, please.",
    "The stock market fell sharply on Monday after the announcement.",
    "Snow covered the mountains all winter.",
    "x",
]


def cos(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def llm(smollm2_path):
    m = edgellm.LLM(str(smollm2_path), n_ctx=256, n_threads=2)
    yield m
    m.close()


@pytest.fixture(scope="module")
def llm_f32(smollm2_path):
    """F32 KV, as eval_logits computes: hidden states comparable with the logits path."""
    m = edgellm.LLM(str(smollm2_path), n_ctx=256, n_threads=2, kv_type="f32")
    yield m
    m.close()


# ---- LLM.embed ------------------------------------------------------------------------------

@REAL
def test_shape_and_l2_normalised(llm):
    vecs = llm.embed(TEXTS[:3])
    assert isinstance(vecs, list) and len(vecs) == 3
    assert llm.n_embd == 576
    for v in vecs:
        assert isinstance(v, list) and len(v) == llm.n_embd and isinstance(v[0], float)
        assert abs(np.linalg.norm(v) - 1.0) < 1e-5
    # A single string is one input.
    one = llm.embed(TEXTS[0])
    assert len(one) == 1 and np.allclose(one[0], vecs[0], atol=1e-6)


@REAL
def test_normalize_options(llm):
    raw = llm.embeddings(TEXTS[1], normalize=False).data[0]
    l2 = llm.embeddings(TEXTS[1]).data[0]
    assert abs(np.linalg.norm(raw) - 1.0) > 0.1  # not normalised
    assert np.allclose(raw / np.linalg.norm(raw), l2, atol=1e-6)
    taxicab = llm.embeddings(TEXTS[1], normalize=1).data[0]
    assert abs(np.abs(taxicab).sum() - 1.0) < 1e-4
    maxabs = llm.embeddings(TEXTS[1], normalize=0).data[0]
    assert abs(np.abs(maxabs).max() - 32760.0) < 0.1


@REAL
def test_result_object_counts_tokens(llm):
    res = llm.embeddings(TEXTS[:4])
    assert res.pooling == "mean" == llm.default_pooling  # SmolLM2's GGUF names no pooling
    assert [d.dtype for d in res.data] == [np.float32] * 4
    assert res.token_counts == [len(llm.tokenize(t)) for t in TEXTS[:4]]
    assert res.prompt_tokens == sum(res.token_counts)


@REAL
def test_batched_equals_one_at_a_time(llm):
    batched = llm.embeddings(TEXTS).data
    for text, b in zip(TEXTS, batched):
        single = llm.embeddings(text).data[0]
        assert np.allclose(b, single, atol=1e-5), text


@REAL
def test_batched_while_generating(llm):
    """Embeddings computed while a generation runs in the same engine batches are the same."""
    alone = llm.embeddings(TEXTS).data
    out = {}

    def generate():
        out["gen"] = llm.generate("Once upon a time", edgellm.SamplingParams(temperature=0, max_tokens=48))

    t = threading.Thread(target=generate)
    t.start()
    together = llm.embeddings(TEXTS * 2).data
    t.join()
    assert len(out["gen"].token_ids) > 0
    alone_gen = llm.generate("Once upon a time", edgellm.SamplingParams(temperature=0, max_tokens=48))
    assert out["gen"].token_ids == alone_gen.token_ids
    for i, v in enumerate(together):
        assert np.allclose(v, alone[i % len(TEXTS)], atol=1e-5)
    assert llm.stats()["pages_used"] == 0


@REAL
def test_token_ids_input_matches_text(llm):
    ids = llm.tokenize(TEXTS[2])
    by_ids = llm.embed([ids, TEXTS[2]])
    assert np.allclose(by_ids[0], by_ids[1], atol=1e-6)
    assert np.allclose(llm.embed(ids)[0], by_ids[1], atol=1e-6)  # a flat id list is one input


@REAL
def test_paraphrase_is_closer_than_unrelated(llm):
    a, para, other = llm.embed([
        "The weather today is sunny and warm.",
        "It is a warm and sunny day today.",
        "The function returns a sorted list of integers.",
    ])
    assert cos(a, para) > cos(a, other) + 0.02, (cos(a, para), cos(a, other))


@REAL
def test_pooling_modes_agree_with_per_token_vectors(llm):
    text = TEXTS[2]
    rows = llm.embeddings(text, pooling="none", normalize=False).data[0]
    n = len(llm.tokenize(text))
    assert rows.shape == (n, llm.n_embd)
    unit = lambda v: v / np.linalg.norm(v)  # noqa: E731
    assert np.allclose(llm.embeddings(text, pooling="mean").data[0], unit(rows.mean(axis=0)), atol=1e-5)
    assert np.allclose(llm.embeddings(text, pooling="cls").data[0], unit(rows[0]), atol=1e-5)
    assert np.allclose(llm.embeddings(text, pooling="last").data[0], unit(rows[-1]), atol=1e-5)
    assert np.allclose(llm.embeddings(text, pooling=3).data[0], unit(rows[-1]), atol=1e-5)
    # pooling "none" with normalize: each token's vector on its own
    normed = llm.embeddings(text, pooling="none").data[0]
    assert np.allclose(np.linalg.norm(normed, axis=1), 1.0, atol=1e-5)
    # the public list form: one list of per-token vectors per input
    as_list = llm.embed([text], pooling="none")
    assert len(as_list) == 1 and len(as_list[0]) == n and len(as_list[0][0]) == llm.n_embd
    # causal: the last-token vector of a prefix is that row of the whole text
    ids = llm.tokenize(text)
    k = n // 2
    prefix_last = llm.embeddings([ids[:k]], pooling="last", normalize=False).data[0]
    assert np.allclose(prefix_last, rows[k - 1], atol=2e-3 * np.abs(rows[k - 1]).max())


@REAL
def test_hidden_rows_are_the_lm_heads_input(llm_f32, smollm2_path):
    """Eval-path consistency: the per-token hidden states times the output matrix are the
    logits eval_logits gives (up to the quantized-activation matmul)."""
    llm = llm_f32
    from reference.forward import ReferenceModel

    ref = ReferenceModel(str(smollm2_path), dtype=np.float32)
    w_out = ref.w("output.weight" if ref.has("output.weight") else "token_embd.weight")
    ids = llm.tokenize(TEXTS[0])
    rows = llm.embeddings([ids], pooling="none", normalize=False).data[0]
    logits = llm.eval_logits(ids)
    mine = rows.astype(np.float64) @ w_out.astype(np.float64).T
    for t in range(len(ids)):
        assert cos(mine[t], logits[t]) > 0.9995
        assert int(np.argmax(mine[t])) == int(np.argmax(logits[t]))


@REAL
def test_mean_pooling_matches_float_reference(llm_f32, smollm2_path):
    """Independent check: tests/reference/forward.py's float forward, final norm, mean."""
    llm = llm_f32
    from reference.forward import ReferenceModel

    ref = ReferenceModel(str(smollm2_path), dtype=np.float32)
    ids = llm.tokenize("Embeddings are mean-pooled hidden states.")
    _, layers = ref.forward(ids, trace=True)
    final = ref.rmsnorm(layers[-1], ref.w("output_norm.weight")).astype(np.float64)
    want = final.mean(axis=0)
    want /= np.linalg.norm(want)
    got = np.asarray(llm.embed([ids])[0], np.float64)
    assert cos(got, want) > 0.995, cos(got, want)
    # ... and a wrong pooling is measurably further away, so the check can fail
    got_last = np.asarray(llm.embed([ids], pooling="last")[0], np.float64)
    assert cos(got_last, want) < cos(got, want) - 0.01


@REAL
def test_async_embed(llm, smollm2_path):
    async def main():
        allm = edgellm.AsyncLLM(str(smollm2_path), n_ctx=256, n_threads=2)
        try:
            a, b = await asyncio.gather(allm.embed(TEXTS[:4]), allm.embed(TEXTS[4:]))
            res = await allm.embeddings(TEXTS[0], pooling="last")
            with pytest.raises(InvalidRequestError):
                await allm.embed([])
            return a + b, res
        finally:
            allm.close()

    vecs, res = asyncio.run(main())
    want = llm.embed(TEXTS)
    assert np.allclose(vecs, want, atol=1e-5)
    assert res.pooling == "last" and res.token_counts == [len(llm.tokenize(TEXTS[0]))]


@REAL
def test_async_many_inputs_one_pipe_and_cancel(smollm2_path):
    """Hundreds of inputs share one wake-up pipe; cancelling the awaiting task aborts them all,
    frees their pages and leaks no descriptor."""
    import os

    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    texts = [f"item number {i}" for i in range(600)]

    async def main():
        allm = edgellm.AsyncLLM(str(smollm2_path), n_ctx=256, n_threads=2)
        try:
            before = fds()
            res = await allm.embeddings(texts)
            assert len(res.data) == 600 and fds() == before
            task = asyncio.ensure_future(allm.embed(texts * 2))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(100):  # the engine drops the aborted requests at its next steps
                st = allm.stats()
                if st["running"] == 0 and st["waiting"] == 0:
                    break
                await asyncio.sleep(0.05)
            assert st["running"] == 0 and st["waiting"] == 0 and st["pages_used"] == 0
            # the pipe closes once the engine has sent every aborted input's last event (the
            # stats can be published before it drains the aborts on a loaded machine)
            for _ in range(200):
                if fds() == before:
                    break
                await asyncio.sleep(0.05)
            assert fds() == before
            return res
        finally:
            allm.close()

    res = asyncio.run(main())
    assert all(n > 0 for n in res.token_counts)


@REAL
def test_errors(llm):
    with pytest.raises(InvalidRequestError, match="empty"):
        llm.embed([])
    with pytest.raises(InvalidRequestError, match="no tokens"):
        llm.embed("")  # SmolLM2 adds no BOS: nothing to embed
    long_text = "word " * 400
    n = len(llm.tokenize(long_text))
    want = f"input 1 is too large: {n} tokens > n_ctx 256 by {n - 256}"
    with pytest.raises(ContextLengthError, match=want):
        llm.embed(["short", long_text])
    with pytest.raises(InvalidRequestError, match="rank"):
        llm.embed("x", pooling="rank")
    with pytest.raises(InvalidRequestError, match="pooling"):
        llm.embed("x", pooling="max")
    with pytest.raises(InvalidRequestError):
        llm.embed([[1, 2], 3.5])
    with pytest.raises(InvalidRequestError, match="vocabulary"):
        llm.embed([[1, 10 ** 7]])
    # exactly n_ctx tokens fit (nothing is generated)
    assert len(llm.embed([[1] * 256])[0]) == llm.n_embd
    assert llm.stats()["running"] == 0 and llm.stats()["pages_used"] == 0


@REAL
def test_gemma3_sliding_window_prompt_in_chunks(gemma3_path):
    """A prompt longer than Gemma 3's 512-token window, prefilled in 64-token chunks (window pages
    trimmed between steps), pools the same rows as in one 1024-token batch, alone or batched."""
    text = " ".join(f"w{i % 37}" for i in range(300))
    small = edgellm.LLM(str(gemma3_path), n_ctx=1024, n_threads=2, max_batch_tokens=64)
    try:
        assert len(small.tokenize(text)) > 512
        chunked = small.embeddings([text, "short"]).data[0]
        alone = small.embeddings(text).data[0]
    finally:
        small.close()
    big = edgellm.LLM(str(gemma3_path), n_ctx=1024, n_threads=2, max_batch_tokens=1024)
    try:
        whole = big.embeddings(text).data[0]
    finally:
        big.close()
    assert np.allclose(chunked, alone, atol=1e-5)
    assert cos(chunked, whole) > 0.9999


# ---- the server -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(smollm2_path):
    from test_server import ServerProcess

    s = ServerProcess(smollm2_path, "--ctx-size", "256", "--embedding").wait_ready()
    yield s
    s.proc.terminate()
    s.proc.wait(timeout=30)


@REAL
@pytest.mark.slow
def test_openai_sdk_float_and_base64(server, llm):
    client = server.client()
    res = client.embeddings.create(model="text-embedding-3-small", input=TEXTS[:3],
                                   encoding_format="float")
    assert [d.index for d in res.data] == [0, 1, 2]
    assert all(d.object == "embedding" for d in res.data)
    n_tokens = sum(len(llm.tokenize(t, parse_special=True)) for t in TEXTS[:3])
    assert res.usage.prompt_tokens == res.usage.total_tokens == n_tokens
    want = llm.embed(TEXTS[:3])
    for d, w in zip(res.data, want):
        assert np.allclose(d.embedding, w, atol=1e-5)
    # The SDK's default asks for base64 and decodes it itself.
    b64 = client.embeddings.create(model="x", input=TEXTS[:3])
    for d, w in zip(b64.data, want):
        assert np.allclose(d.embedding, w, atol=1e-6)
    # Asked for explicitly, base64 comes back as the string: little-endian float32.
    one = client.embeddings.create(model="x", input=TEXTS[0], encoding_format="base64")
    assert len(one.data) == 1 and isinstance(one.data[0].embedding, str)
    vec = np.frombuffer(base64.b64decode(one.data[0].embedding), dtype="<f4")
    assert np.allclose(vec, want[0], atol=1e-6)


@REAL
@pytest.mark.slow
def test_v1_embeddings_shapes(server, llm):
    r = server.post("/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64",
                                       "model": "m", "user": "u"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and set(body) == {"object", "data", "model", "usage"}
    raw = base64.b64decode(body["data"][0]["embedding"])
    vec = struct.unpack(f"<{len(raw) // 4}f", raw)  # little-endian float32, as OpenAI's SDK reads
    assert len(vec) == llm.n_embd and np.allclose(vec, llm.embed(TEXTS[0])[0], atol=1e-6)
    # token ids, lists of token ids, and llama-server's mixed prompts
    ids = llm.tokenize(TEXTS[1])
    r = server.post("/v1/embeddings", {"input": [ids, ids[:3]]})
    assert r.status_code == 200 and len(r.json()["data"]) == 2
    assert np.allclose(r.json()["data"][0]["embedding"], llm.embed([ids])[0], atol=1e-5)
    assert r.json()["usage"]["prompt_tokens"] == len(ids) + 3
    r = server.post("/v1/embeddings", {"input": ids})
    assert r.status_code == 200 and len(r.json()["data"]) == 1
    r = server.post("/v1/embeddings", {"input": [ids[0], "cat sat"]})
    assert r.status_code == 200 and len(r.json()["data"]) == 1
    r = server.post("/v1/embeddings", {"input": [
        "hello world", {"content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]},
        {"prompt_string": "hello world"}]})
    d = r.json()["data"]
    assert d[0]["embedding"] == d[1]["embedding"] == d[2]["embedding"]
    # dimensions: the model's width is accepted, anything else refused
    assert server.post("/v1/embeddings", {"input": "a", "dimensions": llm.n_embd}).status_code == 200
    r = server.post("/v1/embeddings", {"input": "a", "dimensions": 64})
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"
    assert "not supported" in r.json()["error"]["message"]


@REAL
@pytest.mark.slow
@pytest.mark.parametrize("body,param", [
    ({"input": []}, "input"),
    ({"input": ""}, "input"),  # SmolLM2 adds no BOS: no tokens
    ({}, "input"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "a", "embd_normalize": "yes"}, "embd_normalize"),
    ({"input": "a", "temperature": 0.5}, "temperature"),
    ({"input": {"content": "text"}}, "input"),
    ({"input": {"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}}, "input"),
    ({"input": [[1, 2], [1, 99999999]]}, "input"),
    ({"input": 3.5}, "input"),
])
def test_v1_embeddings_rejects(server, body, param):
    r = server.post("/v1/embeddings", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert r.json()["error"]["param"] == param


@REAL
@pytest.mark.slow
def test_context_overflow_is_400_with_numbers(server, llm):
    text = "This is a test " * 100
    n = len(llm.tokenize(text, parse_special=True))
    r = server.post("/v1/embeddings", {"input": ["fine", text]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded"
    assert "too large" in err["message"] and f"by {n - 256}" in err["message"]
    # the server still answers afterwards
    assert server.post("/v1/embeddings", {"input": "fine"}).status_code == 200


@REAL
@pytest.mark.slow
def test_native_endpoints(server, llm):
    r = server.post("/embedding", {"content": TEXTS[0]})
    assert r.status_code == 200
    body = r.json()
    assert isinstance(body, list) and body[0]["index"] == 0
    assert len(body[0]["embedding"]) == 1  # pooled: one row
    assert np.allclose(body[0]["embedding"][0], llm.embed(TEXTS[0])[0], atol=1e-5)
    r = server.post("/embeddings", {"input": TEXTS[:2], "embd_normalize": -1})
    assert [e["index"] for e in r.json()] == [0, 1]
    raw = np.asarray(r.json()[1]["embedding"][0])
    assert abs(np.linalg.norm(raw) - 1.0) > 0.1
    assert np.allclose(raw, llm.embeddings(TEXTS[1], normalize=False).data[0], atol=1e-4)
    # "content" on /v1/embeddings answers the native shape, as llama-server does
    r = server.post("/v1/embeddings", {"content": "hello"})
    assert isinstance(r.json(), list)


@REAL
@pytest.mark.slow
def test_pooling_none_server(smollm2_path, llm):
    from test_server import ServerProcess

    s = ServerProcess(smollm2_path, "--ctx-size", "256", "--pooling", "none").wait_ready()
    try:
        text = "hello hello hello"
        r = s.post("/embeddings", {"input": text})
        assert r.status_code == 200
        rows = r.json()[0]["embedding"]
        assert len(rows) == len(llm.tokenize(text, parse_special=True))
        for row in rows:  # per-token vectors come unnormalised
            assert abs(np.linalg.norm(row) - 1.0) > 1e-3
        want = llm.embeddings(text, pooling="none", normalize=False).data[0]
        assert np.allclose(rows, want, atol=1e-4)
        r = s.post("/v1/embeddings", {"input": text})
        assert r.status_code == 400 and "pooling" in r.json()["error"]["message"]
    finally:
        s.proc.terminate()
        s.proc.wait(timeout=30)


# ---- the server over a stand-in engine (no model needed) --------------------------------------

class FakeEmbedLLM:
    """What server/embeddings.py needs of AsyncLLM. Token i of a text is 100 + its character's
    code (BOS = 1 when special tokens are added); an embedding row is (t, 2t, -t, 1)."""
    n_ctx = 64
    n_vocab = 1000
    n_embd = 4
    isa = "fake"

    def __init__(self, default_pooling="mean"):
        self.default_pooling = default_pooling
        self.calls = []

    def tokenize(self, text, add_special=True, parse_special=False):
        return ([1] if add_special else []) + [100 + ord(c) % 800 for c in text]

    def stats(self):
        return {}

    def close(self):
        pass

    async def embeddings(self, prompts, normalize=True, pooling=None):
        from edgellm.embeddings import Embeddings

        self.calls.append({"prompts": prompts, "normalize": normalize, "pooling": pooling})
        data = []
        for i, p in enumerate(prompts):
            if len(p) > self.n_ctx:
                raise ContextLengthError(f"embedding input {i} is too large: {len(p)} tokens > "
                                         f"n_ctx {self.n_ctx} by {len(p) - self.n_ctx}")
            rows = np.array([[t, 2 * t, -t, 1] for t in p], np.float32)
            data.append(rows if pooling == "none" else rows.mean(axis=0) / 7.0)
        return Embeddings(data, [len(p) for p in prompts], pooling, normalize)


@pytest.fixture
def fake_server():
    from test_server_unit import RunningServer

    servers = []

    def start(engine=None, **cfg):
        s = RunningServer(engine=engine or FakeEmbedLLM(), **cfg).wait_ready()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def _post(s, path, body):
    import httpx

    return httpx.post(s.url + path, json=body, timeout=10)


def test_stand_in_input_shapes_and_tokenization(fake_server):
    s = fake_server()
    tok = s.engine.tokenize
    r = _post(s, "/v1/embeddings", {"input": ["ab", [5, 6], [7, "cd", 8], {"prompt_string": "ab"},
                                              {"content": [{"type": "text", "text": "a"},
                                                           {"type": "text", "text": "b"}]}]})
    assert r.status_code == 200, r.text
    call = s.engine.calls[-1]
    assert call["prompts"] == [tok("ab"), [5, 6], [7] + tok("cd", add_special=False) + [8],
                               tok("ab"), tok("ab")]
    assert call["pooling"] == "mean" and call["normalize"] == 2
    body = r.json()
    assert body["model"] == "fake" and body["object"] == "list"
    assert [d["index"] for d in body["data"]] == [0, 1, 2, 3, 4]
    assert body["usage"] == {"prompt_tokens": 3 + 2 + 4 + 3 + 3, "total_tokens": 15}
    # a flat id list and a mixed list holding an id are one prompt; a leading string gets BOS
    _post(s, "/v1/embeddings", {"input": ["ab", 9]})
    assert s.engine.calls[-1]["prompts"] == [tok("ab") + [9]]
    _post(s, "/v1/embeddings", {"input": [3, 4]})
    assert s.engine.calls[-1]["prompts"] == [[3, 4]]


def test_stand_in_base64_is_little_endian_float32(fake_server):
    s = fake_server()
    f = _post(s, "/v1/embeddings", {"input": "hello"}).json()["data"][0]["embedding"]
    b = _post(s, "/v1/embeddings", {"input": "hello", "encoding_format": "base64"}).json()["data"][0]
    raw = base64.b64decode(b["embedding"])
    assert len(raw) == 4 * 4
    assert list(struct.unpack("<4f", raw)) == pytest.approx(f, abs=0)
    assert list(np.frombuffer(raw, "<f4")) == list(np.asarray(f, np.float32))


def test_stand_in_normalize_and_dimensions(fake_server):
    s = fake_server(embd_normalize=3)
    _post(s, "/v1/embeddings", {"input": "a"})
    assert s.engine.calls[-1]["normalize"] == 3  # --embd-normalize
    _post(s, "/v1/embeddings", {"input": "a", "embd_normalize": -1})
    assert s.engine.calls[-1]["normalize"] == -1  # the request's wins
    assert _post(s, "/v1/embeddings", {"input": "a", "dimensions": 4}).status_code == 200
    r = _post(s, "/v1/embeddings", {"input": "a", "dimensions": 3})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported"
    r = _post(s, "/v1/embeddings", {"input": "a", "model": 7})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"


def test_stand_in_pooling_none(fake_server):
    s = fake_server(pooling="none")
    r = _post(s, "/v1/embeddings", {"input": "ab"})
    assert r.status_code == 400 and "pooling" in r.json()["error"]["message"]
    r = _post(s, "/embeddings", {"input": "ab", "embd_normalize": 2})
    assert r.status_code == 200
    assert s.engine.calls[-1]["pooling"] == "none" and s.engine.calls[-1]["normalize"] == -1
    rows = r.json()[0]["embedding"]
    assert rows == [[t, 2 * t, -t, 1] for t in s.engine.tokenize("ab")]
    # the model's own pooling counts too
    s2 = fake_server(engine=FakeEmbedLLM(default_pooling="none"))
    assert _post(s2, "/v1/embeddings", {"input": "ab"}).status_code == 400


def test_stand_in_native_shape(fake_server):
    s = fake_server()
    r = _post(s, "/embedding", {"content": ["ab", "c"]})
    assert r.status_code == 200
    body = r.json()
    assert [e["index"] for e in body] == [0, 1]
    assert all(len(e["embedding"]) == 1 and len(e["embedding"][0]) == 4 for e in body)


def test_stand_in_errors(fake_server):
    s = fake_server(parallel=1, max_queue=2)
    r = _post(s, "/v1/embeddings", {"input": "x" * 100})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert "by 37" in r.json()["error"]["message"]
    r = _post(s, "/v1/embeddings", {"input": ["a", "b", "c", "d"]})  # more than 1 + 2 sequences
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_sequences"
    r = _post(s, "/v1/embeddings", {"input": [True]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
    r = _post(s, "/v1/embeddings", {"input": [1, -2]})
    assert r.status_code == 400 and "negative" in r.json()["error"]["message"]


def test_stand_in_engine_without_embeddings_is_501(fake_server):
    class NoEmbed:  # an engine that only generates
        n_ctx, n_vocab, isa = 64, 1000, "fake"
        tokenize = FakeEmbedLLM.tokenize
        stats = FakeEmbedLLM.stats
        close = FakeEmbedLLM.close

    s = fake_server(engine=NoEmbed())
    r = _post(s, "/v1/embeddings", {"input": "a"})
    assert r.status_code == 501
