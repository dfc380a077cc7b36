"""The GGUF output of every converter (writer.py's models, lora.py's adapters, vlm.py's
projectors): one metadata value written by its Python type, and the file written beside its
final name and renamed only when complete; the --dry-run listing of a plan."""
from __future__ import annotations

import contextlib
import os

from .errors import ConvertError


def add_kv(w, key: str, value) -> None:
    import gguf

    T = gguf.GGUFValueType
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, bytes):  # tokenizer.ggml.precompiled_charsmap
        w.add_key_value(key, value, T.ARRAY, sub_type=T.UINT8)
    elif isinstance(value, list) and value and isinstance(value[0], bool):
        w.add_array(key, value)
    elif isinstance(value, list) and value and isinstance(value[0], str):
        w.add_array(key, value)
    elif isinstance(value, list) and value and isinstance(value[0], float):
        w.add_key_value(key, value, T.ARRAY, sub_type=T.FLOAT32)
    elif isinstance(value, list):
        w.add_key_value(key, value, T.ARRAY, sub_type=T.INT32)
    else:
        raise ConvertError(f"metadata key {key}: cannot write {type(value).__name__}")


@contextlib.contextmanager
def gguf_file(out_path: str, arch: str):
    """A gguf.GGUFWriter on a temporary file beside out_path, renamed to out_path when the block
    ends without an error; else closed and removed (no partial file is left under either name)."""
    import gguf

    tmp = f"{out_path}.{os.getpid()}.part"
    w = gguf.GGUFWriter(tmp, arch)
    try:
        yield w
        w.close()
        os.replace(tmp, out_path)
    except BaseException:
        try:
            w.close()
        except Exception:
            pass
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def describe(head: str, rows, total: int) -> str:
    """A plan as --dry-run prints it: `head`, one line per tensor (dst, type, ne, bytes, src),
    the total."""
    lines = [head]
    for dst, typ, ne, nbytes, src in rows:
        lines.append(f"{dst:32s} {typ:6s} {str(list(ne)):20s} {nbytes:>12d}  <- {src}")
    lines.append(f"total {total} bytes of tensor data ({total / 2**20:.1f} MiB)")
    return "\n".join(lines)
