"""config.json → the GGUF metadata the engine reads (docs/formats.md §1.5, §4): one ArchSpec
per Hugging Face architecture class. Values the engine cannot honour (a RoPE scaling it does
not implement, an attention scale it derives differently) are refused here rather than
converted into a file that runs wrong."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from .checkpoint import show
from .errors import ConvertError, UnsupportedArchitectureError


@dataclass(frozen=True)
class ArchSpec:
    gguf_arch: str
    permute_qk: bool = False  # llama: HF rotate-half rows → adjacent pairs (docs/formats.md §4.2)
    norm_plus_one: bool = False  # gemma: RMSNorm weights stored as w, applied as 1 + w
    sandwich_norms: bool = False  # gemma2/3: post_attention / pre_feedforward / post_feedforward
    qk_norm: bool = False  # qwen3, gemma3
    qkv_bias: Optional[bool] = None  # True: required, None: optional
    fused_qkv: bool = False  # phi3
    qk_norm_whole: bool = False  # olmoe: Q/K norms over the whole projection, not per head
    moe: bool = False  # mixture-of-experts FFN (docs/formats.md §4.8)
    shared_expert: bool = False  # qwen2moe: a shared expert with its sigmoid gate
    gpt_oss: bool = False  # MXFP4 experts with biases, router bias, attention sinks, post-attention norm


ARCHS: Dict[str, ArchSpec] = {
    "LlamaForCausalLM": ArchSpec("llama", permute_qk=True),
    "MistralForCausalLM": ArchSpec("llama", permute_qk=True),
    "Qwen2ForCausalLM": ArchSpec("qwen2", qkv_bias=True),
    # the language model of Qwen2_5_VLForConditionalGeneration (convert/vlm.py): M-RoPE
    "Qwen2_5_VLForCausalLM": ArchSpec("qwen2vl", qkv_bias=True),
    "Qwen3ForCausalLM": ArchSpec("qwen3", qk_norm=True),
    "Phi3ForCausalLM": ArchSpec("phi3", fused_qkv=True),
    "Gemma2ForCausalLM": ArchSpec("gemma2", norm_plus_one=True, sandwich_norms=True),
    "Gemma3ForCausalLM": ArchSpec("gemma3", norm_plus_one=True, sandwich_norms=True, qk_norm=True),
    "MixtralForCausalLM": ArchSpec("llama", permute_qk=True, moe=True),
    "Qwen2MoeForCausalLM": ArchSpec("qwen2moe", qkv_bias=True, moe=True, shared_expert=True),
    "Qwen3MoeForCausalLM": ArchSpec("qwen3moe", qk_norm=True, moe=True),
    "OlmoeForCausalLM": ArchSpec("olmoe", qk_norm=True, qk_norm_whole=True, moe=True),
    "GptOssForCausalLM": ArchSpec("gpt-oss", qkv_bias=True, moe=True, gpt_oss=True),
}


# ---- config.json schema -------------------------------------------------------------------------
# Every config.json key the converter reads, with its JSON type and range, checked before any
# value is used (check_config): a wrong type, a float where an integer belongs, NaN, or a size
# past what a GGUF (u32) or the engine can hold is a ConvertError naming the key. Absent and
# null keys pass here; the code that needs one says so (_req).
@dataclass(frozen=True)
class Field:
    kind: str  # int, num (int or float), bool, str, strs / nums / ints (lists of), obj
    lo: float = 0
    hi: float = 0
    lo_open: bool = False  # lo itself excluded (eps, theta, factors: > 0)


_I31 = 2**31 - 1
_DIM = Field("int", 1, 1 << 24)
_CONTEXT = Field("int", 1, _I31)
_POS = Field("num", 0, 1e15, lo_open=True)
_CAP = Field("num", 0, 1e6)
ROPE_FIELDS: Dict[str, Field] = {  # rope_scaling / rope_parameters (and each per-layer-type entry)
    "rope_type": Field("str"), "type": Field("str"),
    "rope_theta": _POS, "factor": _POS, "low_freq_factor": _POS, "high_freq_factor": _POS,
    "original_max_position_embeddings": Field("int", 2, _I31),
    "attention_factor": _POS, "mscale": Field("num", -1e6, 1e6), "mscale_all_dim": Field("num", -1e6, 1e6),
    "beta_fast": Field("num", -1e6, 1e6), "beta_slow": Field("num", -1e6, 1e6),
    "extrapolation_factor": Field("num", -1e6, 1e6), "truncate": Field("bool"),
    "long_factor": Field("nums", 0, 1e15, lo_open=True), "short_factor": Field("nums", 0, 1e15, lo_open=True),
    "partial_rotary_factor": Field("num", 0, 1, lo_open=True),
}
CONFIG_FIELDS: Dict[str, Field] = {
    "architectures": Field("strs"),
    "hidden_size": Field("int", 1, 1 << 20),
    "intermediate_size": _DIM,
    "num_hidden_layers": Field("int", 1, 4096),
    "num_attention_heads": Field("int", 1, 1 << 14),
    "num_key_value_heads": Field("int", 1, 1 << 14),
    "head_dim": Field("int", 1, 1 << 16),
    "vocab_size": Field("int", 1, _I31),
    "max_position_embeddings": _CONTEXT,
    "original_max_position_embeddings": Field("int", 2, _I31),
    "rms_norm_eps": Field("num", 0, 1, lo_open=True), "layer_norm_eps": Field("num", 0, 1, lo_open=True),
    "rope_theta": _POS, "rope_local_base_freq": _POS,
    "partial_rotary_factor": Field("num", 0, 1, lo_open=True),
    "rope_scaling": Field("obj"), "rope_parameters": Field("obj"),
    "tie_word_embeddings": Field("bool"),
    "hidden_act": Field("str"), "hidden_activation": Field("str"),
    "use_sliding_window": Field("bool"), "sliding_window": Field("int", 0, _I31),
    "sliding_window_pattern": Field("int", 1, 4096), "layer_types": Field("strs"),
    "query_pre_attn_scalar": _POS, "attn_logit_softcapping": _CAP, "final_logit_softcapping": _CAP,
    "clip_qkv": Field("num", -1e15, 1e15),
    "num_local_experts": Field("int", 1, 1 << 16), "num_experts": Field("int", 1, 1 << 16),
    "num_experts_per_tok": Field("int", 1, 1 << 16),
    "moe_intermediate_size": _DIM, "shared_expert_intermediate_size": _DIM,
    "decoder_sparse_step": Field("int", 0, 4096), "mlp_only_layers": Field("ints", 0, 4096),
    "norm_topk_prob": Field("bool"),
}
_KIND_NAMES = {"int": "an integer", "num": "a number", "bool": "true or false", "str": "a string",
               "strs": "a list of strings", "nums": "a list of numbers", "ints": "a list of integers",
               "obj": "an object"}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _in_range(f: Field, v) -> bool:
    if isinstance(v, float) and not math.isfinite(v):
        return False
    return (f.lo < v if f.lo_open else f.lo <= v) and v <= f.hi


def _check_value(f: Field, v) -> bool:
    if f.kind == "int":
        return _is_int(v) and _in_range(f, v)
    if f.kind == "num":
        return (_is_int(v) or isinstance(v, float)) and _in_range(f, v)
    if f.kind == "bool":
        return isinstance(v, bool)
    if f.kind == "str":
        return isinstance(v, str)
    if f.kind == "obj":
        return isinstance(v, dict)
    if not isinstance(v, list):
        return False
    item = Field({"strs": "str", "nums": "num", "ints": "int"}[f.kind], f.lo, f.hi, f.lo_open)
    return all(_check_value(item, x) for x in v)


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


def _check_fields(obj: dict, fields: Dict[str, Field], path: str, prefix: str = "") -> None:
    for key, f in fields.items():
        v = obj.get(key)
        if v is None or _check_value(f, v):
            continue
        rng = ""
        if f.kind in ("int", "num", "nums", "ints"):
            rng = f" {'greater than' if f.lo_open else 'from'} {_num(f.lo)} {'and at most' if f.lo_open else 'to'} {_num(f.hi)}"
            if f.kind in ("nums", "ints"):
                rng = ", each" + rng
        raise ConvertError(f"{path}: config.json {prefix}{key} = {show(v)} must be {_KIND_NAMES[f.kind]}{rng}")


def check_config(config: dict, path: str) -> None:
    """config.json's keys against CONFIG_FIELDS and its RoPE objects against ROPE_FIELDS."""
    _check_fields(config, CONFIG_FIELDS, path)
    for key in ("rope_scaling", "rope_parameters"):
        rp = config.get(key)
        if not rp:
            continue
        _check_fields(rp, ROPE_FIELDS, path, f"{key}.")
        for sub in ("full_attention", "sliding_attention"):  # transformers 5: one per layer type
            v = rp.get(sub)
            if v is not None and not isinstance(v, dict):
                raise ConvertError(f"{path}: config.json {key}.{sub} = {show(v)} must be an object")
            if v:
                _check_fields(v, ROPE_FIELDS, path, f"{key}.{sub}.")


def supported() -> List[str]:
    return sorted(ARCHS)


@dataclass
class Hparams:
    """The shape facts of a checkpoint, from config.json."""
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_vocab: int
    tied: bool
    n_expert: int = 0  # MoE: experts per layer, used per token, their FFN width, the shared one's
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0


def arch_of(config: dict, path: str) -> Tuple[str, ArchSpec]:
    check_config(config, path)
    names = config.get("architectures") or []
    if not isinstance(names, list) or not names:
        raise UnsupportedArchitectureError(
            f"{path}: config.json names no architecture (\"architectures\"); supported: {', '.join(supported())}")
    for n in names:
        if n in ARCHS:
            return n, ARCHS[n]
    raise UnsupportedArchitectureError(
        f"{path}: architecture {show(', '.join(names), 200)} is not supported; supported: {', '.join(supported())}")


def _req(config: dict, key: str, path: str):
    if key not in config or config[key] is None:
        raise ConvertError(f"{path}: config.json has no {key!r}")
    return config[key]


def _first(config: dict, keys, path: str):
    for k in keys:
        if config.get(k) is not None:
            return config[k]
    raise ConvertError(f"{path}: config.json has none of {', '.join(map(repr, keys))}")


def _moe_hparams(config: dict, path: str, spec: ArchSpec, hp: Hparams) -> None:
    """Expert counts and widths in each architecture's spelling (Mixtral: num_local_experts and
    intermediate_size; Qwen: num_experts and moe_intermediate_size; OLMoE: num_experts and
    intermediate_size); every layer must be a MoE layer (the engine has no mixed stacks)."""
    hp.n_expert = int(_first(config, ("num_local_experts", "num_experts"), path))
    hp.n_expert_used = int(_first(config, ("num_experts_per_tok",), path))
    if hp.n_expert < 1 or not 1 <= hp.n_expert_used <= hp.n_expert:
        raise ConvertError(f"{path}: num_experts_per_tok = {hp.n_expert_used} must be between 1 and the "
                           f"expert count {hp.n_expert}")
    if spec.gguf_arch in ("qwen2moe", "qwen3moe"):
        hp.n_ff_exp = int(_req(config, "moe_intermediate_size", path))
        step = config.get("decoder_sparse_step", 1)
        dense = config.get("mlp_only_layers") or []
        if step not in (None, 1) or dense:
            raise UnsupportedArchitectureError(
                f"{path}: dense FFN layers among the MoE ones (decoder_sparse_step = {step}, mlp_only_layers = "
                f"{dense}) are not supported for {spec.gguf_arch}")
    else:
        hp.n_ff_exp = hp.n_ff
    if spec.shared_expert:
        hp.n_ff_shexp = int(_req(config, "shared_expert_intermediate_size", path))


def hparams(config: dict, path: str, spec: Optional[ArchSpec] = None) -> Hparams:
    check_config(config, path)
    n_head = _req(config, "num_attention_heads", path)
    n_embd = _req(config, "hidden_size", path)
    head_dim = config.get("head_dim")
    if head_dim is None:
        if n_embd % n_head:
            raise ConvertError(f"{path}: config.json hidden_size = {n_embd} is not a multiple of "
                               f"num_attention_heads = {n_head} (and no head_dim is given)")
        head_dim = n_embd // n_head
    n_head_kv = config.get("num_key_value_heads") or n_head
    if n_head % n_head_kv:
        raise ConvertError(f"{path}: config.json num_attention_heads = {n_head} is not a multiple of "
                           f"num_key_value_heads = {n_head_kv}")
    tied = config.get("tie_word_embeddings")
    hp = Hparams(
        n_layer=_req(config, "num_hidden_layers", path),
        n_embd=n_embd,
        n_ff=_req(config, "intermediate_size", path),
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_vocab=_req(config, "vocab_size", path),
        tied=True if tied is None else tied,
    )
    if spec is not None and spec.moe:
        _moe_hparams(config, path, spec, hp)
    return hp


def _rope_params(config: dict) -> dict:
    """RoPE settings in either spelling: rope_theta + rope_scaling (configs before transformers
    5) or rope_parameters (transformers 5; per layer type for gemma3: the full-attention one)."""
    rp = config.get("rope_parameters")
    if isinstance(rp, dict) and isinstance(rp.get("full_attention"), dict):
        rp = rp["full_attention"]
    if isinstance(rp, dict):
        out = dict(rp)
    else:
        out = dict(config.get("rope_scaling") or {})
        if config.get("rope_theta") is not None:
            out["rope_theta"] = config["rope_theta"]
    return {k: v for k, v in out.items() if v is not None}  # null: the default


def _rope_scaling(config: dict, path: str, arch: str, put: Callable) -> None:
    rs = _rope_params(config)
    if arch == "qwen2vl":  # M-RoPE: rotary pairs per position axis (t, h, w), padded to 4 as llama.cpp
        sections = rs.get("mrope_section")
        if not (isinstance(sections, list) and 1 <= len(sections) <= 4
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in sections)):
            raise ConvertError(f"{path}: config.json rope_scaling.mrope_section = {show(sections)} must be a list "
                               f"of up to 4 non-negative integers")
        put(f"{arch}.rope.dimension_sections", list(sections) + [0] * (4 - len(sections)))
        return
    if not rs:
        return
    kind = rs.get("rope_type", rs.get("type"))
    rs = dict(rs, **{k: config[k] for k in ("original_max_position_embeddings",)
                     if k in config and k not in rs})
    if kind == "linear" and float(rs.get("factor", 1.0)) == 1.0:
        return
    if kind in (None, "default"):
        return
    if kind in ("longrope", "su") and arch == "phi3":
        return  # rope_factors_long/short.weight and rope.scaling.attn_factor (longrope_factors)
    if kind == "llama3" and arch == "llama":
        if not float(rs.get("low_freq_factor", 1.0)) < float(rs.get("high_freq_factor", 4.0)):
            raise ConvertError(f"{path}: config.json rope_scaling: llama3 needs low_freq_factor < high_freq_factor")
        return  # baked into rope_freqs.weight (llama3_rope_factors)
    if kind == "yarn" and arch == "gpt-oss":  # the keys llama.cpp's converter writes
        put(f"{arch}.rope.scaling.type", "yarn")
        put(f"{arch}.rope.scaling.factor", float(_req(rs, "factor", path)))
        put(f"{arch}.rope.scaling.original_context_length", int(_req(rs, "original_max_position_embeddings", path)))
        for hf, key in (("extrapolation_factor", "yarn_ext_factor"), ("attention_factor", "yarn_attn_factor"),
                        ("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
            if rs.get(hf) is not None:
                put(f"{arch}.rope.scaling.{key}", float(rs[hf]))
        # edgellm's key (llama.cpp has none and always rounds): transformers' truncate, true by default
        put(f"{arch}.rope.scaling.yarn_truncate", bool(rs.get("truncate", True)))
        return
    if kind == "yarn" and arch in ("llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe"):
        # the keys llama.cpp's converter writes; the engine's YaRN magnitude scale is transformers'
        # default attention_factor (0.1 ln factor + 1), so only that one converts
        for hf in ("attention_factor", "mscale", "mscale_all_dim"):
            if rs.get(hf) is not None:
                raise UnsupportedArchitectureError(
                    f"{path}: config.json rope_scaling {hf} = {rs[hf]!r} is not supported for {arch} "
                    f"(YaRN converts with its default magnitude scale only)")
        put(f"{arch}.rope.scaling.type", "yarn")
        put(f"{arch}.rope.scaling.factor", float(_req(rs, "factor", path)))
        put(f"{arch}.rope.scaling.original_context_length", int(_req(rs, "original_max_position_embeddings", path)))
        for hf, key in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
            if rs.get(hf) is not None:
                put(f"{arch}.rope.scaling.{key}", float(rs[hf]))
        put(f"{arch}.rope.scaling.yarn_truncate", bool(rs.get("truncate", True)))
        return
    if kind == "linear":
        put(f"{arch}.rope.scaling.type", "linear")
        put(f"{arch}.rope.scaling.factor", float(rs["factor"]))
        return
    raise UnsupportedArchitectureError(
        f"{path}: config.json rope_scaling type {kind!r} is not supported for {arch} (the engine runs linear "
        f"scaling, llama3 for llama, longrope for phi3, yarn for llama, qwen2/3 (MoE too) and gpt-oss)")


def metadata(config: dict, path: str, spec: ArchSpec, hp: Hparams) -> List[Tuple[str, object]]:
    """(key, value) pairs for the architecture's keys; floats are f32, ints u32, bools BOOL."""
    a = spec.gguf_arch
    kv: List[Tuple[str, object]] = []

    def put(key, value):
        kv.append((key, value))

    put(f"{a}.context_length", int(_req(config, "max_position_embeddings", path)))
    put(f"{a}.embedding_length", hp.n_embd)
    put(f"{a}.block_count", hp.n_layer)
    put(f"{a}.feed_forward_length", hp.n_ff)
    put(f"{a}.attention.head_count", hp.n_head)
    put(f"{a}.attention.head_count_kv", hp.n_head_kv)
    eps = config.get("rms_norm_eps", config.get("layer_norm_eps"))
    if eps is None:
        raise ConvertError(f"{path}: config.json has no 'rms_norm_eps'")
    put(f"{a}.attention.layer_norm_rms_epsilon", float(eps))
    put(f"{a}.attention.key_length", hp.head_dim)
    put(f"{a}.attention.value_length", hp.head_dim)
    rp = _rope_params(config)
    partial = float(rp.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0)) or 1.0)
    if partial != 1.0 and a != "phi3":
        raise UnsupportedArchitectureError(f"{path}: partial_rotary_factor {partial} is not supported for {a}")
    n_rot = int(hp.head_dim * partial)
    if n_rot < 2 or n_rot % 2:
        raise ConvertError(f"{path}: config.json gives {n_rot} rotary dimensions (head_dim {hp.head_dim} x "
                           f"partial_rotary_factor {partial}); RoPE needs an even number, at least 2")
    put(f"{a}.rope.dimension_count", n_rot)
    put(f"{a}.rope.freq_base", float(_rope_params(config).get("rope_theta", 10000.0)))
    put(f"{a}.vocab_size", hp.n_vocab)
    _rope_scaling(config, path, a, put)

    act = config.get("hidden_act", config.get("hidden_activation"))
    want_act = ("gelu_pytorch_tanh",) if a.startswith("gemma") else ("silu",)
    if act not in want_act:
        raise UnsupportedArchitectureError(f"{path}: hidden activation {act!r} is not supported for {a} "
                                           f"(the engine runs {want_act[0]})")
    if a in ("llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe"):
        if config.get("use_sliding_window"):
            raise UnsupportedArchitectureError(f"{path}: use_sliding_window is not supported for {a} "
                                               f"(the engine runs no window for this architecture)")
        if a == "llama" and config.get("sliding_window"):
            raise UnsupportedArchitectureError(f"{path}: sliding_window (Mistral v0.1) is not supported for llama")
    if a == "olmoe" and config.get("clip_qkv") is not None:
        raise UnsupportedArchitectureError(f"{path}: clip_qkv = {config['clip_qkv']} is not supported for olmoe")
    if spec.moe:
        put(f"{a}.expert_count", hp.n_expert)
        put(f"{a}.expert_used_count", hp.n_expert_used)
        if a in ("qwen2moe", "qwen3moe", "gpt-oss"):
            put(f"{a}.expert_feed_forward_length", hp.n_ff_exp)
        if spec.shared_expert:
            put(f"{a}.expert_shared_feed_forward_length", hp.n_ff_shexp)
        if a not in ("llama", "gpt-oss"):  # Mixtral, gpt-oss: a softmax over the chosen experts' logits
            # the others say whether they renormalise (transformers' default: no)
            put(f"{a}.expert_weights_norm", bool(config.get("norm_topk_prob", False)))
    if a == "gpt-oss":
        put(f"{a}.attention.sliding_window", int(_req(config, "sliding_window", path)))
    if a == "phi3":
        window = config.get("sliding_window")
        if window:
            put(f"{a}.attention.sliding_window", int(window))
        rs = _rope_params(config)
        if rs.get("rope_type", rs.get("type")) in ("longrope", "su"):
            put(f"{a}.rope.scaling.attn_factor", longrope_attn_factor(config, path))
            put(f"{a}.rope.scaling.original_context_length", _longrope_orig_ctx(config, path))
    if a in ("gemma2", "gemma3"):
        scalar = config.get("query_pre_attn_scalar", hp.head_dim)
        big = 62 if a == "gemma3" else 46  # the 27B models (docs/formats.md §4.3, §4.7)
        derived = hp.n_embd // hp.n_head if hp.n_layer == big else hp.head_dim
        if scalar != derived:
            raise UnsupportedArchitectureError(
                f"{path}: query_pre_attn_scalar = {scalar}, but the engine scales queries by 1/sqrt({derived})")
        window = config.get("sliding_window")
        types = config.get("layer_types")
        if window:
            put(f"{a}.attention.sliding_window", int(window))
            if isinstance(types, list) and len(types) == hp.n_layer:
                put(f"{a}.attention.sliding_window_pattern", [t == "sliding_attention" for t in types])
            elif a == "gemma3":
                put(f"{a}.attention.sliding_window_pattern", int(config.get("sliding_window_pattern") or 6))
        elif a == "gemma2":
            put(f"{a}.attention.sliding_window", 0)
        if a == "gemma3":
            rp = config.get("rope_parameters") or {}
            local = (rp.get("sliding_attention") or {}).get("rope_theta") if isinstance(rp, dict) else None
            put(f"{a}.rope.freq_base_swa", float(local or config.get("rope_local_base_freq") or 10000.0))
            if config.get("attn_logit_softcapping"):
                raise UnsupportedArchitectureError(f"{path}: attn_logit_softcapping is not supported for gemma3")
        else:  # gemma2: the engine's defaults (50, 30) apply when a key is absent; None = off
            put(f"{a}.attn_logit_softcapping", float(config.get("attn_logit_softcapping", 50.0) or 0.0))
        cap = config.get("final_logit_softcapping", 30.0 if a == "gemma2" else None)
        if cap or a == "gemma2":
            put(f"{a}.final_logit_softcapping", float(cap or 0.0))
    return kv


def llama3_rope_factors(config: dict, hp: Hparams) -> Optional[np.ndarray]:
    """Llama 3.1+ "llama3" RoPE scaling as per-frequency divisors (rope_freqs.weight, n_rot/2
    f32; docs/formats.md §4.2): 1 for wavelengths shorter than original_context / high_freq_factor,
    `factor` for those longer than original_context / low_freq_factor, smoothly between."""
    rs = _rope_params(config)
    if rs.get("rope_type", rs.get("type")) != "llama3":
        return None
    base = float(rs.get("rope_theta", 10000.0))
    factor = float(rs.get("factor", 8.0))
    low, high = float(rs.get("low_freq_factor", 1.0)), float(rs.get("high_freq_factor", 4.0))
    old_ctx = float(rs.get("original_max_position_embeddings", 8192))
    if not low < high:
        raise ConvertError(f"config.json rope_scaling: llama3 needs low_freq_factor ({low}) < high_freq_factor ({high})")
    dim = hp.head_dim
    # inverse frequencies in float32 as transformers computes them, the rest in double
    freqs = np.float32(1.0) / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / float(f)
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def _longrope_orig_ctx(config: dict, path: str) -> int:
    rs = _rope_params(config)
    orig = rs.get("original_max_position_embeddings", config.get("original_max_position_embeddings"))
    if not orig:
        raise ConvertError(f"{path}: LongRoPE needs original_max_position_embeddings")
    return int(orig)


def longrope_attn_factor(config: dict, path: str) -> float:
    """The scale of cos and sin under LongRoPE: rope_scaling's attention_factor when given, else
    sqrt(1 + ln(s) / ln(original context)) with s = max_position_embeddings / original context
    (1 when s <= 1), as transformers computes it."""
    rs = _rope_params(config)
    if rs.get("attention_factor") is not None:
        return float(rs["attention_factor"])
    orig = _longrope_orig_ctx(config, path)
    scale = float(_req(config, "max_position_embeddings", path)) / orig
    return math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0


def longrope_factors(config: dict, path: str, hp: Hparams, n_rot: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """Phi-3 LongRoPE: rope_scaling's long_factor and short_factor (n_rot / 2 frequency divisors
    each) as rope_factors_long.weight and rope_factors_short.weight (f32)."""
    rs = _rope_params(config)
    if rs.get("rope_type", rs.get("type")) not in ("longrope", "su"):
        return None
    out = []
    for key in ("long_factor", "short_factor"):
        v = rs.get(key)
        if not isinstance(v, list) or len(v) != n_rot // 2:
            raise ConvertError(f"{path}: rope_scaling {key} must be a list of {n_rot // 2} numbers "
                               f"(rotary dims / 2), got {len(v) if isinstance(v, list) else type(v).__name__}")
        out.append(np.asarray(v, dtype=np.float32))
    return out[0], out[1]
