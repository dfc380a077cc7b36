"""edgellm.LLM / AsyncLLM on the real models: continuous batching gives the same greedy tokens
as one sequence alone (also with chunked prefill and under preemption), the prefix cache is
hit and changes nothing, cancelled and finished requests give their KV pages back, seeded
sampling does not depend on the batch, stop strings never leak, and many threads can stream
at once."""
import asyncio
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from edgellm import LLM, AsyncLLM, ContextLengthError, SamplingParams, _core

pytestmark = pytest.mark.real_model

N_THREADS = 2

# 16 prompts of mixed lengths (a few tokens to ~150).
_BASE = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):",
    "List three colors:",
    "The quick brown fox jumps over the lazy dog. " * 6,
    "Water boils at",
    "In 1492, Columbus",
    "Q: What is 2 + 2?\nA:",
    "A haiku about autumn leaves:\n",
    "The mitochondria is the powerhouse of the cell. It produces energy by " * 4,
    "import numpy as np\n\narr = np.array([1, 2, 3])\nprint(",
    "Dear hiring manager, I am writing to apply for",
    "Step 1: preheat the oven. Step 2:",
    "The three laws of motion were formulated by " + "Isaac Newton, who lived in England. " * 8,
    "Hello",
    "Translate to French: good morning ->",
]

GREEDY_TOKENS = {"smollm2": 12, "gemma3": 8}


def greedy(n):
    return SamplingParams(temperature=0.0, max_tokens=n)


def wait_for(pred, timeout=10.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def pages_back_to_zero(llm):
    return wait_for(lambda: llm.stats()["pages_used"] == 0 and llm.stats()["running"] == 0)


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    """(name, path, prompt ids, single-stream greedy reference token lists)."""
    name = request.param
    path = str(request.getfixturevalue(f"{name}_path"))
    tok = _core.Tokenizer.from_gguf(path)
    prompts = [tok.encode(p, True, False) for p in _BASE]
    n = GREEDY_TOKENS[name]
    runner = _core.ModelRunner(_core.Model(path, N_THREADS))
    ref = []
    for ids in prompts:
        runner.reset()
        ref.append(list(runner.greedy(ids, n, tok.eog_ids)))
    return name, path, prompts, ref


@pytest.fixture(scope="module")
def smollm(smollm2_path):
    llm = LLM(str(smollm2_path), n_threads=N_THREADS)
    yield llm
    llm.close()


def test_batched_greedy_equals_single_stream(model):
    name, path, prompts, ref = model
    with LLM(path, n_threads=N_THREADS) as llm:
        outs = llm.generate(prompts, greedy(GREEDY_TOKENS[name]))
        assert [o.token_ids for o in outs] == ref
        assert all(o.finish_reason in ("length", "stop") for o in outs)
        assert pages_back_to_zero(llm)


def test_decode_steps_without_drafts_equal_single_stream(model):
    # speculative off: every step after the prompts is 16 one-token blocks, the decode path of the
    # attention (ranges of sequences balanced by keys, the next sequence's KV prefetched)
    name, path, prompts, ref = model
    with LLM(path, n_threads=N_THREADS, speculative="off") as llm:
        outs = llm.generate(prompts, greedy(GREEDY_TOKENS[name]))
        assert [o.token_ids for o in outs] == ref


def test_decode_steps_past_the_sliding_window_equal_single_stream(gemma3_path):
    # Gemma 3's local layers attend to the last 512 positions: a 700-token prompt decoded beside
    # short ones reads (and balances, and prefetches) only its window there
    path = str(gemma3_path)
    tok = _core.Tokenizer.from_gguf(path)
    long_text = " ".join(f"Item {i}: the value is {i * 7 % 13}." for i in range(120))
    prompts = [tok.encode(t, True, False) for t in [long_text] + _BASE[:5]]
    assert len(prompts[0]) > 600
    runner = _core.ModelRunner(_core.Model(path, N_THREADS))
    ref = []
    for ids in prompts:
        runner.reset()
        ref.append(list(runner.greedy(ids, 6, tok.eog_ids)))
    with LLM(path, n_threads=N_THREADS, speculative="off") as llm:
        outs = llm.generate(prompts, greedy(6))
        assert [o.token_ids for o in outs] == ref


def test_chunked_prefill_and_preemption_keep_outputs(model):
    name, path, prompts, ref = model
    probe = LLM(path, n_threads=N_THREADS, n_ctx=256)
    st = probe.stats()
    probe.close()
    # A KV budget exactly as large as the longest request needs (its pages of both layer groups:
    # n_ctx 256 is within Gemma 3's window): the 16 requests need far more at once, so the engine
    # must preempt; 16-token batches split every prompt into chunks.
    need = max(-(-(len(p) + GREEDY_TOKENS[name]) // 32) for p in prompts)
    kv_memory = need * (st["page_bytes_full"] + st["page_bytes_window"])
    # speculative="off": adaptive drafting follows measured step times, so whether this pool
    # preempts would depend on the machine's load (test_speculative covers drafts + preemption)
    with LLM(path, n_threads=N_THREADS, n_ctx=256, kv_memory=kv_memory, max_batch_tokens=16,
             speculative="off") as llm:
        assert llm.stats()["kv_bytes_total"] == kv_memory
        assert llm.stats()["pages_full_total"] == kv_memory // st["page_bytes_full"]
        outs = llm.generate(prompts, greedy(GREEDY_TOKENS[name]))
        assert [o.token_ids for o in outs] == ref
        st = llm.stats()
        assert st["preemptions"] > 0
        assert pages_back_to_zero(llm)


def test_output_events_are_read_only_objects(smollm):
    """_core.OutputEvent: attributes, not a dict; the last event's fields are None / 0 before."""
    ch = _core.OutputChannel()
    core = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True, logprobs=2).to_core(smollm.n_vocab)
    smollm.engine_client.submit(smollm.tokenize("The capital of France is"), core, ch, True)
    events = []
    while not events or not events[-1].finished:
        ev = ch.pop(1.0)
        if ev is not None:
            events.append(ev)
    assert all(isinstance(ev, _core.OutputEvent) and isinstance(ev.text, str) for ev in events)
    assert [len(ev.token_ids) for ev in events if ev.token_ids] == [1, 1, 1]
    first, last = events[0], events[-1]
    assert first.finish_reason is None and first.timings is None and first.stop_reason is None
    assert len(first.logprobs) == 1 and len(first.logprobs[0][2]) == 2  # (id, logprob, top 2)
    assert last.finish_reason == "length" and last.completion_tokens == 3 and last.error == ""
    assert last.prompt_tokens == len(smollm.tokenize("The capital of France is"))
    assert {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms"} <= set(last.timings)
    assert last.embedding is None and last.progress is None and last.prompt_logprobs is None
    with pytest.raises(AttributeError):
        last.text = "x"


def test_prefix_cache_hit_gives_identical_output(smollm):
    prompt = _BASE[13]
    first = smollm.generate(prompt, greedy(10))
    before = smollm.stats()
    second = smollm.generate(prompt, greedy(10))
    after = smollm.stats()
    assert second.token_ids == first.token_ids and second.text == first.text
    assert after["prefix_cache_hits"] == before["prefix_cache_hits"] + 1
    n_prompt = len(smollm.tokenize(prompt))
    assert second.usage.cached_tokens == (n_prompt - 1) // 32 * 32 > 0
    assert second.timings["prompt_n"] == n_prompt - second.usage.cached_tokens
    assert pages_back_to_zero(smollm)


def test_stream_break_mid_decode_frees_pages(smollm):
    pieces = []
    for piece in smollm.stream(_BASE[1], SamplingParams(max_tokens=400, ignore_eos=True, seed=1)):
        pieces.append(piece)
        if len(pieces) == 3:
            break
    assert pages_back_to_zero(smollm)
    assert smollm.stats()["waiting"] == 0


def _slow_prefill_llm(path):
    # 8-token batches: a long prompt takes many steps, so cancellation lands mid-prefill.
    return AsyncLLM(path, n_threads=N_THREADS, max_batch_tokens=8, prefix_cache=False)


def test_async_cancel_mid_prefill_and_mid_decode(smollm2_path):
    def open_fds():
        return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0

    async def main():
        llm = _slow_prefill_llm(str(smollm2_path))
        long_prompt = _BASE[9] * 3
        fds_before = open_fds()
        try:
            # mid-prefill: cancel while the prompt is still being computed
            async def consume():
                return await llm.generate(long_prompt, greedy(50))
            task = asyncio.create_task(consume())
            while llm.stats()["pages_used"] == 0:
                await asyncio.sleep(0.005)
            assert llm.stats()["generated_tokens_total"] == 0
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await asyncio.to_thread(pages_back_to_zero, llm.llm)
            assert llm.stats()["generated_tokens_total"] == 0

            # mid-decode: cancel a task iterating a stream after a few pieces
            got = []
            async def reader():
                async for piece in llm.stream("Hello", SamplingParams(max_tokens=300, ignore_eos=True, seed=3)):
                    got.append(piece)
            task = asyncio.create_task(reader())
            while len(got) < 3:
                await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await asyncio.to_thread(pages_back_to_zero, llm.llm)

            # breaking out of an async iterator
            n = 0
            agen = llm.stream_chunks("Hello", SamplingParams(max_tokens=300, ignore_eos=True, seed=4))
            async for chunk in agen:
                n += 1
                if n == 3:
                    break
            await agen.aclose()
            assert await asyncio.to_thread(pages_back_to_zero, llm.llm)

            # a normal async request still completes afterwards
            out = await llm.generate("The capital of France is", greedy(4))
            assert out.finish_reason == "length" and len(out.token_ids) == 4
            assert await asyncio.to_thread(pages_back_to_zero, llm.llm)
            # every request's wake-up pipe is closed once the engine sent its last event
            for _ in range(100):
                if open_fds() <= fds_before:
                    break
                await asyncio.sleep(0.01)
            assert open_fds() <= fds_before
        finally:
            llm.close()

    asyncio.run(main())


def test_seeded_sampling_same_alone_and_in_batch(smollm):
    params = SamplingParams(temperature=0.9, seed=1234, max_tokens=16, top_k=0, top_p=1.0, min_p=0.0)
    alone = smollm.generate(_BASE[1], params)
    again = smollm.generate(_BASE[1], params)
    batch = smollm.generate([_BASE[1]] + _BASE[2:10], params)
    assert again.token_ids == alone.token_ids
    assert batch[0].token_ids == alone.token_ids
    other_seed = smollm.generate(_BASE[1], SamplingParams(temperature=0.9, seed=99, max_tokens=16,
                                                          top_k=0, top_p=1.0, min_p=0.0))
    assert other_seed.token_ids != alone.token_ids


def test_each_sequence_of_a_step_draws_as_alone(smollm):
    """A step's plain rows are drawn in parallel (the engine's presample), rows with a grammar,
    siblings (n > 1) or logprobs stay in the ordered loop: in one batch that mixes them, each
    request draws exactly what it draws alone."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    reqs = [
        SamplingParams(temperature=0.8, seed=7, max_tokens=12),                  # default top-k/p chain
        SamplingParams(temperature=0.9, seed=8, max_tokens=12, top_k=0, top_p=1.0, min_p=0.0),
        SamplingParams(temperature=0.7, seed=9, max_tokens=12, json_schema=schema),
        SamplingParams(temperature=0.0, max_tokens=12, logprobs=3),
        SamplingParams(temperature=1.0, seed=10, max_tokens=12, repetition_penalty=1.3),
    ]
    prompts = _BASE[2:2 + len(reqs)]
    alone = [smollm.generate(p, r) for p, r in zip(prompts, reqs)]
    handles = [smollm.submit(p, r) for p, r in zip(prompts, reqs)]  # all running at once
    batch = [h.result(timeout=120) for h in handles]
    for a, b in zip(alone, batch):
        assert b.token_ids == a.token_ids
    assert [t.token_id for t in batch[3].logprobs[0].top_logprobs] == \
        [t.token_id for t in alone[3].logprobs[0].top_logprobs]


def test_batched_logprobs_equal_single_stream(smollm):
    params = SamplingParams(temperature=0.0, max_tokens=6, logprobs=5)
    alone = smollm.generate(_BASE[0], params)
    batch = smollm.generate([_BASE[0]] + _BASE[4:12], params)[0]
    assert batch.token_ids == alone.token_ids
    for a, b in zip(alone.logprobs, batch.logprobs):
        assert [t.token_id for t in a.top_logprobs] == [t.token_id for t in b.top_logprobs]
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
    # the chosen token's log-prob is the top one under greedy, and matches eval_logits (which
    # scores with an F32 KV cache: compare generation on an F32 serving cache). The first token's
    # logits come from the prompt's prefill in both, through the same kernels: equal to float
    # rounding. Later tokens are decode steps (one query per sequence: the row-wise attention
    # path) while eval_logits prefills them (the tiled attention path); the two round
    # differently, and with 8-bit activations a rounding difference becomes a different draw of
    # the quantization noise (~0.1 nat, the size of the whole error against the exact reference,
    # see tests/test_golden_isa.py), so there the bound is that noise level.
    with LLM(smollm.model_path, n_threads=N_THREADS, kv_type="f32") as f32:
        alone = f32.generate(_BASE[0], params)
        ids = f32.tokenize(_BASE[0])
        rows = f32.eval_logits(ids + alone.token_ids[:-1])
    for i, lp in enumerate(alone.logprobs):
        row = rows[len(ids) - 1 + i].astype(np.float64)
        ref = row - row.max() - np.log(np.exp(row - row.max()).sum())
        tok = alone.token_ids[i]
        if i == 0:
            assert int(np.argmax(row)) == tok
            assert lp.logprob == pytest.approx(ref[tok], abs=1e-4)
        else:  # greedy's choice is at the top of eval_logits' row too, up to that noise
            assert ref[tok] >= ref.max() - 0.25
            assert lp.logprob == pytest.approx(ref[tok], abs=0.25)
        assert lp.top_logprobs[0].token_id == tok


def test_stop_strings_across_token_boundaries_never_leak(smollm):
    prompt = _BASE[1]
    full = smollm.generate(prompt, greedy(40))
    pieces = [smollm.token_to_piece(t).decode("utf-8", "replace") for t in full.token_ids]
    # a stop string made of the end of one token and the start of the next
    k = next(i for i in range(3, len(pieces) - 1) if len(pieces[i]) >= 2 and len(pieces[i + 1]) >= 2)
    stop = pieces[k][-2:] + pieces[k + 1][:2]
    at = full.text.find(stop)
    assert at >= 0
    params = SamplingParams(temperature=0.0, max_tokens=40, stop=["never-appears-xyz", stop])
    out = smollm.generate(prompt, params)
    assert out.text == full.text[:at]
    assert out.finish_reason == "stop" and out.stop_reason == stop
    streamed = list(smollm.stream(prompt, params))
    assert "".join(streamed) == full.text[:at]
    assert all(stop not in p for p in streamed)
    chunks = list(smollm.stream_chunks(prompt, params))
    assert chunks[-1].finish_reason == "stop" and chunks[-1].stop_reason == stop
    # a stop token id ends generation with that id as the reason
    tid = full.token_ids[5]
    out = smollm.generate(prompt, SamplingParams(temperature=0.0, max_tokens=40, stop_token_ids=[tid]))
    assert out.stop_reason == tid and out.token_ids[-1] == tid
    assert pages_back_to_zero(smollm)


def test_many_threads_stream_at_once(smollm):
    prompts = _BASE[:8]
    want = [c.text for c in smollm.generate(prompts, greedy(12))]
    got = [None] * 8
    errors = []

    def run(i):
        try:
            got[i] = "".join(smollm.stream(prompts[i], greedy(12)))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert got == want
    assert pages_back_to_zero(smollm)


def test_n_completions_share_the_prompt(smollm):
    outs = smollm.generate(_BASE[13], SamplingParams(temperature=0.0, max_tokens=8, n=3))
    single = smollm.generate(_BASE[13], greedy(8))
    assert [o.index for o in outs] == [0, 1, 2]
    assert all(o.token_ids == single.token_ids for o in outs)
    sampled = smollm.generate(_BASE[0], SamplingParams(temperature=1.0, max_tokens=12, n=2, seed=5,
                                                       top_k=0, top_p=1.0, min_p=0.0))
    assert sampled[0].token_ids != sampled[1].token_ids
    assert pages_back_to_zero(smollm)


def test_context_length_error_names_the_numbers(smollm2_path):
    with LLM(str(smollm2_path), n_ctx=64, n_threads=N_THREADS) as llm:
        ids = llm.tokenize("hello " * 60)
        with pytest.raises(ContextLengthError, match=rf"prompt has {len(ids)} tokens, max_tokens 128: "
                                                     rf"{len(ids) + 128} > n_ctx 64 by {len(ids) + 64}"):
            llm.generate(ids)


def test_prompt_logprobs_and_chat(smollm):
    out = smollm.generate("The capital of France is", SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=2))
    ids = smollm.tokenize("The capital of France is")
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(ids)
    assert [p.token_id for p in out.prompt_logprobs[1:]] == ids[1:]
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = smollm.apply_chat_template(messages)
    assert text.endswith("<|im_start|>assistant\n") and "What is the capital of France?" in text
    ids = smollm.chat_prompt_ids(messages)
    assert ids == smollm.tokenize(text, add_special=True, parse_special=True)
    chat = smollm.chat(messages, SamplingParams(temperature=0, max_tokens=24))
    assert chat.text and chat.usage.prompt_tokens == len(ids)
    assert chat.token_ids == smollm.generate(ids, SamplingParams(temperature=0, max_tokens=24)).token_ids
    assert "".join(smollm.chat_stream(messages, SamplingParams(temperature=0, max_tokens=24))) == chat.text


def test_generate_cli_prints_paris_and_timings(smollm2_path):
    import os
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "edgellm", "generate", str(smollm2_path), "-p",
                        "The capital of France is", "-n", "16", "--temp", "0", "-t", str(N_THREADS)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(" Paris.")
    assert re.search(r"prompt: 5 tokens, [0-9.]+ t/s \| generated: 16 tokens, [0-9.]+ t/s", r.stderr)


def test_prefix_cache_on_sliding_window_model(gemma3_path):
    # Gemma 3's local layers see 512 tokens; a 700-token prompt has window pages trimmed while it
    # runs, yet a cached prefix keeps the window pages a later query needs, so reuse is exact.
    with LLM(str(gemma3_path), n_threads=N_THREADS) as llm:
        ids = llm.tokenize("The history of the city begins in ancient times. " * 70)
        assert len(ids) > 600
        first = llm.generate(ids, greedy(6))
        second = llm.generate(ids, greedy(6))
        assert second.token_ids == first.token_ids
        assert second.usage.cached_tokens == (len(ids) - 1) // 32 * 32
        assert llm.stats()["prefix_cache_hits"] == 1
        assert pages_back_to_zero(llm)
        # with a shared first half only, the match stops where the prompts diverge
        other = ids[:320] + llm.tokenize(" A different story follows here.", add_special=False) * 20
        third = llm.generate(other, greedy(6))
        assert third.usage.cached_tokens == 320
        fresh = LLM(str(gemma3_path), n_threads=N_THREADS, prefix_cache=False)
        try:
            assert fresh.generate(other, greedy(6)).token_ids == third.token_ids
        finally:
            fresh.close()


def test_chat_template_is_public(smollm):
    """LLM.chat_template: what /props and the REPL's /template show (the GGUF's own template here)."""
    from edgellm.chat_template import template_source
    from edgellm.repl.model_facts import template_text
    assert "<|im_start|>" in template_source(smollm.chat_template)
    assert "<|im_start|>" in template_text(smollm)
