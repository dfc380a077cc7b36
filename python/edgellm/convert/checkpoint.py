"""A Hugging Face checkpoint directory: config.json and its safetensors weights, one file or
shards listed by model.safetensors.index.json.

Tensors are read one at a time straight from the file into a fresh buffer (no mmap, so a
converted tensor's pages do not stay resident): peak memory is one tensor, not the model.
The safetensors layout is a u64 header length, a JSON header {name: {dtype, shape,
data_offsets}}, then the data; BF16 (which numpy lacks) is widened to float32 here.

Every file is opened through `open_member`: its name must stay inside the checkpoint folder
(no absolute path, no `..`, no symlink resolving elsewhere -- except into the `blobs/` folder
of a Hugging Face cache snapshot, which is how the hub lays files out), it must be a regular
file (a FIFO or device is refused before it could block), and its size is checked against a
cap before a byte is read. Headers are validated whole (types, offsets inside the data region,
no overlap, sizes equal to dtype x shape) before anything is allocated from them; errors name
the file and the field and never quote the bytes of a file."""
from __future__ import annotations

import fcntl
import json
import math
import os
import stat
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from .errors import ConvertError

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
           "U8": np.uint8,  # U8: MXFP4 blocks and scales (gpt-oss), read raw by load_raw
           "I64": np.int64}  # I64: buffers such as BERT's position_ids, listed but never converted
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
# the safetensors library's own cap on the JSON header (MAX_HEADER_SIZE)
MAX_HEADER_BYTES = 100_000_000
# JSON side files (config.json, tokenizer.json, the shard index, ...), tokenizer.model and
# chat_template.jinja: the largest real ones are tens of MB (Gemma 3's tokenizer.json: 33 MB)
MAX_SIDE_FILE_BYTES = 100_000_000


@dataclass(frozen=True)
class SourceTensor:
    name: str
    file: str  # absolute path of the shard
    dtype: str  # safetensors dtype: F32, F16, BF16
    shape: Tuple[int, ...]  # row-major (numpy) order
    offset: int  # absolute byte offset in the file
    nbytes: int


def show(value, limit: int = 60) -> str:
    """repr of a value from a file, cut to `limit` characters (error messages stay short)."""
    try:
        r = repr(value)
    except (RecursionError, ValueError):
        r = f"<{type(value).__name__}>"
    return r if len(r) <= limit else r[:limit] + "..."


def _roots(directory: str) -> List[str]:
    """The folders a checkpoint's files may resolve into: the folder itself and, for a Hugging
    Face cache snapshot (<repo>/snapshots/<revision>), the repository's blobs/ folder."""
    real = os.path.realpath(directory)
    roots = [real]
    parent = os.path.dirname(real)
    if os.path.basename(parent) == "snapshots":
        roots.append(os.path.join(os.path.dirname(parent), "blobs"))
    return roots


def member(directory: str, name, listed_by: Optional[str] = None) -> str:
    """The path of checkpoint file `name` (as a file such as model.safetensors.index.json lists
    it): a relative name without `..` that resolves inside the checkpoint folder."""
    where = f" (listed by {listed_by})" if listed_by else ""
    try:
        ok = isinstance(name, str) and name and "\0" not in name and os.fsencode(name)
    except UnicodeEncodeError:  # a lone surrogate
        ok = False
    if not ok:
        raise ConvertError(f"{directory}: file name {show(name)}{where} is not a file name")
    parts = name.replace("\\", "/").split("/")
    if os.path.isabs(name) or name.startswith(("/", "\\")) or ".." in parts:
        raise ConvertError(f"{directory}: file name {show(name)}{where} leaves the checkpoint folder")
    path = os.path.join(directory, name)
    real = os.path.realpath(path)
    if not any(real == r or real.startswith(r + os.sep) for r in _roots(directory)):
        raise ConvertError(f"{path}{where}: resolves outside the checkpoint folder")
    return path


def open_regular(path: str, limit: Optional[int], what: str = "file"):
    """(binary file, size) of a regular file no larger than `limit` bytes. Opened without
    blocking, so a FIFO in a file's place is refused rather than waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConvertError(f"{path}: {what} not found") from None
    except OSError as e:
        raise ConvertError(f"{path}: cannot open the {what} ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConvertError(f"{path}: the {what} is not a regular file")
        if limit is not None and st.st_size > limit:
            raise ConvertError(f"{path}: the {what} is {st.st_size} bytes, more than the {limit} this "
                               f"converter reads")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_exact(f, n: int, path: str, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ConvertError(f"{path}: {what} is truncated (the file changed while read?)")
    return data


def _no_duplicates(pairs):
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"key {show(dup)} appears twice in one object")
    return out


def parse_json(data: bytes, path: str, what: str = "file", unique_keys: bool = False):
    """JSON text of a checkpoint file; any failure is a ConvertError naming the file (and the
    position, never the bytes). unique_keys: a key twice in one object is an error (safetensors
    headers: which of two entries of a tensor is meant?); elsewhere the last wins, as json and
    transformers read config files."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConvertError(f"{path}: the {what} is not valid UTF-8 (at byte {e.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates if unique_keys else None)
    except RecursionError:
        raise ConvertError(f"{path}: the {what} is nested too deeply") from None
    except json.JSONDecodeError as e:
        raise ConvertError(f"{path}: the {what} is not valid JSON ({e.msg}: line {e.lineno} column {e.colno})") from None
    except ValueError as e:  # a duplicate key, an integer of too many digits
        raise ConvertError(f"{path}: the {what} is not valid JSON ({str(e)[:120]})") from None


def read_json(path: str, limit: int = MAX_SIDE_FILE_BYTES) -> dict:
    """A JSON object file (config.json, tokenizer.json, ...)."""
    f, size = open_regular(path, limit)
    with f:
        data = read_exact(f, size, path, "file")
    value = parse_json(data, path)
    if not isinstance(value, dict):
        raise ConvertError(f"{path}: expected a JSON object, got {_kind(value)}")
    return value


def read_text(path: str, limit: int = MAX_SIDE_FILE_BYTES) -> str:
    f, size = open_regular(path, limit)
    with f:
        data = read_exact(f, size, path, "file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConvertError(f"{path}: not valid UTF-8 (at byte {e.start})") from None


def _kind(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


def _uint(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _read_header(path: str) -> Dict[str, SourceTensor]:
    f, size = open_regular(path, None, "shard")
    with f:
        if size < 8:
            raise ConvertError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", read_exact(f, 8, path, "header length"))
        if n > MAX_HEADER_BYTES:
            raise ConvertError(f"{path}: safetensors header length {n} is over the {MAX_HEADER_BYTES}-byte "
                               f"limit (the safetensors library's)")
        if n > size - 8:
            raise ConvertError(f"{path}: safetensors header length {n} runs past the file end ({size} bytes)")
        raw = read_exact(f, n, path, "safetensors header")
    header = parse_json(raw, path, "safetensors header", unique_keys=True)
    if not isinstance(header, dict):
        raise ConvertError(f"{path}: the safetensors header is {_kind(header)}, not an object")
    base = 8 + n
    data_len = size - base
    out = {}
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise ConvertError(f"{path}: safetensors __metadata__ must be an object of strings")
            continue
        where = f"{path}: tensor {show(name)}"
        if not isinstance(info, dict):
            raise ConvertError(f"{where}: entry is {_kind(info)}, not an object")
        dtype = info.get("dtype")
        if not isinstance(dtype, str) or dtype not in _DTYPES:
            raise ConvertError(f"{where} has dtype {show(dtype)}; only F32, F16, BF16, F64, U8 (MXFP4) and "
                               f"I64 (skipped buffers) are read")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not isinstance(shape, list) or not all(_uint(x) for x in shape):
            raise ConvertError(f"{where}: shape {show(shape)} is not a list of non-negative integers")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_uint(x) for x in offsets):
            raise ConvertError(f"{where}: data_offsets {show(offsets)} is not a list of two non-negative integers")
        begin, end = offsets
        if not begin <= end <= data_len:
            raise ConvertError(f"{where}: data_offsets [{begin}, {end}) lie outside the data region "
                               f"(0 to {data_len} bytes)")
        want = math.prod(shape) * np.dtype(_DTYPES[dtype]).itemsize
        if end - begin != want:
            raise ConvertError(f"{where} ({dtype} {shape}) has {end - begin} bytes at [{begin}, {end}), "
                               f"expected {want}" if want < 1 << 64 else f"{where}: shape {show(shape)} is too large")
        out[name] = SourceTensor(name, os.path.abspath(path), dtype, tuple(shape), base + begin, want)
        spans.append((begin, end, name))
    # as the safetensors library: tensors tile the data region from 0 to its end, in some order
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            what = "overlaps the tensor before it" if begin < at else "leaves a gap before it"
            raise ConvertError(f"{path}: tensor {show(name)} at [{begin}, {end}) {what} (tensors must tile the "
                               f"data region)")
        at = end
    if at != data_len:
        raise ConvertError(f"{path}: the tensors cover {at} of the data region's {data_len} bytes")
    return out


class Checkpoint:
    """config.json plus the tensor directory of every shard (headers only)."""

    def __init__(self, directory: str):
        self.dir = os.path.abspath(directory)
        if not os.path.isdir(self.dir):
            raise ConvertError(f"{directory}: not a directory")
        self.config = read_json(member(self.dir, "config.json"))
        self.tensors: Dict[str, SourceTensor] = {}
        index = os.path.join(self.dir, INDEX_FILE)
        if os.path.lexists(index):
            weight_map = read_json(member(self.dir, INDEX_FILE)).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ConvertError(f"{index}: no weight_map object")
            paths = {shard: member(self.dir, shard, f"{INDEX_FILE} for tensor {show(t)}")
                     for t, shard in weight_map.items()}
            for shard in sorted(paths):
                path = paths[shard]
                if not os.path.lexists(path):
                    first = next(t for t, s in weight_map.items() if s == shard)
                    raise ConvertError(f"{path}: shard not found (listed by {INDEX_FILE} for {show(first)} "
                                       f"and {sum(1 for s in weight_map.values() if s == shard) - 1} more tensors)")
                self._add(_read_header(path))
            for t, shard in weight_map.items():
                if t not in self.tensors:
                    raise ConvertError(f"{paths[shard]}: tensor {show(t)} (listed by {INDEX_FILE}) is missing")
        else:
            files = sorted(f for f in os.listdir(self.dir) if f.endswith(".safetensors"))
            if not files:
                raise ConvertError(f"{self.dir}: no {SINGLE_FILE} or {INDEX_FILE} "
                                   f"(only safetensors checkpoints are converted)")
            for f in files:
                self._add(_read_header(member(self.dir, f)))

    @classmethod
    def single_file(cls, directory: str, name: str, config: dict) -> "Checkpoint":
        """The tensors of one safetensors file `name` of `directory` (a PEFT adapter's
        adapter_model.safetensors), with `config` standing for config.json."""
        self = cls.__new__(cls)
        self.dir = os.path.abspath(directory)
        if not os.path.isdir(self.dir):
            raise ConvertError(f"{directory}: not a directory")
        self.config = config
        self.tensors = {}
        path = member(self.dir, name)
        if not os.path.lexists(path):
            raise ConvertError(f"{path}: not found")
        self._add(_read_header(path))
        return self

    def _add(self, tensors: Dict[str, SourceTensor]) -> None:
        for name, t in tensors.items():
            if name in self.tensors:
                raise ConvertError(f"{t.file}: tensor {show(name)} is also in {self.tensors[name].file}")
            self.tensors[name] = t

    def names(self) -> List[str]:
        return list(self.tensors)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def info(self, name: str) -> SourceTensor:
        t = self.tensors.get(name)
        if t is None:
            raise ConvertError(f"{self.dir}: tensor {name} not found in the checkpoint")
        return t

    def _read(self, t: SourceTensor, dt: np.dtype, rows: Optional[Tuple[int, int]]) -> Tuple[np.ndarray, tuple]:
        """Rows r0..r1 of t's first axis (all of it without rows) as `dt` items, and their shape."""
        n_rows = t.shape[0] if t.shape else 1
        row = math.prod(t.shape[1:]) if len(t.shape) > 1 else 1
        r0, r1 = rows if rows is not None else (0, n_rows)
        if not 0 <= r0 <= r1 <= n_rows:
            raise ConvertError(f"{t.file}: tensor {t.name}: rows [{r0}, {r1}) outside its {n_rows}")
        count = (r1 - r0) * row
        f, _ = open_regular(t.file, None, "shard")
        with f:
            f.seek(t.offset + r0 * row * dt.itemsize)
            raw = np.fromfile(f, dtype=dt, count=count)
        if raw.size != count:
            raise ConvertError(f"{t.file}: tensor {t.name} is truncated")
        shape = ((r1 - r0),) + tuple(t.shape[1:]) if rows is not None else t.shape
        return raw, shape

    def load_raw(self, name: str, rows: Optional[Tuple[int, int]] = None) -> np.ndarray:
        """The tensor's bytes as stored (U8: MXFP4 blocks or scales), rows r0..r1 of its first axis."""
        t = self.info(name)
        if t.dtype != "U8":
            raise ConvertError(f"{t.file}: tensor {name} has dtype {t.dtype}, expected U8 (MXFP4 blocks or scales)")
        raw, shape = self._read(t, np.dtype(np.uint8), rows)
        return raw.reshape(shape)

    def load_f32(self, name: str, rows: Optional[Tuple[int, int]] = None) -> np.ndarray:
        """The tensor as float32, in its safetensors (row-major) shape; with rows = (r0, r1),
        only those rows of its first dimension."""
        t = self.info(name)
        if t.dtype == "U8":
            raise ConvertError(f"{t.file}: tensor {name} is U8 (MXFP4 blocks or scales) where a float tensor belongs")
        raw, shape = self._read(t, np.dtype(_DTYPES[t.dtype]), rows)
        if t.dtype == "BF16":
            out = raw.astype(np.uint32)
            out <<= 16
            return out.view(np.float32).reshape(shape)
        return raw.astype(np.float32, copy=False).reshape(shape)
