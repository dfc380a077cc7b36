"""The ASGI application: routes, error envelopes, auth, and the model loading in the background
once the server is up."""
import asyncio
import contextlib
from typing import Any, Callable, Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Route

from . import anthropic_api, llamacpp_api
from .auth import BearerAuth
from .config import ServerConfig
from .cors import CORS
from .admission import EngineHost, default_loader, default_params_factory
from .embeddings import EmbeddingRoutes
from .errors import APIError, ErrorGuard
from .limits import BodyLimit
from .responses_api import ResponsesAPI
from .routes import Routes
from .webui import WebUI

OPEN_PATHS = ("/health", "/v1/health")  # and the web chat page's files (webui.py)


def create_app(config: ServerConfig, loader: Callable[[ServerConfig], Any] = default_loader,
               params_factory: Callable[..., Any] = default_params_factory,
               on_load_failure: Optional[Callable[[BaseException], None]] = None) -> Starlette:
    """An OpenAI-compatible app over one AsyncLLM that `loader(config)` builds in a thread.

    `loader` and `params_factory` default to edgellm's AsyncLLM and SamplingParams; tests pass
    stand-ins. `on_load_failure` is told when loading fails (the CLI then exits non-zero).
    """
    host = EngineHost(config, loader, params_factory, on_load_failure=on_load_failure)
    routes = Routes(host)
    embeddings = EmbeddingRoutes(routes)
    anthropic = anthropic_api.AnthropicRoutes(host)
    responses_api = ResponsesAPI(routes)
    native_routes: list = []  # llama-server's own endpoints (llamacpp_api.py)
    native = llamacpp_api.register(native_routes, routes)
    webui = WebUI()  # the chat page at / (webui.py)

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

    app = Starlette(
        routes=[
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
            *webui.routes(),
        ],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.host = host
    # innermost first: an exception escaping a route becomes the envelope (errors.ErrorGuard);
    # the body is read, size- and time-limited, before any route sees it (limits.BodyLimit),
    # but only once the key is checked, so an unauthenticated client is never buffered
    app.add_middleware(ErrorGuard, render_error=render_error, metrics=host.metrics)
    app.add_middleware(BodyLimit, max_body_size=config.max_body_size,
                       read_timeout=config.read_timeout, render_error=render_error,
                       metrics=host.metrics)
    app.add_middleware(BearerAuth, api_key=config.api_key,
                       open_paths=(*OPEN_PATHS, *webui.open_paths),
                       metrics=host.metrics, render_error=render_error)
    # outermost: preflights are answered before the key check, every answer carries the headers
    app.add_middleware(CORS, origins=config.cors_origins, methods=config.cors_methods,
                       headers=config.cors_headers, credentials=config.cors_credentials)
    return app
