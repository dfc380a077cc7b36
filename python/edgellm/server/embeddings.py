"""Embedding endpoints (docs/SERVER.md "Embeddings"): OpenAI's `POST /v1/embeddings` (`input`,
`encoding_format` "float" | "base64": little-endian float32, as OpenAI's SDKs decode;
`dimensions` only the model's width; pooling "none" refused: it is not OpenAI-shaped) and
llama-server's `POST /embedding` and `/embeddings` (`content` or `input`, `embd_normalize`;
[{"index", "embedding": [[...], ...]}]: one row when pooled, one per token, unnormalised, with
`--pooling none`).

Inputs take llama-server's prompt shapes (llamacpp_api.split_prompts), text tokenized with
special tokens added and parsed, as llama-server does. Every input of a request is submitted at
once (AsyncLLM.embeddings), so the engine batches them together and with whatever else is
running; a disconnect or the --timeout aborts them all.
"""
import base64
import time
from typing import Literal, Optional

import numpy as np
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from typing_extensions import Annotated

from .errors import APIError, invalid
from .lifecycle import check_token_ids, engine_error, off_loop, read_json
from .llamacpp_api import split_prompts, tokenize_pieces
from .protocol import checked
from .routes import Routes
from .wire import Wire, parse

_INPUT = {"anyOf": [{"type": "string"}, {"type": "array"}, {"type": "object"}]}


class EmbeddingsBody(Wire):
    """POST /v1/embeddings, /embeddings, /embedding."""
    input: checked(lambda v, _: split_prompts(v, "input", None), _INPUT) = None
    content: checked(lambda v, _: split_prompts(v, "content", None), _INPUT) = None  # native
    model: Optional[str] = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[int] = None    # only the model's own width
    user: Optional[str] = None
    # -1 none, 0 max absolute, 1 taxicab, 2 euclidean, > 2 p-norm
    embd_normalize: Annotated[Optional[int], Field(ge=-1, le=(1 << 31) - 1)] = None


class EmbeddingRoutes:
    def __init__(self, routes: Routes):
        self.life, self.host, self.config, self.metrics = \
            routes.life, routes.host, routes.config, routes.metrics

    async def v1_embeddings(self, request: Request) -> Response:
        return await self._handle(request, oai=True)

    async def native(self, request: Request) -> Response:
        return await self._handle(request, oai=False)

    async def _handle(self, request: Request, oai: bool) -> Response:
        endpoint, t0 = "embeddings", time.monotonic()
        try:
            llm = self.host.require_ready()
            inner = getattr(llm, "llm", llm)
            if not hasattr(llm, "embeddings"):
                raise APIError(501, "this engine does not compute embeddings", "not_supported_error",
                               None, "not_supported")
            body = parse(EmbeddingsBody, await read_json(request))
            if body.input is not None:
                param, raw = "input", body.input
            elif body.content is not None:
                param, raw, oai = "content", body.content, False  # llama-server: content = native
            else:
                raise invalid("'input' or 'content' must be provided", "input", "missing_field")
            pooling = getattr(self.config, "pooling", None) or getattr(inner, "default_pooling",
                                                                       "mean")
            if oai and pooling == "none":
                raise invalid("pooling 'none' gives one vector per token, which is not "
                              "OpenAI-shaped: use POST /embeddings, or serve with another "
                              "--pooling", "input", "unsupported")
            width = getattr(inner, "n_embd", None)
            if body.dimensions is not None and body.dimensions != width:
                raise invalid(f"'dimensions' {body.dimensions} is not supported: this model's "
                              f"embeddings have {width} dimensions and are not shortened",
                              "dimensions", "unsupported")
            # llama-server: per-token vectors (pooling none) come unnormalised
            normalize = -1 if pooling == "none" else getattr(self.config, "embd_normalize", 2) \
                if body.embd_normalize is None else body.embd_normalize
            # tokenized in a thread: a big input must not stall the event loop
            prompts = await off_loop(lambda: [tokenize_pieces(llm, p) for p in raw])
            for i, ids in enumerate(prompts):
                if not ids:
                    raise invalid(f"'{param}' entry {i} has no tokens: input content cannot be "
                                  "empty (this model adds no BOS token)", param, "invalid_value")
            check_token_ids(prompts, self.host.n_vocab, param)
            admission = self.host.admit(len(prompts))
        except Exception as e:  # noqa: BLE001 - APIError, tokenizer failures and the like
            return self.life.fail(endpoint, engine_error(e, "input"))

        result, ended = await self.life.embed(endpoint, param, llm, prompts, admission, request, t0,
                                              normalize=normalize, pooling=pooling)
        if ended is not None:
            return ended
        self.metrics.tokens(prompt=result.prompt_tokens)
        self.metrics.request_done(endpoint, 200)
        if not oai:
            return JSONResponse([{"index": i, "embedding": np.atleast_2d(v).tolist()}
                                 for i, v in enumerate(result.data)])
        data = [{"object": "embedding", "index": i, "embedding": base64.b64encode(
            np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
            if body.encoding_format == "base64" else v.tolist()} for i, v in enumerate(result.data)]
        n = result.prompt_tokens
        return JSONResponse({"object": "list", "data": data, "model": self.config.model_id,
                             "usage": {"prompt_tokens": n, "total_tokens": n}})
