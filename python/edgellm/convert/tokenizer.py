"""tokenizer.json (+ tokenizer_config.json, generation_config.json, chat_template.jinja) →
the GGUF vocabulary keys (docs/formats.md §1.6). Byte-level BPE only; the pre-tokenizer name
is identified from the pre-tokenizer's own structure and regex in tokenizer.json, never from
the model's name (the names edgellm implements: docs/formats.md §7.3)."""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

from .checkpoint import member, read_json, read_text, show
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


_MAX_SEQUENCE_DEPTH = 8  # Sequence inside Sequence: real tokenizers nest one level


def _flatten(pre, path: str, depth: int = 0) -> list:
    if pre is None:
        return []
    if not isinstance(pre, dict):
        raise ConvertError(f"{path}: pre_tokenizer step {show(pre)} is not an object")
    if pre.get("type") == "Sequence":
        steps = pre.get("pretokenizers", [])
        if not isinstance(steps, list):
            raise ConvertError(f"{path}: pre_tokenizer Sequence's pretokenizers is not a list")
        if depth >= _MAX_SEQUENCE_DEPTH:
            raise ConvertError(f"{path}: pre_tokenizer Sequences nested more than {_MAX_SEQUENCE_DEPTH} deep")
        out = []
        for p in steps:
            out += _flatten(p, path, depth + 1)
        return out
    return [pre]


def _regex(p) -> Optional[str]:
    pat = p.get("pattern") or {}
    return pat.get("Regex") if isinstance(pat, dict) else None


def identify_pre(pre, path: str) -> str:
    """The engine's pre-tokenizer name for a tokenizer.json `pre_tokenizer` object."""
    steps = _flatten(pre, path)
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
            names = {_LLAMA3_RE: "llama3", _QWEN2_RE: "qwen2", _GPT2_RE: "gpt2", _GPT4O_RE: "gpt-4o"}
            shape.append(names.get(rx, f"split {show(rx, 200)}") if isinstance(rx, str) or rx is None
                         else f"split {show(rx)}")
        else:
            shape.append(show(p, 200))
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
            f"{path}: pre-tokenizer {show(' + '.join(shape), 600) if shape else '(none)'} is not one edgellm implements "
            f"(gpt2, smollm, llama3, qwen2, gpt-4o: docs/formats.md §7.3)")
    return name


def _token_text(tok) -> Optional[str]:
    if isinstance(tok, dict):
        tok = tok.get("content")
    return tok if isinstance(tok, str) else None


def chat_template(directory: str, tok_config: dict) -> Optional[str]:
    jinja = os.path.join(directory, "chat_template.jinja")
    if os.path.lexists(jinja):
        return _utf8(read_text(member(directory, "chat_template.jinja")), jinja, "chat template")
    t = tok_config.get("chat_template")
    if isinstance(t, list):  # named templates: the default one
        t = next((x.get("template") for x in t if isinstance(x, dict) and x.get("name") == "default"), None)
    if isinstance(t, str):
        return _utf8(t, os.path.join(directory, "tokenizer_config.json"), "chat_template")
    return None


def _utf8(text: str, path: str, what: str) -> str:
    """text, which a GGUF can store: no lone surrogates (JSON's \\ud800 escapes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConvertError(f"{path}: {what} holds a lone surrogate (at character {e.start})") from None
    return text


def _side_json(directory: str, name: str) -> dict:
    """An optional JSON file of the checkpoint ({} when absent)."""
    path = os.path.join(directory, name)
    return read_json(member(directory, name)) if os.path.lexists(path) else {}


def _bpe_vocab(tj: dict, path: str, n_vocab: int):
    """tokenizer.json's model (vocab: text -> id, merges) and added_tokens, checked: ids in
    [0, vocab_size), texts strings, merges pairs of strings."""
    model = tj.get("model")
    if not isinstance(model, dict):
        raise ConvertError(f"{path}: \"model\" is {show(model)}, not an object")
    if model.get("type") != "BPE":
        raise UnsupportedArchitectureError(f"{path}: tokenizer model {show(model.get('type'))} is not supported (BPE only)")
    vocab, added, merges = model.get("vocab", {}), tj.get("added_tokens", []), model.get("merges", [])
    vocab, added, merges = ({} if vocab is None else vocab), ([] if added is None else added), \
        ([] if merges is None else merges)
    if not isinstance(vocab, dict):
        raise ConvertError(f"{path}: model.vocab is not an object of token text -> id")
    if not isinstance(added, list):
        raise ConvertError(f"{path}: added_tokens is not a list")
    if not isinstance(merges, list):
        raise ConvertError(f"{path}: model.merges is not a list")

    def bad_id(i):
        return not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < n_vocab

    def refuse(i, what):
        raise ConvertError(f"{path}: {what} has id {show(i)}, not an integer in [0, {n_vocab}) "
                           f"(config.json's vocab_size)")

    for text, i in vocab.items():
        if bad_id(i):
            refuse(i, f"model.vocab token {show(text)}")
    for k, a in enumerate(added):
        if not isinstance(a, dict) or not isinstance(a.get("content"), str):
            raise ConvertError(f"{path}: added_tokens[{k}] is not an object with a \"content\" string")
        if bad_id(a.get("id")):
            refuse(a.get("id"), f"added_tokens[{k}] ({show(a['content'])})")
    out = []
    for k, m in enumerate(merges):
        if isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
            m = " ".join(m)
        if not isinstance(m, str):
            raise ConvertError(f"{path}: model.merges[{k}] = {show(m)} is neither \"a b\" nor [\"a\", \"b\"]")
        out.append(m)
    return vocab, added, out


def vocab_metadata(directory: str, n_vocab: int, config: dict) -> List[Tuple[str, object]]:
    """tokenizer.* (key, value) pairs; the vocabulary is padded to config's vocab_size. A
    tokenizer.model (SentencePiece) is preferred over tokenizer.json when both are present."""
    tc = _side_json(directory, "tokenizer_config.json")
    if os.path.lexists(os.path.join(directory, "tokenizer.model")):
        return _spm_metadata(directory, n_vocab, tc)
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.lexists(path):
        raise ConvertError(f"{path}: file not found (the converter needs tokenizer.json or tokenizer.model)")
    tj = read_json(member(directory, "tokenizer.json"))
    vocab, added, merges = _bpe_vocab(tj, path, n_vocab)
    pre = identify_pre(tj.get("pre_tokenizer"), path)
    size = n_vocab
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
    _utf8("".join(tokens), path, "a token text")
    _utf8("".join(merges), path, "a merge")

    kv: List[Tuple[str, object]] = [
        ("tokenizer.ggml.model", "gpt2"),
        ("tokenizer.ggml.pre", pre),
        ("tokenizer.ggml.tokens", tokens),
        ("tokenizer.ggml.token_type", types),
        ("tokenizer.ggml.merges", merges),
    ]
    gc = _side_json(directory, "generation_config.json")
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
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < size:
                kv.append((key, v))
                return

    special("tokenizer.ggml.bos_token_id", "bos_token", (gc, config))
    special("tokenizer.ggml.eos_token_id", "eos_token", (gc, config))
    special("tokenizer.ggml.unknown_token_id", "unk_token", ())
    special("tokenizer.ggml.padding_token_id", "pad_token", (gc, config))
    add_bos = tc.get("add_bos_token")
    if add_bos is None:  # a post-processor that prepends a special token
        post = tj.get("post_processor")
        single = (post.get("single") if isinstance(post, dict) else None) or []
        add_bos = isinstance(single, list) and bool(single) and isinstance(single[0], dict) and "SpecialToken" in single[0]
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
    if os.path.lexists(path):
        added = read_json(member(directory, "added_tokens.json"))
        for text, i in added.items():
            if not isinstance(i, int) or isinstance(i, bool) or i < 0:
                raise ConvertError(f"{path}: token {show(text)} has id {show(i)}, not a non-negative integer")
            entries.append((path, i, text, USER_DEFINED))
    decoder = tc.get("added_tokens_decoder") or {}
    tc_path = os.path.join(directory, "tokenizer_config.json")
    if not isinstance(decoder, dict):
        raise ConvertError(f"{tc_path}: added_tokens_decoder is not an object of id -> token")
    for key, data in decoder.items():
        try:
            i = int(key)
        except ValueError:
            raise ConvertError(f"{tc_path}: added_tokens_decoder key {show(key)} is not a token id") from None
        text = data.get("content") if isinstance(data, dict) else None
        if not isinstance(text, str) or i < 0:
            raise ConvertError(f"{tc_path}: added_tokens_decoder[{show(key)}] has no token text (\"content\")")
        if data.get("special") or _looks_special(text):
            entries.append((tc_path, i, text, CONTROL))
        else:
            entries.append((tc_path, i, text.replace("\u2581", " "), USER_DEFINED))
    for src, i, text, kind in entries:
        if i >= n:
            raise ConvertError(f"{src}: added token {show(text)} has id {i}, past config.json's vocab_size {n} "
                               f"(the embedding has no row for it)")
        tokens[i], scores[i], types[i] = text, -1000.0, kind


def _spm_metadata(directory: str, n_vocab: int, tc: dict) -> List[Tuple[str, object]]:
    from .spm import read_model

    path = member(directory, "tokenizer.model")
    m = read_model(path)
    tokens, scores, types = list(m["tokens"]), list(m["scores"]), list(m["types"])
    if len(tokens) > n_vocab:
        raise ConvertError(f"{path}: {len(tokens)} pieces, more than config.json's vocab_size {n_vocab}")
    for i in range(len(tokens), n_vocab):
        tokens.append(f"[PAD{i}]")
        scores.append(-1000.0)
        types.append(UNUSED)
    _spm_added_tokens(directory, tokens, scores, types, tc)
    _utf8("".join(tokens), path, "a piece or added token")
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
