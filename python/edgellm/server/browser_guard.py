"""What keeps a web page from driving the server through its visitor's browser (docs/SERVER.md
"Security"). A server without an API key on 127.0.0.1 is still reachable from every page the
user opens; three checks close the ways in, before any route runs:

- **Host** (DNS rebinding): without an API key, a request whose Host header names a DNS name
  this server was not started for is refused 403. A page at http://attacker.example can make
  attacker.example resolve to 127.0.0.1; its requests then come same-origin, but with
  `Host: attacker.example`. Accepted: IP literals, names without a dot (a public DNS name has
  one), localhost and the local names (*.localhost, *.local, *.internal, *.home.arpa), the
  machine's host name, the names given to --host, and --allowed-hosts (a name, `.example.com`
  for it and every name under it, or `*` for any). With a key the check is off: a page that
  rebinds a name still has no key to send.
- **Origin**: a request that carries an Origin header (every cross-origin request a browser
  sends, and its same-origin POSTs) is served only when the origin is this server's own (its
  host and port are the Host header's) or one --cors-origins allows; else 403. `Origin: null`
  (sandboxed frames, file: pages) is never allowed. Preflights (OPTIONS) are answered by the
  CORS middleware outside this one and never reach a route.
- **Content-Type**: a body is read as JSON only when it is sent as JSON: a POST, PUT, PATCH or
  DELETE whose Content-Type is not `application/json` (or `*/*+json`) is refused 415 naming
  the type. `text/plain`, form and multipart bodies are what a page may send cross-origin
  without a preflight; a request with no Content-Type is still read (curl-like clients omit it,
  and a browser sending one cross-origin carries an Origin, refused above).

WebSocket upgrades are refused too (no route speaks WebSocket): 403 before the handshake, with
the reason as the close reason, instead of an ASGI app that never answers (uvicorn's 500).
"""
import ipaddress
import socket
from typing import Callable, Iterable, Optional, Tuple
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from .cors import origin_allowed
from .errors import APIError

LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".home.arpa")
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def split_host(value: str) -> Tuple[Optional[str], Optional[int]]:
    """'Example.com:8080' -> ('example.com', 8080); '[::1]' -> ('::1', None); (None, None)
    when it is no host[:port]."""
    try:
        u = urlsplit("//" + value)
        host, port = u.hostname, u.port
    except ValueError:
        return None, None
    if not host or u.path or u.query or u.fragment or u.username is not None:
        return None, None
    return host.rstrip(".").lower(), port


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return True
    except ValueError:
        return False


def is_loopback(address: str) -> bool:
    """Whether a --host address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    host = address.strip().strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


class HostRule:
    """Which Host header names a keyless server answers (see the module's text)."""

    def __init__(self, bound: Iterable[str] = (), allowed: Iterable[str] = ()):
        names = {n.strip().strip("[]").rstrip(".").lower() for n in (*bound, *allowed)}
        names.discard("")
        self.any = "*" in names
        self.suffixes = tuple(n for n in names if n.startswith("."))
        try:
            names.add(socket.gethostname().rstrip(".").lower())
        except OSError:  # pragma: no cover - no host name: nothing to add
            pass
        self.names = frozenset(names)

    def allows(self, host: Optional[str]) -> bool:
        if self.any or not host:  # HTTP/1.0 sends none: no browser does that
            return True
        name, _ = split_host(host)
        if name is None:
            return False
        return (is_ip(name) or "." not in name or name in self.names
                or name.endswith(LOCAL_SUFFIXES)
                or any(name.endswith(s) or name == s[1:] for s in self.suffixes))


def same_origin(origin: str, host: Optional[str]) -> bool:
    """The Origin names the server the request was sent to: the Host header's name, and its
    port when the Host gives one (behind a proxy the Host may carry none)."""
    if not host:
        return False
    try:
        u = urlsplit(origin)
        o_name, o_port = (u.hostname or "").rstrip(".").lower(), u.port
    except ValueError:
        return False
    if u.scheme not in ("http", "https") or not o_name:
        return False
    h_name, h_port = split_host(host)
    if h_name is None or h_name != o_name:
        return False
    if h_port is None:
        return True
    return h_port == (o_port or (443 if u.scheme == "https" else 80))


def is_json_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/")
                                           and media.endswith("+json"))


def host_refused(host: str) -> APIError:
    return APIError(403, f"the Host header {host!r} is not a name this server answers without "
                         "an API key (a page could point its own domain at this address); "
                         "connect by address or localhost, or start the server with "
                         "--allowed-hosts NAME (or --api-key)",
                    "permission_error", None, "host_not_allowed")


def origin_refused(origin: str) -> APIError:
    how = ("a page's Origin 'null' is never allowed" if origin.strip().lower() == "null" else
           f"start the server with --cors-origins {origin} to allow it")
    return APIError(403, f"cross-origin request from {origin!r} refused: {how}",
                    "permission_error", None, "origin_not_allowed")


def unsupported_type(content_type: str) -> APIError:
    return APIError(415, f"the request body is sent as {content_type!r}; send it as JSON with "
                         "'Content-Type: application/json' (curl: -H 'Content-Type: "
                         "application/json')", "invalid_request_error", None,
                    "unsupported_media_type")


class BrowserGuard:
    def __init__(self, app: ASGIApp, config, render_error: Optional[Callable] = None,
                 metrics=None):
        self.app = app
        self.render_error = render_error  # (scope, APIError) -> the response for this path
        self.metrics = metrics
        self.origins = getattr(config, "cors_origins", "") or ""
        allowed = [h for h in (getattr(config, "allowed_hosts", "") or "").split(",") if h.strip()]
        self.hosts = None if config.api_key else HostRule(config.hosts, allowed)

    def refusal(self, scope: Scope) -> Optional[APIError]:
        host = origin = content_type = None
        for name, value in scope.get("headers", ()):
            if name == b"host":
                host = value.decode("latin-1")
            elif name == b"origin":
                origin = value.decode("latin-1")
            elif name == b"content-type":
                content_type = value.decode("latin-1")
        if self.hosts is not None and not self.hosts.allows(host):
            return host_refused(host or "")
        if origin is not None and not (origin_allowed(self.origins, origin)
                                       or same_origin(origin, host)):
            return origin_refused(origin)
        if scope.get("method") in BODY_METHODS and content_type is not None \
                and not is_json_type(content_type):
            return unsupported_type(content_type)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "websocket":
            await self._refuse_websocket(scope, receive, send)
            return
        err = self.refusal(scope) if kind == "http" else None
        if err is None:
            await self.app(scope, receive, send)
            return
        if self.metrics is not None:
            self.metrics.request_done("http", err.status)
        response = self.render_error(scope, err) if self.render_error else err.response()
        await response(scope, receive, send)

    @staticmethod
    async def _refuse_websocket(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()  # websocket.connect
        if message.get("type") != "websocket.connect":
            return
        err = APIError(403, "this server speaks no WebSocket: use HTTP (server-sent events "
                            "stream the answers)", "invalid_request_error", None,
                       "websocket_not_supported")
        if "websocket.http.response" in scope.get("extensions", {}):
            response = err.response()
            await send({"type": "websocket.http.response.start", "status": err.status,
                        "headers": response.raw_headers})
            await send({"type": "websocket.http.response.body", "body": response.body})
            return
        await send({"type": "websocket.close", "code": 1008, "reason": err.message[:120]})
