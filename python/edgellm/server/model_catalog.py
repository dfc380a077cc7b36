"""Which models a many-model server knows, and the names a request's `model` may use for each.

    catalog = ModelCatalog.build([("smollm2", "/cache/SmolLM2-135M-Instruct.Q4_1.gguf")],
                                 models_dir="/m", aliases={"chat": "/m/gemma-3-270m-q4_k_m.gguf"})
    catalog.find("gemma-3-270m:q4_k_m")   # -> the entry "chat" (or a 404 listing the ids)

An entry's id is its first --alias, else the known model's name (`smollm2`), else the file's
stem. Case-insensitively it is also picked by its path as given, its file name and stem,
`NAME:latest` (Ollama's default tag), `BASE:QUANT` for a stem ending in a quantization type
(`smollm2-135m-instruct:q4_1`, `smollm2:q4_1`) and the known model's other spellings. A derived
name two entries share picks neither (400); two entries with one id are refused at build.
`--models-dir` is scanned again when a name is not found and when models are listed.
"""
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from .errors import APIError, invalid

# a stem's trailing quantization type: ".Q4_1", "-q4_k_m", "_IQ4_XS", "-F16", ...
_QUANT_TAIL = re.compile(r"^(.+?)[.\-_]((?:i?q\d[a-z0-9_]*)|f16|bf16|f32|mxfp4)$", re.IGNORECASE)


class CatalogError(ValueError):
    """The models given cannot be served together (two with one id, a missing file)."""


@dataclass
class ModelEntry:
    id: str                       # the id clients see
    path: str                     # the GGUF file
    source: str                   # as given: a path, a known name, or found in --models-dir
    aliases: List[str] = field(default_factory=list)   # --alias NAME=MODEL names, sorted
    names: List[str] = field(default_factory=list)     # its id, then its other aliases


def _model_file(p: Path) -> bool:
    """A *.gguf file that is no vision projector (mmproj*.gguf, found beside its model)."""
    name = p.name.lower()
    return name.endswith(".gguf") and not name.startswith("mmproj") and p.is_file()


def _key(name: str) -> str:
    key = name.strip().lower()
    return key[:-len(":latest")] if key.endswith(":latest") else key


def _known_names(path: Path) -> List[str]:
    """edgellm.models' name and other spellings when `path` is a known model's file."""
    from edgellm import models

    for spec in models.KNOWN_MODELS.values():
        if spec.filename.lower() == path.name.lower():
            return [spec.name] + models.other_names(spec.name)
    return []


def _derived_names(path: Path, known: List[str]) -> List[str]:
    stem = path.name[:-len(".gguf")] if path.name.lower().endswith(".gguf") else path.stem
    names = [stem, path.name] + known
    m = _QUANT_TAIL.match(stem)
    if m:
        names.append(f"{m.group(1)}:{m.group(2)}")
        names += [f"{k}:{m.group(2)}" for k in known[:1]]
    return names


class ModelCatalog:
    def __init__(self, models_dir: Optional[str] = None):
        self.models_dir = models_dir
        self.entries: List[ModelEntry] = []
        self._explicit: Dict[str, ModelEntry] = {}      # ids and --alias names
        self._derived: Dict[str, List[ModelEntry]] = {}  # every other name, with its holders
        self._paths: Dict[str, ModelEntry] = {}         # realpath -> entry
        self._on_added: List[Callable[[ModelEntry], None]] = []

    @classmethod
    def build(cls, models: Iterable[Tuple[str, str]], models_dir: Optional[str] = None,
              aliases: Optional[Dict[str, str]] = None) -> "ModelCatalog":
        """models: (as given, resolved path) pairs in command-line order; aliases: NAME -> a
        resolved path (one of the models, or another file, which is added)."""
        cat = cls(models_dir)
        alias_of: Dict[str, List[str]] = {}
        for name, path in (aliases or {}).items():
            alias_of.setdefault(os.path.realpath(path), []).append(name.strip())
        given = list(models)
        seen = {os.path.realpath(p) for _, p in given}
        for path in (aliases or {}).values():
            if os.path.realpath(path) not in seen:
                seen.add(os.path.realpath(path))
                given.append((path, path))
        for source, path in given:
            cat._add(source, path, sorted(alias_of.get(os.path.realpath(path), [])))
        cat.scan()
        if not cat.entries:
            raise CatalogError(f"no models to serve: {models_dir} has no *.gguf file"
                               if models_dir else "no models to serve")
        return cat

    def on_added(self, fn: Callable[[ModelEntry], None]) -> None:
        """fn(entry) for every entry a later scan of --models-dir adds."""
        self._on_added.append(fn)

    def scan(self) -> List[ModelEntry]:
        """Add the *.gguf files of --models-dir not yet known; the new entries."""
        if not self.models_dir:
            return []
        try:  # a model file, or llama-server's folder of one model and its mmproj*.gguf
            files = [(p, []) for p in sorted(Path(self.models_dir).iterdir()) if _model_file(p)] + [
                (ms[0], [d.name]) for d in sorted(Path(self.models_dir).iterdir()) if d.is_dir()
                for ms in [[p for p in sorted(d.iterdir()) if _model_file(p)]] if len(ms) == 1]
        except OSError as e:
            raise CatalogError(f"cannot read --models-dir {self.models_dir}: {e.strerror}") from None
        added = []
        for p, names in files:
            if os.path.realpath(p) not in self._paths:
                try:
                    added.append(self._add(str(p), str(p), names))
                except CatalogError:
                    pass  # its id is taken: the model given first keeps it
        for entry in added:
            self._added(entry)
        return added

    def _added(self, entry: ModelEntry) -> None:
        for fn in self._on_added:
            fn(entry)

    def _add(self, source: str, path: str, aliases: List[str]) -> ModelEntry:
        real = os.path.realpath(path)
        if real in self._paths:  # the same file twice: one entry
            return self._paths[real]
        p = Path(path)
        known = _known_names(p)
        derived = _derived_names(p, known)
        typed = Path(source).name != p.name and os.sep not in source  # "smollm2", not a path
        ident = aliases[0] if aliases else (known[0] if known else (source if typed else derived[0]))
        for name in [ident] + aliases:
            holder = self._explicit.get(_key(name))
            if holder is not None:
                raise CatalogError(f"two models are named {name!r}: {holder.path} and {path}; "
                                   "give one of them another name with --alias NAME=MODEL")
        entry = ModelEntry(id=ident, path=path, source=source, aliases=list(aliases),
                           names=[ident] + [a for a in aliases if a != ident])
        self.entries.append(entry)
        self._paths[real] = entry
        self._explicit.update((_key(name), entry) for name in [ident] + aliases)
        for name in [source, path] + derived:  # what the command line said, the path
            holders = self._derived.setdefault(_key(name), [])
            if entry not in holders:
                holders.append(entry)
        return entry

    # --- Ollama's /api/pull, /api/copy, /api/create, /api/delete (server/ollama_api.py) ---
    def add(self, source: str, path: str, name: Optional[str] = None) -> ModelEntry:
        """Serve one more file (the entry of that file when it is served already), as `name`
        when given (a pulled hf.co/USER/REPO:QUANT keeps the name it was pulled by)."""
        entry = self._paths.get(os.path.realpath(path))
        if entry is None:
            entry = self._add(source, path, [name] if name else [])
            self._added(entry)
        return entry

    def add_name(self, name: str, entry: ModelEntry) -> None:
        """`name` picks `entry` from now on."""
        holder = self._explicit.get(_key(name))
        if holder is not None and holder is not entry:
            raise CatalogError(f"the name {name!r} is taken by the model {holder.id}")
        self._explicit[_key(name)] = entry
        if name not in entry.names:
            entry.names.append(name)

    def remove_name(self, name: str) -> None:
        """Forget a name add_name gave (never an entry's id)."""
        entry = self._explicit.get(_key(name))
        if entry is not None and _key(entry.id) != _key(name):
            del self._explicit[_key(name)]
            entry.names = [n for n in entry.names if _key(n) != _key(name)]

    def remove(self, entry: ModelEntry) -> None:
        """Stop serving `entry`, under every name."""
        self.entries.remove(entry)
        self._paths = {k: e for k, e in self._paths.items() if e is not entry}
        self._explicit = {k: e for k, e in self._explicit.items() if e is not entry}
        for key in list(self._derived):
            self._derived[key] = [e for e in self._derived[key] if e is not entry]
            if not self._derived[key]:
                del self._derived[key]

    def names_of(self, entry: ModelEntry) -> List[str]:
        """The names that pick `entry`: its id and aliases, then the derived names no other
        entry shares (lower case; its path picks it too, not listed)."""
        out = list(entry.names)
        keys = {_key(n) for n in out}
        for key, holders in self._derived.items():
            if holders == [entry] and key not in keys and key not in self._explicit \
                    and "/" not in key and os.sep not in key:  # paths: meta.path says it
                out.append(key)
                keys.add(key)
        return out

    @property
    def ids(self) -> List[str]:
        return [e.id for e in self.entries]

    def find(self, name: str) -> ModelEntry:
        """The entry `name` picks; a 404 `model_not_found` listing the ids when none, a 400
        when it is ambiguous."""
        key = _key(name)
        for attempt in (0, 1):  # not found: scan --models-dir, then look again
            holders = [self._explicit[key]] if key in self._explicit else self._derived.get(key, [])
            if len(holders) == 1:
                return holders[0]
            if len(holders) > 1:
                raise invalid(f"the model name {name!r} is ambiguous: it names "
                              f"{', '.join(e.id for e in holders)}; use one of those ids",
                              "model", "model_ambiguous")
            if attempt == 0 and not self._scan_quietly():
                break
        raise APIError(404, f"the model {name!r} does not exist; this server has "
                            f"{', '.join(self.ids)}", "invalid_request_error", "model",
                       "model_not_found")

    def _scan_quietly(self) -> bool:
        """scan(), True when it added a model; an unreadable --models-dir adds none."""
        try:
            return bool(self.scan())
        except CatalogError:
            return False
