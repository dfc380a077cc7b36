"""Independent pure-Python references for the tokenizer tests.

- BPE: the pre-tokenizer regexes run by Python's `re` engine, with \\p{..} classes spelled out
  from `unicodedata` the way llama.cpp sees them (ASCII keeps ASCII meaning; every printable
  non-alphanumeric ASCII character is \\p{P}; \\s is the Unicode White_Space property), then the
  textbook merge loop (lowest rank, leftmost first).
- SPM: a sentencepiece ModelProto written by a minimal protobuf encoder, so the `sentencepiece`
  library can tokenize with the GGUF's own vocabulary.
"""
from __future__ import annotations

import re
import struct
import sys
import unicodedata
from functools import lru_cache

WHITE_SPACE = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
               0x2028, 0x2029, 0x202F, 0x205F, 0x3000]


def _ranges(pred) -> str:
    out, start, prev = [], None, None
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:
            ok = False
        else:
            ok = pred(cp)
        if ok and start is None:
            start = cp
        if not ok and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, sys.maxunicode))
    esc = lambda c: "\\U%08x" % c
    return "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in out)


@lru_cache(maxsize=None)
def _classes():
    cat = lambda cp: unicodedata.category(chr(cp))
    ws = set(WHITE_SPACE)
    L = _ranges(lambda cp: cat(cp)[0] == "L")
    N = _ranges(lambda cp: cat(cp)[0] == "N")
    P = _ranges(lambda cp: cat(cp)[0] == "P" or (0x21 <= cp <= 0x7E and not chr(cp).isalnum()))
    S = _ranges(lambda cp: cp in ws)
    return L, N, P, S


def _compile(rx: str) -> "re.Pattern":
    L, N, P, S = _classes()
    # Inside a class the category is inlined; outside it gets its own brackets.
    out, i, inside = [], 0, False
    table = {"\\p{L}": L, "\\p{N}": N, "\\p{P}": P, "\\s": S}
    while i < len(rx):
        if rx[i] == "[" and (i == 0 or rx[i - 1] != "\\"):
            inside = True
            out.append("[")
            i += 1
            continue
        if rx[i] == "]" and inside and rx[i - 1] != "\\":
            inside = False
            out.append("]")
            i += 1
            continue
        if rx.startswith("\\S", i):
            out.append(f"[^{S}]")
            i += 2
            continue
        for k, v in table.items():
            if rx.startswith(k, i):
                out.append(v if inside else f"[{v}]")
                i += len(k)
                break
        else:
            out.append(rx[i])
            i += 1
    return re.compile("".join(out))


GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
# gpt-4o / o200k as llama.cpp runs it (src/llama-vocab.cpp rewrites the tokenizer.json regex's
# \p{Lu}/\p{Ll} classes into lookaheads: an ASCII letter has its case, any other letter is both)
_CONTRACTION = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
GPT4O = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + _CONTRACTION +
         r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _CONTRACTION +
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

PRE_REGEXES = {
    "smollm": [r"\p{N}", GPT2],
    "gpt2": [GPT2],
    "llama3": [LLAMA3],
    "qwen2": [QWEN2],
    "gpt4o": [GPT4O],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
}


def pretokenize(text: str, pre: str) -> list[str]:
    """Sequential regex splitting that keeps matches and the unmatched gaps."""
    words = [text] if text else []
    for rx in PRE_REGEXES[pre]:
        pat = _compile(rx)
        nxt = []
        for w in words:
            pos = 0
            for m in pat.finditer(w):
                if m.start() > pos:
                    nxt.append(w[pos:m.start()])
                if m.end() > m.start():
                    nxt.append(m.group())
                pos = m.end()
            if pos < len(w):
                nxt.append(w[pos:])
        words = nxt
    return words


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_UNICODE = _bytes_to_unicode()


class ReferenceBpe:
    def __init__(self, tokens, merges, pre, ignore_merges=False):
        self.tok = {t: i for i, t in enumerate(tokens)}
        self.rank = {}
        for r, m in enumerate(merges):
            sp = m.index(" ", 1)
            self.rank.setdefault((m[:sp], m[sp + 1:]), r)
        self.pre = pre
        self.ignore_merges = ignore_merges

    def encode_word(self, word: str) -> list[int]:
        enc = "".join(BYTE_TO_UNICODE[b] for b in word.encode("utf-8"))
        if self.ignore_merges and enc in self.tok:
            return [self.tok[enc]]
        syms = list(enc)
        while len(syms) > 1:
            best, best_i = None, -1
            for i in range(len(syms) - 1):
                r = self.rank.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            syms[best_i:best_i + 2] = [syms[best_i] + syms[best_i + 1]]
        out = []
        for s in syms:
            if s in self.tok:
                out.append(self.tok[s])
            else:
                # Like llama.cpp: each raw byte of the byte-encoded text, as a 1-byte string.
                for b in s.encode("utf-8"):
                    if b < 0x80 and chr(b) in self.tok:
                        out.append(self.tok[chr(b)])
        return out

    def encode(self, text: str) -> list[int]:
        out = []
        for w in pretokenize(text, self.pre):
            out.extend(self.encode_word(w))
        return out


# ---- minimal protobuf writer for sentencepiece's ModelProto ----------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def _len_field(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def _int_field(field: int, value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    return _key(field, 0) + _varint(value)


def _float_field(field: int, value: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", value)


def sentencepiece_model_proto(tokens, scores, types, *, add_dummy_prefix: bool,
                              unk_id: int, bos_id: int, eos_id: int, pad_id: int) -> bytes:
    """ModelProto bytes: BPE model, byte fallback, identity normalization, no whitespace
    cleanup. GGUF token types map one to one onto sentencepiece piece types (1..6)."""
    parts = []
    for t, s, ty in zip(tokens, scores, types):
        ty = ty if ty in (1, 2, 3, 4, 5, 6) else 1
        if ty == 4:
            # sentencepiece matches user-defined pieces on the escaped text (spaces are '▁'),
            # llama.cpp on the raw text: spell them the way each one looks for them.
            t = t.replace(" ", "\u2581")
        piece = _len_field(1, t.encode("utf-8")) + _float_field(2, float(s)) + _int_field(3, ty)
        parts.append(_len_field(1, piece))
    trainer = b"".join([
        _int_field(3, 2),              # model_type = BPE
        _int_field(4, len(tokens)),    # vocab_size
        _int_field(26, 1),             # allow_whitespace_only_pieces (as Gemma's model sets)
        _int_field(35, 1),             # byte_fallback
        _int_field(40, unk_id), _int_field(41, bos_id), _int_field(42, eos_id), _int_field(43, pad_id),
    ])
    normalizer = b"".join([
        _len_field(1, b"identity"),
        _int_field(3, int(add_dummy_prefix)),
        _int_field(4, 0),              # remove_extra_whitespaces
        _int_field(5, 1),              # escape_whitespaces
    ])
    return b"".join(parts) + _len_field(2, trainer) + _len_field(3, normalizer)
