"""LoRA adapters over HTTP (edgellm.lora holds them, per model): how a request picks one (the
routes that list, load and unload them: server/lora_routes.py).

A request picks adapters three ways; naming none gets the base alone:
- vLLM's: its OpenAI `model` is an adapter's name (lifecycle.read_json notes the body's `model`;
  `request_adapter`, which EngineHost.sampling_params calls, runs the request with that adapter
  at its loaded scale; with several models, `route_model` in the router's dispatch hands it to
  the adapter's base first);
- llama-server's `lora: [{"id": i, "scale": s}]` (ids in --lora / load order; adapters not
  listed are off) on the native routes, and edgellm's own `lora` (names and scales) where a
  route takes it: SamplingParams.lora, sampling_fields' table;
- an unknown name or id is a 404 naming it.

Routes (one model's; the body's or query's `model` picks the model as everywhere):
GET /lora-adapters (llama-server: [{id, path, scale}] plus name), POST /lora-adapters
([{id, scale}]: the default scales; llama-server's global switch, which here sets the scale a
request naming the adapter without one gets), POST /v1/load_lora_adapter {lora_name, lora_path}
and /v1/unload_lora_adapter {lora_name} (vLLM's). Unloading takes the name away at once; running
requests finish with the adapter (the engine holds it until they end).
"""
from __future__ import annotations

import contextvars
import time
from typing import Any, List, Optional

from .errors import APIError, invalid

# the `model` of the request being answered (vLLM's convention: it may name an adapter), noted by
# lifecycle.read_json (every route reads its body through it) in the request's own context
_REQUESTED_MODEL: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("edgellm_model", default=None)


def note_model(body: Any) -> None:
    """Remembers the body's `model` for request_adapter (called by lifecycle.read_json)."""
    name = body.get("model") if isinstance(body, dict) else None
    _REQUESTED_MODEL.set(name if isinstance(name, str) else None)


def not_found(e) -> APIError:
    return APIError(404, str(e), "invalid_request_error", "lora", "lora_not_found")


def _registry(llm):
    """The model's edgellm.lora.LoraRegistry (None for engines without one: test doubles)."""
    inner = getattr(llm, "llm", llm)  # AsyncLLM wraps an LLM
    client = getattr(inner, "engine_client", None)
    return getattr(client, "loras", None)


# --- picking an adapter ------------------------------------------------------------------------
def _adapters_of(slot) -> List[tuple]:
    """(name, path) of a model's adapters: the loaded registry's, or (not loaded yet) the ones
    its config loads with it."""
    reg = _registry(slot.host.llm) if slot.host.llm is not None else None
    if reg is not None:
        return [(a.name, a.path) for a in reg.loaded()]
    return [(name, path) for name, (path, _) in (loader_arg(slot.host.config) or {}).items()]


def route_model(router, name: Optional[str]):
    """The catalog entry a request's `model` names (the default without one); a name that is
    no model but an adapter of one picks that model (loaded on demand as any); request_adapter
    then runs the request with it."""
    if not name:
        return router.default
    try:
        return router.catalog.find(name)
    except APIError as e:
        if e.status != 404:
            raise
        for entry in router.catalog.entries:
            if any(n == name for n, _ in _adapters_of(router.pool.slot(entry))):
                return entry
        raise


def request_adapter(llm, kwargs: dict) -> None:
    """SamplingParams keyword arguments of a request: the adapter its `model` named (unless it
    names adapters itself), and every name or id checked now (404 naming it)."""
    reg = _registry(llm)
    named = _REQUESTED_MODEL.get()
    if named is not None and not kwargs.get("lora") and reg is not None \
            and (reg.has(named) or reg.was_unloaded(named)):
        kwargs["lora"] = named  # an unloaded one: the 404 below
    if kwargs.get("lora") is None or kwargs.get("lora") == []:
        return  # the base alone (llama.cpp clients send an empty list routinely)
    if reg is None:
        raise invalid("this model takes no LoRA adapters", "lora", "unsupported")
    from edgellm.lora import LoraNotFoundError

    try:
        reg.resolve(kwargs["lora"])
    except LoraNotFoundError as e:
        raise not_found(e) from None
    except ValueError as e:
        raise invalid(str(e), "lora") from None


def adapter_cards(router) -> List[dict]:
    """/v1/models entries of the models' adapters (vLLM's: parent = the base, root = the file)."""
    out = []
    for entry in router.catalog.entries:
        slot = router.pool.slot(entry)
        for name, path in _adapters_of(slot):
            out.append({"id": name, "object": "model", "created": int(slot.host.loaded_at or router.started),
                        "owned_by": "edgellm", "root": path, "parent": entry.id})
    return out


def host_cards(host, parent: str) -> List[dict]:
    """A single-model server's /v1/models entries of its adapters."""
    reg = _registry(host.llm) if host.llm is not None else None
    return [{"id": a.name, "object": "model", "created": int(host.loaded_at or time.time()), "owned_by": "edgellm",
             "root": a.path, "parent": parent} for a in (reg.loaded() if reg is not None else [])]


def loader_arg(config) -> Optional[dict]:
    """LLM(lora=...) from serve --lora NAME=PATH[:SCALE] (ServerConfig.lora: (name, path, scale))."""
    items = getattr(config, "lora", None) or []
    base = getattr(config, "lora_base", None)
    if base is not None and config.model_path != base:
        return None
    return {name: (path, scale) for name, path, scale in items} or None
