"""API-key check for every route but the open ones (GET /health, so load balancers and
orchestrators can probe without the key; the web chat page and its files, so a browser can load
the page that then asks for the key), as llama-server's --api-key does. The key comes as
`Authorization: Bearer <key>` (OpenAI) or `x-api-key: <key>` (Anthropic)."""
import hmac
from typing import Iterable, Optional

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import APIError, Guard


class BearerAuth(Guard):
    def __init__(self, app: ASGIApp, api_key: Optional[str], open_paths: Iterable[str], **kw):
        super().__init__(app, **kw)
        self.key = api_key.encode() if api_key else None
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.key is None or scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", ()))  # the last of a repeated header counts
        header, x_api_key = headers.get(b"authorization", b""), headers.get(b"x-api-key", b"")
        scheme, _, token = header.partition(b" ")
        if not header and not x_api_key:
            err = APIError(401, "missing API key: send the header 'Authorization: Bearer <key>' "
                                "or 'x-api-key: <key>'",
                           "authentication_error", None, "missing_api_key")
        elif not (hmac.compare_digest(x_api_key.strip(), self.key) if x_api_key else
                  scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key)):
            err = APIError(401, "invalid API key", "authentication_error", None,
                           "invalid_api_key")
        else:
            await self.app(scope, receive, send)
            return
        err.headers["WWW-Authenticate"] = "Bearer"
        await self.refuse(scope, receive, send, err, "auth")
