"""Re-quantize a GGUF model with edgellm's own block quantizers (_core.quant_quantize) and
write it with the `gguf` package's GGUFWriter.

Type choice per tensor follows llama.cpp's llama-quantize (docs/formats.md §2.5):
- 1-D tensors (norms, biases) and ffn_gate_inp are copied unchanged;
- output.weight, or token_embd.weight when the output projection is tied to it, gets Q6_K
  (Q8_0 when the file type is Q8_0, the file type itself for F16/BF16/F32);
- _M mixes: attn_v (by attn_v count) and ffn_down (by layer) get Q6_K where
  use_more_bits(i, n) = i < n/8 or i >= 7n/8 or (i - n/8) % 3 == 2; Q4_K_S gives Q5_K to the
  first 4 attn_v and the first n_layer/8 ffn_down;
- IQ4_NL / IQ4_XS: attn_v gets Q5_K when n_head / n_head_kv >= 4, the first n_layer/8 ffn_down
  get Q5_K (llama-quantize without an importance matrix);
- every other matrix gets the base type; rows whose length is not a multiple of 256 fall back
  from K-quants (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0) and IQ4_XS -> IQ4_NL, and to F16 when
  not a multiple of 32.

A tensor already in its target type is copied byte for byte. Conversions go through float32 in
row chunks, spread over threads (the quantizer releases the GIL).
"""
from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import numpy as np

from .model_info import FTYPE_IDS

# file type -> base tensor type
BASE_TYPE = {
    "F32": "F32", "F16": "F16", "BF16": "BF16", "Q4_0": "Q4_0", "Q4_1": "Q4_1", "Q5_0": "Q5_0",
    "Q5_1": "Q5_1", "Q8_0": "Q8_0", "Q4_K_M": "Q4_K", "Q4_K_S": "Q4_K", "Q5_K_M": "Q5_K", "Q6_K": "Q6_K",
    "IQ4_NL": "IQ4_NL", "IQ4_XS": "IQ4_XS",
}
QUANT_TYPES = tuple(BASE_TYPE)
_FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "Q2_K": "Q4_0", "Q3_K": "Q4_0", "IQ4_XS": "IQ4_NL"}
_CHUNK_ELEMS = 1 << 20


class QuantizeError(ValueError):
    pass


def use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _block_elems(t: str) -> int:
    return 256 if t.endswith("_K") or t == "IQ4_XS" else (32 if t.startswith(("Q", "IQ")) else 1)


def _fit(t: str, ne0: int) -> str:
    """The type a row of ne0 elements can hold: K-quant fallbacks, then F16."""
    if ne0 % _block_elems(t) != 0:
        t = _FALLBACK.get(t, t)
    if ne0 % _block_elems(t) != 0:
        t = "F16"
    return t


@dataclass
class Plan:
    name: str
    src_type: str
    dst_type: str  # None: copied unchanged (1-D)
    ne: tuple  # ggml order


def plan_types(tensors, ftype: str, n_layer: int, n_gqa: int = 1) -> List[Plan]:
    """Target type of every tensor, in file order (`tensors`: gguf ReaderTensor list; n_gqa:
    query heads per KV head)."""
    if ftype not in BASE_TYPE:
        raise QuantizeError(f"unsupported type {ftype!r}; choose one of {', '.join(QUANT_TYPES)}")
    base = BASE_TYPE[ftype]
    names = [t.name for t in tensors]
    has_output = "output.weight" in names
    n_attn_v = sum(1 for n in names if ".attn_v." in n or ".attn_qkv." in n)
    i_attn_v = 0
    plans = []
    for t in tensors:
        ne = tuple(int(x) for x in t.shape)
        src = t.tensor_type.name
        name = t.name
        if len(ne) < 2 or "ffn_gate_inp" in name or all(x == 1 for x in ne[1:]):
            plans.append(Plan(name, src, None, ne))
            continue
        dst = base
        is_output = name == "output.weight" or (not has_output and name == "token_embd.weight")
        m = re.match(r"blk\.(\d+)\.", name)
        layer = int(m.group(1)) if m else -1
        if base in ("F32", "F16", "BF16"):
            pass
        elif is_output:
            dst = "Q8_0" if base == "Q8_0" else "Q6_K"
        elif ".attn_v." in name or ".attn_qkv." in name:
            if ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(i_attn_v, n_attn_v):
                dst = "Q6_K"
            elif ftype == "Q4_K_S" and i_attn_v < 4:
                dst = "Q5_K"
            elif ftype in ("IQ4_NL", "IQ4_XS") and n_gqa >= 4:
                dst = "Q5_K"
            i_attn_v += 1
        elif ".ffn_down" in name and layer >= 0:
            if ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(layer, n_layer):
                dst = "Q6_K"
            elif ftype in ("Q4_K_S", "IQ4_NL", "IQ4_XS") and layer < n_layer // 8:
                dst = "Q5_K"
        plans.append(Plan(name, src, _fit(dst, ne[0]), ne))
    return plans


def _row_bytes(t: str, ne0: int) -> int:
    from edgellm import _core

    be, bb = _core.dtype_info(t)
    return ne0 // be * bb


def _convert(src_type: str, dst_type: str, raw: np.ndarray, ne0: int, n_rows: int, pool) -> np.ndarray:
    """Rows of raw `src_type` bytes -> rows of `dst_type` bytes (uint8, one row per line)."""
    from edgellm import _core

    src_rb, dst_rb = _row_bytes(src_type, ne0), _row_bytes(dst_type, ne0)
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(n_rows, src_rb)
    out = np.empty((n_rows, dst_rb), dtype=np.uint8)
    rows_per = max(1, _CHUNK_ELEMS // ne0)

    def work(r0):
        r1 = min(n_rows, r0 + rows_per)
        x = _core.quant_dequantize(src_type, raw[r0:r1], (r1 - r0) * ne0)
        out[r0:r1] = _core.quant_quantize(dst_type, x).reshape(r1 - r0, dst_rb)

    list(pool.map(work, range(0, n_rows, rows_per)))
    return out


def _copy_field(writer, field) -> None:
    import gguf

    vt = field.types[0]
    if vt == gguf.GGUFValueType.ARRAY:
        if len(field.types) > 2:
            raise QuantizeError(f"metadata key {field.name}: nested arrays are not supported")
        writer.add_key_value(field.name, field.contents(), vt, sub_type=field.types[-1])
    else:
        writer.add_key_value(field.name, field.contents(), vt)


def quantize_file(src: str, dst: str, ftype: str, n_threads: int = 0,
                  log: Optional[Callable[[str], None]] = None) -> Dict[str, str]:
    """Writes `dst`; returns tensor name -> written type."""
    import gguf

    ftype = ftype.upper()
    if ftype not in BASE_TYPE:
        raise QuantizeError(f"unsupported type {ftype!r}; choose one of {', '.join(QUANT_TYPES)}")
    if os.path.abspath(src) == os.path.abspath(dst):
        raise QuantizeError(f"output {dst} is the input file")
    r = gguf.GGUFReader(src, "r")
    arch_f = r.fields.get("general.architecture")
    if arch_f is None:
        raise QuantizeError(f"{src}: no general.architecture key")
    arch = arch_f.contents()
    nl = r.fields.get(f"{arch}.block_count")
    n_head, n_head_kv = r.fields.get(f"{arch}.attention.head_count"), r.fields.get(f"{arch}.attention.head_count_kv")
    n_gqa = 1
    if n_head is not None and n_head_kv is not None and not isinstance(n_head.contents(), list):
        n_gqa = max(1, int(n_head.contents()) // max(1, int(n_head_kv.contents())))
    plans = plan_types(r.tensors, ftype, int(nl.contents()) if nl is not None else 0, n_gqa)

    w = gguf.GGUFWriter(dst, arch)
    skip = {"general.architecture", "general.file_type", "general.quantization_version", "general.alignment"}
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key in skip:
            continue
        _copy_field(w, field)
    w.add_file_type(FTYPE_IDS[ftype])
    if BASE_TYPE[ftype] not in ("F32", "F16", "BF16"):
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    written = {}
    for t, p in zip(r.tensors, plans):
        dst_type = p.dst_type or p.src_type
        written[p.name] = dst_type
        ne0 = p.ne[0]
        n_rows = int(np.prod(p.ne[1:])) if len(p.ne) > 1 else 1
        np_shape = tuple(reversed(p.ne))
        if dst_type == "F32":
            w.add_tensor_info(p.name, np_shape, np.dtype(np.float32), n_rows * ne0 * 4)
        elif dst_type == "F16":
            w.add_tensor_info(p.name, np_shape, np.dtype(np.float16), n_rows * ne0 * 2)
        else:
            rb = _row_bytes(dst_type, ne0)
            byte_shape = np_shape[:-1] + (rb,)
            w.add_tensor_info(p.name, byte_shape, np.dtype(np.uint8), n_rows * rb,
                              raw_dtype=gguf.GGMLQuantizationType[dst_type])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    with ThreadPoolExecutor(max_workers=n_threads or os.cpu_count() or 1) as pool:
        for t, p in zip(r.tensors, plans):
            dst_type = written[p.name]
            ne0 = p.ne[0]
            n_rows = int(np.prod(p.ne[1:])) if len(p.ne) > 1 else 1
            if dst_type == p.src_type:
                data = np.ascontiguousarray(t.data)
            else:
                data = _convert(p.src_type, dst_type, t.data, ne0, n_rows, pool)
                if dst_type == "F32":
                    data = data.view(np.float32)
                elif dst_type == "F16":
                    data = data.view(np.float16)
            if log is not None:
                log(f"{p.name:32s} {p.src_type:>5s} -> {dst_type:5s} {list(p.ne)}")
            w.write_tensor_data(data)
    w.close()
    return written
