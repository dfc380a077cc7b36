"""CORS with llama-server's options (--cors-origins, --cors-methods, --cors-headers,
--cors-credentials), closed by default (docs/SERVER.md "Security"): no --cors-origins allows no
origin but the server's own; '*' allows any (the Origin echoed with credentials, as
llama-server); 'localhost' allows localhost origins; a comma list allows those exactly;
'null' never. A preflight (OPTIONS) is answered 200 at once, without the API key (browsers send
none with it). Sitting outside the key check, 401 and 503 answers carry the headers too; names
are sent in llama-server's capitalisation (some clients compare them exactly).
"""
from typing import Optional
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def origin_is_localhost(origin: str) -> bool:
    try:
        u = urlsplit(origin)
        u.port  # a malformed port raises
    except ValueError:
        return False
    return u.scheme in ("http", "https") and u.hostname in _LOCAL_HOSTS and not u.path.strip("/")


def origin_allowed(origins: str, origin: str) -> bool:
    """Whether --cors-origins `origins` ("", "*", "localhost" or a comma list) lets a page of
    `origin` use the server. 'null' never."""
    origins = (origins or "").strip()
    if not origin or origin.strip().lower() == "null" or not origins:
        return False
    if origins == "*":
        return True
    if origins == "localhost":
        return origin_is_localhost(origin)
    return origin in [o.strip() for o in origins.split(",")]


class CORS:
    def __init__(self, app: ASGIApp, origins: str = "", methods: str = "GET, POST, DELETE, OPTIONS",
                 headers: str = "*", credentials: bool = True):
        self.app, self.origins = app, (origins or "").strip()
        self.methods, self.headers, self.credentials = methods, headers, credentials

    def allow_origin(self, origin: Optional[str]) -> Optional[str]:
        """The Access-Control-Allow-Origin value for a request from `origin`, None for none."""
        if not origin:
            return "*" if self.origins == "*" else None
        if not origin_allowed(self.origins, origin):
            return None
        return origin if (self.credentials or self.origins != "*") else "*"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"origin"),
                      None)
        allow = self.allow_origin(origin)
        extra = []
        if allow is not None:
            extra.append((b"Access-Control-Allow-Origin", allow.encode("latin-1")))
            if self.origins != "*" or origin:
                extra.append((b"Vary", b"Origin"))

        if scope["method"] == "OPTIONS":
            headers = extra + ([
                (b"Access-Control-Allow-Credentials", b"true" if self.credentials else b"false"),
                (b"Access-Control-Allow-Methods", self.methods.encode("latin-1")),
                (b"Access-Control-Allow-Headers", self.headers.encode("latin-1")),
            ] if allow is not None else []) + [(b"content-type", b"text/html"),
                                               (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message = {**message, "headers": list(message.get("headers", ())) + extra}
            await send(message)

        await self.app(scope, receive, send_with_cors)
