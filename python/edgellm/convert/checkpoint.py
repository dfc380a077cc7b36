"""A Hugging Face checkpoint directory: config.json and its safetensors weights, one file or
shards listed by model.safetensors.index.json.

Tensors are read one at a time straight from the file into a fresh buffer (no mmap, so a
converted tensor's pages do not stay resident): peak memory is one tensor, not the model.
The safetensors layout is a u64 header length, a JSON header {name: {dtype, shape,
data_offsets}}, then the data; BF16 (which numpy lacks) is widened to float32 here."""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from .errors import ConvertError

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
           "U8": np.uint8}  # U8: MXFP4 blocks and scales (gpt-oss), read raw by load_raw
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


@dataclass(frozen=True)
class SourceTensor:
    name: str
    file: str  # absolute path of the shard
    dtype: str  # safetensors dtype: F32, F16, BF16
    shape: Tuple[int, ...]  # row-major (numpy) order
    offset: int  # absolute byte offset in the file
    nbytes: int


def read_json(path: str) -> dict:
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConvertError(f"{path}: file not found") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: not valid JSON ({e})") from None


def _read_header(path: str) -> Dict[str, SourceTensor]:
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ConvertError(f"{path}: not a safetensors file (shorter than its header)")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise ConvertError(f"{path}: safetensors header length {n} runs past the file end")
            header = json.loads(f.read(n))
    except FileNotFoundError:
        raise ConvertError(f"{path}: shard not found") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: safetensors header is not valid JSON ({e})") from None
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info.get("dtype")
        if dtype not in _DTYPES:
            raise ConvertError(f"{path}: tensor {name} has dtype {dtype}; only F32, F16, BF16, F64 and U8 (MXFP4) are converted")
        shape = tuple(int(x) for x in info["shape"])
        begin, end = (int(x) for x in info["data_offsets"])
        want = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[dtype]).itemsize
        if end - begin != want or base + end > size:
            raise ConvertError(f"{path}: tensor {name} ({dtype} {list(shape)}) has {end - begin} bytes "
                               f"at [{begin}, {end}), expected {want} inside the file")
        out[name] = SourceTensor(name, os.path.abspath(path), dtype, shape, base + begin, want)
    return out


class Checkpoint:
    """config.json plus the tensor directory of every shard (headers only)."""

    def __init__(self, directory: str):
        self.dir = os.path.abspath(directory)
        if not os.path.isdir(self.dir):
            raise ConvertError(f"{directory}: not a directory")
        self.config = read_json(os.path.join(self.dir, "config.json"))
        self.tensors: Dict[str, SourceTensor] = {}
        index = os.path.join(self.dir, INDEX_FILE)
        if os.path.exists(index):
            weight_map = read_json(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ConvertError(f"{index}: no weight_map")
            shards = sorted(set(weight_map.values()))
            for shard in shards:
                path = os.path.join(self.dir, shard)
                if not os.path.exists(path):
                    first = next(t for t, s in weight_map.items() if s == shard)
                    raise ConvertError(f"{path}: shard not found (listed by {INDEX_FILE} for {first} "
                                       f"and {sum(1 for s in weight_map.values() if s == shard) - 1} more tensors)")
                self.tensors.update(_read_header(path))
            for t, shard in weight_map.items():
                if t not in self.tensors:
                    raise ConvertError(f"{os.path.join(self.dir, shard)}: tensor {t} "
                                       f"(listed by {INDEX_FILE}) is missing")
        else:
            files = sorted(f for f in os.listdir(self.dir) if f.endswith(".safetensors"))
            if not files:
                raise ConvertError(f"{self.dir}: no {SINGLE_FILE} or {INDEX_FILE} "
                                   f"(only safetensors checkpoints are converted)")
            for f in files:
                self.tensors.update(_read_header(os.path.join(self.dir, f)))

    def names(self) -> List[str]:
        return list(self.tensors)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def info(self, name: str) -> SourceTensor:
        t = self.tensors.get(name)
        if t is None:
            raise ConvertError(f"{self.dir}: tensor {name} not found in the checkpoint")
        return t

    def load_raw(self, name: str, rows: Optional[Tuple[int, int]] = None) -> np.ndarray:
        """The tensor's bytes as stored (U8: MXFP4 blocks or scales), rows r0..r1 of its first axis."""
        t = self.info(name)
        if t.dtype != "U8":
            raise ConvertError(f"{t.file}: tensor {name} has dtype {t.dtype}, expected U8 (MXFP4 blocks or scales)")
        row = int(np.prod(t.shape[1:], dtype=np.int64)) if len(t.shape) > 1 else 1
        r0, r1 = rows if rows is not None else (0, t.shape[0] if t.shape else 1)
        with open(t.file, "rb") as f:
            f.seek(t.offset + r0 * row)
            raw = np.fromfile(f, dtype=np.uint8, count=(r1 - r0) * row)
        if raw.size != (r1 - r0) * row:
            raise ConvertError(f"{t.file}: tensor {name} is truncated")
        return raw.reshape(((r1 - r0),) + tuple(t.shape[1:]))

    def load_f32(self, name: str, rows: Optional[Tuple[int, int]] = None) -> np.ndarray:
        """The tensor as float32, in its safetensors (row-major) shape; with rows = (r0, r1),
        only those rows of its first dimension."""
        t = self.info(name)
        if t.dtype == "U8":
            raise ConvertError(f"{t.file}: tensor {name} is U8 (MXFP4 blocks or scales) where a float tensor belongs")
        dt = np.dtype(_DTYPES[t.dtype])
        row_elems = int(np.prod(t.shape[1:], dtype=np.int64)) if len(t.shape) > 1 else 1
        r0, r1 = rows if rows is not None else (0, t.shape[0] if t.shape else 1)
        count = (r1 - r0) * row_elems
        with open(t.file, "rb") as f:
            f.seek(t.offset + r0 * row_elems * dt.itemsize)
            raw = np.fromfile(f, dtype=dt, count=count)
        if raw.size != count:
            raise ConvertError(f"{t.file}: tensor {name} is truncated")
        shape = ((r1 - r0),) + tuple(t.shape[1:]) if rows is not None else t.shape
        if t.dtype == "BF16":
            out = raw.astype(np.uint32)
            out <<= 16
            return out.view(np.float32).reshape(shape)
        return raw.astype(np.float32, copy=False).reshape(shape)
