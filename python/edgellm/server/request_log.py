"""The server's log: one format for every line (edgellm's own, uvicorn's, the start-up lines)
and one line per request, as llama-server and Ollama write them.

    2026-12-07T14:50:01.234Z INFO edgellm.request: POST /v1/chat/completions 200 prompt=12 generated=40 time_ms=812.4
    {"time": "2026-12-07T14:50:01.234Z", "level": "INFO", "logger": "edgellm.request",
     "message": "POST /v1/chat/completions 200", "method": "POST", "path": "/v1/chat/completions",
     "status": 200, "prompt_tokens": 12, "generated_tokens": 40, "time_ms": 812.4}   (--log-format json)

`configure(level, fmt)` sets the root logger's one handler (stderr) and the levels
(`--log-level`); uvicorn is started with `log_config=None`, so its loggers reach the same handler.
`RequestLog` (registered in app.py) is the ASGI middleware writing the request lines; the token
counts come from `count`, which ServerMetrics.tokens calls for the request being answered (a
context variable: the counts of a request are its own).
"""
from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
from typing import Any, Dict, Optional

__all__ = ["configure", "RequestLog", "count", "FORMATS"]

FORMATS = ("text", "json")
log = logging.getLogger("edgellm.request")
_current: contextvars.ContextVar[Optional[Dict[str, int]]] = contextvars.ContextVar(
    "edgellm_request_tokens", default=None)
# the fields a request line carries beyond the message (LogRecord attributes)
_FIELDS = ("method", "path", "status", "prompt_tokens", "generated_tokens", "time_ms")


def count(prompt: int = 0, generated: int = 0) -> None:
    """Tokens of the request being answered (no-op outside one)."""
    rec = _current.get()
    if rec is not None:
        rec["prompt"] += prompt
        rec["generated"] += generated


def _stamp(record: logging.LogRecord) -> str:
    t = time.gmtime(record.created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z"


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"{_stamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        if getattr(record, "status", None) is not None:
            line += (f" prompt={record.prompt_tokens} generated={record.generated_tokens} "
                     f"time_ms={record.time_ms}")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: Dict[str, Any] = {"time": _stamp(record), "level": record.levelname,
                               "logger": record.name, "message": record.getMessage()}
        for k in _FIELDS:
            v = getattr(record, k, None)
            if v is not None:
                out[k] = v
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str = "info", fmt: str = "text", stream=None) -> None:
    """The root logger writes every line (edgellm's, uvicorn's) in `fmt` at `level` and above."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
        lg.setLevel(level.upper())


class RequestLog:
    """ASGI middleware: one INFO line per HTTP request once it is answered -- method, path,
    status, prompt / generated tokens, milliseconds."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rec = {"prompt": 0, "generated": 0}
        status = {"code": 0}
        token = _current.set(rec)
        t0 = time.perf_counter()

        async def send_status(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)
        try:
            await self.app(scope, receive, send_status)
        finally:
            _current.reset(token)
            ms = round((time.perf_counter() - t0) * 1000, 1)
            method, path = scope.get("method", "?"), scope.get("path", "?")
            log.info("%s %s %s", method, path, status["code"] or "-",
                     extra={"method": method, "path": path, "status": status["code"],
                            "prompt_tokens": rec["prompt"], "generated_tokens": rec["generated"],
                            "time_ms": ms})
