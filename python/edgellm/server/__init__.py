"""`edgellm serve`: an OpenAI-, Anthropic-, Ollama- and llama.cpp-compatible HTTP server over
one shared AsyncLLM, or several models each loaded on first use (docs/SERVER.md).

    from edgellm.server import ServerConfig, create_app
    app = create_app(ServerConfig(model="smollm2"))   # any ASGI server can run it
"""
from .app import create_app
from .config import ServerConfig, parse_size

__all__ = ["create_app", "ServerConfig", "parse_size"]
