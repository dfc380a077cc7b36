"""Hugging Face tensor names → GGUF names (docs/formats.md §1.7), the per-architecture
transforms (llama's Q/K row permutation, gemma's 1 + w norms) and the shapes config.json
implies, checked before anything is written."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from .checkpoint import Checkpoint
from .config import ArchSpec, Hparams
from .errors import ConvertError

_LAYER = re.compile(r"^model\.layers\.([0-9]{1,6})\.(.+)$", re.S)

# HF suffix inside a layer → GGUF suffix
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_FUSED = {  # phi3: HF's fused projections are kept fused (docs/formats.md §4.6)
    "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight",
}
_SANDWICH = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
}
_PLAIN = {"post_attention_layernorm.weight": "ffn_norm.weight"}
# mixture of experts (docs/formats.md §4.8): the router, the shared expert (qwen2moe) and its gate
_MOE = {
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",  # Mixtral
}
_SHARED = {
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
}
# one expert's matrix: model.layers.L.mlp.experts.E.gate_proj.weight (Mixtral: block_sparse_moe
# ... w1 gate, w3 up, w2 down) -> stacked along a new first axis into ffn_{gate,up,down}_exps
_EXPERT = re.compile(r"^(?:mlp|block_sparse_moe)\.experts\.([0-9]{1,6})\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$")
_EXPERT_KIND = {"gate_proj": "gate", "w1": "gate", "up_proj": "up", "w3": "up", "down_proj": "down", "w2": "down"}
_GPT_OSS = {  # besides the attention projections (with biases)
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.sinks": "attn_sinks.weight",
    "mlp.router.weight": "ffn_gate_inp.weight",
    "mlp.router.bias": "ffn_gate_inp.bias",
}
# gpt-oss's experts: MXFP4 [E, rows, cols / 32, 16] code bytes + [E, rows, cols / 32] E8M0 scales,
# gate_up with gate and up rows interleaved (even rows gate), and F32 biases [E, rows]
_GPT_OSS_EXPERTS = re.compile(r"^mlp\.experts\.(gate_up_proj|down_proj)_(blocks|scales|bias)$")
# the same already stacked (checkpoints saved by transformers 5): [n_expert, 2 n_ff_exp, n_embd]
# gate rows then up rows, and [n_expert, n_embd, n_ff_exp]
_FUSED_EXPERTS = re.compile(r"^mlp\.experts\.(gate_up_proj|down_proj)(?:\.weight)?$")
# HF names with no meaning for inference
_IGNORED = re.compile(r"(rotary_emb\.inv_freq|\.masked_bias|\.attn\.bias)$")


@dataclass
class TensorPlan:
    src: str  # HF name
    dst: str  # GGUF name
    shape: Tuple[int, ...]  # row-major (numpy) shape, as in the checkpoint
    permute_heads: int = 0  # > 0: llama Q/K permutation over this many heads
    plus_one: bool = False
    value: Optional[np.ndarray] = None  # a tensor computed from config.json (src names its origin)
    parts: Tuple[str, ...] = ()  # experts: one HF tensor per slice of the first axis, stacked
    half: Optional[int] = None  # fused gate_up experts: 0 the gate rows, 1 the up rows (of axis 1)
    interleaved: bool = False  # with half: gate and up rows alternate (gpt-oss), else gate rows first
    mxfp4_scales: Optional[str] = None  # src is MXFP4 code bytes, these its scales: written as MXFP4


def _expected_shapes(hp: Hparams, spec: ArchSpec):
    q, kv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    e = {
        "attn_norm.weight": (hp.n_embd,),
        "ffn_norm.weight": (hp.n_embd,),
        "post_attention_norm.weight": (hp.n_embd,),
        "post_ffw_norm.weight": (hp.n_embd,),
        "attn_q.weight": (q, hp.n_embd),
        "attn_k.weight": (kv, hp.n_embd),
        "attn_v.weight": (kv, hp.n_embd),
        "attn_output.weight": (hp.n_embd, q),
        "attn_q.bias": (q,),
        "attn_k.bias": (kv,),
        "attn_v.bias": (kv,),
        "attn_output.bias": (hp.n_embd,),
        "attn_q_norm.weight": (hp.head_dim,),
        "attn_k_norm.weight": (hp.head_dim,),
        "ffn_gate.weight": (hp.n_ff, hp.n_embd),
        "ffn_up.weight": (hp.n_ff, hp.n_embd),
        "ffn_down.weight": (hp.n_embd, hp.n_ff),
        "attn_qkv.weight": (q + 2 * kv, hp.n_embd),
    }
    if spec.fused_qkv:
        e["ffn_up.weight"] = (2 * hp.n_ff, hp.n_embd)
    if spec.qk_norm_whole:
        e["attn_q_norm.weight"], e["attn_k_norm.weight"] = (q,), (kv,)
    if spec.moe:
        e.update({
            "ffn_gate_inp.weight": (hp.n_expert, hp.n_embd),
            "ffn_gate_exps.weight": (hp.n_expert, hp.n_ff_exp, hp.n_embd),
            "ffn_up_exps.weight": (hp.n_expert, hp.n_ff_exp, hp.n_embd),
            "ffn_down_exps.weight": (hp.n_expert, hp.n_embd, hp.n_ff_exp),
            "ffn_gate_shexp.weight": (hp.n_ff_shexp, hp.n_embd),
            "ffn_up_shexp.weight": (hp.n_ff_shexp, hp.n_embd),
            "ffn_down_shexp.weight": (hp.n_embd, hp.n_ff_shexp),
            "ffn_gate_inp_shexp.weight": (1, hp.n_embd),
        "ffn_gate_inp.bias": (hp.n_expert,),
        "attn_sinks.weight": (hp.n_head,),
        })
    return e


def _strip_prefix(name: str) -> str:
    # multimodal wrappers keep the text model under language_model.
    for p in ("language_model.", "model.language_model."):
        if name.startswith(p):
            rest = name[len(p):]
            return rest if rest.startswith(("model.", "lm_head.")) else "model." + rest
    return name


def layer_names(spec: ArchSpec) -> dict:
    """HF suffix inside a layer → GGUF suffix for a dense layer of `spec` (MoE names added by
    plan_tensors); LoRA conversion (lora.py) maps adapted modules with it too."""
    layer_map = dict(_LAYER_NAMES)
    layer_map.update(_SANDWICH if spec.sandwich_norms else _PLAIN)
    if spec.fused_qkv:
        for k in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                  "mlp.gate_proj.weight", "mlp.up_proj.weight"):
            del layer_map[k]
        layer_map.update(_FUSED)
    return layer_map


def expected_shapes(hp: Hparams, spec: ArchSpec) -> dict:
    """GGUF suffix → row-major shape config.json implies."""
    return _expected_shapes(hp, spec)


def plan_tensors(ckpt: Checkpoint, spec: ArchSpec, hp: Hparams) -> List[TensorPlan]:
    """Every tensor to write, in GGUF order; raises ConvertError naming the file and tensor for
    an unknown, missing or misshapen one."""
    shapes = _expected_shapes(hp, spec)
    layer_map = layer_names(spec)
    if spec.moe:
        for k in ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"):
            del layer_map[k]
        layer_map.update(_MOE)
        if spec.shared_expert:
            layer_map.update(_SHARED)
        if spec.gpt_oss:
            for k in _MOE:
                del layer_map[k]
            layer_map.update(_GPT_OSS)
    top, layers = [], {}
    experts = {}  # layer -> kind -> {expert: HF name}
    fused_experts = {}  # layer -> kind -> HF name
    for name in ckpt.names():
        if _IGNORED.search(name):
            continue
        hf = _strip_prefix(name)
        m = _LAYER.match(hf)
        em = _EXPERT.match(m.group(2)) if m and spec.moe else None
        fm = _FUSED_EXPERTS.match(m.group(2)) if m and spec.moe else None
        gm = _GPT_OSS_EXPERTS.match(m.group(2)) if m and spec.gpt_oss else None
        if gm and int(m.group(1)) < hp.n_layer:
            fused_experts.setdefault(int(m.group(1)), {})[gm.group(1) + "_" + gm.group(2)] = name
        elif spec.gpt_oss and (em or fm):
            raise ConvertError(f"{ckpt.info(name).file}: tensor {name}: gpt-oss experts are converted from "
                               f"their MXFP4 blocks and scales only")
        elif em and int(m.group(1)) < hp.n_layer:
            e = int(em.group(1))
            if e >= hp.n_expert:
                raise ConvertError(f"{ckpt.info(name).file}: tensor {name}: expert {e}, but config.json has "
                                   f"{hp.n_expert} experts")
            experts.setdefault(int(m.group(1)), {}).setdefault(_EXPERT_KIND[em.group(2)], {})[e] = name
        elif fm and int(m.group(1)) < hp.n_layer:
            fused_experts.setdefault(int(m.group(1)), {})[fm.group(1)] = name
        elif m:
            il, suffix = int(m.group(1)), m.group(2)
            if suffix not in layer_map or il >= hp.n_layer:
                raise ConvertError(f"{ckpt.info(name).file}: tensor {name} has no GGUF counterpart for "
                                   f"{spec.gguf_arch} (the engine would ignore it)")
            dst = layer_map[suffix]
            if dst in ("attn_q_norm.weight", "attn_k_norm.weight") and not spec.qk_norm:
                raise ConvertError(f"{ckpt.info(name).file}: tensor {name}: {spec.gguf_arch} has no Q/K norms")
            layers.setdefault(il, []).append((name, dst))
        elif hf == "model.embed_tokens.weight":
            top.append((0, name, "token_embd.weight", (hp.n_vocab, hp.n_embd)))
        elif hf == "model.norm.weight":
            top.append((2, name, "output_norm.weight", (hp.n_embd,)))
        elif hf == "lm_head.weight":
            if not hp.tied:
                top.append((1, name, "output.weight", (hp.n_vocab, hp.n_embd)))
        else:
            raise ConvertError(f"{ckpt.info(name).file}: tensor {name} has no GGUF counterpart for {spec.gguf_arch}")

    def check(name, dst, want):
        got = ckpt.info(name).shape
        if tuple(got) != tuple(want):
            raise ConvertError(f"{ckpt.info(name).file}: tensor {name} has shape {list(got)}, "
                               f"config.json implies {list(want)} for {dst}")

    have = {d for _, _, d, _ in top}
    for need in ("token_embd.weight", "output_norm.weight"):
        if need not in have:
            hf_name = "model.embed_tokens.weight" if need == "token_embd.weight" else "model.norm.weight"
            raise ConvertError(f"{ckpt.dir}: tensor {hf_name} not found in the checkpoint")
    if not hp.tied and "output.weight" not in have:
        raise ConvertError(f"{ckpt.dir}: tensor lm_head.weight not found (config.json: tie_word_embeddings is false)")

    plans = []
    for _, name, dst, want in sorted(t for t in top if t[0] < 2):
        check(name, dst, want)
        plans.append(TensorPlan(name, dst, tuple(want)))
    required = ["attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"]
    if spec.fused_qkv:
        required = ["attn_norm.weight", "attn_qkv.weight", "attn_output.weight", "ffn_norm.weight",
                    "ffn_up.weight", "ffn_down.weight"]
    if spec.sandwich_norms:
        required += ["post_attention_norm.weight", "post_ffw_norm.weight"]
    if spec.gpt_oss:
        required = [("post_attention_norm.weight" if r == "ffn_norm.weight" else r) for r in required]
        required += ["attn_output.bias", "attn_sinks.weight", "ffn_gate_inp.bias"]
    if spec.qk_norm:
        required += ["attn_q_norm.weight", "attn_k_norm.weight"]
    if spec.qkv_bias:
        required += ["attn_q.bias", "attn_k.bias", "attn_v.bias"]
    if spec.moe:
        required = [r for r in required if r not in ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight")]
        required.append("ffn_gate_inp.weight")
        if spec.shared_expert:
            required += ["ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
                         "ffn_down_shexp.weight"]
    router = "block_sparse_moe" if any(n.endswith("block_sparse_moe.gate.weight") for n in ckpt.names()) else "mlp"
    for il in range(hp.n_layer):
        got = dict((d, n) for n, d in layers.get(il, []))
        for r in required:
            if r not in got:
                hf_name = next(f"model.layers.{il}.{k}" for k, v in layer_map.items()
                               if v == r and (r != "ffn_gate_inp.weight" or k.startswith(router)))
                raise ConvertError(f"{ckpt.dir}: tensor {hf_name} not found in the checkpoint")
        for dst in sorted(got, key=lambda d: (required.index(d) if d in required else len(required), d)):
            name = got[dst]
            check(name, f"blk.{il}.{dst}", shapes[dst])
            heads = 0
            if spec.permute_qk and dst.startswith(("attn_q.", "attn_k.")):
                heads = hp.n_head if dst.startswith("attn_q.") else hp.n_head_kv
            plus = spec.norm_plus_one and dst.endswith("norm.weight")
            plans.append(TensorPlan(name, f"blk.{il}.{dst}", shapes[dst], heads, plus))
        if spec.gpt_oss:
            plans += _mxfp4_expert_plans(ckpt, hp, il, fused_experts.get(il, {}))
        elif spec.moe:
            plans += _expert_plans(ckpt, hp, il, experts.get(il, {}), fused_experts.get(il, {}), shapes, router)
    name, dst, want = next((n, d, w) for _, n, d, w in top if d == "output_norm.weight")
    check(name, dst, want)
    plans.append(TensorPlan(name, dst, tuple(want), 0, spec.norm_plus_one))
    return plans


def _expert_plans(ckpt: Checkpoint, hp: Hparams, il: int, per_expert: dict, fused: dict, shapes: dict,
                  router: str) -> List[TensorPlan]:
    """ffn_{gate,up,down}_exps of layer il: each stacked from the n_expert per-expert matrices
    (read one expert at a time by load_transformed) or taken from transformers 5's fused ones."""
    out = []
    if fused and per_expert:
        raise ConvertError(f"{ckpt.dir}: layer {il} has both per-expert and fused expert tensors")
    if fused:
        for kind in ("gate_up_proj", "down_proj"):
            if kind not in fused:
                raise ConvertError(f"{ckpt.dir}: tensor model.layers.{il}.mlp.experts.{kind} not found in the checkpoint")
        name = fused["gate_up_proj"]
        g, e = shapes["ffn_gate_exps.weight"], ckpt.info(name)
        want = (g[0], 2 * g[1], g[2])
        if tuple(e.shape) != want:
            raise ConvertError(f"{e.file}: tensor {name} has shape {list(e.shape)}, config.json implies "
                               f"{list(want)} for blk.{il}.ffn_gate_exps/ffn_up_exps")
        out.append(TensorPlan(name, f"blk.{il}.ffn_gate_exps.weight", g, half=0))
        out.append(TensorPlan(name, f"blk.{il}.ffn_up_exps.weight", g, half=1))
        name, d = fused["down_proj"], shapes["ffn_down_exps.weight"]
        if tuple(ckpt.info(name).shape) != d:
            raise ConvertError(f"{ckpt.info(name).file}: tensor {name} has shape {list(ckpt.info(name).shape)}, "
                               f"config.json implies {list(d)} for blk.{il}.ffn_down_exps")
        out.append(TensorPlan(name, f"blk.{il}.ffn_down_exps.weight", d))
        return out
    hf_kind = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    if router == "block_sparse_moe":
        hf_kind = {"gate": "w1", "up": "w3", "down": "w2"}
    for kind in ("gate", "up", "down"):
        got = per_expert.get(kind, {})
        dst = f"ffn_{kind}_exps.weight"
        want = shapes[dst][1:]
        names = []
        for e in range(hp.n_expert):
            if e not in got:
                raise ConvertError(f"{ckpt.dir}: tensor model.layers.{il}.{router}.experts.{e}.{hf_kind[kind]}.weight "
                                   f"not found in the checkpoint ({hp.n_expert} experts in config.json)")
            info = ckpt.info(got[e])
            if tuple(info.shape) != want:
                raise ConvertError(f"{info.file}: tensor {got[e]} has shape {list(info.shape)}, config.json implies "
                                   f"{list(want)} for expert {e} of blk.{il}.{dst}")
            names.append(got[e])
        src = f"model.layers.{il}.{router}.experts.{{0..{hp.n_expert - 1}}}.{hf_kind[kind]}.weight"
        out.append(TensorPlan(src, f"blk.{il}.{dst}", shapes[dst], parts=tuple(names)))
    return out


def _mxfp4_expert_plans(ckpt: Checkpoint, hp: Hparams, il: int, got: dict) -> List[TensorPlan]:
    """gpt-oss layer il: ffn_{gate,up,down}_exps.weight as MXFP4 (the checkpoint's codes moved
    into ggml's block layout, no requantization) and their F32 biases; gate and up are the even
    and odd rows of gate_up_proj."""
    e, ff, d = hp.n_expert, hp.n_ff_exp, hp.n_embd
    if ff % 32 or d % 32:
        raise ConvertError(f"{ckpt.dir}: MXFP4 experts need hidden_size ({d}) and intermediate_size ({ff}) "
                           f"to be multiples of 32")
    want = {"gate_up_proj_blocks": (e, 2 * ff, d // 32, 16), "gate_up_proj_scales": (e, 2 * ff, d // 32),
            "gate_up_proj_bias": (e, 2 * ff), "down_proj_blocks": (e, d, ff // 32, 16),
            "down_proj_scales": (e, d, ff // 32), "down_proj_bias": (e, d)}
    for k, shape in want.items():
        if k not in got:
            raise ConvertError(f"{ckpt.dir}: tensor model.layers.{il}.mlp.experts.{k} not found in the checkpoint")
        info = ckpt.info(got[k])
        if tuple(info.shape) != shape:
            raise ConvertError(f"{info.file}: tensor {got[k]} has shape {list(info.shape)}, config.json implies "
                               f"{list(shape)}")
        if (info.dtype == "U8") != (not k.endswith("_bias")):
            raise ConvertError(f"{info.file}: tensor {got[k]} has dtype {info.dtype}, expected "
                               f"{'a float type' if k.endswith('_bias') else 'U8 (MXFP4)'}")
    b = f"blk.{il}."
    return [
        TensorPlan(got["gate_up_proj_blocks"], b + "ffn_gate_exps.weight", (e, ff, d), half=0, interleaved=True,
                   mxfp4_scales=got["gate_up_proj_scales"]),
        TensorPlan(got["gate_up_proj_blocks"], b + "ffn_up_exps.weight", (e, ff, d), half=1, interleaved=True,
                   mxfp4_scales=got["gate_up_proj_scales"]),
        TensorPlan(got["down_proj_blocks"], b + "ffn_down_exps.weight", (e, d, ff), mxfp4_scales=got["down_proj_scales"]),
        TensorPlan(got["gate_up_proj_bias"], b + "ffn_gate_exps.bias", (e, ff), half=0, interleaved=True),
        TensorPlan(got["gate_up_proj_bias"], b + "ffn_up_exps.bias", (e, ff), half=1, interleaved=True),
        TensorPlan(got["down_proj_bias"], b + "ffn_down_exps.bias", (e, d)),
    ]


def mxfp4_blocks(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Hugging Face MXFP4 ([..., n, 16] bytes, value 2j in byte j's low nibble and 2j + 1 in its
    high one; [..., n] E8M0 scales) -> ggml MXFP4 rows ([..., n * 17] bytes: per block the scale,
    then 16 bytes holding value j low and value j + 16 high). The 4-bit codes are the same."""
    lo, hi = codes & 0x0F, codes >> 4
    vals = np.stack((lo, hi), axis=-1).reshape(codes.shape[:-1] + (32,))
    qs = vals[..., :16] | (vals[..., 16:] << 4)
    out = np.concatenate((scales[..., None], qs), axis=-1)
    return np.ascontiguousarray(out.reshape(codes.shape[:-2] + (codes.shape[-2] * 17,)))


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF's rotate-half order → GGUF's adjacent pairs: within each head, row i of the first
    half and row i of the second half become rows 2i and 2i + 1 (weights and biases)."""
    rows = w.shape[0]
    rest = w.shape[1:]
    return (w.reshape(n_head, 2, rows // n_head // 2, *rest)
             .swapaxes(1, 2)
             .reshape(rows, *rest))


def load_transformed(ckpt: Checkpoint, p: TensorPlan, rows: Optional[Tuple[int, int]] = None) -> np.ndarray:
    """The tensor (or rows r0..r1 of it; not for permuted ones) as float32 in its GGUF row
    order (numpy shape = reversed ggml ne)."""
    if p.value is not None:
        return p.value if rows is None else p.value[rows[0]:rows[1]]
    if p.parts:
        e0, e1 = rows if rows is not None else (0, len(p.parts))
        out = np.empty((e1 - e0,) + tuple(p.shape[1:]), dtype=np.float32)
        for i in range(e0, e1):
            out[i - e0] = ckpt.load_f32(p.parts[i])
        return out
    if p.mxfp4_scales is not None:
        codes, scales = ckpt.load_raw(p.src, rows), ckpt.load_raw(p.mxfp4_scales, rows)
        if p.half is not None:
            codes, scales = codes[:, p.half::2], scales[:, p.half::2]
        return mxfp4_blocks(codes, scales)
    if p.half is not None:
        x = ckpt.load_f32(p.src, rows)
        if p.interleaved:
            return np.ascontiguousarray(x[:, p.half::2])
        n = x.shape[1] // 2
        return np.ascontiguousarray(x[:, p.half * n:(p.half + 1) * n])
    if rows is not None and p.permute_heads:
        raise ValueError("a permuted tensor is read whole")
    x = ckpt.load_f32(p.src, rows)
    if p.permute_heads:
        x = np.ascontiguousarray(permute_rows(x, p.permute_heads))
    if p.plus_one:
        x = x + np.float32(1.0)
    return x
