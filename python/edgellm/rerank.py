"""Rerank: `LLM.rerank(query, documents)` and `AsyncLLM.rerank`, for cross-encoders (a BERT or
XLM-R with a classification head: GGUF cls.output.*, pooling_type 4 "rank") and for decoder
rerankers that score a yes/no answer token (Qwen3-Reranker as llama.cpp converts it: cls.output
holds the LM head's "yes" and "no" rows, tokenizer.chat_template.rerank the prompt with {query}
and {document}; the score is P(yes), the softmax of the two logits at the last position).

    for r in llm.rerank("what is a panda", ["hi", "a panda is a bear"], top_n=1):
        print(r.index, r.relevance_score)

Each document is paired with the query as transformers encodes a sentence pair —
[CLS] query [SEP] document [SEP], token type 1 from the document on (the engine's encoder sets
the types after the first [SEP]: model/encoder.h); XLM-R's <s> query </s></s> document </s>
(one token type) — cut to the model's input limit by
transformers' "longest_first" rule (a token off the end of the longer text at a time). All
pairs are submitted at once (the engine batches them as embedding requests with pooling
"rank"); each score is the classification head's raw first output (no sigmoid), as
transformers' logits[:, 0]. Results: exactly min(top_n, len(documents)) of them, best first
(ties in document order).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

from ._core import InvalidRequestError

__all__ = ["RerankResult", "rerank_pairs", "rank_results"]


@dataclass(frozen=True)
class RerankResult:
    index: int  # the document's position in the request
    relevance_score: float  # the raw score
    document: Optional[str] = None


def _check(llm, query, documents) -> List[str]:
    engine = llm.engine_client.engine
    if engine.rank_outputs <= 0:
        raise InvalidRequestError("this model is not a reranker (it has no classification head; "
                                  "rerank needs a cross-encoder such as a BertForSequenceClassification)")
    if not isinstance(query, str):
        raise InvalidRequestError(f"query must be a string, got {type(query).__name__}")
    if isinstance(documents, str) or not isinstance(documents, (list, tuple)):
        raise InvalidRequestError("documents must be a list of strings")
    if not documents:
        raise InvalidRequestError("documents is empty: give at least one")
    for i, d in enumerate(documents):
        if not isinstance(d, str):
            raise InvalidRequestError(f"documents[{i}] must be a string, got {type(d).__name__}")
    return list(documents)


def rerank_pairs(llm, query: str, documents: Sequence[str]) -> List[List[int]]:
    """The token ids of each (query, document) pair, as transformers encodes and truncates them."""
    from .embeddings import encoder_limit

    docs = _check(llm, query, documents)
    tok = llm.engine_client.tok
    template = llm.metadata.get("tokenizer.chat_template.rerank")
    if isinstance(template, str):  # a decoder reranker: its template, filled as llama-server fills it
        return [list(tok.encode(template.replace("{query}", query).replace("{document}", d), False, True))
                for d in docs]
    limit = encoder_limit(llm)
    cls, sep = tok.bos_id, tok.eos_id
    # XLM-R (a Unigram "t5" vocabulary) separates the pair with two: <s> q </s></s> d </s>
    mid = [sep, sep] if tok.model == "t5" else [sep]
    q = list(tok.encode(query, False, True))  # special-token texts parsed, as transformers does
    out = []
    for d in docs:
        a, b = list(q), list(tok.encode(d, False, True))
        while len(a) + len(b) + 2 + len(mid) > limit and (a or b):
            (a if len(a) > len(b) else b).pop()
        out.append([cls] + a + mid + b + [sep])
    return out


def rank_results(scores: Sequence[float], documents: Sequence[str], top_n: Optional[int],
                 return_documents: bool) -> List[RerankResult]:
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
        raise InvalidRequestError(f"top_n must be a positive integer, got {top_n!r}")
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if top_n is not None:
        order = order[:top_n]
    return [RerankResult(i, float(scores[i]), documents[i] if return_documents else None) for i in order]


def rerank_sync(llm, query, documents, top_n=None, return_documents=False) -> List[RerankResult]:
    from .embeddings import embeddings_sync

    pairs = rerank_pairs(llm, query, documents)
    res = embeddings_sync(llm, pairs, normalize=False, pooling="rank")
    return rank_results([float(v[0]) for v in res.data], list(documents), top_n, return_documents)


async def rerank_async(allm, query, documents, top_n=None, return_documents=False):
    """rerank_sync on AsyncLLM; also returns the pairs' token count (usage)."""
    from .embeddings import embeddings_async

    pairs = rerank_pairs(allm.llm, query, documents)
    res = await embeddings_async(allm, pairs, normalize=False, pooling="rank")
    return rank_results([float(v[0]) for v in res.data], list(documents), top_n, return_documents), \
        res.prompt_tokens
