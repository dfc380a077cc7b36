"""CORS as llama-server does it (its --cors-origins, --cors-methods, --cors-headers,
--cors-credentials):

- every response gets Access-Control-Allow-Origin: with origins "*" and credentials on (the
  default) the request's Origin is echoed; with "localhost" it is echoed only for a localhost
  origin (http(s)://localhost, 127.0.0.1 or [::1], any port); with a comma-separated list it is
  echoed when it is one of them (llama-server sends the list itself, which browsers reject);
- an OPTIONS request (a browser's preflight) is answered 200 at once, with the allowed
  credentials, methods and headers, and never needs the API key: browsers send none with it.

This middleware sits outside the API-key check, so 401 and 503 answers carry the headers too.
Header names are sent in llama-server's capitalisation (some clients compare them exactly).
"""
from typing import List, Optional
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def origin_is_localhost(origin: str) -> bool:
    try:
        u = urlsplit(origin)
        host = u.hostname
        _ = u.port  # a malformed port raises
    except ValueError:
        return False
    return u.scheme in ("http", "https") and host in _LOCAL_HOSTS and not u.path.strip("/")


class CORS:
    def __init__(self, app: ASGIApp, origins: str = "*", methods: str = "GET, POST, DELETE, OPTIONS",
                 headers: str = "*", credentials: bool = True):
        self.app = app
        self.origins = (origins or "*").strip()
        self.allowed: List[str] = [o.strip() for o in self.origins.split(",") if o.strip()]
        self.methods = methods
        self.headers = headers
        self.credentials = credentials

    def allow_origin(self, origin: Optional[str]) -> Optional[str]:
        if self.origins == "*":
            return origin if (self.credentials and origin) else "*"
        if not origin:
            return None
        if self.origins == "localhost":
            return origin if origin_is_localhost(origin) else None
        return origin if origin in self.allowed else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = None
        for name, value in scope.get("headers", ()):
            if name == b"origin":
                origin = value.decode("latin-1")
                break
        allow = self.allow_origin(origin)
        extra = []
        if allow is not None:
            extra.append((b"Access-Control-Allow-Origin", allow.encode("latin-1")))
            if self.origins != "*" or origin:
                extra.append((b"Vary", b"Origin"))

        if scope["method"] == "OPTIONS":
            headers = extra + [
                (b"Access-Control-Allow-Credentials", b"true" if self.credentials else b"false"),
                (b"Access-Control-Allow-Methods", self.methods.encode("latin-1")),
                (b"Access-Control-Allow-Headers", self.headers.encode("latin-1")),
                (b"content-type", b"text/html"),
                (b"content-length", b"0"),
            ]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message = dict(message)
                message["headers"] = list(message.get("headers", ())) + extra
            await send(message)

        await self.app(scope, receive, send_with_cors)
