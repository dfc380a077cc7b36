"""LoRA adapters by name, for one engine (docs/formats.md §1.8; the engine's side is
cpp/src/model/lora.h): `LLM(model, lora={"name": path or (path, scale)})`, `llm.load_lora`,
`llm.unload_lora`, and a request's `SamplingParams(lora=...)`.

A request's `lora` names the adapters it runs with; adapters it does not name are off (the base
alone when it names none — unlike llama-server, which applies every loaded adapter to such a
request). Its forms: "name"; a list of names and/or (name, scale) pairs and/or
{"name": ..., "scale": ...} objects and/or llama-server's {"id": i, "scale": s} (ids in load
order); a {name: scale} dict. A name's scale defaults to the one it was loaded with. Unloading removes the name at once (new requests naming it fail with
`LoraNotFoundError`); requests already running keep the adapter's weights until they finish.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._core import InvalidRequestError
from .validation import fail

__all__ = ["LoraNotFoundError", "LoadedLora", "LoraRegistry", "check_lora_spec"]


class LoraNotFoundError(InvalidRequestError):
    """A request or an unload names an adapter that is not loaded (the server's 404)."""

    def __init__(self, name: str, loaded: List[str]):
        self.lora_name = name
        have = ", ".join(loaded) if loaded else "none"
        super().__init__(f"LoRA adapter {name if name.startswith('id ') else repr(name)} is not loaded "
                         f"(loaded: {have})")
        self.param = "lora"
        self.code = "lora_not_found"


@dataclass(frozen=True)
class LoadedLora:
    id: int        # its position among the loaded ones, in load order (llama-server's ids)
    name: str
    path: str
    scale: float   # the default scale of requests that name it without one
    rank: int
    alpha: float
    targets: Tuple[str, ...]
    nbytes: int
    adapter: Any   # the engine's _core.LoraAdapter

    def describe(self) -> dict:
        return {"id": self.id, "name": self.name, "path": self.path, "scale": self.scale, "rank": self.rank,
                "alpha": self.alpha, "n_tensors": len(self.targets), "bytes": self.nbytes}


def _scale(v, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise fail(f"{what}: scale must be a finite number, got {v!r}", "lora")
    return float(v)


def _name(v, what: str) -> str:
    if not isinstance(v, str) or not v:
        raise fail(f"{what}: an adapter name must be a non-empty string, got {v!r}", "lora")
    return v


def _id(v, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise fail(f"{what}: an adapter id must be an integer >= 0, got {v!r}", "lora")
    return v


def check_lora_spec(spec, name: str = "lora") -> Optional[List[Tuple[Any, Optional[float]]]]:
    """A request's `lora` as [(name or id, scale or None)], checked for shape only
    (InvalidRequestError naming what is wrong); None for none. sampling_fields' rule for it."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return [(_name(spec, name), None)]
    if isinstance(spec, Mapping):
        return [(_name(k, name), _scale(v, f"{name}[{k!r}]")) for k, v in spec.items()]
    if not isinstance(spec, (list, tuple)):
        raise fail(f"{name} must be an adapter name, a list or a {{name: scale}} object, got "
                   f"{type(spec).__name__}", "lora")
    out = []
    for i, item in enumerate(spec):
        what = f"{name}[{i}]"
        if isinstance(item, str):
            out.append((_name(item, what), None))
        elif isinstance(item, Mapping):
            keys = set(item)
            if keys - {"name", "id", "scale"} or len(keys & {"name", "id"}) != 1:
                raise fail(f"{what}: expected {{'name' or 'id', 'scale'}}, got keys {sorted(map(str, item))}", "lora")
            key = _name(item["name"], what) if "name" in item else _id(item["id"], what)
            out.append((key, _scale(item["scale"], what) if "scale" in item else None))
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            out.append((_name(item[0], what), _scale(item[1], what)))
        else:
            raise fail(f"{what}: expected a name, (name, scale) or {{'name' or 'id', 'scale'}}, got {item!r}", "lora")
    keys = [k for k, _ in out]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise fail(f"{name} names adapter {dup!r} twice", "lora")
    return out


class LoraRegistry:
    """The adapters loaded into one engine, by name (thread-safe)."""

    def __init__(self, engine):
        self._engine = engine
        self._lock = threading.Lock()
        self._by_name: Dict[str, LoadedLora] = {}
        self._gone: set = set()  # names unloaded (and not loaded again): the server's 404s
        self._next_id = 0

    def load(self, name: str, path, scale: float = 1.0) -> LoadedLora:
        """Opens `path` (a GGUF LoRA adapter for this model) under `name`. ModelFormatError for a
        bad or foreign file; InvalidRequestError for a name already loaded."""
        _name(name, "load_lora")
        scale = _scale(scale, f"load_lora({name!r})")
        path = os.fspath(path)
        with self._lock:
            if name in self._by_name:
                raise InvalidRequestError(f"a LoRA adapter named {name!r} is already loaded "
                                          f"({self._by_name[name].path}); unload it first")
        ad = self._engine.load_lora(path)  # GIL released: the file is read and checked
        with self._lock:
            if name in self._by_name:
                raise InvalidRequestError(f"a LoRA adapter named {name!r} is already loaded")
            entry = LoadedLora(self._next_id, name, path, scale, int(ad.max_rank), float(ad.alpha),
                               tuple(ad.targets), int(ad.nbytes), ad)
            self._next_id += 1
            self._by_name[name] = entry
            self._gone.discard(name)
            return entry

    def unload(self, name: str) -> LoadedLora:
        with self._lock:
            entry = self._by_name.pop(name, None)
            if entry is None:
                raise LoraNotFoundError(name, list(self._by_name))
            self._gone.add(name)
            return entry

    def was_unloaded(self, name: str) -> bool:
        """`name` was an adapter here and was unloaded (not loaded again since)."""
        with self._lock:
            return name in self._gone

    def get(self, name: str) -> LoadedLora:
        with self._lock:
            entry = self._by_name.get(name)
            if entry is None:
                raise LoraNotFoundError(name, list(self._by_name))
            return entry

    def has(self, name: str) -> bool:
        with self._lock:
            return name in self._by_name

    def loaded(self) -> List[LoadedLora]:
        """In load order (llama-server's ids)."""
        with self._lock:
            return sorted(self._by_name.values(), key=lambda e: e.id)

    def set_scale(self, name: str, scale: float) -> None:
        with self._lock:
            entry = self._by_name.get(name)
            if entry is None:
                raise LoraNotFoundError(name, list(self._by_name))
            self._by_name[name] = LoadedLora(**{**entry.__dict__, "scale": _scale(scale, name)})

    def resolve(self, spec) -> Optional[List[Tuple[Any, float]]]:
        """A request's `lora` as the engine takes it: [(_core.LoraAdapter, scale)] or None."""
        uses = check_lora_spec(spec)
        if not uses:
            return None
        with self._lock:
            out = []
            for key, scale in uses:
                entry = self._find(key)
                out.append((entry.adapter, entry.scale if scale is None else scale))
            return out

    def _find(self, key) -> LoadedLora:
        """By name, or by id (llama-server's per-request form); LoraNotFoundError otherwise."""
        if isinstance(key, int):
            entry = next((e for e in self._by_name.values() if e.id == key), None)
            if entry is None:
                raise LoraNotFoundError(f"id {key}", [f"{e.id}: {e.name}" for e in self._by_name.values()])
            return entry
        entry = self._by_name.get(key)
        if entry is None:
            raise LoraNotFoundError(key, list(self._by_name))
        return entry


def lora_arg(spec) -> Dict[str, Tuple[str, float]]:
    """LLM(..., lora=...)'s argument: {name: path or (path, scale)} -> {name: (path, scale)}."""
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise InvalidRequestError("lora must be a dict {name: path or (path, scale)}")
    out = {}
    for name, v in spec.items():
        _name(name, "lora")
        if isinstance(v, (str, os.PathLike)):
            out[name] = (os.fspath(v), 1.0)
        elif isinstance(v, (list, tuple)) and len(v) == 2 and isinstance(v[0], (str, os.PathLike)):
            out[name] = (os.fspath(v[0]), _scale(v[1], f"lora[{name!r}]"))
        else:
            raise InvalidRequestError(f"lora[{name!r}] must be a path or (path, scale), got {v!r}")
    return out


def parse_cli(values) -> List[Tuple[str, str, float]]:
    """--lora NAME=PATH[:SCALE] (or a bare PATH, named by its file stem) -> [(name, path, scale)];
    ValueError naming the bad one."""
    out, names = [], set()
    for v in values:
        name, sep, rest = v.partition("=")
        if not sep:
            name, rest = os.path.splitext(os.path.basename(v))[0], v
        path, scale = rest, 1.0
        head, colon, tail = rest.rpartition(":")
        if colon and head:
            try:
                path, scale = head, float(tail)
            except ValueError:
                path, scale = rest, 1.0  # a path with a colon in it
        if not name or not path:
            raise ValueError(f"{v!r}: give NAME=PATH[:SCALE]")
        if name in names:
            raise ValueError(f"{v!r}: the name {name!r} is given twice")
        names.add(name)
        out.append((name, path, scale))
    return out
