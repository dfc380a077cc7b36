"""Rerank endpoints (docs/SERVER.md "Rerank"): `POST /v1/rerank`, `/rerank` (and llama-server's
`/reranking`, `/v1/reranking` spellings), for a cross-encoder model (edgellm/rerank.py).

Jina's / llama-server's shape: `query` (a string), `documents` (strings, or objects whose
`text` is scored), `top_n` (default: all), `return_documents` (each result then carries
`document`: {"text": ...} for a string, the object as given otherwise), `model` accepted.
Answers {"model", "object": "list", "results": [{"index", "relevance_score"[, "document"]}],
"usage": {"prompt_tokens", "total_tokens"}} with exactly min(top_n, len(documents)) results,
best first; relevance_score is the raw score (no sigmoid). Text Embeddings Inference's shape
is taken too, as llama-server takes it: `texts` instead of `documents` answers the bare list
[{"index", "score"[, "text" with return_text]}]. A model that is not a reranker answers 400
(not_supported); every pair of a request is submitted at once, and a disconnect or the
--timeout aborts them all, as for embeddings.
"""
import logging
import time
from typing import Any, List, Optional

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from typing_extensions import Annotated

from .. import validation as V
from ..rerank import rerank_async
from .errors import APIError, invalid
from .lifecycle import ClientGone, engine_error, read_json
from .protocol import checked
from .routes import Routes
from .wire import Int, Wire, parse

log = logging.getLogger("edgellm.server")


def _documents(v, where):
    """Strings, or objects whose string `text` is scored (their other fields come back as given)."""
    if not isinstance(v, list):
        raise V.bad_type(where, v, "an array of strings or objects")
    for i, d in enumerate(v):
        if not (isinstance(d, str) or (isinstance(d, dict) and isinstance(d.get("text"), str))):
            raise V.fail(f"'{where}[{i}]' must be a string or an object with a string 'text', got "
                         f"{V.type_name(d)}", f"{where}[{i}]", "invalid_type")
    return v


_DOCUMENTS = {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "object", "properties": {
    "text": {"type": "string"}}, "required": ["text"]}]}}


class RerankBody(Wire):
    """POST /v1/rerank, /rerank, /reranking, /v1/reranking."""
    query: str
    documents: checked(_documents, _DOCUMENTS) = None
    texts: Optional[List[str]] = None  # Text Embeddings Inference's name (bare-list answer)
    top_n: Annotated[Optional[Int], Field(ge=1)] = None
    return_documents: bool = False
    return_text: bool = False  # TEI
    model: Optional[str] = None


class RerankRoutes:
    def __init__(self, routes: Routes):
        self.life = routes.life
        self.host = routes.host
        self.config = routes.config
        self.metrics = routes.metrics

    async def rerank(self, request: Request) -> Response:
        endpoint = "rerank"
        t0 = time.monotonic()
        try:
            llm = self.host.require_ready()
            inner = getattr(llm, "llm", llm)
            if not hasattr(llm, "rerank") or inner.engine_client.engine.rank_outputs <= 0:
                raise APIError(400, "this model is not a reranker (it has no classification head): serve a "
                               "cross-encoder to rerank", "invalid_request_error", None, "not_supported")
            body = parse(RerankBody, await read_json(request))
            tei = body.texts is not None
            docs: List[Any] = body.texts if tei else body.documents
            if docs is None:
                raise invalid("'documents' must be provided", "documents", "missing_field")
            if not docs:
                raise invalid("'documents' must be a non-empty array", "texts" if tei else "documents",
                              "invalid_value")
            texts = [d if isinstance(d, str) else d["text"] for d in docs]
            admission = self.host.admit(len(texts))
        except Exception as e:  # noqa: BLE001 - APIError, validation and the like
            return self.life.fail(endpoint, engine_error(e, "documents"))

        try:
            results, n_tokens = await self.life.race(
                rerank_async(llm, body.query, texts, body.top_n), request, self.life.deadline(t0))
        except ClientGone:
            return self.life.gone(endpoint, "while its documents were scored")
        except Exception as e:  # noqa: BLE001
            return self.life.fail(endpoint, engine_error(e, "documents"))
        finally:
            admission.release()

        self.metrics.tokens(prompt=n_tokens)
        self.metrics.request_done(endpoint, 200)
        if tei:
            return JSONResponse([{"index": r.index, "score": r.relevance_score,
                                  **({"text": texts[r.index]} if body.return_text else {})} for r in results])
        out = []
        for r in results:
            item = {"index": r.index, "relevance_score": r.relevance_score}
            if body.return_documents:
                d = docs[r.index]
                item["document"] = {"text": d} if isinstance(d, str) else d
            out.append(item)
        return JSONResponse({"model": body.model or self.config.model_id, "object": "list", "results": out,
                             "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})
