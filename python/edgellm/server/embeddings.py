"""Embedding endpoints (docs/SERVER.md "Embeddings"):

- `POST /v1/embeddings` — OpenAI's: `input` (a string, strings, token ids, token-id lists),
  `encoding_format` "float" | "base64" (little-endian float32, as OpenAI's SDKs decode),
  `model` / `user` accepted, `dimensions` only if it equals the model's width. Answers
  {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
  "usage": {"prompt_tokens", "total_tokens"}}. Pooling "none" is refused (not OpenAI-shaped).
- `POST /embedding` and `POST /embeddings` — llama-server's native ones: `content` or `input`,
  `embd_normalize`; answers [{"index", "embedding": [[...], ...]}] — one row when pooled, one
  per token (unnormalised) with `--pooling none`.

Inputs take llama-server's shapes: besides OpenAI's, a prompt may mix strings and token ids
([12, "text", 34]), or be {"prompt_string": ...} or {"content": [{"type": "text", "text"}]}.
Text is tokenized with special tokens added and parsed, as llama-server does. Every input of a
request is submitted at once (AsyncLLM.embeddings), so the engine batches them together and
with whatever else is running; a disconnect or the --timeout aborts them all.
"""
import base64
import logging
import time
from typing import Any, List, Literal, Optional

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from pydantic import Field, WithJsonSchema
from typing_extensions import Annotated

from .errors import APIError, invalid
from .lifecycle import ClientGone, check_token_ids, engine_error, off_loop, read_json
from .routes import Routes
from .wire import Wire, parse

log = logging.getLogger("edgellm.server")

_INPUT = {"anyOf": [{"type": "string"}, {"type": "array"}, {"type": "object"}]}


class EmbeddingsBody(Wire):
    """POST /v1/embeddings, /embeddings, /embedding."""
    input: Annotated[Any, WithJsonSchema(_INPUT)] = None
    content: Annotated[Any, WithJsonSchema(_INPUT)] = None  # llama-server's name: native answer
    model: Optional[str] = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[int] = None    # only the model's own width
    user: Optional[str] = None
    # -1 none, 0 max absolute, 1 taxicab, 2 euclidean, > 2 p-norm
    embd_normalize: Annotated[Optional[int], Field(ge=-1)] = None


def _type(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object", type(None): "null"}.get(type(v), type(v).__name__)


def _is_id(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class _Tokenizer:
    """llama-server's prompt shapes -> token ids (tokenize_mixed semantics: only a leading
    string gets the special tokens added)."""

    def __init__(self, llm, param: str):
        self.llm = llm
        self.param = param

    def text(self, s: str, add_special: bool = True) -> List[int]:
        return [int(t) for t in self.llm.tokenize(s, add_special=add_special, parse_special=True)]

    def mixed(self, parts: list, where: str) -> List[int]:
        ids: List[int] = []
        for k, p in enumerate(parts):
            if isinstance(p, str):
                ids += self.text(p, add_special=(k == 0))
            elif _is_id(p):
                if p < 0:
                    raise invalid(f"'{where}[{k}]': token id {p} is negative", self.param,
                                  "invalid_value")
                ids.append(p)
            else:
                raise invalid(f"'{where}[{k}]' must be a string or a token id, got {_type(p)}",
                              self.param, "invalid_type")
        return ids

    def content_parts(self, parts: Any, where: str) -> List[int]:
        if not isinstance(parts, list):
            raise invalid(f"'{where}.content' must be an array of {{\"type\": \"text\"}} parts, "
                          f"got {_type(parts)}", self.param, "invalid_type")
        text = ""
        for k, part in enumerate(parts):
            if not isinstance(part, dict):
                raise invalid(f"'{where}.content[{k}]' must be an object, got {_type(part)}",
                              self.param, "invalid_type")
            kind = part.get("type")
            if kind != "text":
                raise invalid(f"'{where}.content[{k}]' has type {kind!r}: only text parts are "
                              "supported (this model takes no images, audio or video)",
                              self.param, "invalid_value")
            if not isinstance(part.get("text"), str):
                raise invalid(f"'{where}.content[{k}].text' must be a string", self.param,
                              "invalid_type")
            text += part["text"]
        return self.text(text)

    def entry(self, p: Any, where: str) -> List[int]:
        if isinstance(p, str):
            return self.text(p)
        if isinstance(p, list):
            return self.mixed(p, where)
        if isinstance(p, dict):
            if "content" in p:
                return self.content_parts(p["content"], where)
            if "prompt_string" in p:
                inner = p["prompt_string"]
                if "multimodal_data" in p:
                    raise invalid(f"'{where}.multimodal_data': this model takes no images or "
                                  "audio", self.param, "invalid_value")
                if isinstance(inner, str):
                    return self.text(inner)
                if isinstance(inner, list):
                    return self.mixed(inner, where + ".prompt_string")
                raise invalid(f"'{where}.prompt_string' must be a string or an array, got "
                              f"{_type(inner)}", self.param, "invalid_type")
            raise invalid(f"'{where}' must have 'content' or 'prompt_string'", self.param,
                          "invalid_value")
        raise invalid(f"'{where}' must be a string, an array of token ids / strings, or an "
                      f"object, got {_type(p)}", self.param, "invalid_type")

    def prompts(self, v: Any) -> List[List[int]]:
        """The whole `input`: one prompt, or an array of prompts (an array holding any token
        id is one prompt, as in llama-server)."""
        if isinstance(v, list):
            if not v:
                raise invalid(f"'{self.param}' must not be empty", self.param, "invalid_value")
            if any(_is_id(x) for x in v):
                out = [self.mixed(v, self.param)]
            else:
                out = [self.entry(p, f"{self.param}[{i}]") for i, p in enumerate(v)]
        else:
            out = [self.entry(v, self.param)]
        for i, ids in enumerate(out):
            if not ids:
                raise invalid(f"'{self.param}' entry {i} has no tokens: input content cannot be "
                              "empty (this model adds no BOS token)", self.param, "invalid_value")
        return out


class EmbeddingRoutes:
    def __init__(self, routes: Routes):
        self.life = routes.life
        self.host = routes.host
        self.config = routes.config
        self.metrics = routes.metrics

    async def v1_embeddings(self, request: Request) -> Response:
        return await self._handle(request, oai=True)

    async def native(self, request: Request) -> Response:
        return await self._handle(request, oai=False)

    def _pooling(self, inner) -> str:
        configured = getattr(self.config, "pooling", None)
        if configured:
            return configured
        return getattr(inner, "default_pooling", "mean")

    async def _handle(self, request: Request, oai: bool) -> Response:
        endpoint = "embeddings"
        t0 = time.monotonic()
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
            pooling = self._pooling(inner)
            if oai and pooling == "none":
                raise invalid("pooling 'none' gives one vector per token, which is not "
                              "OpenAI-shaped: use POST /embeddings, or serve with another "
                              "--pooling", "input", "unsupported")
            fmt = body.encoding_format
            width = getattr(inner, "n_embd", None)
            if body.dimensions is not None and body.dimensions != width:
                raise invalid(f"'dimensions' {body.dimensions} is not supported: this model's "
                              f"embeddings have {width} dimensions and are not shortened",
                              "dimensions", "unsupported")
            normalize = getattr(self.config, "embd_normalize", 2)
            if body.embd_normalize is not None:
                normalize = body.embd_normalize
            if pooling == "none":
                normalize = -1  # llama-server: per-token vectors come unnormalised
            # tokenized in a thread: a big input must not stall the event loop
            prompts = await off_loop(_Tokenizer(llm, param).prompts, raw)
            check_token_ids(prompts, self.host.n_vocab, param)
            admission = self.host.admit(len(prompts))
        except Exception as e:  # noqa: BLE001 - APIError, tokenizer failures and the like
            return self.life.fail(endpoint, engine_error(e, "input"))

        try:
            result = await self.life.race(
                llm.embeddings(prompts, normalize=normalize, pooling=pooling), request,
                self.life.deadline(t0))
        except ClientGone:
            return self.life.gone(endpoint, "while its embeddings were computed")
        except Exception as e:  # noqa: BLE001
            return self.life.fail(endpoint, engine_error(e, param))
        finally:
            admission.release()

        self.metrics.tokens(prompt=result.prompt_tokens)
        self.metrics.request_done(endpoint, 200)
        if not oai:
            return JSONResponse([{"index": i, "embedding": np.atleast_2d(v).tolist()}
                                 for i, v in enumerate(result.data)])
        data = []
        for i, v in enumerate(result.data):
            if fmt == "base64":
                vec: Any = base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii")
            else:
                vec = v.tolist()
            data.append({"object": "embedding", "index": i, "embedding": vec})
        n = result.prompt_tokens
        return JSONResponse({"object": "list", "data": data, "model": self.config.model_id,
                             "usage": {"prompt_tokens": n, "total_tokens": n}})

