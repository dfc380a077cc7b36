"""Helpers that write tiny GGUF files for the reader's tests.

`write_valid_fixture` uses the `gguf` package's writer (an independent implementation of the
format). The byte-level builders (`kv`, `tensor_info`, `build`) exist to write files the `gguf`
writer refuses to produce: every field can be overridden, so each malformed case states
exactly which field is wrong.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

REAL_MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}


def real_model_path(name: str) -> Path:
    """Path of a cached real model (may not exist): edgellm.models if present, else
    $EDGELLM_MODELS or ~/.cache/edgellm/models."""
    try:
        from edgellm.models import model_path
    except ImportError:
        base = os.environ.get("EDGELLM_MODELS") or os.path.expanduser("~/.cache/edgellm/models")
        return Path(base) / REAL_MODELS[name]
    return Path(model_path(name))


def require_real_model(name: str) -> Path:
    import pytest

    p = real_model_path(name)
    if not p.is_file():
        pytest.skip(f"real model {name} not cached at {p} (fetch it with `python -m edgellm.models fetch {name}`)")
    return p


# ---- valid fixtures through gguf.GGUFWriter ------------------------------------------------

# One key per scalar value type, one array per element type (and an array of strings).
SCALARS = [
    ("t.u8", 200, VT.UINT8), ("t.i8", -100, VT.INT8), ("t.u16", 60000, VT.UINT16),
    ("t.i16", -30000, VT.INT16), ("t.u32", 4000000000, VT.UINT32), ("t.i32", -2000000000, VT.INT32),
    ("t.f32", 0.15625, VT.FLOAT32), ("t.bool_true", True, VT.BOOL), ("t.bool_false", False, VT.BOOL),
    ("t.str", "héllo wörld ✓", VT.STRING), ("t.u64", 2**63 + 5, VT.UINT64), ("t.i64", -(2**62), VT.INT64),
    ("t.f64", 1.0000000000000002, VT.FLOAT64),
]
ARRAYS = [
    ("a.u8", [0, 1, 255], VT.UINT8), ("a.i8", [-128, 0, 127], VT.INT8), ("a.u16", [0, 65535], VT.UINT16),
    ("a.i16", [-32768, 32767], VT.INT16), ("a.u32", [0, 2**32 - 1], VT.UINT32),
    ("a.i32", [-(2**31), 2**31 - 1, 7], VT.INT32), ("a.f32", [0.5, -1.25, 3e38], VT.FLOAT32),
    ("a.bool", [True, False, True], VT.BOOL), ("a.u64", [2**64 - 1, 0], VT.UINT64),
    ("a.i64", [-(2**63), 2**63 - 1], VT.INT64), ("a.f64", [1e300, -2.5], VT.FLOAT64),
    ("a.str", ["", "a", "ünï", "<0x0A>", "x" * 300], VT.STRING),
]


def fixture_tensors(seed: int = 0) -> Dict[str, tuple]:
    """name -> (float32 values in numpy order, ggml type) covering float and block types."""
    rng = np.random.default_rng(seed)
    return {
        "f32.weight": (rng.standard_normal((3, 5)).astype(np.float32), QT.F32),
        "f16.weight": (rng.standard_normal((2, 7)).astype(np.float32), QT.F16),
        "q8_0.weight": (rng.standard_normal((4, 64)).astype(np.float32), QT.Q8_0),
        "q4_0.weight": (rng.standard_normal((2, 32)).astype(np.float32), QT.Q4_0),
        "vec.bias": (rng.standard_normal((11,)).astype(np.float32), QT.F32),
        "cube.weight": (rng.standard_normal((2, 3, 32)).astype(np.float32), QT.Q8_0),
    }


def write_valid_fixture(path: Path, *, version: int = 3, alignment: Optional[int] = None,
                        tensors: Optional[Dict[str, tuple]] = None, arch: str = "llama") -> Path:
    """A small, valid GGUF with every value type and a few tensors, written by gguf.GGUFWriter.
    `version=2` patches the version field: v2 and v3 share the little-endian layout."""
    w = gguf.GGUFWriter(str(path), arch)
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for key, val, vt in SCALARS:
        w.add_key_value(key, val, vt)
    for key, val, vt in ARRAYS:
        w.add_key_value(key, val, VT.ARRAY, sub_type=vt)
    for name, (values, qt) in (fixture_tensors() if tensors is None else tensors).items():
        if qt == QT.F32:
            w.add_tensor(name, values)
        elif qt == QT.F16:
            w.add_tensor(name, values.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(values, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if version != 3:
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(struct.pack("<I", version))
    return Path(path)


# ---- byte-level builder for malformed files -------------------------------------------------

def gstr(s, length: Optional[int] = None) -> bytes:
    """A GGUF string; `length` overrides the stored length (the bytes stay as given)."""
    b = s.encode() if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b) if length is None else length) + b


_FMT = {VT.UINT8: "B", VT.INT8: "b", VT.UINT16: "H", VT.INT16: "h", VT.UINT32: "I", VT.INT32: "i",
        VT.FLOAT32: "f", VT.BOOL: "?", VT.UINT64: "Q", VT.INT64: "q", VT.FLOAT64: "d"}


def value_bytes(vtype: int, value) -> bytes:
    if vtype == VT.STRING:
        return gstr(value)
    return struct.pack("<" + _FMT[VT(vtype)], value)


def kv(key: str, vtype: int, value=None, *, elem_type: Optional[int] = None, count: Optional[int] = None,
       payload: Optional[bytes] = None, key_len: Optional[int] = None) -> bytes:
    """One metadata pair. For arrays pass elem_type and a list `value`; `count` overrides the
    stored element count; `payload` replaces the encoded value bytes."""
    out = gstr(key, key_len) + struct.pack("<I", vtype)
    if vtype == VT.ARRAY:
        items = list(value or [])
        out += struct.pack("<IQ", elem_type, len(items) if count is None else count)
        body = b"".join(value_bytes(elem_type, v) for v in items) if elem_type in _FMT or elem_type == VT.STRING else b""
    else:
        body = b"" if value is None else value_bytes(vtype, value)
    return out + (body if payload is None else payload)


def tensor_info(name: str, ne: Sequence[int], ttype: int, offset: int, *, n_dims: Optional[int] = None,
                name_len: Optional[int] = None) -> bytes:
    """One tensor-info record; ne in ggml order."""
    return (gstr(name, name_len) + struct.pack("<I", len(ne) if n_dims is None else n_dims)
            + b"".join(struct.pack("<q", d) for d in ne) + struct.pack("<I", ttype)
            + struct.pack("<Q", offset))


def build(kvs: List[bytes], infos: List[bytes], data: bytes = b"", *, magic: bytes = b"GGUF", version: int = 3,
          n_tensors: Optional[int] = None, n_kv: Optional[int] = None, alignment: int = 32,
          pad: bool = True) -> bytes:
    """Header + pairs + infos, padded to `alignment` from the file start, then `data`."""
    out = magic + struct.pack("<Iqq", version, len(infos) if n_tensors is None else n_tensors,
                              len(kvs) if n_kv is None else n_kv)
    out += b"".join(kvs) + b"".join(infos)
    if pad:
        out += b"\0" * (-len(out) % alignment)
    return out + data


def f32_tensor(name: str = "w", n: int = 8, offset: int = 0) -> tuple:
    """(info, data) of a 1-D F32 tensor of n floats."""
    return tensor_info(name, [n], QT.F32, offset), np.arange(n, dtype=np.float32).tobytes()


def minimal_valid() -> bytes:
    """The smallest file the malformed cases mutate: two pairs and one F32 tensor."""
    info, data = f32_tensor()
    return build([kv("general.architecture", VT.STRING, "llama"), kv("x.count", VT.UINT32, 3)], [info], data)


# ---- split models (llama.cpp's gguf-split layout) through gguf.GGUFWriter --------------------

def write_split(src: Path, dst: Path, *, max_tensors: int = 0, max_bytes: int = 0) -> List[Path]:
    """`src` rewritten as a split model, as convert_hf_to_gguf.py --split-max-tensors /
    --split-max-size writes one (GGUFWriter's own splitting): shards named
    DST-0000i-of-0000N.gguf beside `dst` (`dst` itself is not written). Metadata and tensors
    are copied byte for byte. Returns the shard paths in order."""
    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch, split_max_tensors=max_tensors, split_max_size=max_bytes)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == VT.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data)
    writer.close()
    n = len(writer.tensors)
    return [dst.with_name(f"{dst.stem}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]
