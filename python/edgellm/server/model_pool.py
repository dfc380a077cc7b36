"""Which of a many-model server's models are in memory: loaded on first use, kept for their
keep-alive, unloaded least recently used first to make room, never under their requests.

Each catalog entry has one `ModelSlot`: its EngineHost (the single-model server's, reused as
is), its planned bytes and its use counts. Every rule runs on the event loop, so a check and
the state change it leads to never interleave with another request's:

- `acquire(slot)` waits for the model to be loaded and claims it (`busy`); the first request
  starts the load, later ones wait on the same load.
- A model loads only when the budget has room for its plan (`planner(config)`, from
  edgellm.memory_plan) beside the models loaded or loading, and fewer than `max_loaded` are;
  else idle models are unloaded, least recently used first; when every other one is busy the
  request waits (up to `wait_timeout`, then 503). A plan larger than the whole budget is a 503
  at once, naming both numbers.
- Idle = no request holds it or waits for it. An idle model stays for its keep-alive (the last
  request's `keep_alive`, else --keep-alive, as Ollama's): None for ever, 0 not at all.
- A failed load answers every waiting request (503 when the engine's memory check refused,
  else 500) and leaves the slot unloaded; the next request tries again.
- A model whose file changed on disk (LLM.model_file_state) is loaded again before its next
  request: rewritten in place ("changed": its running requests fail with 503) once those end,
  renamed over ("replaced": the loaded one is intact) once no request uses it.
- One transition at a time: unloaded -> loading -> loaded -> unloading -> unloaded. A load waits
  for an unload under way (the closing engine holds its memory until then); only the transition
  that set a state moves it on.
"""
import asyncio
import logging
import os
import re
import time
from dataclasses import replace
from typing import Any, Callable, Dict, List, Optional

from .admission import EngineHost, close_engine, engine_args
from .config import ServerConfig
from .errors import APIError
from .metrics import ServerMetrics
from .model_catalog import ModelEntry

log = logging.getLogger("edgellm.server")

UNLOADED, LOADING, LOADED, UNLOADING = "unloaded", "loading", "loaded", "unloading"
SERVER_KEEP_ALIVE = object()  # a request that gave no keep_alive: the server's --keep-alive


def _shutting_down() -> APIError:
    return APIError(503, "the server is shutting down", "unavailable_error", None, "shutting_down")


def _mib(n: Optional[int]) -> str:
    return "unknown" if n is None else f"{n / (1 << 20):.1f} MiB"


def default_planner(config: ServerConfig) -> int:
    """The bytes LLM(config's model and engine arguments) takes, from its memory plan (nothing
    is loaded: the GGUF header and tensor table are read)."""
    from edgellm.memory_plan import plan

    return plan(config.model_path or config.model, **engine_args(config)).total


def machine_budget() -> Optional[int]:
    """What the machine can give now (edgellm.memory_plan: MemAvailable, the cgroup's room or
    EDGELLM_MEMORY_LIMIT); None when it cannot be read."""
    from edgellm.memory_plan import machine_memory

    return machine_memory().available


class ModelSlot:
    def __init__(self, entry: ModelEntry, host: EngineHost):
        self.entry = entry
        self.host = host
        self.state = UNLOADED
        self.error: Optional[str] = None       # why the last load failed
        self.bytes: Optional[int] = None        # the memory plan's total, once planned
        self.busy = 0                           # requests running on it
        self.waiting = 0                        # requests waiting for it to load
        self.last_used = 0.0                    # monotonic time it was last released
        self.keep_alive: Optional[float] = None  # seconds after the last request; None = ever
        self.expires_at: Optional[float] = None  # wall-clock time of the keep-alive unload
        self.loads = 0
        self.unloads: Dict[str, int] = {}       # reason -> count (keep_alive, evicted, request)
        self._loading: Optional[asyncio.Future] = None
        self._unloading: Optional[asyncio.Future] = None  # the unload under way, if any
        self._timer: Optional[asyncio.TimerHandle] = None

    @property
    def idle(self) -> bool:
        return self.state == LOADED and self.busy == 0 and self.waiting == 0


class ModelPool:
    def __init__(self, config: ServerConfig, entries: List[ModelEntry],
                 loader: Callable[[ServerConfig], Any], params_factory: Callable[..., Any],
                 metrics: ServerMetrics, planner: Callable[[ServerConfig], int] = default_planner,
                 budget: Optional[int] = None, max_loaded: Optional[int] = None,
                 keep_alive: Optional[float] = 300.0, wait_timeout: Optional[float] = 600.0):
        self.config = config
        self.loader = loader
        self.params_factory = params_factory
        self.metrics = metrics
        self.planner = planner
        self.budget = budget                  # bytes for all loaded models; None = no limit
        self.max_loaded = max_loaded
        self.keep_alive = keep_alive
        self.wait_timeout = wait_timeout
        self.slots: Dict[str, ModelSlot] = {}
        self.closed = False
        # set (and dropped) whenever room may have freed; made on the event loop when first
        # waited on (Python 3.9's Event binds the loop it is made under)
        self._changed: Optional[asyncio.Event] = None
        for entry in entries:
            self.add(entry)

    def add(self, entry: ModelEntry) -> ModelSlot:
        # its projector: the --mmproj MODEL=PATH naming it (as given, by a name or its path),
        # else None (the one mmproj*.gguf beside its file, if any)
        mmproj = next((path for name, path in self.config.model_mmproj.items()
                       if name in (entry.source, *entry.names)
                       or os.path.realpath(name) == os.path.realpath(entry.path)), None)
        cfg = replace(self.config, model=entry.source, model_path=entry.path, alias=entry.id,
                      mmproj=mmproj)
        host = EngineHost(cfg, self.loader, self.params_factory, metrics=self.metrics)
        host.state = UNLOADED
        slot = ModelSlot(entry, host)
        slot.keep_alive = self.keep_alive
        self.slots[entry.id] = slot
        return slot

    def slot(self, entry: ModelEntry) -> ModelSlot:
        return self.slots.get(entry.id) or self.add(entry)

    # --- a request's claim ---------------------------------------------------------------------
    async def acquire(self, slot: ModelSlot) -> None:
        """Until `slot` is loaded; then it is claimed (busy) until release(slot)."""
        slot.waiting += 1
        try:
            await self._reload_if_stale(slot)
            while slot.state != LOADED:
                if self.closed:
                    raise _shutting_down()
                if slot._unloading is not None:  # its engine is still closing: then a load
                    await asyncio.shield(slot._unloading)
                    continue
                if slot._loading is None:
                    slot._loading = asyncio.ensure_future(self._load(slot))
                await asyncio.shield(slot._loading)  # a waiter leaving does not stop the load
        finally:
            slot.waiting -= 1
        slot.busy += 1
        self._cancel_timer(slot)

    async def _reload_if_stale(self, slot: ModelSlot) -> None:
        """Unloads `slot` when its model file changed since it was loaded (acquire then loads
        the file as it is now); a changed file's running requests are waited for (they fail at
        their next step), a replaced one's are not (the loaded model is intact: it serves them
        and this request)."""
        while slot.state == LOADED and not self.closed:
            state = _file_state(slot.host.llm)
            if state == "intact" or (state == "replaced" and slot.busy > 0):
                return
            if slot.busy == 0:
                log.warning("model %s: its file was %s on disk; loading it again", slot.entry.id,
                            "rewritten in place" if state == "changed" else "replaced")
                await self._unload(slot, "file_changed")
                return
            await self._change().wait()

    def release(self, slot: ModelSlot, keep_alive: Any = SERVER_KEEP_ALIVE) -> None:
        """The end of a request; `keep_alive` (seconds, None = for ever) is how long the model
        stays once idle, as Ollama's: the last request decides."""
        slot.busy -= 1
        slot.last_used = time.monotonic()
        slot.keep_alive = self.keep_alive if keep_alive is SERVER_KEEP_ALIVE else keep_alive
        if slot.busy == 0:
            self._schedule_expiry(slot)
            self._notify()

    # --- loading -------------------------------------------------------------------------------
    async def _load(self, slot: ModelSlot) -> None:
        try:
            if slot.bytes is None:
                slot.bytes = await asyncio.get_running_loop().run_in_executor(
                    None, self.planner, slot.host.config)
            await self._make_room(slot)
            slot.state, slot.error = LOADING, None
            slot.host.state = "loading"
            t0 = time.monotonic()
            await slot.host.load()
            if slot.host.state == "failed" and _is_memory_refusal(slot.host.error) \
                    and self._idle_others(slot) and not self.closed:
                # the machine has less than the budget said: free every idle model, try once more
                for other in self._idle_others(slot):
                    if other.idle:  # still, after the unloads before it
                        await self._unload(other, "evicted")
                slot.host.state = "loading"
                await slot.host.load()
            if slot.host.state == "ready" and not self.closed:
                slot.state = LOADED
                slot.loads += 1
                slot.last_used = time.monotonic()
                log.info("model %s loaded in %.2f s (%s planned)", slot.entry.id,
                         time.monotonic() - t0, _mib(slot.bytes))
                self._schedule_expiry(slot)  # no one may be waiting: a keep-alive of its own
                return
            error = slot.host.error
            slot.state = UNLOADED
            slot.host.close()
            slot.host.state = UNLOADED
            if self.closed:
                raise _shutting_down()
            slot.error = public_text(str(error))
            raise _load_error(slot, error)
        except APIError:
            if slot.state == LOADING:
                slot.state = UNLOADED
            raise
        except Exception as e:  # noqa: BLE001 - the planner failed: the file is not usable
            slot.state = UNLOADED
            slot.error = public_text(str(e))
            raise _load_error(slot, e) from None
        finally:
            slot._loading = None
            self._notify()

    async def _make_room(self, slot: ModelSlot) -> None:
        need = slot.bytes or 0
        if self.budget is not None and need > self.budget:
            raise APIError(503, f"the model {slot.entry.id} needs {need} bytes "
                                f"({_mib(need)}, its memory plan at --ctx-size "
                                f"{self.config.ctx_size or 'default'}, --parallel "
                                f"{self.config.parallel}) but the server may use {self.budget} "
                                f"bytes ({_mib(self.budget)}) for models in all; it cannot be "
                                f"loaded (a smaller -c / --kv-memory, or a larger "
                                f"--models-memory, would let it)",
                           "unavailable_error", "model", "model_too_large")
        deadline = None if not self.wait_timeout else time.monotonic() + self.wait_timeout
        while True:
            others = [s for s in self.slots.values()
                      if s is not slot and s.state in (LOADED, LOADING, UNLOADING)]
            used = sum(s.bytes or 0 for s in others)
            fits = self.budget is None or used + need <= self.budget
            if fits and (self.max_loaded is None or len(others) < self.max_loaded):
                return
            idle = sorted((s for s in others if s.idle), key=lambda s: s.last_used)
            if idle:
                log.info("unloading %s (idle since %.0f s) to make room for %s", idle[0].entry.id,
                         time.monotonic() - idle[0].last_used, slot.entry.id)
                await self._unload(idle[0], "evicted")
                continue
            changed = self._change()
            timeout = None if deadline is None else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                busy = ", ".join(f"{s.entry.id} ({_mib(s.bytes)}, {s.busy} running)"
                                 for s in others)
                raise APIError(503, f"no room to load {slot.entry.id} ({_mib(need)}): the "
                                    f"models in use hold {_mib(used)} of {_mib(self.budget)}"
                                    f"{'' if self.max_loaded is None else f' (at most {self.max_loaded} loaded)'}"
                                    f" and stayed busy for {self.wait_timeout:g} s: {busy}",
                               "unavailable_error", "model", "no_room_for_model",
                               headers={"Retry-After": "5"})
            try:
                await asyncio.wait_for(changed.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    # --- unloading -----------------------------------------------------------------------------
    async def unload(self, slot: ModelSlot) -> bool:
        """Unload `slot` now if it is idle (POST /models/unload); False when it is busy."""
        if slot._loading is not None:
            return False
        if slot._unloading is not None:
            await asyncio.shield(slot._unloading)
            return True
        if slot.state != LOADED:
            return True
        if not slot.idle:
            return False
        await self._unload(slot, "request")
        return True

    async def _unload(self, slot: ModelSlot, reason: str) -> None:
        assert slot.state == LOADED and slot.busy == 0 and slot._unloading is None, slot.entry.id
        self._cancel_timer(slot)
        slot.state = UNLOADING
        llm, slot.host.llm = slot.host.llm, None
        slot.host.state = UNLOADED
        done = slot._unloading = asyncio.get_running_loop().create_future()
        try:
            if llm is not None:  # closing writes queued cache pages: off the event loop
                await asyncio.get_running_loop().run_in_executor(None, close_engine, llm)
        finally:
            del llm
            # nothing else moves a slot out of UNLOADING (acquire waits on `done`), so the
            # slot is the unload's to finish
            slot.state = UNLOADED
            slot._unloading = None
            done.set_result(None)
            slot.unloads[reason] = slot.unloads.get(reason, 0) + 1
            log.info("model %s unloaded (%s)", slot.entry.id, reason)
            self._notify()

    def _schedule_expiry(self, slot: ModelSlot) -> None:
        self._cancel_timer(slot)
        if slot.keep_alive is None or slot.state != LOADED or self.closed:
            return
        delay = max(0.0, slot.keep_alive)
        slot.expires_at = time.time() + delay
        slot._timer = asyncio.get_running_loop().call_later(delay, self._expire, slot)

    def _cancel_timer(self, slot: ModelSlot) -> None:
        if slot._timer is not None:
            slot._timer.cancel()
        slot._timer = slot.expires_at = None

    def _expire(self, slot: ModelSlot) -> None:
        slot._timer = slot.expires_at = None

        async def unload() -> None:
            if slot.idle and not self.closed:  # a request may have claimed it since
                await self._unload(slot, "keep_alive")
        if slot.idle and not self.closed:
            asyncio.ensure_future(unload())

    def _idle_others(self, slot: ModelSlot) -> List[ModelSlot]:
        return [s for s in self.slots.values() if s is not slot and s.idle]

    def _change(self) -> asyncio.Event:
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def close(self) -> None:
        """At shutdown: every engine closed; a load under way closes its own when it ends."""
        self.closed = True
        for slot in self.slots.values():
            self._cancel_timer(slot)
            if slot._loading is not None:
                slot.host.state = "closed"
            else:
                slot.host.close()
                slot.state = UNLOADED


def _file_state(llm) -> str:
    """LLM.model_file_state() of a loaded engine (AsyncLLM holds its LLM as .llm); "intact" for
    an engine that cannot tell."""
    for obj in (llm, getattr(llm, "llm", None)):
        probe = getattr(obj, "model_file_state", None)
        if callable(probe):
            try:
                return probe()
            except Exception:  # noqa: BLE001 - a closed engine: nothing to reload
                return "intact"
    return "intact"


def _is_memory_refusal(e: Optional[BaseException]) -> bool:
    try:
        from edgellm.memory_plan import MemoryPlanError
    except ImportError:  # pragma: no cover - the package without its _core
        return False
    return isinstance(e, (MemoryPlanError, MemoryError))


_ABS_PATH = re.compile(r"(?<![\w.~])(?:[A-Za-z]:)?[/\\](?:[^\s'\"/\\]+[/\\])+([^\s'\"/\\:]*)")
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")


def public_text(message: str) -> str:
    """A load failure as clients may read it: absolute paths cut to their file names, and
    quoted text (what the engine read from the file: a symlink to /etc/passwd fails with its
    first bytes as the 'magic') replaced by '...'. The log keeps the whole message."""
    return _QUOTED.sub("'...'", _ABS_PATH.sub(r"\1", message))


def _load_error(slot: ModelSlot, e: Optional[BaseException]) -> APIError:
    if _is_memory_refusal(e):
        return APIError(503, f"the model {slot.entry.id} does not fit in memory: "
                             f"{public_text(str(e))}",
                        "unavailable_error", "model", "model_too_large")
    log.warning("loading the model %s (%s) failed: %s: %s", slot.entry.id, slot.entry.path,
                type(e).__name__, e)
    return APIError(500, f"loading the model {slot.entry.id} failed: "
                         f"{type(e).__name__}: {public_text(str(e))}", "server_error", "model",
                    "model_load_failed")
