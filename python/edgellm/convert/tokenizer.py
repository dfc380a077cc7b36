"""tokenizer.json (+ tokenizer_config.json, generation_config.json, chat_template.jinja) →
the GGUF vocabulary keys (docs/formats.md §1.6). Byte-level BPE only; the pre-tokenizer name
is identified from the pre-tokenizer's own structure and regex in tokenizer.json, never from
the model's name (the names edgellm implements: docs/formats.md §7.3)."""
from __future__ import annotations

import json
import os
from typing import List, Optional, Tuple

from .checkpoint import read_json
from .errors import ConvertError, UnsupportedArchitectureError

# token types (docs/formats.md §1.6)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_RE = _LLAMA3_RE.replace(r"\p{N}{1,3}", r"\p{N}")
_GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
# o200k (gpt-oss; GGUF name "gpt-4o", as llama.cpp writes it)
_GPT4O_WORD = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?")
_GPT4O_RE = _GPT4O_WORD + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def _flatten(pre) -> list:
    if not pre:
        return []
    if pre.get("type") == "Sequence":
        out = []
        for p in pre.get("pretokenizers", []):
            out += _flatten(p)
        return out
    return [pre]


def _regex(p) -> Optional[str]:
    pat = p.get("pattern") or {}
    return pat.get("Regex") if isinstance(pat, dict) else None


def identify_pre(pre, path: str) -> str:
    """The engine's pre-tokenizer name for a tokenizer.json `pre_tokenizer` object."""
    steps = _flatten(pre)
    shape = []
    for p in steps:
        t = p.get("type")
        if t == "ByteLevel":
            shape.append("bytelevel+regex" if p.get("use_regex", True) else "bytelevel")
            if p.get("add_prefix_space"):
                shape.append("prefix-space")
        elif t == "Digits":
            shape.append("digits1" if p.get("individual_digits") else "digits")
        elif t == "Split" and p.get("behavior") == "Isolated" and not p.get("invert"):
            rx = _regex(p)
            shape.append({_LLAMA3_RE: "llama3", _QWEN2_RE: "qwen2", _GPT2_RE: "gpt2", _GPT4O_RE: "gpt-4o"}.get(rx, f"split {rx!r}"))
        else:
            shape.append(json.dumps(p, sort_keys=True))
    known = {
        ("bytelevel+regex",): "gpt2",
        ("digits1", "bytelevel+regex"): "smollm",
        ("llama3", "bytelevel"): "llama3",
        ("qwen2", "bytelevel"): "qwen2",
        ("gpt2", "bytelevel"): "gpt2",
        ("gpt-4o", "bytelevel"): "gpt-4o",
    }
    name = known.get(tuple(shape))
    if name is None:
        raise UnsupportedArchitectureError(
            f"{path}: pre-tokenizer {' + '.join(shape) or '(none)'} is not one edgellm implements "
            f"(gpt2, smollm, llama3, qwen2, gpt-4o: docs/formats.md §7.3)")
    return name


def _token_text(tok) -> Optional[str]:
    if isinstance(tok, dict):
        return tok.get("content")
    return tok if isinstance(tok, str) else None


def chat_template(directory: str, tok_config: dict) -> Optional[str]:
    jinja = os.path.join(directory, "chat_template.jinja")
    if os.path.exists(jinja):
        with open(jinja, "r", encoding="utf-8") as f:
            return f.read()
    t = tok_config.get("chat_template")
    if isinstance(t, list):  # named templates: the default one
        t = next((x.get("template") for x in t if x.get("name") == "default"), None)
    return t if isinstance(t, str) else None


def vocab_metadata(directory: str, n_vocab: int, config: dict) -> List[Tuple[str, object]]:
    """tokenizer.* (key, value) pairs; the vocabulary is padded to config's vocab_size. A
    tokenizer.model (SentencePiece) is preferred over tokenizer.json when both are present."""
    tc_path = os.path.join(directory, "tokenizer_config.json")
    tc = read_json(tc_path) if os.path.exists(tc_path) else {}
    if os.path.exists(os.path.join(directory, "tokenizer.model")):
        return _spm_metadata(directory, n_vocab, tc)
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.exists(path):
        raise ConvertError(f"{path}: file not found (the converter needs tokenizer.json or tokenizer.model)")
    tj = read_json(path)
    model = tj.get("model") or {}
    if model.get("type") != "BPE":
        raise UnsupportedArchitectureError(f"{path}: tokenizer model {model.get('type')!r} is not supported (BPE only)")
    pre = identify_pre(tj.get("pre_tokenizer"), path)
    vocab = model.get("vocab") or {}
    added = tj.get("added_tokens") or []
    size = max([n_vocab - 1] + list(vocab.values()) + [a["id"] for a in added]) + 1
    if size > n_vocab:
        raise ConvertError(f"{path}: {size} tokens, more than config.json's vocab_size {n_vocab}")
    tokens: List[Optional[str]] = [None] * size
    types = [NORMAL] * size
    for text, i in vocab.items():
        tokens[i] = text
    for a in added:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = CONTROL if a.get("special") else USER_DEFINED
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i] = f"[PAD{i}]"
            types[i] = UNUSED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]

    kv: List[Tuple[str, object]] = [
        ("tokenizer.ggml.model", "gpt2"),
        ("tokenizer.ggml.pre", pre),
        ("tokenizer.ggml.tokens", tokens),
        ("tokenizer.ggml.token_type", types),
        ("tokenizer.ggml.merges", merges),
    ]
    gc_path = os.path.join(directory, "generation_config.json")
    gc = read_json(gc_path) if os.path.exists(gc_path) else {}
    index = {t: i for i, t in enumerate(tokens)}

    def special(key, text_key, ids):
        text = _token_text(tc.get(text_key))
        if text is not None and text in index:
            kv.append((key, index[text]))
            return
        for src in ids:
            v = src.get(text_key + "_id")
            if isinstance(v, list):
                v = v[0] if v else None
            if isinstance(v, int) and 0 <= v < size:
                kv.append((key, v))
                return

    special("tokenizer.ggml.bos_token_id", "bos_token", (gc, config))
    special("tokenizer.ggml.eos_token_id", "eos_token", (gc, config))
    special("tokenizer.ggml.unknown_token_id", "unk_token", ())
    special("tokenizer.ggml.padding_token_id", "pad_token", (gc, config))
    add_bos = tc.get("add_bos_token")
    if add_bos is None:  # a post-processor that prepends a special token
        single = ((tj.get("post_processor") or {}).get("single") or [])
        add_bos = bool(single) and "SpecialToken" in single[0]
    kv.append(("tokenizer.ggml.add_bos_token", bool(add_bos)))
    if tc.get("add_eos_token") is not None:
        kv.append(("tokenizer.ggml.add_eos_token", bool(tc["add_eos_token"])))
    tmpl = chat_template(directory, tc)
    if tmpl:
        kv.append(("tokenizer.chat_template", tmpl))
    return kv


def _looks_special(text: str) -> bool:
    """Added tokens that are control tokens although not marked special (as llama.cpp's
    converter decides: <|...|>, <｜...｜>, <unused...>, and a few names)."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<｜") and text.endswith("｜>")) or (text.startswith("<unused") and text.endswith(">")))


def _spm_added_tokens(directory: str, tokens: list, scores: list, types: list, tc: dict) -> None:
    """Tokens added beside a SentencePiece model (Phi-3's <|user|>, <|end|>, ...): added_tokens.json
    ({text: id}, user-defined) then tokenizer_config.json's added_tokens_decoder (special ones and
    those that look special are control tokens, the rest user-defined with ▁ read as a space), each
    at its id with score -1000, as llama.cpp's converter writes them. An id past config.json's
    vocab_size has no embedding row: an error."""
    n = len(tokens)
    path = os.path.join(directory, "added_tokens.json")
    entries = []
    if os.path.exists(path):
        added = read_json(path)
        if not isinstance(added, dict):
            raise ConvertError(f"{path}: expected an object of token text -> id")
        for text, i in added.items():
            if not isinstance(i, int) or isinstance(i, bool) or i < 0:
                raise ConvertError(f"{path}: token {text!r} has id {i!r}, not a non-negative integer")
            entries.append((path, i, text, USER_DEFINED))
    decoder = tc.get("added_tokens_decoder") or {}
    tc_path = os.path.join(directory, "tokenizer_config.json")
    for key, data in decoder.items():
        try:
            i = int(key)
        except ValueError:
            raise ConvertError(f"{tc_path}: added_tokens_decoder key {key!r} is not a token id") from None
        text = data.get("content") if isinstance(data, dict) else None
        if not isinstance(text, str) or i < 0:
            raise ConvertError(f"{tc_path}: added_tokens_decoder[{key!r}] has no token text (\"content\")")
        if data.get("special") or _looks_special(text):
            entries.append((tc_path, i, text, CONTROL))
        else:
            entries.append((tc_path, i, text.replace("\u2581", " "), USER_DEFINED))
    for src, i, text, kind in entries:
        if i >= n:
            raise ConvertError(f"{src}: added token {text!r} has id {i}, past config.json's vocab_size {n} "
                               f"(the embedding has no row for it)")
        tokens[i], scores[i], types[i] = text, -1000.0, kind


def _spm_metadata(directory: str, n_vocab: int, tc: dict) -> List[Tuple[str, object]]:
    from .spm import read_model

    path = os.path.join(directory, "tokenizer.model")
    m = read_model(path)
    tokens, scores, types = list(m["tokens"]), list(m["scores"]), list(m["types"])
    if len(tokens) > n_vocab:
        raise ConvertError(f"{path}: {len(tokens)} pieces, more than config.json's vocab_size {n_vocab}")
    for i in range(len(tokens), n_vocab):
        tokens.append(f"[PAD{i}]")
        scores.append(-1000.0)
        types.append(UNUSED)
    _spm_added_tokens(directory, tokens, scores, types, tc)
    kv: List[Tuple[str, object]] = [
        ("tokenizer.ggml.model", "llama"),
        ("tokenizer.ggml.tokens", tokens),
        ("tokenizer.ggml.scores", scores),
        ("tokenizer.ggml.token_type", types),
    ]
    for key in ("bos", "eos", "unk", "pad"):
        i = m[f"{key}_id"]
        if 0 <= i < len(tokens):
            name = {"unk": "unknown", "pad": "padding"}.get(key, key)
            kv.append((f"tokenizer.ggml.{name}_token_id", i))
    kv.append(("tokenizer.ggml.add_space_prefix", bool(m["add_dummy_prefix"])))
    kv.append(("tokenizer.ggml.add_bos_token", bool(tc.get("add_bos_token", True))))
    if tc.get("add_eos_token") is not None:
        kv.append(("tokenizer.ggml.add_eos_token", bool(tc["add_eos_token"])))
    tmpl = chat_template(directory, tc)
    if tmpl:
        kv.append(("tokenizer.chat_template", tmpl))
    return kv
