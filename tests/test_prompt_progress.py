"""return_progress (llama-server's prompt_progress): the engine's progress chunks through the
Python API on a tiny generated model, then through the real server on SmolLM2 -- the chat,
legacy completions, native /completion and /v1/responses streams.

A progress sequence: one update when the request is admitted (processed == cache == the prompt
tokens reused from the prefix cache, time 0), then one per prefill chunk (processed grows by the
chunk, cache fixed), the last with processed == total; all before the first token.
"""
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

from edgellm import AsyncLLM, LLM, SamplingParams  # noqa: E402
from tiny_vocab_model import write_tiny_vocab_model  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BATCH = 32
PROMPT = [(7 * i + 3) % 250 + 1 for i in range(100)]  # 100 token ids, no BOS/EOS (259)


def expected(total: int, cache: int, batch: int = BATCH):
    """processed of each update when nothing else shares the batches."""
    out = [cache]
    while out[-1] < total:
        out.append(min(total, out[-1] + batch))
    return out


def check_progress(updates, total=None, cache=None):
    assert updates, "no progress updates"
    first = updates[0]
    assert first["processed"] == first["cache"]
    assert first["time_ms"] == 0
    assert updates[-1]["processed"] == updates[-1]["total"]
    for a, b in zip(updates, updates[1:]):
        assert b["total"] == a["total"] and b["cache"] == a["cache"]
        assert b["processed"] > a["processed"]
        assert b["time_ms"] >= a["time_ms"]
    if total is not None:
        assert first["total"] == total
    if cache is not None:
        assert first["cache"] == cache


# --- the Python API on a tiny model ------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_vocab_model(tmp_path_factory.mktemp("progress") / "tiny.gguf")
    llm = LLM(str(path), n_ctx=512, n_threads=2, max_batch_tokens=BATCH, page_size=16)
    yield llm
    llm.close()


def greedy(**kw):
    return SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True, **kw)


def split(chunks):
    progress, rest = [], []
    for ch in chunks:
        if ch.progress is not None:
            assert not rest, "a progress chunk after the first token"
            assert ch.text == "" and ch.token_ids == [] and ch.finish_reason is None
            progress.append(ch.progress)
        else:
            rest.append(ch)
    return progress, rest


def test_stream_chunks_report_each_prefill_chunk(tiny):
    plain = list(tiny.stream_chunks(PROMPT, greedy()))
    assert all(ch.progress is None for ch in plain)
    with_progress = list(tiny.stream_chunks(PROMPT, greedy(return_progress=True)))
    progress, rest = split(with_progress)
    check_progress(progress, total=len(PROMPT))
    # the first run registered its pages: this one reuses six of 16 (the last token is recomputed)
    assert [p["processed"] for p in progress] == expected(len(PROMPT), 96)
    # the events around them are unchanged
    assert [c.token_ids for c in rest] == [c.token_ids for c in plain]
    assert "".join(c.text for c in rest) == "".join(c.text for c in plain)
    assert rest[-1].finish_reason == "length" and rest[-1].usage.cached_tokens == 96


def test_cold_prompt_is_chunked(tiny):
    prompt = [(11 * i + 5) % 250 + 1 for i in range(90)]
    progress, rest = split(tiny.stream_chunks(prompt, greedy(return_progress=True)))
    check_progress(progress, total=90, cache=0)
    assert [p["processed"] for p in progress] == [0, 32, 64, 90]
    assert progress[-1]["time_ms"] > 0
    assert sum(len(c.token_ids) for c in rest) == 6


def test_stream_text_and_generate_ignore_progress(tiny):
    prompt = [(13 * i + 2) % 250 + 1 for i in range(70)]
    text = "".join(tiny.stream(prompt, greedy()))
    assert "".join(tiny.stream(prompt, greedy(return_progress=True))) == text
    # not streaming: the flag has no effect
    c = tiny.generate(prompt, greedy(return_progress=True))
    assert c.text == text and c.finish_reason == "length"


def test_async_stream_chunks(tiny):
    prompt = [(17 * i + 9) % 250 + 1 for i in range(75)]

    async def run():
        allm = AsyncLLM.__new__(AsyncLLM)
        allm.llm = tiny  # share the loaded engine
        got = []
        async for ch in allm.stream_chunks(prompt, greedy(return_progress=True)):
            got.append(ch)
        texts = [t async for t in allm.stream(prompt, greedy(return_progress=True))]
        return got, texts

    got, texts = asyncio.run(run())
    progress, rest = split(got)
    check_progress(progress, total=75, cache=0)
    assert [p["processed"] for p in progress] == [0, 32, 64, 75]
    assert "".join(texts) == "".join(c.text for c in rest)


# --- the real server on SmolLM2 -----------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(smollm2_path):
    port = _free_port()
    env = dict(os.environ)
    if env.get("EDGELLM_BUILD_DIR"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"edgellm-progress-{port}.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgellm", "serve", str(smollm2_path), "--port", str(port),
         "--threads", "2", "--parallel", "1", "--max-batch-tokens", str(BATCH),
         "--log-level", "warning"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"server exited with {proc.returncode}:\n{log.read()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server not ready"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def sse_events(url, path, body):
    """The data objects of an SSE stream (without [DONE])."""
    out = []
    with httpx.stream("POST", url + path, json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def long_text(word: str) -> str:
    return " ".join(f"{word} number {i} is here." for i in range(30))


@pytest.mark.real_model
@pytest.mark.slow
def test_chat_stream_progress(server):
    body = {"messages": [{"role": "user", "content": long_text("chat")}], "max_tokens": 4,
            "temperature": 0, "stream": True, "return_progress": True}
    events = sse_events(server, "/v1/chat/completions", body)
    progress_events = [e for e in events if "prompt_progress" in e]
    updates = [e["prompt_progress"] for e in progress_events]
    check_progress(updates, cache=0)
    total = updates[0]["total"]
    assert total > 2 * BATCH
    assert [u["processed"] for u in updates] == expected(total, 0)
    assert all(isinstance(u["time_ms"], int) for u in updates)
    for e in progress_events:  # llama-server: each update is a role delta, content null
        assert e["object"] == "chat.completion.chunk"
        assert e["choices"][0]["delta"] == {"role": "assistant", "content": None}
        assert "timings" not in e
    first_text = next(i for i, e in enumerate(events) if e["choices"] and
                      e["choices"][0]["delta"].get("content"))
    assert first_text > events.index(progress_events[-1])
    # the role is said once before the text (by the progress chunks)
    roles = [e for e in events if e["choices"] and "role" in e["choices"][0]["delta"]
             and "prompt_progress" not in e]
    assert roles == []

    # again: the prompt's full pages come from the prefix cache
    again = [e["prompt_progress"] for e in sse_events(server, "/v1/chat/completions", body)
             if "prompt_progress" in e]
    check_progress(again, total=total)
    cache = again[0]["cache"]
    assert cache > 0 and cache == (total - 1) // 32 * 32
    assert [u["processed"] for u in again] == expected(total, cache)


@pytest.mark.real_model
@pytest.mark.slow
def test_chat_without_stream_or_flag(server):
    msgs = [{"role": "user", "content": long_text("plain")}]
    events = sse_events(server, "/v1/chat/completions",
                        {"messages": msgs, "max_tokens": 3, "stream": True})
    assert not any("prompt_progress" in e for e in events)
    r = httpx.post(server + "/v1/chat/completions", timeout=120,
                   json={"messages": msgs, "max_tokens": 3, "return_progress": True})
    assert r.status_code == 200 and "prompt_progress" not in r.json()
    assert r.json()["choices"][0]["message"]["content"]
    bad = httpx.post(server + "/v1/chat/completions", timeout=30,
                     json={"messages": msgs, "return_progress": "yes"})
    assert bad.status_code == 400


@pytest.mark.real_model
@pytest.mark.slow
def test_chat_progress_with_timings_per_token(server):
    body = {"messages": [{"role": "user", "content": long_text("timed")}], "max_tokens": 3,
            "stream": True, "return_progress": True, "timings_per_token": True}
    progress_events = [e for e in sse_events(server, "/v1/chat/completions", body)
                       if "prompt_progress" in e]
    first = progress_events[0]["timings"]
    assert first["prompt_n"] == 0 and first["prompt_ms"] == 0.0
    assert first["predicted_n"] == 0 and first["predicted_ms"] == 0.0
    ms = 0.0
    for e in progress_events:
        t, p = e["timings"], e["prompt_progress"]
        assert all(v is not None and v >= 0 for v in t.values())
        assert t["prompt_n"] == p["processed"] - p["cache"]
        assert t["prompt_ms"] >= ms
        ms = t["prompt_ms"]
    assert ms > 0


@pytest.mark.real_model
@pytest.mark.slow
def test_native_completion_progress(server):
    body = {"prompt": long_text("native"), "n_predict": 4, "stream": True,
            "return_progress": True, "timings_per_token": True}
    events = sse_events(server, "/completion", body)
    progress_events = [e for e in events if "prompt_progress" in e]
    updates = [e["prompt_progress"] for e in progress_events]
    check_progress(updates, cache=0)
    total = updates[0]["total"]
    assert [u["processed"] for u in updates] == expected(total, 0)
    for e in progress_events:
        assert e["content"] == "" and e["tokens"] == [] and e["stop"] is False
        assert e["tokens_evaluated"] == total and e["tokens_predicted"] == 0
    assert progress_events[0]["timings"]["prompt_n"] == 0
    assert progress_events[0]["timings"]["prompt_ms"] == 0.0
    assert progress_events[-1]["timings"]["prompt_ms"] > 0
    texts = [e for e in events if e.get("content")]
    assert texts and events.index(texts[0]) > events.index(progress_events[-1])
    assert events[-1]["stop"] is True and "prompt_progress" not in events[-1]
    # without stream the flag is accepted and has no effect
    r = httpx.post(server + "/completion", timeout=120,
                   json={"prompt": long_text("native"), "n_predict": 2, "return_progress": True})
    assert r.status_code == 200 and "prompt_progress" not in r.json()


@pytest.mark.real_model
@pytest.mark.slow
def test_legacy_completions_progress(server):
    body = {"prompt": long_text("legacy"), "max_tokens": 3, "stream": True,
            "return_progress": True}
    events = sse_events(server, "/v1/completions", body)
    progress_events = [e for e in events if "prompt_progress" in e]
    check_progress([e["prompt_progress"] for e in progress_events], cache=0)
    for e in progress_events:
        assert e["object"] == "text_completion" and e["choices"][0]["text"] == ""
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"])


@pytest.mark.real_model
@pytest.mark.slow
def test_responses_progress(server):
    body = {"input": long_text("responses"), "max_output_tokens": 4, "stream": True,
            "return_progress": True, "timings_per_token": True}
    events = []
    with httpx.stream("POST", server + "/v1/responses", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    progress_events = [e for e in events if "prompt_progress" in e]
    assert all(e["type"] == "response.in_progress" for e in progress_events)
    updates = [e["prompt_progress"] for e in progress_events]
    check_progress(updates, cache=0)
    assert [u["processed"] for u in updates] == expected(updates[0]["total"], 0)
    assert progress_events[0]["timings"]["prompt_ms"] == 0.0
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all("prompt_per_second" in e["timings"] and "predicted_per_second" in
                          e["timings"] for e in deltas if "timings" in e)
    assert any("timings" in e for e in deltas)
    done = events[-1]
    assert done["type"] in ("response.completed", "response.incomplete")
    assert "timings" in done and done["response"]["usage"]["input_tokens"] == updates[0]["total"]
    seqs = [e["sequence_number"] for e in events]
    assert seqs == list(range(len(events)))
