"""Perplexity with llama.cpp's method (tools/perplexity):

- the whole text is tokenized once, with BOS when the model adds it;
- it is cut into floor(n_tokens / n_ctx) chunks of n_ctx tokens (the tail is dropped);
- each chunk is evaluated in a fresh context, its first token replaced by BOS when the model
  adds BOS;
- only the second half is scored: for positions j = n_ctx/2 .. n_ctx-2 the negative log
  probability of token j+1 under the logits at j (n_ctx/2 - 1 tokens per chunk);
- the running estimate after chunk i is exp(mean NLL so far); the final error is
  PPL · sqrt(var(NLL) / (N - 1)) with var = mean(NLL²) - mean(NLL)², as llama.cpp prints it.

The log-softmax runs in numpy over row blocks (no Python loop over the vocabulary).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

import numpy as np


@dataclass
class PerplexityResult:
    n_ctx: int
    n_tokens: int  # tokens of the whole text
    n_chunks: int
    n_scored: int
    ppl: float
    ppl_err: float
    nll_mean: float
    running: List[float] = field(default_factory=list)  # estimate after each chunk


def chunk_tokens(ids: Sequence[int], n_ctx: int, bos_id: Optional[int]) -> List[List[int]]:
    """The chunks llama.cpp evaluates: consecutive n_ctx-token slices, first token -> BOS."""
    if n_ctx < 4:
        raise ValueError(f"context size {n_ctx} is too small for perplexity (need >= 4)")
    n_chunks = len(ids) // n_ctx
    chunks = []
    for i in range(n_chunks):
        c = [int(t) for t in ids[i * n_ctx:(i + 1) * n_ctx]]
        if bos_id is not None:
            c[0] = int(bos_id)
        chunks.append(c)
    return chunks


def target_nll(logits: np.ndarray, targets: np.ndarray, block: int = 32) -> np.ndarray:
    """-log softmax(logits[i])[targets[i]] for every row, float64; rows in blocks of `block`
    so a large vocabulary never needs a float64 copy of the whole matrix."""
    logits = np.asarray(logits)
    out = np.empty(len(targets), dtype=np.float64)
    for s in range(0, len(targets), block):
        x = logits[s:s + block].astype(np.float64)
        m = x.max(axis=1, keepdims=True)
        lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
        out[s:s + block] = lse - x[np.arange(len(x)), targets[s:s + block]]
    return out


def score_chunk(logits_second_half: np.ndarray, chunk: Sequence[int]) -> np.ndarray:
    """NLLs of one chunk from the logits at positions first .. n_ctx-1 (first = n_ctx // 2)."""
    n_ctx = len(chunk)
    first = n_ctx // 2
    targets = np.asarray(chunk[first + 1:], dtype=np.int64)
    return target_nll(logits_second_half[:n_ctx - 1 - first], targets)


def summarize(nll: np.ndarray, n_ctx: int, n_tokens: int, n_chunks: int, running: List[float]) -> PerplexityResult:
    n = len(nll)
    mean = float(nll.mean())
    var = float((nll * nll).mean()) - mean * mean
    ppl = math.exp(mean)
    err = ppl * math.sqrt(var / (n - 1)) if n > 1 and var > 0 else 0.0
    return PerplexityResult(n_ctx=n_ctx, n_tokens=n_tokens, n_chunks=n_chunks, n_scored=n, ppl=ppl, ppl_err=err,
                            nll_mean=mean, running=running)


def perplexity(path: str, text: str, n_ctx: int = 512, n_batch: int = 512, n_threads: int = 0,
               on_chunk: Optional[Callable[[int, float], None]] = None,
               on_start: Optional[Callable[[int], None]] = None) -> PerplexityResult:
    """Perplexity of `text` under the model at `path`; on_start(n_chunks) once the text is
    tokenized, on_chunk(i, running_ppl) after each chunk."""
    from edgellm import _core

    tok = _core.Tokenizer.from_gguf(str(path))
    add_bos = bool(tok.add_bos) and tok.bos_id is not None
    ids = list(tok.encode(text, True, False))
    chunks = chunk_tokens(ids, n_ctx, tok.bos_id if add_bos else None)
    if not chunks:
        raise ValueError(f"the text has {len(ids)} tokens; perplexity needs at least n_ctx = {n_ctx} "
                         f"(use a longer text or a smaller -c)")
    if on_start is not None:
        on_start(len(chunks))
    # n_ctx also picks LongRoPE's factors (phi3) as llama-perplexity's context does.
    model = _core.Model(str(path), n_threads=n_threads, max_batch_tokens=max(1, min(n_batch, n_ctx)), n_ctx=n_ctx)
    # Scoring runs at full KV precision, as LLM.eval_logits does (the serving default is F16).
    runner = _core.ModelRunner(model, n_ctx=n_ctx, kv_type="F32")
    first = n_ctx // 2
    nlls: List[np.ndarray] = []
    running: List[float] = []
    for i, chunk in enumerate(chunks):
        runner.reset()
        # Only the scored half needs logits: the first half is evaluated for its KV alone.
        runner.eval(chunk[:first], all_logits=False)
        logits = runner.eval(chunk[first:], all_logits=True)
        nlls.append(score_chunk(logits, chunk))
        running.append(math.exp(float(np.concatenate(nlls).mean())))
        if on_chunk is not None:
            on_chunk(i, running[-1])
    return summarize(np.concatenate(nlls), n_ctx, len(ids), len(chunks), running)
