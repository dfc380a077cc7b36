"""LLM.submit / submit_chat -> RequestHandle (poll without blocking, result, cancel from any
thread) and Stream.cancel() for the iterators, on SmolLM2: the polled text is the blocking
call's, cancelling ends the request early and gives its KV pages back."""
import threading
import time

import pytest

from edgellm import LLM, InvalidRequestError, RequestHandle, SamplingParams, Stream
from test_llm import greedy, wait_for  # noqa: E402

pytestmark = pytest.mark.real_model

N_THREADS = 2
LONG = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)
STORY = "Write a very long story about a dragon who learns to bake bread."


def slot_freed(llm):
    return wait_for(lambda: llm.stats()["pages_used"] == 0 and llm.stats()["running"] == 0
                    and llm.stats()["waiting"] == 0, timeout=20.0)


@pytest.fixture(scope="module")
def llm(smollm2_path):
    with LLM(str(smollm2_path), n_threads=N_THREADS) as m:
        yield m


def poll_until_done(h, timeout=60.0):
    """(pieces, number of polls that found nothing). `timeout`: a hang guard only."""
    pieces, empty = [], 0
    t_end = time.time() + timeout
    while not h.done:
        assert time.time() < t_end, "request never finished"
        piece = h.poll()
        if piece:
            pieces.append(piece)
        else:
            empty += 1
        time.sleep(0.002)
    pieces.append(h.poll())  # whatever came with the last event
    return pieces, empty


def test_poll_never_blocks_and_gives_the_blocking_text(llm):
    prompt = "The capital of France is"
    ref = llm.generate(prompt, greedy(40))
    h = llm.submit(prompt, greedy(40))
    assert isinstance(h, RequestHandle) and not h.done and h.finish_reason is None
    pieces, empty = poll_until_done(h)
    # polls came back with nothing while the engine was working: a poll that waited for the
    # engine would always have come back with a piece (no wall-clock bound needed)
    assert empty > 0
    assert "".join(pieces) == ref.text == h.text
    assert h.poll() == "" and h.poll_chunks() == []  # nothing after the end
    res = h.result(timeout=5)
    assert res.text == ref.text and res.token_ids == ref.token_ids
    assert res.finish_reason == ref.finish_reason
    assert (res.usage.prompt_tokens, res.usage.completion_tokens) == (ref.usage.prompt_tokens, ref.usage.completion_tokens)
    assert res.timings["predicted_n"] == len(ref.token_ids)
    assert slot_freed(llm)


def test_submit_chat_matches_chat_and_calls_back_on_the_polling_thread(llm):
    msgs = [{"role": "user", "content": "Name three fruits."}]
    ref = llm.chat(msgs, greedy(48))
    got, done, threads = [], [], set()

    def on_text(piece):
        got.append(piece)
        threads.add(threading.get_ident())

    h = llm.submit_chat(msgs, greedy(48), on_text=on_text,
                        on_done=lambda hh: (done.append(hh), threads.add(threading.get_ident())))
    pieces, _ = poll_until_done(h)
    assert "".join(pieces) == "".join(got) == ref.content == h.text
    assert done == [h] and threads == {threading.get_ident()}
    res = h.result()
    assert res.content == ref.content and res.finish_reason == ref.finish_reason
    assert res.token_ids == ref.token_ids


def test_cancel_from_another_thread_ends_it_and_frees_the_slot(llm):
    h = llm.submit(STORY, LONG)
    first = threading.Event()
    canceller = threading.Thread(target=lambda: (first.wait(30), h.cancel()))
    canceller.start()
    text = ""
    t_end = time.time() + 60
    while not h.done:
        assert time.time() < t_end
        text += h.poll()
        if len(text) > 20:
            first.set()
        time.sleep(0.005)
    text += h.poll()
    canceller.join()
    assert h.cancelled and h.finish_reason == "cancelled"
    res = h.result()
    assert res.finish_reason == "cancelled" and res.text == text
    assert 0 < res.usage.completion_tokens < LONG.max_tokens
    assert slot_freed(llm)
    h.cancel()  # after the end: nothing happens
    assert llm.generate("Hello", greedy(4)).usage.completion_tokens > 0  # the engine goes on


def test_result_waits_and_times_out(llm):
    h = llm.submit(STORY, LONG)
    with pytest.raises(TimeoutError):
        h.result(timeout=0.0)
    h.cancel()
    assert h.result(timeout=30).finish_reason == "cancelled"
    assert slot_freed(llm)


def test_dropped_handle_aborts(llm):
    h = llm.submit(STORY, LONG)
    assert wait_for(lambda: llm.stats()["running"] == 1)
    del h
    assert slot_freed(llm)


def test_bad_handle_arguments(llm):
    with pytest.raises(InvalidRequestError, match="n=1"):
        llm.submit("Hi", SamplingParams(n=2, max_tokens=2))
    with pytest.raises(InvalidRequestError, match="on_text must be callable"):
        llm.submit("Hi", greedy(2), on_text="print")
    with pytest.raises(InvalidRequestError):
        llm.submit_chat([{"role": "nobody"}], greedy(2))


@pytest.mark.parametrize("kind", ["stream", "stream_chunks", "chat_stream", "chat_stream_chunks"])
def test_stream_cancel_from_another_thread(llm, kind):
    if kind.startswith("chat"):
        s = getattr(llm, kind)([{"role": "user", "content": STORY}], LONG)
    else:
        s = getattr(llm, kind)(STORY, LONG)
    assert isinstance(s, Stream)
    items = []
    started = threading.Event()
    canceller = threading.Thread(target=lambda: (started.wait(30), s.cancel()))
    canceller.start()
    for item in s:
        items.append(item)
        if len(items) == 5:
            started.set()
    canceller.join()
    assert s.cancelled and 5 <= len(items) < LONG.max_tokens
    if kind.endswith("chunks"):
        assert items[-1].finish_reason == "cancelled"
    assert slot_freed(llm)


def test_stream_cancelled_before_it_starts(llm):
    s = llm.stream_chunks(STORY, LONG)
    s.cancel()
    chunks = list(s)
    assert chunks and chunks[-1].finish_reason == "cancelled"
    assert sum(len(c.token_ids) for c in chunks) < LONG.max_tokens
    assert slot_freed(llm)


def test_async_stream_cancel_from_another_thread(smollm2_path):
    import asyncio
    from edgellm import AsyncLLM, AsyncStream

    async def run(allm, kind):
        if kind.startswith("chat"):
            s = getattr(allm, kind)([{"role": "user", "content": STORY}], LONG)
        else:
            s = getattr(allm, kind)(STORY, LONG)
        assert isinstance(s, AsyncStream)
        started = threading.Event()
        canceller = threading.Thread(target=lambda: (started.wait(30), s.cancel()))
        canceller.start()
        items = []
        async for item in s:
            items.append(item)
            if len(items) == 5:
                started.set()
        canceller.join()
        return s, items

    with AsyncLLM(str(smollm2_path), n_threads=N_THREADS) as allm:
        for kind in ("stream", "stream_chunks", "chat_stream", "chat_stream_chunks"):
            s, items = asyncio.run(run(allm, kind))
            assert s.cancelled and 5 <= len(items) < LONG.max_tokens, kind
            if kind.endswith("chunks"):
                assert items[-1].finish_reason == "cancelled"
            assert slot_freed(allm.llm)
