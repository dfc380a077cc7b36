"""Issue 17's server chaos test and soak, against SmolLM2 in one `edgellm serve` process.

- chaos: in one run, 64 concurrent streams of which half are dropped mid-stream at a random
  chunk, malformed bodies, oversized bodies (413), over-long prompts (400 context error);
  afterwards /health answers, the engine runs nothing (`edgellm_requests_running` 0), and no KV
  page is held by a request (`edgellm_kv_pages_in_use_requests` 0; pages kept only by the
  prefix cache, `edgellm_kv_pages_cached`, are allowed).
- soak: 2,000+ mixed small requests (chat, completion, tokenize, streaming, errors); the server's
  RSS (VmRSS of /proc/<pid>/status) after a warm-up of 400 requests grows less than 5 MB by the
  end.
"""
import asyncio
import json
import random
import time

import httpx
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

from test_server import ServerProcess  # noqa: E402

pytestmark = [pytest.mark.real_model]

CTX = 512
LIMIT = 1 << 20


@pytest.fixture(scope="module")
def server(smollm2_path):
    # a small KV pool, so that the warm-up of the soak has touched all of it
    s = ServerProcess(smollm2_path, "--parallel", "16", "--ctx-size", str(CTX),
                      "--kv-memory", "64M", "--max-body-size", "1M", "--read-timeout", "10",
                      "--max-queue", "512")
    try:
        yield s.wait_ready()
    finally:
        s.stop()


def metrics(server) -> dict:
    return server.metrics()


def wait_idle(server, timeout=30.0) -> dict:
    """Poll /metrics until nothing runs and no request holds a KV page (aborts are
    asynchronous: the engine frees a dropped stream's pages at its next step)."""
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(server)
        if (m["edgellm_requests_running"] == 0 and m["edgellm_requests_waiting"] == 0
                and m["edgellm_kv_pages_in_use_requests"] == 0
                and m["edgellm_http_requests_active"] == 0):
            return m
        assert time.monotonic() < deadline, {k: v for k, v in m.items()
                                             if "requests_" in k or "kv_pages" in k}
        time.sleep(0.1)


def is_envelope(r) -> bool:
    try:
        err = r.json()["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(err, dict) and {"message", "type", "param", "code"} <= set(err)


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def chat(text, **kw):
    return {"messages": [{"role": "user", "content": text}], "temperature": 0, **kw}


async def _stream(c, url, body, drop_after):
    """A streaming chat; stops reading (and closes the connection) after `drop_after` events,
    or reads it to the end when None. Returns ('dropped' | 'done', events seen)."""
    seen = 0
    async with c.stream("POST", url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                return "done", seen
            event = json.loads(line[6:])
            assert "error" not in event, event
            seen += 1
            if drop_after is not None and seen >= drop_after:
                return "dropped", seen  # leaving the block closes the unfinished response
    return "done", seen


def test_chaos_streams_disconnects_bad_bodies_then_idle(server):
    rng = random.Random(17)
    url = server.url
    outcomes = {"dropped": 0, "done": 0, "413": 0, "400": 0, "context": 0}

    async def main():
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        async with httpx.AsyncClient(timeout=120, headers=server.headers, limits=limits) as c:
            async def streamer(i):
                drop = rng.randint(1, 12) if i % 2 == 0 else None
                body = chat(f"Count from {i} to {i + 20}, one number per line.", stream=True,
                            max_tokens=24)
                kind, _ = await _stream(c, url, body, drop)
                outcomes[kind] += 1

            async def malformed(i):
                raw = [b"{", b'{"messages": [', b"not json", b"[" * 50_000,
                       json.dumps({"messages": "hi"}).encode(),
                       json.dumps(chat("x", max_tokens="many")).encode(),
                       json.dumps({"prompt": [1 << 40], "max_tokens": 1}).encode(),
                       json.dumps(chat("x", temperature=10 ** 400)).encode()][i % 8]
                path = "/v1/completions" if b"prompt" in raw else "/v1/chat/completions"
                r = await c.post(url + path, content=raw,
                                 headers={"content-type": "application/json"})
                assert r.status_code == 400 and is_envelope(r), (raw[:60], r.status_code, r.text)
                outcomes["400"] += 1

            async def oversized(i):
                body = json.dumps(chat("y" * (LIMIT + 1000 * i), max_tokens=1))
                r = await c.post(url + "/v1/chat/completions", content=body,
                                 headers={"content-type": "application/json"})
                assert r.status_code == 413 and is_envelope(r), (r.status_code, r.text[:200])
                outcomes["413"] += 1

            async def overlong(i):
                body = chat("lorem ipsum dolor " * (CTX + 50 * i), max_tokens=8,
                            stream=bool(i % 2))
                r = await c.post(url + "/v1/chat/completions", json=body)
                assert r.status_code == 400 and is_envelope(r), (r.status_code, r.text[:200])
                assert r.json()["error"]["code"] == "context_length_exceeded"
                outcomes["context"] += 1

            jobs = [streamer(i) for i in range(64)] + [malformed(i) for i in range(16)] + \
                [oversized(i) for i in range(4)] + [overlong(i) for i in range(6)]
            rng.shuffle(jobs)
            await asyncio.gather(*jobs)

    asyncio.run(main())
    assert outcomes == {"dropped": 32, "done": 32, "413": 4, "400": 16, "context": 6}, outcomes
    assert httpx.get(url + "/health", timeout=5).json() == {"status": "ok"}
    m = wait_idle(server)
    assert m["edgellm_kv_pages_in_use_requests"] == 0 and m["edgellm_requests_running"] == 0
    assert m['edgellm_requests_total{endpoint="chat",status="499"}'] >= 1  # the dropped streams
    # and the server still answers properly
    r = server.post("/v1/chat/completions", chat("Say hi.", max_tokens=4))
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


SOAK_WARMUP = 400
SOAK_TOTAL = 2000


@pytest.mark.slow
def test_soak_rss_stays_flat(server):
    url = server.url
    pid = server.proc.pid
    counts = {}

    def kinds(i):
        k = i % 10
        if k in (0, 1, 2):
            return "chat", ("POST", "/v1/chat/completions",
                            chat(f"Item {i}: name a colour.", max_tokens=2)), 200
        if k in (3, 4):
            return "completion", ("POST", "/v1/completions",
                                  {"prompt": f"{i} apples and", "max_tokens": 2,
                                   "temperature": 0}), 200
        if k == 5:
            return "stream", None, 200
        if k == 6:
            return "tokenize", ("POST", "/tokenize", {"content": f"text number {i} " * 5}), 200
        if k == 7:
            return "bad json", ("RAW", "/v1/chat/completions", b'{"messages": [' + b"1," * i), 400
        if k == 8:
            return "bad field", ("POST", "/v1/completions",
                                 {"prompt": "x", "max_tokens": 1, "top_k": "ten"}), 400
        return "context", ("POST", "/v1/completions",
                           {"prompt": "word " * (CTX + 10), "max_tokens": 1}), 400

    async def one(c, i):
        kind, req, status = kinds(i)
        if kind == "stream":
            got, _ = await _stream(c, url, chat(f"Stream {i}.", stream=True, max_tokens=3),
                                   1 if i % 20 == 5 else None)
        else:
            method, path, body = req
            if method == "RAW":
                r = await c.post(url + path, content=body,
                                 headers={"content-type": "application/json"})
            else:
                r = await c.post(url + path, json=body)
            assert r.status_code == status, (kind, r.status_code, r.text[:200])
            if status >= 400:
                assert is_envelope(r), r.text[:200]
        counts[kind] = counts.get(kind, 0) + 1

    async def run(start, stop, concurrency=8):
        async with httpx.AsyncClient(timeout=120, headers=server.headers) as c:
            queue = iter(range(start, stop))

            async def worker():
                for i in queue:
                    await one(c, i)

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    t0 = time.monotonic()
    asyncio.run(run(0, SOAK_WARMUP))
    wait_idle(server)
    before = rss_kb(pid)
    asyncio.run(run(SOAK_WARMUP, SOAK_TOTAL + SOAK_WARMUP))
    wait_idle(server)
    after = rss_kb(pid)
    took = time.monotonic() - t0
    assert sum(counts.values()) == SOAK_TOTAL + SOAK_WARMUP
    assert httpx.get(url + "/health", timeout=5).status_code == 200
    grew = (after - before) / 1024
    print(f"soak: {SOAK_TOTAL + SOAK_WARMUP} requests in {took:.1f} s, RSS {before / 1024:.1f} "
          f"-> {after / 1024:.1f} MB ({grew:+.2f} MB after the warm-up); {counts}")
    assert grew < 5.0, f"RSS grew {grew:.2f} MB over {SOAK_TOTAL} requests after the warm-up"
