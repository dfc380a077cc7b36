"""`edgellm serve`: an OpenAI-compatible HTTP server over one shared AsyncLLM.

    from edgellm.server import ServerConfig, create_app
    app = create_app(ServerConfig(model="smollm2"))   # any ASGI server can run it

Endpoints: POST /v1/chat/completions, /v1/completions (streaming with SSE), GET /v1/models,
/health, /metrics (Prometheus), POST /tokenize, /detokenize.

Several models: ServerConfig(model=..., models=[(name, path), ...], models_dir=...) -- the
request's `model` picks one, each loads on first use (model_catalog.py, model_pool.py,
model_router.py; docs/SERVER.md "Several models").
"""
from .app import create_app
from .config import ServerConfig, parse_size

__all__ = ["create_app", "ServerConfig", "parse_size"]
