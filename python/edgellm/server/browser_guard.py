"""What keeps a web page from driving the server through its visitor's browser, checked before
any route runs (docs/SERVER.md "Security" says what is refused and why):

- Host (DNS rebinding): without an API key, a Host naming a DNS name the server was not started
  for is 403 (IP literals, dotless and local names, the machine's name, --host, --allowed-hosts
  pass);
- Origin: a request carrying an Origin that is neither the server's own nor allowed by
  --cors-origins is 403 ('null' never passes); preflights are answered by cors.CORS outside;
- Content-Type: a body a page may send without a preflight (anything but JSON) is 415;
- WebSocket: refused before the handshake (403) instead of an app that never answers.
"""
import ipaddress
import socket
from typing import Iterable, Optional, Tuple
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from .cors import origin_allowed
from .errors import APIError
from .limits import Guard

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


def ip_of(host: str):
    """The IP address a host name is written as (None for a DNS name)."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def is_loopback(address: str) -> bool:
    """Whether a --host address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    host = address.strip().lower()
    ip = ip_of(host)
    return ip.is_loopback if ip else (host == "localhost" or host.endswith(".localhost"))


class HostRule:
    """Which Host header names a keyless server answers (see the module's text)."""

    def __init__(self, bound: Iterable[str] = (), allowed: Iterable[str] = ()):
        names = {n.strip().strip("[]").rstrip(".").lower() for n in (*bound, *allowed)}
        names.discard("")
        self.any = "*" in names
        self.suffixes = tuple(n for n in names if n.startswith("."))
        self.names = frozenset(names | {socket.gethostname().rstrip(".").lower()})

    def allows(self, host: Optional[str]) -> bool:
        if self.any or not host:  # HTTP/1.0 sends none: no browser does that
            return True
        name, _ = split_host(host)
        if name is None:
            return False
        return (ip_of(name) is not None or "." not in name or name in self.names
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


class BrowserGuard(Guard):
    def __init__(self, app: ASGIApp, config, **kw):
        super().__init__(app, **kw)
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
        else:
            await self.refuse(scope, receive, send, err)

    @staticmethod
    async def _refuse_websocket(scope: Scope, receive: Receive, send: Send) -> None:
        """A close before the handshake: the server answers the upgrade 403."""
        if (await receive()).get("type") == "websocket.connect":
            await send({"type": "websocket.close", "code": 1008,
                        "reason": "this server speaks no WebSocket: use HTTP"})
