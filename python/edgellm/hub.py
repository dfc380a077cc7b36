"""Models by name beyond edgellm's known ones: Hugging Face repositories and local copies.

    edgellm pull hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M
    edgellm run  hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M "Hi"
    edgellm cp   hf.co/bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M smol && edgellm run smol "Hi"

A repository is named as Ollama and llama.cpp's `-hf` name it: `hf.co/USER/REPO[:QUANT]`, also
`huggingface.co/...`, `https://huggingface.co/USER/REPO`, `hf://USER/REPO[:QUANT]` and a bare
`USER/REPO[:QUANT]` that is no path on disk. The quant picks the file among the repository's
*.gguf as llama.cpp does (`pick_files`): the first model file whose name holds QUANT followed by
`.` or `-`, case-insensitively; without one Q4_K_M, else Q8_0, else the first model file. A model
split in `-0000i-of-0000N.gguf` files is fetched whole; the repository's mmproj*.gguf (the
vision projector) is fetched beside the model when there is one.

Files come through `huggingface_hub` into its cache (HF_HOME / HF_HUB_CACHE; HF_ENDPOINT and
HF_TOKEN honoured; a connection dropped mid-file is resumed with a Range request). What a name
stands for is kept in `names.json` in edgellm's model cache (edgellm.models.cache_dir()): name ->
files, digest, size, time; `edgellm cp` adds a name there, `edgellm rm` removes one and deletes
the files no other name uses. So a pulled name is found again without the network.

`pull(name, progress)` is the one entry point for downloads (known models too, through
edgellm.models.fetch); progress(status, completed, total) gets Ollama's /api/pull steps:
"pulling manifest", "pulling <digest>" with the bytes of each file, "verifying sha256 digest",
"writing manifest", "success".
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import models
from .download_progress import ByteBar, ProgressFn

__all__ = ["HubRef", "LocalModel", "HubError", "parse_ref", "pick_files", "pull", "resolve",
           "local_models", "find", "copy", "remove", "canonical"]

_LATEST = "latest"
_DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")  # llama.cpp's picks when no quant is named
_NAMES_FILE = "names.json"
_thread_lock = threading.Lock()  # names.json: read-modify-write within this process


class HubError(models.ModelFetchError):
    """A repository, quant or file that cannot be pulled (not found, no GGUF, unreachable)."""


# ---- names -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HubRef:
    repo: str                # USER/REPO
    quant: Optional[str]     # upper case; None: llama.cpp's default pick
    bare: bool = False       # typed without hf.co/: it could have been meant as a path

    @property
    def name(self) -> str:
        """The canonical name: hf.co/USER/REPO:QUANT (Ollama's spelling; :latest without one)."""
        return f"hf.co/{self.repo}:{self.quant or _LATEST}"


_HUB_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "https://hf.co/",
                 "http://hf.co/", "huggingface.co/", "hf.co/", "hf://")
_REPO_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
_REF = re.compile(rf"^({_REPO_PART})/({_REPO_PART})(?::([A-Za-z0-9._-]+))?$")


def parse_ref(name: str) -> Optional[HubRef]:
    """The repository `name` spells, or None when it is no repository name. A bare USER/REPO
    counts only when no such path exists and it does not end in .gguf (a mistyped file)."""
    text = str(name).strip()
    prefixed = False
    for prefix in _HUB_PREFIXES:
        if text.lower().startswith(prefix):
            text, prefixed = text[len(prefix):], True
            break
    if not prefixed and (text.lower().endswith(".gguf") or Path(text).expanduser().exists()):
        return None
    text = text.rstrip("/")
    m = _REF.match(text)
    if m is None:
        if prefixed:
            raise models.UnknownModelError(
                f"{name!r} is not a Hugging Face model name; give hf.co/USER/REPO[:QUANT]")
        return None
    quant = m.group(3)
    if quant and quant.lower() == _LATEST:
        quant = None
    # quants are matched case-insensitively and written as llama.cpp's file names write them
    return HubRef(f"{m.group(1)}/{m.group(2)}", quant.upper() if quant else None, bare=not prefixed)


def canonical(name: str) -> str:
    """The name `name` is stored and listed under: hf.co/USER/REPO:QUANT for a repository, a
    known model's registry name, else the name with Ollama's default tag (`smol` -> smol:latest)."""
    ref = parse_ref(name)
    if ref is not None:
        return ref.name
    base = _strip_latest(name)
    try:
        return models.canonical_name(base)
    except models.UnknownModelError:
        pass
    text = name.strip()
    if not text or any(c.isspace() for c in text) or text.lower().endswith(".gguf") or "/" in text:
        raise models.UnknownModelError(
            f"{name!r} cannot name a model: use letters, digits, '.', '-', '_' and one ':TAG'")
    return text if ":" in text else f"{text}:{_LATEST}"


def _strip_latest(name: str) -> str:
    text = name.strip()
    return text[:-len(":" + _LATEST)] if text.lower().endswith(":" + _LATEST) else text


# ---- which files of a repository -------------------------------------------------------------

_SPLIT = re.compile(r"^(.+)-(\d{5})-of-(\d{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


def _split_info(path: str) -> Tuple[str, str, int, int]:
    """(prefix, quant tag, part index, part count) of a .gguf path, as llama.cpp reads them."""
    prefix = path[:-len(".gguf")] if path.lower().endswith(".gguf") else path
    index = count = 1
    m = _SPLIT.match(prefix)
    if m:
        prefix, index, count = m.group(1), int(m.group(2)), int(m.group(3))
    t = _TAG.search(prefix)
    return prefix, (t.group(1).upper() if t else ""), index, count


def _tag_bits(tag: str) -> int:
    """The bits a quant tag names: Q4_K_M -> 4, F16 -> 16, IQ4_XS -> 4, BF16 -> 16."""
    m = re.search(r"\d+", tag)
    return int(m.group(0)) if m else 0


def _bits(path: str) -> int:
    return _tag_bits(_split_info(path)[1])


def _is_model_file(path: str) -> bool:
    base = path.rsplit("/", 1)[-1].lower()
    return base.endswith(".gguf") and "mmproj" not in base and "imatrix" not in base


def _first_part(path: str) -> bool:
    _, _, index, count = _split_info(path)
    return count <= 1 or index == 1


def pick_files(paths: Sequence[str], quant: Optional[str]) -> Tuple[List[str], Optional[str]]:
    """(the model's files in order -- one, or every part of a split model --, the mmproj file
    or None) among a repository's file paths, for `quant` (None: Q4_K_M, else Q8_0, else the
    first model file). HubError names the quants there are when none matches."""
    candidates = [p for p in paths if _is_model_file(p)]
    if not candidates:
        raise HubError("the repository has no GGUF model file")
    primary = None
    for tag in ([quant] if quant else list(_DEFAULT_QUANTS)):
        pattern = re.compile(re.escape(tag) + r"[.-]", re.IGNORECASE)
        primary = next((p for p in candidates if _first_part(p) and pattern.search(p)), None)
        if primary:
            break
    if primary is None and not quant:
        primary = next((p for p in candidates if _first_part(p)), None)
    if primary is None:
        tags = sorted({_split_info(p)[1] for p in candidates if _split_info(p)[1]})
        raise HubError(f"no GGUF file for quant {quant!r}; the repository has "
                       f"{', '.join(tags) or ', '.join(candidates)}")
    prefix, _, _, count = _split_info(primary)
    if count > 1:
        parts = sorted((p for p in candidates if _split_info(p)[0] == prefix and
                        _split_info(p)[3] == count), key=lambda p: _split_info(p)[2])
        if [_split_info(p)[2] for p in parts] != list(range(1, count + 1)):
            raise HubError(f"{primary} is part of {count} files but the repository has "
                           f"{len(parts)} of them")
    else:
        parts = [primary]
    # the projector in the model's folder whose quant is nearest the model's (llama.cpp's pick)
    folder = primary.rsplit("/", 1)[0] if "/" in primary else ""
    projectors = [p for p in paths if p.lower().endswith(".gguf") and "mmproj" in
                  p.rsplit("/", 1)[-1].lower() and (p.rsplit("/", 1)[0] if "/" in p else "") == folder]
    want = _tag_bits(quant) if quant else _bits(primary)
    mmproj = min(projectors, key=lambda p: abs(_bits(p) - want)) if projectors else None
    return parts, mmproj


# ---- the names file --------------------------------------------------------------------------

@dataclass
class LocalModel:
    """A name `list` shows and `run` takes, with the files it stands for."""
    name: str
    path: Path                          # the model file (the first part of a split model)
    digest: str                         # SHA-256 hex of the model file ("" when unknown)
    size: int                           # bytes of the model's files and its mmproj
    modified: float                     # epoch seconds
    source: str                         # what was pulled: a repository name or a known model
    files: List[Path] = field(default_factory=list)   # every file, mmproj included
    mmproj: Optional[Path] = None

    def to_json(self) -> dict:
        return {"path": str(self.path), "digest": self.digest, "size": self.size,
                "modified": self.modified, "source": self.source,
                "files": [str(f) for f in self.files],
                "mmproj": str(self.mmproj) if self.mmproj else None}

    @classmethod
    def from_json(cls, name: str, d: dict) -> "LocalModel":
        return cls(name=name, path=Path(d["path"]), digest=str(d.get("digest") or ""),
                   size=int(d.get("size") or 0), modified=float(d.get("modified") or 0),
                   source=str(d.get("source") or name),
                   files=[Path(f) for f in d.get("files") or [d["path"]]],
                   mmproj=Path(d["mmproj"]) if d.get("mmproj") else None)


def _names_path() -> Path:
    return models.cache_dir() / _NAMES_FILE


@contextmanager
def _names_locked():
    """names.json to this thread and process alone (a pull in the server and `edgellm cp` may
    run at once): a lock file beside it, through filelock (huggingface_hub's own dependency)."""
    with _thread_lock:
        try:
            from filelock import FileLock
        except ImportError:
            yield
            return
        path = _names_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            yield


def _read_names() -> Dict[str, LocalModel]:
    try:
        data = json.loads(_names_path().read_text(encoding="utf-8"))
        entries = data.get("models", {}) if isinstance(data, dict) else {}
        return {n: LocalModel.from_json(n, d) for n, d in entries.items() if isinstance(d, dict)}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise models.ModelFetchError(f"{_names_path()} is unreadable ({e}); remove it to start "
                                     "again (the model files stay where they are)") from None


def _write_names(names: Dict[str, LocalModel]) -> None:
    path = _names_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{_NAMES_FILE}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps({"version": 1, "models": {n: m.to_json() for n, m in names.items()}},
                              indent=1), encoding="utf-8")
    os.replace(tmp, path)


def _lookup(names: Dict[str, LocalModel], name: str) -> Optional[LocalModel]:
    try:
        key = canonical(name).lower()
    except models.UnknownModelError:
        return None
    return next((m for n, m in names.items() if n.lower() == key), None)


def _known(name: str) -> Optional[str]:
    try:
        return models.canonical_name(_strip_latest(name))
    except models.UnknownModelError:
        return None


def _known_entry(spec: "models.ModelSpec") -> Optional[LocalModel]:
    path = models.cache_dir() / spec.filename
    if not models.is_cached(spec.name):
        return None
    return LocalModel(name=f"{spec.name}:{_LATEST}", path=path, digest=spec.sha256,
                      size=spec.size, modified=path.stat().st_mtime, source=spec.name,
                      files=[path])


def local_models() -> List[LocalModel]:
    """Every model on this machine by name, newest first: the known models that are fetched
    and the names pulled or copied (whose files still exist). Ollama's /api/tags lists these."""
    found = [m for m in (_known_entry(s) for s in models.KNOWN_MODELS.values()) if m]
    with _names_locked():
        found += [m for m in _read_names().values() if all(f.is_file() for f in m.files)]
    return sorted(found, key=lambda m: -m.modified)


def find(name: str) -> Optional[LocalModel]:
    """The local model `name` names (a known model that is fetched, a pulled or copied name),
    None when there is none. Nothing is downloaded."""
    known = _known(name)
    if known is not None:
        return _known_entry(models.KNOWN_MODELS[known])
    with _names_locked():
        m = _lookup(_read_names(), name)
    return m if m is not None and all(f.is_file() for f in m.files) else None


# ---- pulling ---------------------------------------------------------------------------------

def _file_bar(report: ProgressFn, status: str, size: Optional[int]):
    """A tqdm stand-in for huggingface_hub's download of one file: its bytes go to `report`."""

    class FileBytes:
        def __init__(self, *args, total=None, initial=0, **kwargs):
            self.total = total or size
            self.n = initial
            report(status, self.n, self.total)

        def update(self, n=1):
            self.n += n
            report(status, self.n, self.total)

        def close(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

    return FileBytes


def _hub_error(ref: HubRef, e: Exception) -> HubError:
    error = _hub_error_of(ref, e)
    if ref.bare:
        return HubError(f"{error} (no file {ref.repo} here, so it was taken as a Hugging Face "
                        "repository)")
    return error


def _hub_error_of(ref: HubRef, e: Exception) -> HubError:
    from huggingface_hub import constants, errors

    where = constants.ENDPOINT
    if isinstance(e, errors.GatedRepoError):
        return HubError(f"{ref.repo} is gated on {where}: accept its terms there and set HF_TOKEN")
    if isinstance(e, errors.RepositoryNotFoundError):
        return HubError(f"no repository {ref.repo} on {where} (or it is private: set HF_TOKEN)")
    if isinstance(e, errors.RevisionNotFoundError):
        return HubError(f"{ref.repo} on {where}: {e}")
    if isinstance(e, errors.HfHubHTTPError):
        return HubError(f"{where} answered {ref.repo}: {str(e).splitlines()[0]}")
    detail = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}"
    unreachable = isinstance(e, (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled)) or \
        any(word in type(e).__name__ for word in ("Connect", "Timeout", "Network"))
    if unreachable:
        return HubError(f"cannot reach {where} for {ref.repo} ({detail}); offline, only pulled "
                        "names run (edgellm list)")
    return HubError(f"pulling {ref.repo} from {where} failed ({detail})")


def _pull_repo(ref: HubRef, report: ProgressFn) -> LocalModel:
    try:
        from huggingface_hub import HfApi, hf_hub_download, try_to_load_from_cache
    except ImportError:
        raise HubError("pulling from Hugging Face needs the huggingface_hub package: "
                       "pip install huggingface_hub") from None
    report("pulling manifest", None, None)
    try:
        info = HfApi().model_info(ref.repo, files_metadata=True)
    except Exception as e:  # noqa: BLE001 -- every failure becomes one typed, worded error
        raise _hub_error(ref, e) from None
    siblings = {s.rfilename: s for s in info.siblings or []}
    try:
        parts, mmproj = pick_files(list(siblings), ref.quant)
    except HubError as e:
        raise HubError(f"{ref.repo}: {e}") from None
    wanted = parts + ([mmproj] if mmproj else [])

    def digest(f: str) -> str:
        s = siblings[f]
        return (s.lfs.sha256 if s.lfs else None) or s.blob_id or ""

    statuses = {f: f"pulling {(digest(f) or f)[:12]}" for f in wanted}
    for f in wanted:  # every file first, so one bar can show the whole model
        report(statuses[f], 0, siblings[f].size or 0)
    paths: List[Path] = []
    fresh: List[Tuple[Path, str]] = []  # downloaded now, with the sha256 the Hub states
    revision = info.sha or "main"
    for f in wanted:
        cached = try_to_load_from_cache(ref.repo, f, revision=revision)
        try:
            got = hf_hub_download(ref.repo, f, revision=revision,
                                  tqdm_class=_file_bar(report, statuses[f], siblings[f].size))
        except Exception as e:  # noqa: BLE001
            raise _hub_error(ref, e) from None
        path = Path(got)
        report(statuses[f], path.stat().st_size, path.stat().st_size)
        paths.append(path)
        lfs = siblings[f].lfs
        if not isinstance(cached, str) and lfs is not None and lfs.sha256:
            fresh.append((path, lfs.sha256))
    # huggingface_hub checks a download's size; the bytes are checked here, as Ollama does
    report("verifying sha256 digest", None, None)
    for path, expected in fresh:
        digest_now = models.sha256_of(path)
        if digest_now != expected.lower():
            _delete_file(path)
            raise HubError(f"{ref.repo}: {path.name} arrived with SHA-256 {digest_now}, the Hub "
                           f"states {expected}; the download was discarded")
    model_files = paths[:len(parts)]
    return LocalModel(name=ref.name, path=model_files[0], digest=digest(parts[0]),
                      size=sum(p.stat().st_size for p in paths), modified=time.time(),
                      source=ref.name, files=paths, mmproj=paths[-1] if mmproj else None)


class _NoteHandler(logging.Handler):
    """huggingface_hub's log lines (a dropped connection being resumed) as notes above the bar."""

    def __init__(self, bar: ByteBar):
        super().__init__(logging.INFO)
        self.bar = bar

    def emit(self, record: logging.LogRecord) -> None:
        self.bar.note("; ".join(ln.strip() for ln in record.getMessage().splitlines() if ln.strip()))


@contextmanager
def _hub_log_above(bar: Optional[ByteBar]):
    if bar is None:  # a caller's callback: huggingface_hub logs as it is configured to
        yield
        return
    try:
        import huggingface_hub.utils.logging  # noqa: F401 -- adds its handler: replace it after
    except ImportError:
        pass  # _pull_repo says what is missing
    log = logging.getLogger("huggingface_hub")
    saved = log.handlers[:], log.propagate
    log.handlers, log.propagate = [_NoteHandler(bar)], False
    try:
        yield
    finally:
        log.handlers, log.propagate = saved


def pull(name: str, progress: Optional[ProgressFn] = None) -> Path:
    """Fetch the model `name` (a known model or a Hugging Face repository name) and return the
    path of its model file. progress(status, completed, total) is called from this (the
    downloading) thread; None shows one bar of the bytes on stderr."""
    bar = None
    if progress is None:
        progress = bar = ByteBar(f"pulling {name}")
    try:
        return _pull(name, progress, bar)
    finally:
        if bar is not None:
            bar.close()


def _pull(name: str, progress: ProgressFn, bar: Optional[ByteBar]) -> Path:
    with _hub_log_above(bar):
        known = _known(name)
        if known is not None:
            spec = models.KNOWN_MODELS[known]
            path = models.fetch(known, progress=progress)
            progress(f"pulling {spec.sha256[:12]}", spec.size, spec.size)  # also when cached
        else:
            ref = parse_ref(name)
            if ref is None:
                raise models.UnknownModelError(
                    f"{name!r} is neither a known model ({', '.join(models.KNOWN_MODELS)}) nor a "
                    "Hugging Face repository (hf.co/USER/REPO[:QUANT])")
            entry = _pull_repo(ref, progress)
            progress("writing manifest", None, None)
            with _names_locked():
                names = _read_names()
                names[entry.name] = entry
                _write_names(names)
            path = entry.path
        progress("success", None, None)
        return path  # type: ignore[return-value]


def resolve(name: str, fetch: bool = True) -> Optional[Path]:
    """edgellm.models.resolve's step for names it does not know: a pulled or copied name ->
    its file; a repository name -> pulled first when `fetch` (else FileNotFoundError);
    None when `name` is neither."""
    known = _known(name)
    if known is not None:  # smollm2:latest
        return models.resolve(known, fetch=fetch)
    local = find(name)
    if local is None:
        ref = parse_ref(name)
        if ref is None:
            return None
        if not fetch:
            raise FileNotFoundError(f"{ref.name} is not pulled; run `edgellm pull {ref.name}`")
        pull(name)
        local = find(name)
        assert local is not None, name
    # a split model's first part: the loader finds the other parts beside it by their names
    # (gguf/gguf_file.h), as huggingface_hub lays them out in its snapshot folder
    return local.path


# ---- copy and remove -------------------------------------------------------------------------

def copy(source: str, destination: str) -> LocalModel:
    """`edgellm cp`: `destination` becomes another name of the model `source` names (no bytes
    are copied, as in Ollama). An existing `destination` name is replaced."""
    src = find(source)
    if src is None:
        raise models.UnknownModelError(f"model '{source}' not found")
    dest = canonical(destination)
    if _known(dest) is not None or parse_ref(dest) is not None:
        raise models.UnknownModelError(
            f"'{destination}' is a known model's or a repository's name; pick another name")
    entry = LocalModel(**{**src.__dict__, "name": dest, "modified": time.time()})
    with _names_locked():
        names = _read_names()
        for n in [n for n in names if n.lower() == dest.lower()]:
            del names[n]
        names[dest] = entry
        _write_names(names)
    return entry


def _hub_blob(path: Path) -> Optional[Path]:
    """The blob a huggingface_hub snapshot link points to (None for a plain file)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else None


def _delete_file(path: Path) -> None:
    """Delete a model file; in huggingface_hub's cache its snapshot link, the blob when no other
    snapshot links to it, and the repository's folder once it holds no blob."""
    blob = _hub_blob(path)
    path.unlink(missing_ok=True)
    if blob is None:
        return
    repo_dir = blob.parent.parent  # .../models--U--R/{blobs,snapshots,refs}
    snapshots = repo_dir / "snapshots"
    if not any(os.path.realpath(p) == str(blob) for p in snapshots.rglob("*") if p.is_symlink()):
        blob.unlink(missing_ok=True)
    folder = path.parent
    while folder != snapshots and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
    if (repo_dir / "blobs").is_dir() and not any((repo_dir / "blobs").iterdir()):
        shutil.rmtree(repo_dir, ignore_errors=True)


def remove(name: str) -> str:
    """`edgellm rm`: forget the name and delete the files no other name uses. Returns the name
    removed. A known model's file is deleted unless a copy of it still names it."""
    with _names_locked():
        names = _read_names()
        known = _known(name)
        if known is not None:
            entry = _known_entry(models.KNOWN_MODELS[known])
            if entry is None:
                raise models.UnknownModelError(f"model '{name}' not found (not fetched)")
            users = [n for n, m in names.items() if entry.path in m.files]
            if users:
                raise models.UnknownModelError(
                    f"{known}'s file is also named {', '.join(users)}; remove that name first")
            entry.path.unlink()
            return known
        entry = _lookup(names, name)
        if entry is None:
            raise models.UnknownModelError(f"model '{name}' not found")
        del names[entry.name]
        _write_names(names)
        in_use = {f for m in names.values() for f in m.files}
        known_files = {models.cache_dir() / s.filename for s in models.KNOWN_MODELS.values()}
        for f in entry.files:
            if f not in in_use and f not in known_files:
                _delete_file(f)
        return entry.name


models.NAME_RESOLVERS.append(lambda text, fetch: resolve(text, fetch=fetch))  # models.resolve's step
