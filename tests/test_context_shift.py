"""Context shift (issue 19 item 5; llama.cpp's --context-shift) on the real models: with
LLM(context_shift=True) a generation that fills n_ctx keeps its first n_keep tokens and the newer
half of the rest and goes on, and what it generates after each shift is exactly what a fresh
greedy request with the kept tokens as its prompt generates (the kept tokens are re-prefilled
at positions 0.., not rotated). Without the opt-in nothing changes."""
import pytest

from edgellm import LLM, ContextLengthError, SamplingParams

pytestmark = pytest.mark.real_model

N_CTX = 128
PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def _params(max_tokens, n_keep=0, n_discard=0):
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, n_keep=n_keep,
                          n_discard=n_discard)


def _kept_segments(llm, prompt_ids, out, n_keep, n_discard=0):
    """llama-server's rule on the token list: (kept tokens, first output index after them, how
    many tokens until the next shift) for every shift within `out`."""
    bos = llm.tokenizer.bos_id
    keep = len(prompt_ids) if n_keep < 0 else n_keep
    if n_keep >= 0 and bos is not None and prompt_ids[0] == bos and llm.tokenize("a")[0] == bos:
        keep += 1
    keep = max(0, min(keep, N_CTX - 4))
    tokens = list(prompt_ids)
    segments = []
    for i, t in enumerate(out):
        tokens.append(t)
        if len(tokens) >= N_CTX and i + 1 < len(out):
            n_left = len(tokens) - 1 - keep
            drop = min(n_discard, n_left) if n_discard > 0 else n_left // 2
            tokens = tokens[:keep] + tokens[keep + drop:]
            segments.append((list(tokens), i + 1, N_CTX - len(tokens)))
    return segments


@pytest.fixture(scope="module")
def shifting(smollm2_path):
    with LLM(smollm2_path, n_ctx=N_CTX, n_threads=2, max_seqs=2, context_shift=True,
             speculative="off") as llm:
        yield llm


@pytest.fixture(scope="module")
def plain(smollm2_path):
    """No context shift and no prefix cache: fresh generations that share nothing with the
    shifted ones (a wrong re-prefill cannot be reused from the prefix cache)."""
    with LLM(smollm2_path, n_ctx=N_CTX, n_threads=2, max_seqs=1, prefix_cache=False,
             speculative="off") as llm:
        yield llm


@pytest.mark.parametrize("n_keep, n_discard", [(-1, 0), (6, 0), (6, 40)])
def test_keeps_generating_and_is_exact(shifting, plain, n_keep, n_discard):
    llm = shifting
    ids = llm.tokenize(PROMPT)
    before = llm.stats()["context_shifts"]
    c = llm.generate(ids, _params(300, n_keep, n_discard))
    assert c.finish_reason == "length"
    assert len(c.token_ids) == 300 and c.usage.completion_tokens == 300
    assert c.usage.prompt_tokens == len(ids)
    segments = _kept_segments(llm, ids, c.token_ids, n_keep, n_discard)
    assert len(segments) >= 3
    assert c.timings["context_shifts"] == len(segments)
    assert llm.stats()["context_shifts"] - before == len(segments)
    # After each shift the output is a fresh greedy generation from the kept tokens.
    for kept, start, room in segments:
        want = c.token_ids[start:start + room]
        fresh = plain.generate(kept, _params(len(want)))
        assert fresh.token_ids == want, f"after the shift at output token {start}"
    assert c.text.startswith(llm.detokenize(c.token_ids[:20]))
    st = llm.stats()
    assert st["pages_used"] == 0 and st["running"] == 0


def test_streamed_text_is_seamless(shifting):
    llm = shifting
    ids = llm.tokenize(PROMPT)
    whole = llm.generate(ids, _params(200, -1))
    pieces = list(llm.stream(ids, _params(200, -1)))
    assert "".join(pieces) == whole.text
    assert whole.timings["context_shifts"] >= 1


def test_prompt_must_still_fit(shifting):
    with pytest.raises(ContextLengthError):
        shifting.generate(list(shifting.tokenize("word " * 200))[:N_CTX], _params(10))


def test_off_is_unchanged(plain):
    llm = plain
    assert llm.context_shift is False
    ids = llm.tokenize(PROMPT)
    with pytest.raises(ContextLengthError):
        llm.generate(ids, _params(300))
    c = llm.generate(ids, _params(None))
    assert c.finish_reason == "length"
    assert len(ids) + len(c.token_ids) == N_CTX
    assert "context_shifts" not in c.timings
    assert llm.stats()["context_shifts"] == 0


def test_speculative_drafts_change_nothing(smollm2_path, shifting):
    # N-gram drafts stop at the context's end and are dropped on a shift: the same tokens.
    ids = shifting.tokenize(PROMPT)
    want = shifting.generate(ids, _params(300, 6)).token_ids
    with LLM(smollm2_path, n_ctx=N_CTX, n_threads=2, max_seqs=1, context_shift=True,
             speculative="ngram", spec_adaptive=False) as llm:
        c = llm.generate(ids, _params(300, 6))
        assert c.token_ids == want
        st = llm.stats()
        assert st["spec_drafted"] > 0 and st["context_shifts"] >= 3


def test_grammar_follows_the_text_across_shifts(shifting):
    # The constraint's state follows the generated text, not the KV: still obeyed after shifts.
    import re
    c = shifting.generate(shifting.tokenize(PROMPT),
                          SamplingParams(temperature=0.0, max_tokens=250, regex="[a-z ,.]+",
                                         n_keep=-1))
    assert len(c.token_ids) == 250 and c.timings["context_shifts"] >= 2
    assert re.fullmatch("[a-z ,.]+", c.text), c.text
