"""The persistent prefix cache's model key (LLM(cache_dir=...), serve --cache-dir).

KV pages on disk are content-addressed (cpp/src/kv/page_store.h): the directory they live in is
named by the model file's SHA-256 (first 32 hex digits) and the KV layout, so a renamed or copied
model finds its pages and a re-quantized one never finds another's. Hashing a model reads the
whole file once (about a second per GB); the digest is remembered in <cache_dir>/model-keys.json
under the file's real path, size, mtime and inode, so a restart of the same file costs a stat."""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import threading
import weakref
from typing import Optional

_KEYS_FILE = "model-keys.json"
_lock = threading.Lock()


def model_key(model_path: str, cache_dir: str) -> str:
    """The content key of model_path (hex), from the memo in cache_dir when the file is unchanged."""
    real = os.path.realpath(model_path)
    st = os.stat(real)
    stamp = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}
    memo_path = os.path.join(cache_dir, _KEYS_FILE)
    with _lock:
        memo = _read_memo(memo_path)
        hit = memo.get(real)
        if isinstance(hit, dict) and all(hit.get(k) == v for k, v in stamp.items()) \
                and isinstance(hit.get("sha256"), str):
            return hit["sha256"][:32]
        digest = _sha256(real)
        memo = _read_memo(memo_path)  # another process may have written it meanwhile
        memo[real] = dict(stamp, sha256=digest)
        _write_memo(memo_path, memo)
        return digest[:32]


def file_key(model_path: str, cache_dir: Optional[str] = None) -> str:
    """model_key, remembered in cache_dir when there is one, else hashed from the file."""
    if cache_dir:
        return model_key(model_path, cache_dir)
    return _sha256(os.path.realpath(model_path))[:32]


def hash_file(h, path: str) -> None:
    """Feed the file's bytes to hash object `h`, 8 MiB at a time."""
    with open(path, "rb") as f:
        while True:
            chunk = f.read(8 << 20)
            if not chunk:
                break
            h.update(chunk)


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    hash_file(h, path)
    return h.hexdigest()


def _read_memo(path: str) -> dict:
    try:
        with open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # missing or damaged: rebuilt


def _write_memo(path: str, memo: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(memo, f)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def prepare(cache_dir, model_path: str) -> tuple:
    """(absolute cache_dir, model key); the directory is created."""
    path = os.path.abspath(os.path.expanduser(os.fspath(cache_dir)))
    os.makedirs(path, exist_ok=True)
    return path, model_key(model_path, path)


# Pages are written on the engine's writer thread; an LLM still open when the interpreter exits
# has what is queued written before the process ends.
_open: "weakref.WeakSet" = weakref.WeakSet()


def track(llm) -> None:
    _open.add(llm)


@atexit.register
def _flush_all() -> None:
    for llm in list(_open):
        eng: Optional[object] = getattr(llm, "_engine", None)
        try:
            if eng is not None and not eng.closed:
                eng.flush_cache()
        except Exception:
            pass
