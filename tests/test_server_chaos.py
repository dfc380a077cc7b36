"""Issue 17's server chaos test and soak, against SmolLM2 in one `edgellm serve` process.

- chaos: in one run, 64 concurrent streams of which half are dropped mid-stream at a random
  chunk, malformed bodies, oversized bodies (413), over-long prompts (400 context error);
  afterwards /health answers, the engine runs nothing (`edgellm_requests_running` 0), and no KV
  page is held by a request (`edgellm_kv_pages_in_use_requests` 0; pages kept only by the
  prefix cache, `edgellm_kv_pages_cached`, are allowed).
- models-dir churn (issue 39): two models under --max-loaded-models 1 while their files are
  replaced (renamed over, rewritten in place with the same bytes, truncated and put back) and
  loads and unloads race with streams, for a bounded time; every stream ends complete or with a
  typed error, at no moment are two models loaded, and afterwards /health answers and the
  process holds no more fds, threads or memory than before it (one model loaded both times).
- soak: 2,000+ mixed small requests (chat, completion, tokenize, streaming, errors); the server's
  RSS (VmRSS of /proc/<pid>/status) after a warm-up of 400 requests grows less than 5 MB by the
  end.
"""
import asyncio
import json
import os
import random
import time
from pathlib import Path

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


# ---- models-dir churn -----------------------------------------------------------------------------

CHURN_SECONDS = 30.0


def _proc_counts(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    with open(f"/proc/{pid}/maps") as f:  # model files mapped: (inode, path) of each
        mapped = sorted({(int(p[4]), p[5].strip()) for p in (line.split(None, 5) for line in f)
                         if len(p) == 6 and ".gguf" in p[5]})
    return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": int(status["Threads"]),
            "rss_kb": int(status["VmRSS"].split()[0]), "mapped": mapped}


def _loaded(url) -> list:
    data = httpx.get(url + "/v1/models", timeout=10).json()["data"]
    return [m["id"] for m in data if m["status"]["value"] == "loaded"]


def _only_a_loaded(url):
    """Settle on one known state: model a loaded, b not (for the before / after counts)."""
    assert httpx.post(url + "/models/unload", json={"model": "b"}, timeout=60).status_code == 200
    r = httpx.post(url + "/v1/completions", json={"model": "a", "prompt": "Hi", "max_tokens": 2},
                   timeout=120)
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30
    while _loaded(url) != ["a"]:
        assert time.monotonic() < deadline, _loaded(url)
        time.sleep(0.1)


def test_models_dir_churn_then_limits_held_and_nothing_leaked(smollm2_path, tmp_path):
    from test_server_models import _serve, _stop, _wait_up

    folder = tmp_path / "models"
    folder.mkdir()
    data = Path(smollm2_path).read_bytes()
    for name in ("a", "b"):
        (folder / f"{name}.gguf").write_bytes(data)
    log = open(tmp_path / "serve.log", "w")  # it logs every reload: more than a pipe holds
    proc, url = _serve("--models-dir", str(folder), "--max-loaded-models", "1", "--ctx-size",
                       "512", "--threads", "2", "--parallel", "4", "--spec", "off", log=log)
    rng = random.Random(39)
    seen = {"done": 0, "typed_error": 0, "refused": 0, "replaced": 0, "unloads": 0}
    most_loaded = [0]
    allowed = {"model_file_changed", "model_load_failed", "no_room_for_model"}

    async def churn(seconds):
        stop_at = time.monotonic() + seconds
        async with httpx.AsyncClient(timeout=120) as c:
            async def streamer():
                while time.monotonic() < stop_at:
                    body = {"model": rng.choice("ab"), "prompt": "Count: 1, 2, 3,",
                            "max_tokens": rng.randint(4, 40), "temperature": 0,
                            "ignore_eos": True, "stream": True}
                    async with c.stream("POST", url + "/v1/completions", json=body) as r:
                        if r.status_code != 200:  # refused before it started: typed
                            err = json.loads(await r.aread())["error"]
                            assert err["code"] in allowed, (r.status_code, err)
                            seen["refused"] += 1
                            continue
                        async for line in r.aiter_lines():
                            if line == "data: [DONE]":
                                seen["done"] += 1
                                break
                            if line.startswith("data: ") and "error" in json.loads(line[6:]):
                                err = json.loads(line[6:])["error"]
                                assert err["code"] in allowed, err
                                seen["typed_error"] += 1
                                break

            async def unloader():
                while time.monotonic() < stop_at:
                    await asyncio.sleep(rng.random() * 0.6)
                    r = await c.post(url + "/models/unload", json={"model": rng.choice("ab")})
                    assert r.status_code in (200, 409), r.text
                    seen["unloads"] += 1

            async def replacer():
                while time.monotonic() < stop_at:
                    await asyncio.sleep(0.5 + rng.random())
                    path = folder / f"{rng.choice('ab')}.gguf"
                    how = rng.choice(["rename", "cp-same", "truncate"])
                    if how == "rename":  # the documented safe way
                        tmp = folder / ".incoming.tmp"
                        tmp.write_bytes(data)
                        os.replace(tmp, path)
                    else:
                        with open(path, "r+b") as f:
                            f.truncate(0)
                            if how == "truncate":
                                await asyncio.sleep(0.05)
                            f.write(data)
                    seen["replaced"] += 1

            async def monitor():
                while time.monotonic() < stop_at:
                    r = await c.get(url + "/v1/models")
                    assert r.status_code == 200, r.text
                    n = sum(m["status"]["value"] == "loaded" for m in r.json()["data"])
                    most_loaded[0] = max(most_loaded[0], n)
                    await asyncio.sleep(0.05)

            await asyncio.gather(*[streamer() for _ in range(4)], unloader(), replacer(),
                                 monitor())

    try:
        _wait_up(proc, url)
        asyncio.run(churn(8.0))  # warm-up: executors and allocator reach their working size
        _only_a_loaded(url)
        before = _proc_counts(proc.pid)
        asyncio.run(churn(CHURN_SECONDS))
        assert proc.poll() is None, "the server died in the churn"
        health = httpx.get(url + "/health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        _only_a_loaded(url)
        after = _proc_counts(proc.pid)
        metrics_text = httpx.get(url + "/metrics", timeout=10).text
    finally:
        _stop(proc)
        log.close()
    loads = sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
                if line.startswith("edgellm_model_loads_total"))
    print(f"churn: {seen}, loads {loads:.0f}, most loaded {most_loaded[0]}, {before} -> {after}")
    assert most_loaded[0] <= 1, f"{most_loaded[0]} models loaded under --max-loaded-models 1"
    assert seen["done"] > 0 and seen["replaced"] > 0 and loads >= 4, (seen, loads)
    # nothing leaked: one model loaded before and after, through many loads and unloads. An
    # engine left behind would hold its model file's fd, its threads (engine + compute pool)
    # and ~100 MB per load; the slack is what the event loop's executor may still add.
    assert len(after["mapped"]) == len(before["mapped"]) == 1, (before, after)
    assert after["fds"] <= before["fds"] + 4, (before, after)
    assert after["threads"] <= before["threads"] + 4, (before, after)
    assert after["rss_kb"] - before["rss_kb"] < len(data) // 1024, (before, after)  # < a model


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
