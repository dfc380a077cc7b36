"""tokenizer.model (a SentencePiece ModelProto) → GGUF `llama` vocabulary keys
(docs/formats.md §1.6, §7.2). The protobuf is read by hand (its wire format: varint keys,
length-delimited messages) so that neither protobuf nor the sentencepiece package is needed:
pieces (1: piece, 2: score, 3: type), trainer_spec (40-43: unk/bos/eos/pad ids),
normalizer_spec (3: add_dummy_prefix). SentencePiece's piece types are GGUF's token types."""
from __future__ import annotations

import struct
from typing import Dict, Iterator, List, Tuple

from .checkpoint import MAX_SIDE_FILE_BYTES, open_regular, read_exact
from .errors import ConvertError


def _varint(b: bytes, i: int) -> Tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(b):
            raise ValueError("truncated varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _fields(b: bytes) -> Iterator[Tuple[int, int, object]]:
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        if i > len(b):
            raise ValueError("truncated field")
        yield num, wire, v


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def read_model(path: str) -> Dict[str, object]:
    """{"tokens", "scores", "types", "unk_id", "bos_id", "eos_id", "pad_id", "add_dummy_prefix"}."""
    f, size = open_regular(path, MAX_SIDE_FILE_BYTES)
    with f:
        data = read_exact(f, size, path, "file")
    try:
        tokens: List[str] = []
        scores: List[float] = []
        types: List[int] = []
        ids = {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1}
        add_dummy_prefix = True
        for num, wire, v in _fields(data):
            if num == 1 and wire == 2:
                piece, score, typ = "", 0.0, 1
                for n2, w2, v2 in _fields(v):
                    if n2 == 1 and w2 == 2:
                        piece = v2.decode("utf-8")
                    elif n2 == 2 and w2 == 5:
                        score = struct.unpack("<f", v2)[0]
                    elif n2 == 3 and w2 == 0:
                        typ = v2
                if not 1 <= typ <= 6:
                    raise ValueError(f"piece {len(tokens)} has type {typ} (SentencePiece's are 1 to 6)")
                tokens.append(piece)
                scores.append(score)
                types.append(typ)
            elif num == 2 and wire == 2:
                for n2, w2, v2 in _fields(v):
                    if w2 == 0 and n2 in (40, 41, 42, 43):
                        ids[("unk_id", "bos_id", "eos_id", "pad_id")[n2 - 40]] = _signed(v2)
            elif num == 3 and wire == 2:
                for n2, w2, v2 in _fields(v):
                    if n2 == 3 and w2 == 0:
                        add_dummy_prefix = bool(v2)
    except UnicodeDecodeError as e:
        raise ConvertError(f"{path}: not a SentencePiece model (a piece is not valid UTF-8 at byte {e.start})") from None
    except (ValueError, struct.error) as e:
        raise ConvertError(f"{path}: not a SentencePiece model ({e})") from None
    if not tokens:
        raise ConvertError(f"{path}: no pieces (not a SentencePiece model?)")
    return dict(ids, tokens=tokens, scores=scores, types=types, add_dummy_prefix=add_dummy_prefix)
