"""Embeddings: `LLM.embed` / `LLM.embeddings` and their AsyncLLM twins.

    vecs = llm.embed(["a cat", "a dog"])                 # list of lists of floats, L2-normalised
    res = llm.embeddings("a cat", pooling="last")       # Embeddings: numpy arrays + token counts

Every input becomes one engine request flagged "embedding" (Engine.submit_embedding). All of a
call's inputs are submitted at once, so the engine prefills them together in its ordinary
batches (alongside any generation in flight); instead of sampling, it pools the final-norm
hidden states of each prompt (the rows the LM head would read) and ends the request with the
vector. Nothing here runs per token.

pooling: None = the model's (GGUF `<arch>.pooling_type`, else "mean"), or "mean", "cls" (the
first token), "last" (the last token), "none" (one vector per token), or llama.cpp's numbers
0..3. "rank" is a reranker's classification head (encoders with one: their scores; refused
elsewhere). normalize: True = euclidean (L2), False /
None = raw, or llama.cpp's embd_normalize integer (-1 none, 0 max-abs scaled to the int16
range, 1 taxicab, 2 euclidean, > 2 p-norm). With pooling "none" each token's vector is
normalised on its own.

Errors: an empty input list, an input with no tokens (an empty string on a model that adds no
BOS) -> InvalidRequestError; an input longer than the context -> ContextLengthError naming
which and by how much. Decoders never truncate. Encoders (BERT family, engine.causal False)
cut an input longer than their limit — the GGUF's <arch>.max_seq_length (sentence-transformers'
max_seq_length) or else the positions, n_ctx and max_batch_tokens — as sentence-transformers
does: the first limit - 1 tokens and the closing [SEP]; their text inputs have special-token
texts ("[SEP]") parsed as those tokens, as Hugging Face tokenizers do.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import List, Sequence, Union

import numpy as np

from . import _core
from ._core import ContextLengthError, InvalidRequestError
from ._engine_client import POLL_S, WakePipe, event_error

__all__ = ["Embeddings", "POOLING_TYPES", "pooling_code", "normalize_code"]

# llama.cpp's llama_pooling_type numbering (GGUF <arch>.pooling_type).
POOLING_TYPES = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
_POOLING_NAMES = {v: k for k, v in POOLING_TYPES.items()}

Input = Union[str, Sequence[int]]


@dataclass
class Embeddings:
    """One entry per input, in input order.

    data[i]: float32 numpy array, [n_embd] when pooled, [n_tokens, n_embd] with pooling "none".
    token_counts[i]: the tokens input i was (prompt_tokens for usage).
    """
    data: List[np.ndarray]
    token_counts: List[int]
    pooling: str
    normalize: int
    timings: List[dict] = field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        return sum(self.token_counts)

    def tolist(self) -> list:
        return [d.tolist() for d in self.data]


def pooling_code(pooling) -> int:
    """None -> -1 (the model's); a name or llama.cpp's number -> that number."""
    if pooling is None:
        return -1
    if isinstance(pooling, str):
        key = pooling.strip().lower()
        if key not in POOLING_TYPES:
            raise InvalidRequestError(f"pooling {pooling!r} is not one of none, mean, cls, last")
        code = POOLING_TYPES[key]
    elif isinstance(pooling, int) and not isinstance(pooling, bool):
        code = int(pooling)
        if code not in _POOLING_NAMES and code != -1:
            raise InvalidRequestError(f"pooling {pooling} is not a pooling type (0 none, 1 mean, "
                                      "2 cls, 3 last)")
    else:
        raise InvalidRequestError(f"pooling must be a name or an integer, got {pooling!r}")
    return code  # "rank" without a classification head: the engine refuses it


def normalize_code(normalize) -> int:
    """True -> 2 (euclidean), False/None -> -1, an int -> llama.cpp's embd_normalize."""
    if normalize is True:
        return 2
    if normalize is False or normalize is None:
        return -1
    if isinstance(normalize, int):
        if normalize < -1:
            raise InvalidRequestError(f"normalize {normalize} is not an embd_normalize value "
                                      "(-1 none, 0 max-abs, 1 taxicab, 2 euclidean, > 2 p-norm)")
        return int(normalize)
    raise InvalidRequestError(f"normalize must be a bool or an integer, got {normalize!r}")


def pooling_name(code: int) -> str:
    return _POOLING_NAMES.get(code, str(code))


def _inputs(texts) -> List[Input]:
    """A string, a token-id list, or a list of strings / token-id lists -> list of inputs."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, np.ndarray):
        texts = texts.tolist()
    if not isinstance(texts, (list, tuple)):
        raise InvalidRequestError(f"embedding input must be a string or a list, got "
                                  f"{type(texts).__name__}")
    if not texts:
        raise InvalidRequestError("embedding input is empty: give at least one text")
    if all(isinstance(t, int) and not isinstance(t, bool) for t in texts):
        return [list(texts)]  # one input given as token ids
    out: List[Input] = []
    for i, t in enumerate(texts):
        if isinstance(t, str):
            out.append(t)
        elif isinstance(t, (list, tuple, np.ndarray)) and \
                all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in t):
            out.append([int(x) for x in t])
        else:
            raise InvalidRequestError(f"embedding input {i} must be a string or a list of token "
                                      f"ids, got {type(t).__name__}")
    return out


def _prepare(llm, texts, normalize, pooling):
    """Token ids of every input, checked before anything is submitted."""
    pool = pooling_code(pooling)
    norm = normalize_code(normalize)
    client = llm.engine_client
    limit = encoder_limit(llm)
    # encoders read special-token texts in the input as those tokens ("[SEP]"), as Hugging Face
    # tokenizers (and so sentence-transformers) do
    ids = [list(client.tok.encode(t, True, True)) if limit is not None and isinstance(t, str)
           else client.prompt_ids(t) for t in _inputs(texts)]
    if limit is not None:
        ids = [truncate(x, limit, client.tok.eos_id) for x in ids]
    n_ctx = llm.n_ctx
    for i, x in enumerate(ids):
        if not x:
            raise InvalidRequestError(f"embedding input {i} has no tokens (an empty text on a "
                                      "model that adds no BOS token)")
        if len(x) > n_ctx:
            raise ContextLengthError(f"embedding input {i} is too large: {len(x)} tokens > n_ctx "
                                     f"{n_ctx} by {len(x) - n_ctx} (it is not truncated)")
    if pool == -1:
        pool = int(client.engine.default_pooling)
    return ids, pool, norm


def encoder_limit(llm):
    """The most tokens an encoder input keeps (None for decoders, which never truncate)."""
    engine = llm.engine_client.engine
    if engine.causal:
        return None
    limit = int(engine.encoder_input_limit)
    meta = llm.metadata
    msl = meta.get(f"{meta.get('general.architecture')}.max_seq_length")
    return min(limit, int(msl)) if isinstance(msl, int) and msl > 0 else limit


def truncate(ids: List[int], limit: int, sep: int) -> List[int]:
    """sentence-transformers' cut: the first limit tokens, the closing [SEP] kept in place."""
    if len(ids) <= limit:
        return ids
    if ids and ids[-1] == sep and limit >= 2:
        return ids[:limit - 1] + [sep]
    return ids[:limit]


def _result(events: list, pool: int, norm: int) -> Embeddings:
    data, counts, timings = [], [], []
    for ev in events:
        if ev.finish_reason == "error":
            raise event_error(ev.error, "embedding failed in the engine")
        m = ev.embedding
        if ev.finish_reason == "cancelled" or m is None:
            raise _core.RequestCancelled("the embedding request was cancelled")
        data.append(m if pool == POOLING_TYPES["none"] else m[0])
        counts.append(int(ev.prompt_tokens))
        timings.append(dict(ev.timings or {}))
    return Embeddings(data, counts, pooling_name(pool), norm, timings)


def embeddings_sync(llm, texts, normalize=True, pooling=None) -> Embeddings:
    ids, pool, norm = _prepare(llm, texts, normalize, pooling)
    engine = llm.engine_client.engine
    channels, rids, events = [], [], {}
    try:
        for x in ids:
            ch = _core.OutputChannel()
            rids.append(engine.submit_embedding(x, ch, pool, norm))
            channels.append(ch)
        for i, ch in enumerate(channels):
            while i not in events:
                ev = ch.pop(POLL_S)
                if ev is not None and ev.finished:
                    events[i] = ev
    finally:
        for i, rid in enumerate(rids):
            if i not in events:
                engine.abort(rid)
    return _result([events[i] for i in range(len(ids))], pool, norm)


async def embeddings_async(allm, texts, normalize=True, pooling=None) -> Embeddings:
    llm = allm.llm
    ids, pool, norm = _prepare(llm, texts, normalize, pooling)
    engine = llm.engine_client.engine
    pipe = WakePipe(asyncio.get_running_loop())
    rids, events = [], {}
    try:
        for x in ids:
            rids.append(engine.submit_embedding(x, pipe.channel(), pool, norm))
        pending = set(range(len(ids)))
        while pending:
            for i in list(pending):
                ev = pipe.channels[i].try_pop()
                while ev is not None and not ev.finished:
                    ev = pipe.channels[i].try_pop()
                if ev is not None:
                    events[i] = ev
                    pending.discard(i)
            if pending:
                await pipe.wait()
    finally:
        for i, rid in enumerate(rids):
            if i not in events:
                engine.abort(rid)
        pipe.close()
    return _result([events[i] for i in range(len(ids))], pool, norm)
