"""The ASGI application (FastAPI on Starlette): routes, error envelopes, auth, the OpenAPI
document (/openapi.json, its page at /docs), and the model loading in the background once the
server is up; with several models, the router in front of each one's routes.

Bodies are parsed by each API's own pydantic models (protocol.py, anthropic_models.py,
responses_models.py), not by FastAPI's parameters, so every error keeps its API's envelope; the
routes only name those models for the OpenAPI document."""
import asyncio
import contextlib
import json
import re
from typing import Any, Callable, List, Optional

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import BaseRoute

import edgellm

from . import (anthropic_api, anthropic_models, llamacpp_api, lora_routes, ollama_api, ollama_library,
               ollama_models, protocol, responses, responses_models)
from .auth import BearerAuth
from .browser_guard import BrowserGuard
from .config import ServerConfig
from .cors import CORS
from .admission import EngineHost, default_loader, default_params_factory
from .embeddings import EmbeddingRoutes, EmbeddingsBody
from .rerank import RerankBody, RerankRoutes
from .errors import APIError, ErrorGuard
from .limits import BodyLimit
from .metrics import ServerMetrics
from .request_log import RequestLog
from .responses_api import ResponsesAPI, ResponseStore
from .routes import Routes
from .webui import WebUI

DOC_PATHS = ("/docs", "/openapi.json")
OPEN_PATHS = ("/health", "/v1/health", *DOC_PATHS)  # and the web chat page's files (webui.py)
_SCHEMAS = "#/components/schemas/"


def route(path: str, endpoint: Callable, method: str = "POST", body: Optional[type] = None,
          tag: str = "OpenAI", response_class: type = JSONResponse,
          answer: Optional[type] = None, events: Optional[type] = None,
          streams: Optional[str] = None) -> APIRoute:
    """One endpoint; `body`, the pydantic model of its request, `answer` of its JSON answer and
    `events` of its stream's events go in the OpenAPI document only (the endpoint parses the
    body itself, answering in its API's error envelope); `streams`: the media type it streams
    in besides JSON (Ollama's NDJSON)."""
    def ref(model: type) -> dict:  # named in _openapi, where every model's name is known
        return {"schema": {"$ref": f"{_SCHEMAS}{model.__name__}@{id(model)}"}}

    extra: dict = {"parameters": [{"name": name, "in": "path", "required": True,
                                   "schema": {"type": "string"}}
                                  for name in re.findall(r"{(\w+)}", path)]}
    if body is not None:
        extra["requestBody"] = {"required": True, "content": {"application/json": ref(body)}}
    if answer is not None:
        extra["responses"] = {"200": {"description": "The answer (`stream`: its events)",
                                      "content": {"application/json": ref(answer), **(
                                          {"text/event-stream": ref(events)} if events else {})}}}
    doc = (endpoint.__doc__ or "").strip().split("\n")[0] or None
    responses = {200: {"content": {"application/json": {}, streams: {}}}} if streams else None
    out = APIRoute(path, endpoint, methods=[method], openapi_extra=extra, tags=[tag],
                   response_class=response_class, responses=responses,
                   summary=doc, name=f"{method} {path}", operation_id=method.lower()
                   + path.replace("/", "_").replace("{", "").replace("}", "").replace("-", "_"))
    out.models = [m for m in (body, answer, events) if m is not None]
    return out


def model_routes(host: EngineHost, store: Optional[ResponseStore] = None,
                 ollama: Optional[ollama_library.OllamaServer] = None) -> List[APIRoute]:
    """Every route of the API over one model's EngineHost; `store` keeps /v1/responses (one
    store shared by every model of a many-model server), `ollama` Ollama's created models."""
    routes = Routes(host)
    native_ollama = ollama_api.OllamaRoutes(host, ollama)
    embeddings = EmbeddingRoutes(routes)
    rerank = RerankRoutes(routes)
    anthropic = anthropic_api.AnthropicRoutes(host)
    replies = ResponsesAPI(routes, store)
    native = llamacpp_api.LlamaCppAPI(routes)
    chat = dict(body=protocol.ChatBody, answer=responses.ChatCompletion,
                events=responses.ChatChunk)
    reply = dict(body=responses_models.ResponsesBody, answer=responses_models.ResponseObject)

    def at(paths: str, endpoint: Callable, *args, **kw) -> List[APIRoute]:  # one per alias
        return [route(path, endpoint, *args, **kw) for path in paths.split()]
    return [
        *at("/v1/chat/completions /chat/completions", routes.chat_completions, **chat),
        route("/v1/completions", routes.completions, body=protocol.CompletionBody,
              answer=responses.TextCompletion, events=responses.TextCompletion),
        *at("/v1/responses /responses", replies.create, **reply),
        route("/v1/responses/{response_id}", replies.retrieve, "GET",
              answer=responses_models.ResponseObject),
        route("/v1/responses/{response_id}", replies.delete, "DELETE",
              answer=responses_models.Deleted),
        route("/v1/responses/{response_id}/input_items", replies.input_items, "GET",
              answer=responses_models.ItemsPage),
        route("/v1/messages", anthropic.messages, body=anthropic_models.MessagesBody,
              tag="Anthropic", answer=anthropic_models.MessageOut),
        route("/v1/messages/count_tokens", anthropic.count_tokens,
              body=anthropic_models.CountTokensBody, tag="Anthropic",
              answer=anthropic_models.TokenCount),
        *at("/v1/models /models", routes.models, "GET"),
        *at("/health /v1/health", routes.health, "GET", tag="server"),
        route("/metrics", native.metrics_endpoint, "GET", tag="server",  # + llamacpp:* names
              response_class=PlainTextResponse),
        route("/tokenize", routes.tokenize, body=protocol.TokenizeBody, tag="llama.cpp"),
        route("/detokenize", routes.detokenize, body=protocol.DetokenizeBody, tag="llama.cpp"),
        # OpenAI's embeddings, and llama-server's native ones (server/embeddings.py)
        route("/v1/embeddings", embeddings.v1_embeddings, body=EmbeddingsBody),
        *at("/embeddings /embedding", embeddings.native, body=EmbeddingsBody, tag="llama.cpp"),
        # cross-encoders: Jina's / llama-server's rerank (server/rerank.py)
        *at("/v1/rerank /rerank /v1/reranking /reranking", rerank.rerank, body=RerankBody),
        *[route(path, fn, method, body, "llama.cpp") for path, fn, method, body in native.endpoints()],
        *lora_routes.routes(host, route),  # LoRA adapters (server/lora_routes.py)
        # Ollama's generation and embedding routes (server/ollama_api.py)
        *[route(f"/api/{name}", fn, body=body, tag="Ollama", **kw) for name, fn, body, kw in (
            ("generate", native_ollama.generate, ollama_models.OllamaGenerateBody,
             {"streams": ollama_models.NDJSON}),
            ("chat", native_ollama.chat, ollama_models.OllamaChatBody,
             {"streams": ollama_models.NDJSON}),
            ("embed", native_ollama.embed, ollama_models.OllamaEmbedBody, {}),
            ("embeddings", native_ollama.embeddings, ollama_models.OllamaEmbeddingsBody, {}))],
    ]


# a many-model server answers these itself (server/model_router.py), or, for stored responses,
# from the store every model shares; the rest are one model's
_SERVER_PATHS = {"/v1/models", "/models", "/health", "/v1/health", "/metrics"}
_STORED_PATHS = {"/v1/responses/{response_id}", "/v1/responses/{response_id}/input_items"}


def create_app(config: ServerConfig, loader: Callable[[ServerConfig], Any] = default_loader,
               params_factory: Callable[..., Any] = default_params_factory,
               on_load_failure: Optional[Callable[[BaseException], None]] = None,
               planner: Optional[Callable[[ServerConfig], int]] = None) -> FastAPI:
    """An OpenAI-compatible app over one AsyncLLM that `loader(config)` builds in a thread --
    or, when `config.multi_model`, over several, each loaded on first use (`planner(config)`:
    the bytes a model needs, default its memory plan; docs/SERVER.md "Several models").

    `loader` and `params_factory` default to edgellm's AsyncLLM and SamplingParams; tests pass
    stand-ins. `on_load_failure` is told when loading fails (the CLI then exits non-zero; with
    several models a failed load is the request's error instead).
    """
    if config.multi_model:
        return _many_model_app(config, loader, params_factory, planner)
    host = EngineHost(config, loader, params_factory, on_load_failure=on_load_failure)
    ollama = ollama_library.OllamaServer(ollama_library.OneModel(host), host.metrics)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        loading = asyncio.ensure_future(host.load())
        try:
            yield
        finally:
            if not loading.done():
                host.state = "closed"  # load() closes the engine itself when it finishes
            else:
                host.close()

    app = _fastapi(config, model_routes(host, ollama=ollama), lifespan, host.metrics, ollama=ollama)
    app.state.host = host
    return app


def _many_model_app(config: ServerConfig, loader, params_factory, planner) -> FastAPI:
    from .model_catalog import CatalogError, ModelCatalog
    from .model_pool import ModelPool, default_planner, machine_budget
    from .model_router import ModelRouter

    try:
        catalog = ModelCatalog.build(config.models or ([(config.model, config.model_path)]
                                                       if config.model_path else []),
                                     config.models_dir, config.model_aliases)
    except CatalogError as e:
        raise ValueError(str(e)) from None
    metrics = ServerMetrics()
    budget = config.models_memory if config.models_memory is not None else machine_budget()
    pool = ModelPool(config, catalog.entries, loader, params_factory, metrics,
                     planner=planner or default_planner, budget=budget,
                     max_loaded=config.max_loaded_models, keep_alive=config.keep_alive,
                     wait_timeout=config.timeout)
    store = ResponseStore()
    ollama = ollama_library.OllamaServer(None, metrics)
    router = ModelRouter(catalog, pool,
                         lambda host: [r for r in model_routes(host, store, ollama)
                                       if r.path not in _SERVER_PATHS | _STORED_PATHS],
                         metrics)
    ollama.models = ollama_library.ManyModels(catalog, pool, router)
    documented = model_routes(pool.slot(router.default).host, store, ollama)
    stored = [r for r in documented if r.path in _STORED_PATHS]  # they read the shared store only

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            pool.close()

    app = _fastapi(config, router.routes(route) + stored, lifespan, metrics,
                   [r for r in documented if r.path not in _SERVER_PATHS | _STORED_PATHS],
                   ollama=ollama)
    app.router.default = router.dispatch  # every other path: one model's routes
    app.state.host = pool.slot(router.default).host
    app.state.models = pool
    return app


def _fastapi(config: ServerConfig, routes: List[BaseRoute], lifespan, metrics,
             dispatched: List[APIRoute] = (), ollama=None) -> FastAPI:
    """The app over `routes`; `dispatched`: routes the many-model router reaches, documented
    in /openapi.json as the app's own; `ollama`: Ollama's server routes (/, /api/tags, ...)."""
    async def http_error(request: Request, exc: HTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = {404: f"no route {request.url.path}",
                   405: f"method {request.method} is not allowed on {request.url.path}"}.get(
            exc.status_code, str(exc.detail))
        err = APIError(exc.status_code, message, kind, None, None, exc.headers)
        return render_error(request.scope, err)

    def render_error(scope, err: APIError):
        if anthropic_api.is_anthropic_path(scope["path"]):
            return anthropic_api.error_response(err)
        if ollama_models.is_ollama_path(scope["path"]):
            return ollama_models.error_response(err)
        return err.response()

    webui = WebUI() if config.webui else None  # the chat page at / (webui.py), one model or several
    if ollama is not None:  # GET / answers Ollama's probe, and a browser the web chat page
        ollama.webui = webui
        routes = [*ollama.routes(route), *routes]
    app = FastAPI(title="edgellm", version=edgellm.__version__, lifespan=lifespan,
                  routes=[*routes, *(webui.routes() if webui else [])],
                  exception_handlers={HTTPException: http_error},
                  docs_url=DOC_PATHS[0], openapi_url=DOC_PATHS[1], redoc_url=None,
                  description="OpenAI-, Anthropic- and llama.cpp-compatible server over "
                              "edgellm's engine (docs/SERVER.md)")
    app.openapi = lambda: _openapi(app, [*app.routes, *dispatched])
    # innermost first: an exception escaping a route becomes the envelope (errors.ErrorGuard);
    # the body is read, size- and time-limited, before any route sees it (limits.BodyLimit),
    # but only once the key is checked, so an unauthenticated client is never buffered
    app.add_middleware(ErrorGuard, render_error=render_error, metrics=metrics)
    app.add_middleware(BodyLimit, max_body_size=config.max_body_size,
                       read_timeout=config.read_timeout, render_error=render_error,
                       metrics=metrics)
    app.add_middleware(BearerAuth, api_key=config.api_key,
                       open_paths=(*OPEN_PATHS, *(webui.open_paths if webui else [])),
                       metrics=metrics, render_error=render_error)
    # Host / Origin / Content-Type checks against web pages driving the server (browser_guard.py)
    app.add_middleware(BrowserGuard, config=config, render_error=render_error, metrics=metrics)
    # outermost: preflights are answered before the key check, every answer carries the headers
    app.add_middleware(CORS, origins=config.cors_origins, methods=config.cors_methods,
                       headers=config.cors_headers, credentials=config.cors_credentials)
    app.add_middleware(RequestLog)  # outermost: one log line per request (request_log.py)
    return app


def _openapi(app: FastAPI, routes: List[BaseRoute]) -> dict:
    """FastAPI's document of the routes, with the models they name as components (named by
    pydantic, which tells apart the models of several APIs that share a name)."""
    if app.openapi_schema is None:
        doc = get_openapi(title=app.title, version=app.version, description=app.description,
                          routes=routes)
        models = {m for r in routes for m in getattr(r, "models", ())}
        refs, defs = models_json_schema([(m, "validation") for m in models],
                                        ref_template=_SCHEMAS + "{model}")
        doc.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
        text = json.dumps(doc)
        for (m, _), ref in refs.items():
            text = text.replace(f'"{_SCHEMAS}{m.__name__}@{id(m)}"', json.dumps(ref["$ref"]))
        app.openapi_schema = _no_null_defaults(json.loads(text))
    return app.openapi_schema


def _no_null_defaults(node):
    """Drop `"default": null`: on the wire null is the field left out, which the schema of an
    optional field already says (and a null default breaks a non-null type)."""
    if isinstance(node, dict):
        if node.get("default", 0) is None:
            del node["default"]
        for v in node.values():
            _no_null_defaults(v)
    elif isinstance(node, list):
        for v in node:
            _no_null_defaults(v)
    return node
