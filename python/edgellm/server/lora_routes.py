"""LoRA adapters' own routes: llama-server's GET/POST /lora-adapters and vLLM's
POST /v1/load_lora_adapter and /v1/unload_lora_adapter (the per-request choice of an adapter is
server/lora_api.py's, which admission and lifecycle use; these routes read their bodies through
lifecycle.read_json)."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from .errors import APIError, invalid
from .lifecycle import read_json
from .lora_api import _registry, not_found
from .wire import Wire, parse


class LoadLoraBody(Wire):
    """vLLM's POST /v1/load_lora_adapter."""
    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    model: Optional[str] = None


class UnloadLoraBody(Wire):
    """vLLM's POST /v1/unload_lora_adapter (lora_int_id accepted, unused)."""
    lora_name: str = Field(min_length=1)
    lora_int_id: Optional[int] = None
    model: Optional[str] = None


class ScaleEntry(Wire):
    id: int = Field(ge=0)
    scale: float


# --- routes ------------------------------------------------------------------------------------
class LoraRoutes:
    def __init__(self, host):
        self.host = host

    def _reg(self):
        reg = _registry(self.host.require_ready())
        if reg is None:
            raise invalid("this model takes no LoRA adapters", None, "unsupported")
        return reg

    def endpoints(self) -> list:
        """(path, endpoint, method, request model, tag) of each route."""
        return [("/lora-adapters", self.list_adapters, "GET", None, "llama.cpp"),
                ("/lora-adapters", self.set_scales, "POST", None, "llama.cpp"),
                ("/v1/load_lora_adapter", self.load, "POST", LoadLoraBody, "vLLM"),
                ("/v1/unload_lora_adapter", self.unload, "POST", UnloadLoraBody, "vLLM")]

    async def list_adapters(self, request: Request) -> Response:
        return JSONResponse([{"id": a.id, "path": a.path, "scale": a.scale, "name": a.name}
                             for a in self._reg().loaded()])

    async def set_scales(self, request: Request) -> Response:
        body = await read_json(request)
        if not isinstance(body, list):
            raise invalid("expected a list of {\"id\": int, \"scale\": number}", None, "invalid_type")
        entries = [parse(ScaleEntry, item) for item in body]
        reg = self._reg()
        by_id = {a.id: a for a in reg.loaded()}
        for e in entries:
            if e.id not in by_id:
                raise APIError(404, f"LoRA adapter id {e.id} is not loaded (loaded: "
                                    f"{', '.join(f'{a.id}: {a.name}' for a in by_id.values()) or 'none'})",
                               "invalid_request_error", "id", "lora_not_found")
        for e in entries:
            reg.set_scale(by_id[e.id].name, e.scale)
        return await self.list_adapters(request)

    async def load(self, request: Request) -> Response:
        body = parse(LoadLoraBody, await read_json(request))
        reg = self._reg()
        if reg.has(body.lora_name):
            raise invalid(f"The lora adapter '{body.lora_name}' has already been loaded.", "lora_name",
                          "lora_already_loaded")
        try:  # the file is read and checked in a worker thread
            await asyncio.get_running_loop().run_in_executor(None, reg.load, body.lora_name, body.lora_path)
        except ValueError as e:  # ModelFormatError / InvalidRequestError: a bad or foreign file
            raise invalid(str(e), "lora_path", "invalid_lora_adapter") from None
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    async def unload(self, request: Request) -> Response:
        body = parse(UnloadLoraBody, await read_json(request))
        from edgellm.lora import LoraNotFoundError

        try:
            self._reg().unload(body.lora_name)
        except LoraNotFoundError as e:
            raise not_found(e) from None
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")


def routes(host, route: Callable[..., Any]) -> list:
    """The routes over one model's EngineHost, each made by app.route."""
    r = LoraRoutes(host)
    return [route(path, fn, method, body, tag) for path, fn, method, body, tag in r.endpoints()]
