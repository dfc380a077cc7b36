"""Errors the server answers with, in OpenAI's envelope:

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

Every failure a client can cause or meet (bad JSON, wrong types, context overflow, full queue,
model still loading, timeout, missing key) becomes an APIError with its HTTP status, so a
handler never lets a bare exception turn into an opaque 500.
"""
from typing import Dict, Optional

from starlette.responses import JSONResponse


class APIError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type,
                          "param": self.param, "code": self.code}}

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
