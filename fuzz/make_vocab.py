#!/usr/bin/env python3
"""Writes vocabulary-only GGUF files for the tokenizer harnesses, and small GGUF seeds.

    fuzz/make_vocab.py OUT_DIR [--models DIR] [--seeds SEED_DIR]

For each real model found in DIR (default $EDGELLM_MODELS or ~/.cache/edgellm/models) writes
OUT_DIR/<name>.gguf: the GGUF header, general.architecture / general.name and every
tokenizer.* key, byte for byte, and no tensors -- a few MB that load in well under a second, so
the harnesses never map the model. With --seeds, also writes SEED_DIR/real-<name>.gguf: a
model's header, its metadata with the long tokenizer arrays cut to their first 64 entries, and
the infos and data of its three smallest tensors (the GGUF harness's seeds from real files).

No dependencies beyond the standard library: the GGUF layout (docs/formats.md §1)
is walked directly.
"""
from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path

MODELS = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
# ggml type -> (block elements, block bytes), for the tensor sizes of the seeds.
GGML = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
        10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}


class Reader:
    def __init__(self, buf: memoryview):
        self.b, self.p = buf, 0

    def u32(self):
        v = struct.unpack_from("<I", self.b, self.p)[0]
        self.p += 4
        return v

    def u64(self):
        v = struct.unpack_from("<Q", self.b, self.p)[0]
        self.p += 8
        return v

    def string(self):
        n = self.u64()
        s = bytes(self.b[self.p:self.p + n])
        self.p += n
        return s

    def skip_value(self, t):
        if t in SCALAR:
            self.p += SCALAR[t]
        elif t == STRING:
            n = self.u64()
            self.p += n
        elif t == ARRAY:
            et, n = self.u32(), self.u64()
            if et == STRING:
                for _ in range(n):
                    m = self.u64()
                    self.p += m
            else:
                self.p += SCALAR[et] * n
        else:
            raise ValueError(f"unknown GGUF value type {t}")


def gstr(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def parse(path: Path):
    """(version, [(key, type, raw value bytes)], [(name, dims, type, offset)], data_offset, buffer)."""
    data = memoryview(path.read_bytes()) if path.stat().st_size < (1 << 20) else None
    if data is None:
        import mmap
        f = open(path, "rb")
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    r = Reader(data)
    if bytes(data[:4]) != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    r.p = 4
    version = r.u32()
    n_tensors, n_kv = r.u64(), r.u64()
    kvs = []
    for _ in range(n_kv):
        key = r.string()
        t = r.u32()
        start = r.p
        r.skip_value(t)
        kvs.append((key, t, bytes(data[start:r.p])))
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.u32()
        dims = [r.u64() for _ in range(nd)]
        tt = r.u32()
        off = r.u64()
        tensors.append((name, dims, tt, off))
    align = 32
    for key, t, raw in kvs:
        if key == b"general.alignment":
            align = struct.unpack("<I", raw)[0]
    data_off = (r.p + align - 1) // align * align
    return version, kvs, tensors, data_off, data


def header(version, n_tensors, kvs) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs))
    for key, t, raw in kvs:
        out += gstr(key) + struct.pack("<I", t) + raw
    return out


def truncate_array(t, raw, keep):
    if t != ARRAY:
        return raw
    et, n = struct.unpack_from("<IQ", raw, 0)
    if n <= keep:
        return raw
    p = 12
    if et == STRING:
        for _ in range(keep):
            p += 8 + struct.unpack_from("<Q", raw, p)[0]
    else:
        p += SCALAR[et] * keep
    return struct.pack("<IQ", et, keep) + raw[12:p]


def vocab_only(path: Path) -> bytes:
    version, kvs, _, _, _ = parse(path)
    keep = [kv for kv in kvs if kv[0].startswith(b"tokenizer.") or kv[0] in (b"general.architecture", b"general.name")]
    return header(version, 0, keep)


def nbytes(dims, tt):
    n = 1
    for d in dims:
        n *= d
    be, bb = GGML[tt]
    return n // be * bb


def seed(path: Path, keep_entries=64, n_small=3) -> bytes:
    version, kvs, tensors, data_off, data = parse(path)
    kvs = [(k, t, truncate_array(t, raw, keep_entries)) for k, t, raw in kvs
           if k != b"tokenizer.chat_template"]
    small = sorted((t for t in tensors if t[2] in GGML), key=lambda t: nbytes(t[1], t[2]))[:n_small]
    infos, blobs, off = b"", b"", 0
    for name, dims, tt, o in small:
        n = nbytes(dims, tt)
        infos += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", tt, off)
        blob = bytes(data[data_off + o:data_off + o + n])
        blobs += blob + b"\0" * ((-len(blob)) % 32)
        off += n + ((-n) % 32)
    head = header(version, len(small), kvs) + infos
    head += b"\0" * ((-len(head)) % 32)
    return head + blobs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--models", default=os.environ.get("EDGELLM_MODELS") or os.path.expanduser("~/.cache/edgellm/models"))
    ap.add_argument("--seeds")
    args = ap.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    missing = []
    for name, fname in MODELS.items():
        src = Path(args.models) / fname
        if not src.is_file():
            missing.append(str(src))
            continue
        dst = out / f"{name}.gguf"
        if not dst.exists() or dst.stat().st_mtime < src.stat().st_mtime:
            blob = vocab_only(src)
            tmp = dst.with_suffix(".tmp")
            tmp.write_bytes(blob)
            tmp.replace(dst)
        if args.seeds:
            Path(args.seeds).mkdir(parents=True, exist_ok=True)
            (Path(args.seeds) / f"real-{name}.gguf").write_bytes(seed(src))
    if missing:
        print("make_vocab: models not found (fetch them: edgellm models fetch all): " + ", ".join(missing),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
