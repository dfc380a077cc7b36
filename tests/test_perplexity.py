"""`edgellm perplexity`: llama.cpp's method (BOS-replaced chunks in fresh contexts, second half
scored, running estimate, error from the NLL variance), checked against an independent numpy
computation over LLM.eval_logits."""
import math
import re

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("edgellm._core")

from edgellm import LLM  # noqa: E402
from edgellm.bench.perplexity import chunk_tokens, perplexity, summarize, target_nll  # noqa: E402
from edgellm.cli import main  # noqa: E402
from tiny_vocab_model import TEXT, write_tiny_vocab_model  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_vocab_model(tmp_path_factory.mktemp("ppl") / "tiny.gguf"))


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("ppl_text") / "text.txt"
    p.write_text(TEXT * 3, encoding="utf-8")
    return str(p)


def reference_ppl(path, text, n_ctx):
    """Straight from the definition, one token at a time over eval_logits of each chunk."""
    llm = LLM(path, n_ctx=n_ctx)
    try:
        ids = llm.tokenize(text)
        bos = llm.tokenizer.bos_id
        nll = []
        running = []
        for c in range(len(ids) // n_ctx):
            chunk = ids[c * n_ctx:(c + 1) * n_ctx]
            chunk[0] = bos
            logits = np.asarray(llm.eval_logits(chunk), dtype=np.float64)
            for j in range(n_ctx // 2, n_ctx - 1):
                row = logits[j]
                lse = math.log(sum(math.exp(v - row.max()) for v in row)) + row.max()
                nll.append(lse - row[chunk[j + 1]])
            running.append(math.exp(sum(nll) / len(nll)))
    finally:
        llm.close()
    nll = np.array(nll)
    mean = nll.mean()
    err = math.exp(mean) * math.sqrt(((nll ** 2).mean() - mean ** 2) / (len(nll) - 1))
    return math.exp(mean), err, running, len(ids)


@pytest.mark.parametrize("n_ctx", [64, 100])
def test_perplexity_equals_numpy_scoring_of_eval_logits(tiny, n_ctx):
    ref_ppl, ref_err, ref_running, n_ids = reference_ppl(tiny, TEXT * 3, n_ctx)
    r = perplexity(tiny, TEXT * 3, n_ctx=n_ctx, n_batch=32, n_threads=1)
    assert r.n_tokens == n_ids and r.n_chunks == n_ids // n_ctx >= 3
    assert r.n_scored == r.n_chunks * (n_ctx - 1 - n_ctx // 2)
    assert r.ppl == pytest.approx(ref_ppl, rel=1e-4)
    assert r.ppl_err == pytest.approx(ref_err, rel=1e-3)
    assert r.running == pytest.approx(ref_running, rel=1e-4)
    assert r.ppl > 1.0 and r.ppl_err > 0


def test_chunks_replace_first_token_by_bos_and_drop_the_tail():
    ids = list(range(10, 33))  # 23 tokens
    assert chunk_tokens(ids, 8, 1) == [[1] + list(range(11, 18)), [1] + list(range(19, 26))]
    assert chunk_tokens(ids, 8, None)[1] == list(range(18, 26))
    assert chunk_tokens(ids, 24, 1) == []
    with pytest.raises(ValueError, match="too small"):
        chunk_tokens(ids, 2, None)


def test_target_nll_blocks_equal_direct_log_softmax():
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((70, 500)) * 4).astype(np.float32)
    targets = rng.integers(0, 500, 70)
    got = target_nll(logits, targets, block=16)
    x = logits.astype(np.float64)
    want = -(x - np.log(np.exp(x).sum(axis=1, keepdims=True)))[np.arange(70), targets]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_error_is_llama_cpp_formula():
    nll = np.array([1.0, 2.0, 3.0, 4.0])
    r = summarize(nll, 8, 16, 2, [])
    assert r.ppl == pytest.approx(math.exp(2.5))
    # var = E[x²] - E[x]² = 7.5 - 6.25; err = ppl * sqrt(var / (N - 1))
    assert r.ppl_err == pytest.approx(math.exp(2.5) * math.sqrt(1.25 / 3))


def test_cli_prints_running_estimate_and_final_line(tiny, text_file):
    r = CliRunner().invoke(main, ["perplexity", tiny, "-f", text_file, "-c", "64", "-b", "16", "-t", "1"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    running = re.findall(r"\[(\d+)\]([0-9.]+)", lines[0])
    want = perplexity(tiny, open(text_file).read(), n_ctx=64, n_batch=16, n_threads=1)
    assert [int(i) for i, _ in running] == list(range(1, want.n_chunks + 1))
    assert [float(v) for _, v in running] == pytest.approx(want.running, abs=1e-4)
    m = re.fullmatch(r"PPL = ([0-9.]+) ± ([0-9.]+)", lines[-1])
    assert m and float(m[1]) == pytest.approx(want.ppl, abs=1e-4)


def test_cli_text_shorter_than_a_chunk_is_an_error(tiny, tmp_path):
    p = tmp_path / "short.txt"
    p.write_text("the end", encoding="utf-8")
    r = CliRunner().invoke(main, ["perplexity", tiny, "-f", str(p), "-c", "64"])
    assert r.exit_code == 1 and "needs at least n_ctx = 64" in r.output


@pytest.mark.real_model
def test_smollm2_two_chunks_match_eval_logits(smollm2_path):
    text = open(__file__.rsplit("/", 2)[0] + "/bench/data/declaration.txt", encoding="utf-8").read()[:2500]
    r = perplexity(str(smollm2_path), text, n_ctx=128, n_threads=2)
    llm = LLM(str(smollm2_path), n_ctx=128)
    try:
        ids = llm.tokenize(text)
        nll = []
        for c in range(len(ids) // 128):
            chunk = ids[c * 128:(c + 1) * 128]  # SmolLM2 adds no BOS: chunks are used as they are
            logits = llm.eval_logits(chunk)
            nll.append(target_nll(logits[64:127], np.array(chunk[65:])))
    finally:
        llm.close()
    want = math.exp(np.concatenate(nll).mean())
    assert r.ppl == pytest.approx(want, rel=2e-3)
    assert 2.0 < r.ppl < 200.0
