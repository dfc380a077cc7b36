"""The HTTP side of a many-model server: which model a request is for, and the routes that
speak of every model at once (/v1/models, /health, /metrics, llama-server's /models/load and
/models/unload).

`dispatch` (the app's fallback route) takes the body's `model` (or `?model=`; else the first
model), waits until that model is loaded (model_pool.py) and hands the request to its own routes
(app.model_routes over its EngineHost), holding the model until the answer ends, a stream
included. Ollama's `keep_alive` is taken out of the body here. A client that leaves while its
model loads is dropped; the load goes on. A path that is no model's route is a 404 with nothing
loaded."""
import asyncio
import json
import logging
import time
from typing import Any, Callable, Dict, List, Optional

from pydantic import Field
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Match, Route, Router

from . import lora_api
from .config import parse_keep_alive
from .errors import APIError, invalid
from .lifecycle import CLIENT_CLOSED, read_json
from .limits import replay
from .metrics import ServerMetrics, _labels
from .model_catalog import ModelCatalog, ModelEntry
from .model_pool import LOADED, SERVER_KEEP_ALIVE, ModelPool, ModelSlot
from .routes import engine_meta, model_card
from .sse import ClientGone, race
from .wire import Wire, parse

log = logging.getLogger("edgellm.server")

_BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")


class ModelName(Wire):
    """The body of POST /models/load and /models/unload (llama-server's router mode)."""
    model: str = Field(min_length=1)


class ModelRouter:
    def __init__(self, catalog: ModelCatalog, pool: ModelPool,
                 model_routes: Callable[[Any], List[Route]], metrics: ServerMetrics):
        self.catalog = catalog
        self.pool = pool
        self.metrics = metrics
        self._model_routes = model_routes        # EngineHost -> that model's routes
        self._apps: Dict[str, Router] = {}
        self.started = time.time()
        catalog.on_added(pool.slot)

    @property
    def default(self) -> ModelEntry:
        return self.catalog.entries[0]

    def _app(self, slot: ModelSlot) -> Router:
        app = self._apps.get(slot.entry.id)
        if app is None:
            app = self._apps[slot.entry.id] = Router(routes=self._model_routes(slot.host))
        return app

    def forget(self, entry_id: str) -> None:
        """Drop a removed model's routes (Ollama's /api/delete)."""
        self._apps.pop(entry_id, None)

    # --- every request for one model -------------------------------------------------------------
    async def dispatch(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        template = self._app(self.pool.slot(self.default))
        matches = {r.matches(scope)[0] for r in template.routes}
        if Match.FULL not in matches:  # answered in the app's envelope; nothing is loaded
            raise HTTPException(405 if Match.PARTIAL in matches else 404)
        request = Request(scope, receive)
        body = await request.body()  # server/limits.BodyLimit has bounded it
        fields = await read_json(request) if scope["method"] in _BODY_METHODS \
            and body.strip() else {}
        fields = fields if isinstance(fields, dict) else {}  # the route says what is wrong
        name = fields.get("model")
        if name is None:
            name = request.query_params.get("model")
        if name is not None and not isinstance(name, str):
            raise invalid("'model' must be a string: the name of one of this server's models",
                          "model", "invalid_type")
        keep_alive: Any = SERVER_KEEP_ALIVE
        if "keep_alive" in fields:
            try:
                keep_alive = parse_keep_alive(fields["keep_alive"])
            except ValueError as e:
                raise invalid(str(e), "keep_alive", "invalid_value") from None
            del fields["keep_alive"]
            body = json.dumps(fields, ensure_ascii=False).encode("utf-8")
            scope.setdefault("state", {})["keep_alive"] = keep_alive  # Ollama's load/unload forms
        entry = lora_api.route_model(self, name)  # a model, or an adapter's base (server/lora_api.py)
        slot = self.pool.slot(entry)
        loaded, t0 = slot.state == LOADED, time.monotonic()
        if not await self._acquire(slot, receive):
            self.metrics.request_done("http", CLIENT_CLOSED)
            return  # the client left while its model was loading: nothing to answer
        if not loaded:  # Ollama's answers report it (load_duration)
            scope.setdefault("state", {})["load_seconds"] = time.monotonic() - t0
        try:
            await self._app(slot)(scope, replay(body, receive), send)
        finally:
            self.pool.release(slot, keep_alive)

    async def _acquire(self, slot: ModelSlot, receive) -> bool:
        """pool.acquire(slot), given up (False) when the client disconnects first; a load it
        started goes on for the others."""
        acquiring = asyncio.ensure_future(self.pool.acquire(slot))
        try:
            await (acquiring if slot.state == LOADED else race(acquiring, receive))
            return True
        except (ClientGone, asyncio.CancelledError) as e:
            if not acquiring.cancelled() and acquiring.exception() is None:
                self.pool.release(slot)  # it was claimed just as the client left
            if isinstance(e, asyncio.CancelledError):
                raise
            log.info("client disconnected while %s was loading; request dropped", slot.entry.id)
            return False

    # --- the routes about every model ------------------------------------------------------------
    def routes(self, route: Callable[..., Route]) -> List[Route]:
        """Its own routes, each built by `route(path, endpoint, method, body, tag)` (app.route:
        in the OpenAPI document)."""
        return [route(path, fn, method, body, "models") for path, fn, method, body in [
            ("/v1/models", self.list_models, "GET", None), ("/models", self.list_models, "GET", None),
            ("/health", self.health, "GET", None), ("/v1/health", self.health, "GET", None),
            ("/models/load", self.load, "POST", ModelName),
            ("/models/unload", self.unload, "POST", ModelName)]] + [
            route("/metrics", self.metrics_text, "GET", None, "models",
                  response_class=PlainTextResponse)]

    def _card(self, slot: ModelSlot) -> dict:
        meta = engine_meta(slot.host.llm) if slot.state == LOADED and slot.host.llm else {}
        meta["path"] = meta.get("path") or slot.entry.path
        meta["memory_bytes"] = slot.bytes  # its memory plan's total (null until first planned)
        status: dict = {"value": slot.state}
        if slot.expires_at is not None:
            status["expires_at"] = int(slot.expires_at)
        if slot.error and slot.state != LOADED:
            status["failed"] = slot.error
        return model_card(slot.entry.id, slot.host.loaded_at or self.started,
                          self.catalog.names_of(slot.entry), self.pool.config.tag_list, meta,
                          status=status)

    async def list_models(self, request: Request) -> Response:
        self.catalog._scan_quietly()
        data = [self._card(self.pool.slot(e)) for e in self.catalog.entries] + lora_api.adapter_cards(self)
        self.metrics.request_done("models", 200)
        return JSONResponse({"object": "list", "data": data})

    async def health(self, request: Request) -> Response:
        """200 while the server can take requests (models load on demand); each model's state,
        unless an API key is set: /health needs none, so it names no models then."""
        if self.pool.config.api_key:
            return JSONResponse({"status": "ok"})
        return JSONResponse({"status": "ok", "models": {
            e.id: self.pool.slot(e).state for e in self.catalog.entries}})

    async def load(self, request: Request) -> Response:
        return await self._load_or_unload(request, "models_load")

    async def unload(self, request: Request) -> Response:
        return await self._load_or_unload(request, "models_unload")

    async def _load_or_unload(self, request: Request, endpoint: str) -> Response:
        slot = self.pool.slot(self.catalog.find(parse(ModelName, await read_json(request)).model))
        if endpoint == "models_load":
            await self.pool.acquire(slot)
            self.pool.release(slot)
        elif not await self.pool.unload(slot):
            raise APIError(409, f"the model {slot.entry.id} is {slot.state} with {slot.busy} "
                                "request(s) running; it unloads when idle",
                           "invalid_request_error", "model", "model_busy")
        self.metrics.request_done(endpoint, 200)
        return JSONResponse({"success": True, "model": slot.entry.id, "status": slot.state})

    async def metrics_text(self, request: Request) -> Response:
        from .llamacpp_api import llamacpp_metrics, not_supported

        if not self.pool.config.metrics_endpoint:
            raise not_supported("This server does not support metrics endpoint (start it with "
                                "--metrics)")
        slots = [self.pool.slot(e) for e in self.catalog.entries]
        stats = _summed([s.host.stats() for s in slots if s.state == LOADED])
        text = self.metrics.render(stats, None, False,
                                   models=[(s.entry.id, s.state == LOADED) for s in slots])
        text += llamacpp_metrics(stats, self.metrics) + _pool_metrics(slots)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")


def _summed(stats: List[Optional[dict]]) -> Optional[dict]:
    """The engines' counters and gauges added up (each is a count, a byte size or a rate)."""
    out: dict = {}
    for s in stats:
        for k, v in (s or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
            elif k not in out:
                out[k] = v
    return out or None


def _pool_metrics(slots: List[ModelSlot]) -> str:
    from .metrics import family

    def each(value, only=lambda s: True) -> list:
        return [(_labels([("model", s.entry.id)]), value(s)) for s in slots if only(s)]

    out: List[str] = []
    family(out, "edgellm_model_loaded", "gauge", "1 while the model is in memory",
           each(lambda s: 1 if s.state == LOADED else 0))
    family(out, "edgellm_model_memory_bytes", "gauge", "The model's memory plan (counted against "
           "--models-memory while it is loaded)",
           each(lambda s: s.bytes, lambda s: s.bytes is not None))
    family(out, "edgellm_model_requests_running", "gauge", "Requests holding the model now",
           each(lambda s: s.busy))
    family(out, "edgellm_model_loads_total", "counter", "Times the model was loaded",
           each(lambda s: s.loads))
    family(out, "edgellm_model_unloads_total", "counter", "Times the model was unloaded, by reason "
           "(keep_alive, evicted for room, request)",
           [(_labels([("model", s.entry.id), ("reason", r)]), n)
            for s in slots for r, n in sorted(s.unloads.items())])
    return "\n".join(out) + "\n"
