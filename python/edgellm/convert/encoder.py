"""BERT-family encoders (BertModel, BertForSequenceClassification, XLMRobertaModel,
XLMRobertaForSequenceClassification) and sentence-transformers folders -> GGUF in llama.cpp's `bert`
layout (conversion/bert.py in llama.cpp), so files from either converter load in both.

XLM-RoBERTa (multilingual-e5, bge-m3, bge-reranker-v2-m3) is written as llama.cpp writes it: arch
`bert`, its position table cut by pad_token_id + 1 rows (RoBERTa numbers positions from
padding_idx + 1, so row padding_idx + 1 + i is position i), `roberta.` dropped from the names, a
classification head's dense + tanh as cls.* and out_proj as cls.output.*, and the Unigram
vocabulary as tokenizer.ggml.model "t5" with its scores and SentencePiece's precompiled charsmap
(tokenizer/unigram_tokenizer.cpp runs it as `tokenizers` does).

A sentence-transformers folder is a transformers checkpoint plus modules.json (Transformer,
Pooling, Normalize), 1_Pooling/config.json (the pooling mode -> bert.pooling_type) and
sentence_bert_config.json (max_seq_length: inputs are cut to it -> bert.max_seq_length,
edgellm's key; llama.cpp reads context_length only). A sequence classifier (cross-encoder)
keeps its pooler (dense + tanh, transformers' BertPooler) as cls.weight / cls.bias — llama.cpp's
converter drops it, which changes the scores — and its classifier as cls.output.*; its pooling
type is rank (4). The I64 position_ids buffer is skipped.

The vocabulary is WordPiece in llama.cpp's "phantom space" form: a word-initial piece is
written as "\u2581piece", a continuation "##piece" as "piece", special tokens as they are.
BertNormalizer's lowercase / strip_accents go to tokenizer.wordpiece.* (edgellm's keys)."""
from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple

import numpy as np

from .checkpoint import (MAX_SIDE_FILE_BYTES, Checkpoint, member, open_regular, parse_json, read_exact,
                         read_json)
from .errors import ConvertError
from .tensors import TensorPlan
from .tokenizer import CONTROL, NORMAL, UNKNOWN, UNUSED

ENCODER_CLASSES = ("BertModel", "BertForMaskedLM", "BertForSequenceClassification", "XLMRobertaModel",
                   "XLMRobertaForSequenceClassification", "NomicBertModel")
CLASSIFIERS = ("BertForSequenceClassification", "XLMRobertaForSequenceClassification")
POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}

_LAYER = {
    "attention.self.query": "attn_q", "attention.self.key": "attn_k", "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output", "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up", "output.dense": "ffn_down", "output.LayerNorm": "layer_output_norm",
}
_GLOBAL = {
    "embeddings.word_embeddings": "token_embd", "embeddings.position_embeddings": "position_embd",
    "embeddings.token_type_embeddings": "token_types", "embeddings.LayerNorm": "token_embd_norm",
}
_SKIPPED = re.compile(r"^(embeddings\.position_ids|embeddings\.token_type_ids|cls\.predictions\..*|"
                      r"cls\.seq_relationship\..*|lm_head\..*)$")


def is_encoder(config: dict) -> bool:
    archs = config.get("architectures") or []
    return bool(archs) and isinstance(archs, list) and archs[0] in ENCODER_CLASSES


def _int(config: dict, key: str, path: str, default: Optional[int] = None) -> int:
    v = config.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 1 << 24:
        raise ConvertError(f"{path}: {key} = {v!r} is not a positive integer")
    return v


def _side(directory: str, name: str):
    """A JSON side file (object or list; modules.json is a list), None when absent."""
    if not os.path.lexists(os.path.join(directory, name)):
        return None
    path = member(directory, name)
    f, size = open_regular(path, MAX_SIDE_FILE_BYTES)
    with f:
        return parse_json(read_exact(f, size, path, "file"), path)


def pooling_of(directory: str, classifier: bool) -> Tuple[Optional[int], Optional[int], bool]:
    """(pooling_type, max_seq_length, normalize) from a sentence-transformers folder's modules;
    (None, None, False) for a plain checkpoint (rank for a classifier)."""
    if classifier:
        return POOLING["rank"], None, False
    modules = _side(directory, "modules.json")
    pooling, normalize = None, False
    if isinstance(modules, list):
        for m in modules:
            kind = str(m.get("type", "")) if isinstance(m, dict) else ""
            if kind.endswith(".Normalize"):
                normalize = True
            if kind.endswith(".Pooling"):
                cfg = _side(directory, os.path.join(str(m.get("path", "")), "config.json"))
                if not isinstance(cfg, dict):
                    raise ConvertError(f"{directory}: the Pooling module's config.json is missing or not an object")
                if cfg.get("pooling_mode_cls_token"):
                    pooling = POOLING["cls"]
                elif cfg.get("pooling_mode_lasttoken"):
                    pooling = POOLING["last"]
                elif cfg.get("pooling_mode_mean_tokens"):
                    pooling = POOLING["mean"]
                else:
                    modes = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v]
                    raise ConvertError(f"{directory}: sentence-transformers pooling {modes} is not supported "
                                       "(mean, cls or last token)")
    st = _side(directory, "sentence_bert_config.json") or {}
    if not isinstance(st, dict):
        raise ConvertError(f"{directory}/sentence_bert_config.json: expected a JSON object")
    max_len = st.get("max_seq_length")
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= 0):
        raise ConvertError(f"{directory}/sentence_bert_config.json: max_seq_length = {max_len!r} is not a "
                           "positive integer")
    return pooling, max_len, normalize


def _tokenizer_json(directory: str) -> dict:
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.lexists(path):
        raise ConvertError(f"{path}: file not found (an encoder checkpoint needs its tokenizer.json)")
    return read_json(member(directory, "tokenizer.json"))


def _special_ids(tj: dict, n_vocab: int, path: str, tokens: list, types: list) -> dict:
    """added_tokens: their texts and types into tokens/types; {content: id}."""
    special = {}
    for a in tj.get("added_tokens") or []:
        i = a.get("id")
        if isinstance(i, int) and 0 <= i < n_vocab:
            tokens[i] = a["content"]
            types[i] = CONTROL if a.get("special") else NORMAL
            special[a["content"]] = i
    return special


def unigram_vocab_metadata(directory: str, n_vocab: int) -> List[Tuple[str, object]]:
    """XLM-R's Unigram tokenizer.json (Precompiled + Replace(" {2,}", " ") + Metaspace) as llama.cpp's
    "t5" vocabulary."""
    import base64

    path = os.path.join(directory, "tokenizer.json")
    tj = _tokenizer_json(directory)
    model = tj.get("model") or {}
    if model.get("type") != "Unigram" or not isinstance(model.get("vocab"), list):
        raise ConvertError(f"{path}: model type {model.get('type')!r} is not Unigram")
    if model.get("byte_fallback"):
        raise ConvertError(f"{path}: a Unigram model with byte_fallback is not supported")
    norm = tj.get("normalizer") or {}
    steps = norm.get("normalizers") if norm.get("type") == "Sequence" else [norm]
    kinds = [(x or {}).get("type") for x in steps or []]
    if kinds not in (["Precompiled", "Replace"], ["Precompiled"]) or (
            len(kinds) == 2 and (steps[1].get("pattern") != {"Regex": " {2,}"} or steps[1].get("content") != " ")):
        raise ConvertError(f"{path}: normalizer {kinds} is not XLM-R's (Precompiled, then Replace(' {{2,}}', ' '))")
    pre = tj.get("pre_tokenizer") or {}
    if pre.get("type") != "Metaspace" or pre.get("replacement") != "\u2581" or \
            pre.get("prepend_scheme", "always") != "always" or not pre.get("split", True):
        raise ConvertError(f"{path}: pre-tokenizer {pre.get('type')!r} is not XLM-R's Metaspace('\u2581', "
                           "prepend_scheme always, split)")
    try:
        charsmap = base64.b64decode(steps[0].get("precompiled_charsmap") or "")
    except ValueError as e:
        raise ConvertError(f"{path}: precompiled_charsmap is not base64: {e}") from None
    vocab = model["vocab"]
    if len(vocab) > n_vocab:
        raise ConvertError(f"{path}: {len(vocab)} pieces, more than vocab_size {n_vocab}")
    tokens: List[Optional[str]] = [None] * n_vocab
    scores, types = [-10000.0] * n_vocab, [NORMAL] * n_vocab
    for i, item in enumerate(vocab):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], (int, float))):
            raise ConvertError(f"{path}: vocab[{i}] is not a [piece, score] pair")
        tokens[i], scores[i] = item[0], float(item[1])
    special = _special_ids(tj, n_vocab, path, tokens, types)
    unk = model.get("unk_id")
    if isinstance(unk, int) and 0 <= unk < n_vocab:
        types[unk] = UNKNOWN
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i], types[i] = f"[PAD{i}]", UNUSED
    kv: List[Tuple[str, object]] = [
        ("tokenizer.ggml.model", "t5"),
        ("tokenizer.ggml.pre", "default"),
        ("tokenizer.ggml.tokens", tokens),
        ("tokenizer.ggml.scores", scores),
        ("tokenizer.ggml.token_type", types),
        ("tokenizer.ggml.add_space_prefix", True),
        ("tokenizer.ggml.remove_extra_whitespaces", True),
        ("tokenizer.ggml.add_bos_token", True),
        ("tokenizer.ggml.add_eos_token", True),
    ]
    if charsmap:
        kv.append(("tokenizer.ggml.precompiled_charsmap", bytes(charsmap)))
    if isinstance(unk, int) and 0 <= unk < n_vocab:
        kv.append(("tokenizer.ggml.unknown_token_id", unk))
    for key, name in (("bos", "<s>"), ("eos", "</s>"), ("seperator", "</s>"), ("padding", "<pad>"), ("mask", "<mask>")):
        if name in special:
            kv.append((f"tokenizer.ggml.{key}_token_id", special[name]))
    return kv


def vocab_metadata(directory: str, n_vocab: int) -> List[Tuple[str, object]]:
    path = os.path.join(directory, "tokenizer.json")
    tj = _tokenizer_json(directory)
    model = tj.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise ConvertError(f"{path}: model type {model.get('type')!r} is not WordPiece")
    prefix = model.get("continuing_subword_prefix", "##")
    if prefix != "##" or int(model.get("max_input_chars_per_word", 100)) != 100:
        raise ConvertError(f"{path}: only WordPiece with prefix '##' and 100-character words is supported")
    norm = tj.get("normalizer") or {}
    if norm.get("type") != "BertNormalizer":
        raise ConvertError(f"{path}: normalizer {norm.get('type')!r} is not BertNormalizer")
    if not norm.get("clean_text", True) or not norm.get("handle_chinese_chars", True):
        raise ConvertError(f"{path}: BertNormalizer without clean_text / handle_chinese_chars is not supported")
    if (tj.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer":
        raise ConvertError(f"{path}: pre-tokenizer {(tj.get('pre_tokenizer') or {}).get('type')!r} is not "
                           "BertPreTokenizer")
    lowercase = bool(norm.get("lowercase", True))
    strip = norm.get("strip_accents")
    strip = lowercase if strip is None else bool(strip)

    tokens: List[Optional[str]] = [None] * n_vocab
    types = [NORMAL] * n_vocab
    for text, i in model["vocab"].items():
        if not isinstance(i, int) or not 0 <= i < n_vocab:
            raise ConvertError(f"{path}: token {text!r} has id {i!r} outside the vocabulary (0..{n_vocab - 1})")
        tokens[i] = text
    special = _special_ids(tj, n_vocab, path, tokens, types)
    unk = special.get(model.get("unk_token", "[UNK]"))
    if unk is not None:
        types[unk] = UNKNOWN
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i], types[i] = f"[PAD{i}]", CONTROL
        elif types[i] == NORMAL:
            tokens[i] = t[2:] if t.startswith("##") else "\u2581" + t
    kv: List[Tuple[str, object]] = [
        ("tokenizer.ggml.model", "bert"),
        ("tokenizer.ggml.tokens", tokens),
        ("tokenizer.ggml.token_type", types),
        ("tokenizer.wordpiece.lowercase", lowercase),
        ("tokenizer.wordpiece.strip_accents", strip),
    ]
    for key, name in (("unknown", "[UNK]"), ("cls", "[CLS]"), ("seperator", "[SEP]"), ("padding", "[PAD]"),
                      ("mask", "[MASK]")):
        if name in special:
            kv.append((f"tokenizer.ggml.{key}_token_id", special[name]))
    return kv


_NOMIC_LAYER = {"attn.Wqkv": "attn_qkv", "attn.out_proj": "attn_output", "mlp.fc11": "ffn_up", "mlp.fc12": "ffn_gate",
                "mlp.fc2": "ffn_down", "norm1": "attn_output_norm", "norm2": "layer_output_norm"}
_NOMIC_GLOBAL = {"embeddings.word_embeddings": "token_embd", "embeddings.token_type_embeddings": "token_types",
                 "emb_ln": "token_embd_norm"}


def plan_nomic(ckpt: Checkpoint) -> Tuple[str, list, List[TensorPlan]]:
    """nomic-embed-text v1 / v1.5 (the hub's NomicBertModel: nomic's config keys and tensor names) in
    llama.cpp's `nomic-bert` layout (conversion/bert.py NomicBertModel): fused Wqkv, fc11 up, fc12 gate,
    rotary positions, no biases."""
    c, path = ckpt.config, os.path.join(ckpt.dir, "config.json")
    if "n_embd" not in c:
        raise ConvertError(f"{path}: a NomicBertModel in transformers' own layout (hidden_size, q_proj, ...) is "
                           "not supported; give the hub's nomic layout (n_embd, attn.Wqkv, mlp.fc11)")
    want = {"activation_function": "swiglu", "qkv_proj_bias": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False,
            "prenorm": False, "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False, "causal": False}
    for k, v in want.items():
        if c.get(k, v) != v:
            raise ConvertError(f"{path}: {k} = {c.get(k)!r} is not supported ({v!r}: nomic-embed-text v1 / v1.5)")
    if c.get("rotary_emb_scale_base") is not None or c.get("moe_every_n_layers"):
        raise ConvertError(f"{path}: scaled rotary embeddings and the MoE variant are not supported")
    n_embd, n_layer = _int(c, "n_embd", path), _int(c, "n_layer", path)
    n_head, n_ff, n_vocab = _int(c, "n_head", path), _int(c, "n_inner", path), _int(c, "vocab_size", path)
    n_types = _int(c, "type_vocab_size", path, 2)
    # trained for max_trained_positions tokens (llama.cpp's context_length: 2048 for v1 / v1.5)
    n_ctx = min(_int(c, "n_positions", path), _int(c, "max_trained_positions", path, 2048))
    eps = c.get("layer_norm_epsilon", 1e-12)
    if n_embd % n_head:
        raise ConvertError(f"{path}: n_embd {n_embd} is not a multiple of n_head {n_head}")
    shapes = {"token_embd": (n_vocab, n_embd), "token_types": (n_types, n_embd), "token_embd_norm": (n_embd,),
              "attn_qkv": (3 * n_embd, n_embd), "attn_output": (n_embd, n_embd), "ffn_up": (n_ff, n_embd),
              "ffn_gate": (n_ff, n_embd), "ffn_down": (n_embd, n_ff), "attn_output_norm": (n_embd,),
              "layer_output_norm": (n_embd,)}
    plans: List[TensorPlan] = []
    for name in ckpt.names():
        stem, _, kind = name.rpartition(".")
        m = re.match(r"^encoder\.layers\.(\d+)\.(.+)$", stem)
        if m and m.group(2) in _NOMIC_LAYER and int(m.group(1)) < n_layer:
            key = _NOMIC_LAYER[m.group(2)]
            dst = f"blk.{m.group(1)}.{key}"
        elif stem in _NOMIC_GLOBAL:
            key = dst = _NOMIC_GLOBAL[stem]
        else:
            raise ConvertError(f"{ckpt.dir}: tensor {name} is not part of a NomicBertModel (nomic-embed-text v1 / v1.5)")
        shape, want_shape = tuple(ckpt.info(name).shape), shapes[key] if kind == "weight" else (shapes[key][0],)
        if kind not in ("weight", "bias") or shape != want_shape:
            raise ConvertError(f"{ckpt.dir}: tensor {name} has shape {list(shape)}, expected {list(want_shape)}")
        plans.append(TensorPlan(name, f"{dst}.{kind}", shape))
    need = ["token_embd.weight", "token_embd_norm.weight", "token_embd_norm.bias"]
    need += [f"blk.{i}.{k}.weight" for i in range(n_layer) for k in _NOMIC_LAYER.values()]
    need += [f"blk.{i}.{k}.bias" for i in range(n_layer) for k in ("attn_output_norm", "layer_output_norm")]
    missing = [n for n in need if n not in {p.dst for p in plans}]
    if missing:
        raise ConvertError(f"{ckpt.dir}: the checkpoint lacks {missing[0]}" +
                           (f" and {len(missing) - 1} more tensors" if len(missing) > 1 else ""))
    order = {d: i for i, d in enumerate(need)}
    plans.sort(key=lambda p: (order.get(p.dst, len(order)), p.dst))
    pooling, max_len, _ = pooling_of(ckpt.dir, False)
    a = "nomic-bert"
    kv: List[Tuple[str, object]] = [
        ("general.name", os.path.basename(ckpt.dir.rstrip("/"))), (f"{a}.context_length", n_ctx),
        (f"{a}.embedding_length", n_embd), (f"{a}.feed_forward_length", n_ff), (f"{a}.attention.head_count", n_head),
        (f"{a}.block_count", n_layer), (f"{a}.attention.layer_norm_epsilon", float(eps)),
        (f"{a}.attention.causal", False), (f"{a}.rope.freq_base", float(c.get("rotary_emb_base", 10000.0))),
        ("tokenizer.ggml.token_type_count", n_types),
    ]
    if pooling is not None:
        kv.append((f"{a}.pooling_type", pooling))
    if max_len is not None:
        kv.append((f"{a}.max_seq_length", min(max_len, n_ctx)))
    kv += vocab_metadata(ckpt.dir, n_vocab)
    return "NomicBertModel", kv, plans


def plan(ckpt: Checkpoint) -> Tuple[str, str, list, List[TensorPlan]]:
    """(GGUF arch, hf class, metadata, tensor plans) of an encoder checkpoint."""
    c, path = ckpt.config, os.path.join(ckpt.dir, "config.json")
    hf_arch = c["architectures"][0]
    if hf_arch == "NomicBertModel":
        return ("nomic-bert",) + plan_nomic(ckpt)
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise ConvertError(f"{path}: position_embedding_type {c.get('position_embedding_type')!r} is not "
                           "supported (absolute)")
    if c.get("hidden_act", "gelu") != "gelu":
        raise ConvertError(f"{path}: hidden_act {c.get('hidden_act')!r} is not supported (gelu)")
    roberta = hf_arch.startswith("XLMRoberta")
    n_embd, n_layer = _int(c, "hidden_size", path), _int(c, "num_hidden_layers", path)
    n_head, n_ff = _int(c, "num_attention_heads", path), _int(c, "intermediate_size", path)
    n_pos, n_vocab = _int(c, "max_position_embeddings", path), _int(c, "vocab_size", path)
    # RoBERTa: position i is row padding_idx + 1 + i; the rows before are cut (llama.cpp's layout)
    pos_offset = 0
    if roberta:
        pad = c.get("pad_token_id", 1)
        if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < n_pos - 1:
            raise ConvertError(f"{path}: pad_token_id = {pad!r} does not fit max_position_embeddings {n_pos}")
        pos_offset = pad + 1
    n_ctx = n_pos - pos_offset
    n_types = _int(c, "type_vocab_size", path, 2)
    if n_embd % n_head:
        raise ConvertError(f"{path}: hidden_size {n_embd} is not a multiple of num_attention_heads {n_head}")
    eps = c.get("layer_norm_eps", 1e-12)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise ConvertError(f"{path}: layer_norm_eps = {eps!r} is not a small positive number")
    classifier = hf_arch in CLASSIFIERS
    pooling, max_len, _ = pooling_of(ckpt.dir, classifier)

    shapes = {
        "token_embd": (n_vocab, n_embd), "position_embd": (n_pos, n_embd), "token_types": (n_types, n_embd),
        "token_embd_norm": (n_embd,), "attn_q": (n_embd, n_embd), "attn_k": (n_embd, n_embd),
        "attn_v": (n_embd, n_embd), "attn_output": (n_embd, n_embd), "attn_output_norm": (n_embd,),
        "ffn_up": (n_ff, n_embd), "ffn_down": (n_embd, n_ff), "layer_output_norm": (n_embd,), "cls": (n_embd, n_embd),
    }
    plans: List[TensorPlan] = []
    n_labels = None
    for name in ckpt.names():
        base = name.split(".", 1)[1] if name.startswith(("bert.", "roberta.")) else name
        base = re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", base))
        if _SKIPPED.match(base):
            continue
        stem, _, kind = base.rpartition(".")
        dst = None
        m = re.match(r"^encoder\.layer\.(\d+)\.(.+)$", stem)
        if m and m.group(2) in _LAYER:
            if int(m.group(1)) >= n_layer:
                raise ConvertError(f"{ckpt.dir}: tensor {name} is beyond num_hidden_layers {n_layer}")
            key = _LAYER[m.group(2)]
            dst = f"blk.{m.group(1)}.{key}"
        elif stem in _GLOBAL:
            key = dst = _GLOBAL[stem]
        elif stem == "pooler.dense":
            if not classifier:
                continue  # embeddings pool the hidden states; the pooler is a classifier's
            key = dst = "cls"
        elif stem == "classifier" and classifier and not roberta:
            key, dst = None, "cls.output"
        elif stem == "classifier.dense" and classifier and roberta:  # RobertaClassificationHead
            key = dst = "cls"
        elif stem == "classifier.out_proj" and classifier and roberta:
            key, dst = None, "cls.output"
        if dst is None or kind not in ("weight", "bias"):
            raise ConvertError(f"{ckpt.dir}: tensor {name} is not part of a {hf_arch}")
        shape = tuple(ckpt.info(name).shape)
        if key is None:
            n_labels = shape[0]
            want = (n_labels, n_embd) if kind == "weight" else (n_labels,)
        else:
            want = shapes[key] if kind == "weight" or len(shapes[key]) == 1 else (shapes[key][0],)
        if shape != want:
            raise ConvertError(f"{ckpt.dir}: tensor {name} has shape {list(shape)}, expected {list(want)}")
        if dst == "position_embd" and pos_offset:
            rows = ckpt.load_f32(name)[pos_offset:]
            plans.append(TensorPlan(name, f"{dst}.{kind}", rows.shape, value=np.ascontiguousarray(rows)))
            continue
        plans.append(TensorPlan(name, f"{dst}.{kind}", shape))
    dsts = {p.dst for p in plans}
    need = ["token_embd.weight", "position_embd.weight", "token_embd_norm.weight", "token_embd_norm.bias"]
    need += [f"blk.{i}.{k}.{kind}" for i in range(n_layer) for k in _LAYER.values() for kind in ("weight", "bias")]
    if classifier:
        need += ["cls.output.weight"]
    missing = [n for n in need if n not in dsts]
    if missing:
        raise ConvertError(f"{ckpt.dir}: the checkpoint lacks {missing[0]}" +
                           (f" and {len(missing) - 1} more tensors" if len(missing) > 1 else ""))
    order = {d: i for i, d in enumerate(need)}
    plans.sort(key=lambda p: (order.get(p.dst, len(order)), p.dst))

    kv: List[Tuple[str, object]] = [
        ("general.name", os.path.basename(ckpt.dir.rstrip("/"))),
        ("bert.context_length", n_ctx),
        ("bert.embedding_length", n_embd),
        ("bert.feed_forward_length", n_ff),
        ("bert.attention.head_count", n_head),
        ("bert.block_count", n_layer),
        ("bert.attention.layer_norm_epsilon", float(eps)),
        ("bert.attention.causal", False),
        ("tokenizer.ggml.token_type_count", n_types),
    ]
    if pooling is not None:
        kv.append(("bert.pooling_type", pooling))
    if max_len is not None:
        kv.append(("bert.max_seq_length", min(max_len, n_ctx)))
    if n_labels is not None:
        labels = c.get("id2label")
        if isinstance(labels, dict) and len(labels) == n_labels and not (
                n_labels == 2 and labels.get("0") == "LABEL_0"):
            kv.append(("bert.classifier.output_labels", [str(labels[k]) for k in sorted(labels, key=int)]))
    kv += unigram_vocab_metadata(ckpt.dir, n_vocab) if roberta else vocab_metadata(ckpt.dir, n_vocab)
    return "bert", hf_arch, kv, plans


def tensor_type(dst: str, ne0: int, out_type: str) -> str:
    """Output type of one tensor: 1-D F32; the classifier and token types F32 (tiny); matrices
    the file type where their rows fit its blocks (else Q8_0, else F16); the embeddings F16
    in quantized files (read a row at a time)."""
    if not dst.endswith(".weight") or dst.startswith("cls.output") or dst.startswith("token_types") \
            or "norm" in dst:
        return "F32"
    if out_type in ("F32", "F16", "BF16"):
        return out_type
    if dst.startswith(("token_embd", "position_embd")):
        return "F16"
    block = 256 if "_K" in out_type else 32
    if ne0 % block == 0:
        return {"Q4_K_M": "Q4_K", "Q4_K_S": "Q4_K", "Q5_K_M": "Q5_K"}.get(out_type, out_type)
    return "Q8_0" if ne0 % 32 == 0 else "F16"
