"""Direct load of a Hugging Face checkpoint directory (`LLM("./dir")`, `edgellm run ./dir`,
`serve ./dir`): the directory is converted once into a GGUF file named by a content hash of
its files and the output type, under $EDGELLM_CONVERTED (default ~/.cache/edgellm/converted),
and that file is loaded; the next call with unchanged files reuses it. Hashing reads every
file once; the digest is remembered under the files' names, sizes, mtimes and inodes, so an
unchanged directory costs a stat per file."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..cache_dir import hash_file

_MEMO = "dir-keys.json"


def converted_dir() -> Path:
    env = os.environ.get("EDGELLM_CONVERTED")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "edgellm" / "converted"


def is_checkpoint_dir(path) -> bool:
    p = Path(path).expanduser()
    return p.is_dir() and (p / "config.json").is_file()


def _files(directory: str):
    for name in sorted(os.listdir(directory)):
        p = os.path.join(directory, name)
        if os.path.isfile(p) and not name.startswith("."):
            yield name, p


def content_key(directory: str, cache: Path) -> str:
    real = os.path.realpath(directory)
    stamp = []
    for name, p in _files(real):
        st = os.stat(p)
        stamp.append([name, st.st_size, st.st_mtime_ns, st.st_ino])
    memo_path = cache / _MEMO
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    hit = memo.get(real)
    if isinstance(hit, dict) and hit.get("stamp") == stamp:
        return hit["key"]
    h = hashlib.sha256()
    for name, p in _files(real):
        h.update(name.encode() + b"\0")
        hash_file(h, p)
        h.update(b"\0")
    key = h.hexdigest()[:32]
    memo[real] = {"stamp": stamp, "key": key}
    tmp = memo_path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(memo))
    os.replace(tmp, memo_path)
    return key


def converted_path(directory, out_type: str = "F16", progress=None) -> Path:
    """The GGUF conversion of checkpoint `directory` to out_type, made on first use."""
    from .writer import OUT_TYPES, convert
    from .errors import ConvertError

    out_type = out_type.upper()
    if out_type not in OUT_TYPES:
        raise ConvertError(f"unsupported quantize type {out_type!r}; choose one of {', '.join(OUT_TYPES)}")
    cache = converted_dir()
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"{content_key(str(directory), cache)}-{out_type.lower()}.gguf"
    if not out.is_file():
        convert(str(directory), str(out), out_type, progress=progress)
    return out
