"""The ASGI application: routes, error envelopes, auth, and the model loading in the background
once the server is up; with several models, the router in front of each one's routes."""
import asyncio
import contextlib
from typing import Any, Callable, List, Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Route

from . import anthropic_api, llamacpp_api
from .auth import BearerAuth
from .browser_guard import BrowserGuard
from .config import ServerConfig
from .cors import CORS
from .admission import EngineHost, default_loader, default_params_factory
from .embeddings import EmbeddingRoutes
from .errors import APIError, ErrorGuard
from .limits import BodyLimit
from .metrics import ServerMetrics
from .responses_api import ResponsesAPI, ResponseStore
from .routes import Routes
from .webui import WebUI

OPEN_PATHS = ("/health", "/v1/health")  # and the web chat page's files (webui.py)


def model_routes(host: EngineHost, store: Optional[ResponseStore] = None) -> List[Route]:
    """Every route of the API over one model's EngineHost; `store` keeps /v1/responses (one
    store shared by every model of a many-model server)."""
    routes = Routes(host)
    embeddings = EmbeddingRoutes(routes)
    anthropic = anthropic_api.AnthropicRoutes(host)
    responses_api = ResponsesAPI(routes, store)
    native_routes: list = []  # llama-server's own endpoints (llamacpp_api.py)
    native = llamacpp_api.register(native_routes, routes)
    return [
        Route("/v1/chat/completions", routes.chat_completions, methods=["POST"]),
        Route("/chat/completions", routes.chat_completions, methods=["POST"]),
        Route("/v1/completions", routes.completions, methods=["POST"]),
        Route("/v1/responses", responses_api.create, methods=["POST"]),
        Route("/responses", responses_api.create, methods=["POST"]),
        Route("/v1/responses/{response_id}", responses_api.retrieve, methods=["GET"]),
        Route("/v1/responses/{response_id}", responses_api.delete, methods=["DELETE"]),
        Route("/v1/responses/{response_id}/input_items", responses_api.input_items,
              methods=["GET"]),
        Route("/v1/messages", anthropic.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", anthropic.count_tokens, methods=["POST"]),
        Route("/v1/models", routes.models, methods=["GET"]),
        Route("/models", routes.models, methods=["GET"]),
        Route("/health", routes.health, methods=["GET"]),
        Route("/v1/health", routes.health, methods=["GET"]),
        Route("/metrics", native.metrics_endpoint, methods=["GET"]),  # + llamacpp:* names
        Route("/tokenize", routes.tokenize, methods=["POST"]),
        Route("/detokenize", routes.detokenize, methods=["POST"]),
        # OpenAI's embeddings, and llama-server's native ones (server/embeddings.py)
        Route("/v1/embeddings", embeddings.v1_embeddings, methods=["POST"]),
        Route("/embeddings", embeddings.native, methods=["POST"]),
        Route("/embedding", embeddings.native, methods=["POST"]),
        *native_routes,
    ]


# a many-model server answers these itself (server/model_router.py), or, for stored responses,
# from the store every model shares; the rest are one model's
_SERVER_PATHS = {"/v1/models", "/models", "/health", "/v1/health", "/metrics"}
_STORED_PATHS = {"/v1/responses/{response_id}", "/v1/responses/{response_id}/input_items"}


def create_app(config: ServerConfig, loader: Callable[[ServerConfig], Any] = default_loader,
               params_factory: Callable[..., Any] = default_params_factory,
               on_load_failure: Optional[Callable[[BaseException], None]] = None,
               planner: Optional[Callable[[ServerConfig], int]] = None) -> Starlette:
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

    app = _starlette(config, model_routes(host), lifespan, host.metrics)
    app.state.host = host
    return app


def _many_model_app(config: ServerConfig, loader, params_factory, planner) -> Starlette:
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
    router = ModelRouter(catalog, pool,
                         lambda host: [r for r in model_routes(host, store)
                                       if r.path not in _SERVER_PATHS | _STORED_PATHS],
                         metrics)
    stored = [r for r in model_routes(pool.slot(router.default).host, store)
              if r.path in _STORED_PATHS]  # they read the shared store only

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            pool.close()

    app = _starlette(config, router.routes() + stored, lifespan, metrics)
    app.router.default = router.dispatch  # every other path: one model's routes
    app.state.host = pool.slot(router.default).host
    app.state.models = pool
    return app


def _starlette(config: ServerConfig, routes: List[Route], lifespan, metrics) -> Starlette:
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
        return err.response()

    webui = WebUI() if config.webui else None  # the chat page at / (webui.py), one model or several
    app = Starlette(routes=[*routes, *(webui.routes() if webui else [])],
                    exception_handlers={HTTPException: http_error}, lifespan=lifespan)
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
    return app
