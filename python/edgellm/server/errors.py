"""Errors the server answers with, in OpenAI's envelope:

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

Every failure a client can cause or meet (bad JSON, wrong types, context overflow, full queue,
model still loading, timeout, missing key) becomes an APIError with its HTTP status, so a
handler never lets a bare exception turn into an opaque 500.
"""
import logging
from typing import Any, Dict, Optional

from pydantic import ValidationError
from starlette.responses import JSONResponse

from .. import validation as V

_log = logging.getLogger("edgellm.server")


class APIError(Exception):
    """`extra`: more fields of the error object (llama-server's n_prompt_tokens, n_ctx)."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None, extra: Optional[dict] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type,
                          "param": self.param, "code": self.code, **self.extra}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(message: str, param: Optional[str] = None, code: Optional[str] = None) -> APIError:
    """A request the server understood but cannot accept (HTTP 400)."""
    return APIError(400, message, "invalid_request_error", param, code)


def not_ready(state: str) -> APIError:
    return APIError(503, f"the model is {state}; retry when GET /health answers 200",
                    "unavailable_error", None, "model_" + state,
                    headers={"Retry-After": "1"})


def queue_full(capacity: int, retry_after_s: int) -> APIError:
    return APIError(429, f"server busy: all {capacity} request slots (running + queued) are "
                         f"taken; retry in {retry_after_s} s",
                    "rate_limit_error", None, "queue_full",
                    headers={"Retry-After": str(retry_after_s)})


def timed_out(seconds: float) -> APIError:
    return APIError(504, f"request timed out after {seconds:g} s (server --timeout); "
                         f"it was aborted", "timeout_error", None, "timeout")


def from_exception(e: BaseException, param: Optional[str] = None) -> APIError:
    """An exception that is not an APIError, as the answer a client gets: what bad input makes
    Python raise (ValueError, OverflowError for a huge number, RecursionError for deep nesting)
    is a 400; running out of memory is a 507; anything else is a bug of ours, a 500 -- each in
    the envelope."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, RecursionError):
        return invalid(f"the request is nested too deeply to process ({e})", param,
                       "nesting_too_deep")
    if isinstance(e, OverflowError):
        return invalid(f"a number in the request is too large: {e}", param, "invalid_value")
    if isinstance(e, ValueError):
        return invalid(str(e), param)
    if isinstance(e, MemoryError):
        return APIError(507, "the server ran out of memory for this request; send a smaller one",
                        "server_error", param, "out_of_memory")
    return APIError(500, f"internal error: {type(e).__name__}: {e}", "server_error", param,
                    "internal_error")


class Guard:
    """A pure ASGI middleware that may refuse a request before the routes, in the envelope of
    the path's API (`render_error(scope, err)`; OpenAI's by default), counted in metrics."""

    def __init__(self, app, render_error=None, metrics=None):
        self.app = app
        self.render_error = render_error  # (scope, APIError) -> response for this path
        self.metrics = metrics

    async def refuse(self, scope, receive, send, err: APIError, endpoint: str = "http") -> None:
        if self.metrics is not None:
            self.metrics.request_done(endpoint, err.status)
        response = self.render_error(scope, err) if self.render_error else err.response()
        await response(scope, receive, send)


class ErrorGuard(Guard):
    """An exception escaping a route before its answer started becomes the envelope
    (`from_exception`) instead of Starlette's plain-text 500. After the answer started (a
    stream) there is nothing to send: the exception goes on to close the connection."""

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as e:  # noqa: BLE001 - MemoryError and RecursionError are Exceptions
            if started:
                raise
            err = from_exception(e)
            if err.status >= 500:
                _log.error("%s %s failed", scope.get("method"), scope.get("path"), exc_info=e)
            await self.refuse(scope, receive, send, err)


# --- a request model's validation error (server/wire.py) -> the 400 naming the field -------------

class Refusal(ValueError):
    """A rule of a model's own failing; `{where}` in `message` / `param` is the checked value's
    path, which only the parser knows."""

    def __init__(self, message: str, code: str = "invalid_value", param: str = "{where}"):
        super().__init__(message)
        self.message, self.code, self.param = message, code, param


_TYPES = {"string_type": "a string", "int_type": "an integer", "float_type": "a number",
          "bool_type": "a boolean", "dict_type": "an object", "model_type": "an object",
          "model_attributes_type": "an object", "list_type": "an array"}
_TEXTS = {"literal_error": "must be {expected}, got {got}", "too_short": "must not be empty",
          "string_pattern_mismatch": "must match {pattern}, got {got}",
          "too_long": "has {actual_length} entries or characters, at most {max_length}"}
_BOUNDS = {"greater_than_equal": (">=", "ge"), "less_than_equal": ("<=", "le"),
           "greater_than": (">", "gt"), "less_than": ("<", "lt")}


def _path(loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "[key]":
            out += f".{part}" if out else str(part)
    return out


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) and x.is_integer() else str(x)


def api_error(e: ValidationError) -> APIError:
    """The first error of `e` (an unknown field first) as the 400 naming its field."""
    errors = e.errors()
    err = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    where, kind, ctx, v = _path(err["loc"]), err["type"], err.get("ctx") or {}, err.get("input")
    if isinstance(ctx.get("error"), Refusal):
        r = ctx["error"]
        return invalid(r.message.replace("{where}", where), r.param.replace("{where}", where),
                       r.code)
    if kind == "extra_forbidden":
        return invalid(f"unknown field '{where}'", where, "unknown_field")
    if kind == "missing":
        return invalid(f"'{where}' is required", where, "missing_field")
    if kind in _TYPES:
        return invalid(f"'{where}' must be {_TYPES[kind]}, got {V.type_name(v)} {V.short(v)}",
                       where, "invalid_type")
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        text = f"must be {op} {_num(ctx[key])}, got {_num(v)}"
    elif kind in _TEXTS:
        text = _TEXTS[kind].format(**ctx, got=V.short(v))
    else:  # finite_number, ...
        text = err["msg"][0].lower() + err["msg"][1:]
    return invalid(f"'{where}' {text}", where, "invalid_value")
