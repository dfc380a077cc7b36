"""Tiny random-weight GGUF models of each architecture edgellm runs, written with the `gguf`
package for the forward-pass tests.

    write_tiny_model(path, "gemma3", weight_type="Q8_0", sliding_window=4)
    write_tiny_model(path, "phi3", longrope=True, n_rot=24)   # fused attn_qkv / ffn_up, LongRoPE
    write_tiny_model(path, "qwen3moe")     # 8 experts, 2 used, experts 64 wide

"mixtral" is a llama-arch file with experts (general.architecture "llama", expert_count 8).

Dims are small but keep every block format whole (rows of 64/128 elements for Q-types of 32)
and head_dim 32 so a Q8_0 KV cache works. The weights are seeded, so a file is reproducible.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Union

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize

ARCHS = ("llama", "gemma3", "qwen2", "qwen3", "phi3", "gemma2", "qwen3moe", "olmoe", "mixtral", "qwen2moe")
MOE_ARCHS = ("qwen3moe", "olmoe", "mixtral", "qwen2moe")


def _quantize(a: np.ndarray, qt) -> np.ndarray:
    """gguf's quantizer, or edgellm's own for the types gguf cannot write (IQ4_NL, IQ4_XS); the
    reference still decodes every type with gguf's dequantize."""
    try:
        return quantize(a, qt)
    except NotImplementedError:
        from edgellm import _core
        flat = a.reshape(-1, a.shape[-1])
        rows = [np.asarray(_core.quant_quantize(qt.name, np.ascontiguousarray(r))) for r in flat]
        q = np.stack(rows).astype(np.uint8)
        return q.reshape(a.shape[:-1] + (q.shape[-1],))


def write_tiny_model(
    path,
    arch: str,
    *,
    n_embd: int = 64,
    n_layer: int = 3,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 32,
    n_ff: int = 128,
    n_vocab: int = 96,
    weight_type: str = "F32",
    seed: int = 0,
    sliding_window: int = 4,
    sliding_window_pattern: Union[int, Sequence[bool], None, str] = "auto",
    rope_freqs: bool = False,
    rope_scaling_factor: Optional[float] = None,
    tied_output: Optional[bool] = None,
    softcap: Optional[float] = None,
    type_of: Optional[Callable[[str], Optional[str]]] = None,
    attn_softcap: Optional[float] = 3.0,
    n_rot: Optional[int] = None,
    longrope: bool = True,
    fused_qkv: bool = True,
    tokenizer: Optional[Callable[["gguf.GGUFWriter"], None]] = None,
    n_expert: int = 8,
    n_expert_used: int = 2,
    n_ff_exp: int = 64,
    router_std: float = 0.6,
    expert_gating: Optional[str] = None,
    expert_weights_norm: Optional[bool] = None,
    perturb_expert: Optional[tuple] = None,
    metadata_expert_count: Optional[int] = None,
    n_ff_shexp: Optional[int] = None,
):
    """Writes a model; 2-D weights are stored as `weight_type` (F32, F16, Q4_0, Q4_1, Q5_0,
    Q5_1, Q8_0 or "mixed": a rotation through the legacy quant types), 1-D tensors as F32.

    sliding_window_pattern "auto": 3 for gemma3, not written for gemma2 (its default period 2
    applies, as in converted Gemma 2 files). sliding_window applies to gemma3, gemma2 and phi3
    (every layer). gemma2: attn_softcap / softcap are attn_logit_softcapping /
    final_logit_softcapping (None: not written, the defaults 50 / 30 apply). phi3: n_rot rotated
    dims (default head_dim), longrope writes rope_factors_short/long with an original context of
    128 (of 512) and its attention factor, fused_qkv stores attn_qkv (else attn_q/k/v).
    tokenizer(writer) may add tokenizer keys (n_vocab must match its token count).
    MoE archs (MOE_ARCHS) get n_expert experts of width n_ff_exp (ggml ne {n_in, n_out,
    n_expert} tensors ffn_{gate,up,down}_exps), n_expert_used per token, a router ffn_gate_inp
    with weights of router_std (large enough that tokens pick different experts);
    expert_gating ("softmax"/"sigmoid") and expert_weights_norm write those keys.
    perturb_expert=(layer, expert) adds noise to that one expert's three matrices and nothing
    else (the rest of the file is the same as without it). qwen2moe adds a shared expert (n_ff
    wide, gated by ffn_gate_inp_shexp); n_ff_shexp gives any MoE arch one of that width (written
    as expert_shared_feed_forward_length). metadata_expert_count writes that expert_count
    instead (a file whose metadata and tensors disagree)."""
    assert arch in ARCHS
    moe = arch in MOE_ARCHS
    gguf_arch = "llama" if arch == "mixtral" else arch
    if moe and arch not in ("qwen3moe", "qwen2moe"):
        n_ff = n_ff_exp  # llama (Mixtral) and olmoe experts are feed_forward_length wide
    rng = np.random.Generator(np.random.PCG64(seed))
    w = gguf.GGUFWriter(str(path), gguf_arch)
    w.add_name(f"tiny-{arch}")
    w.add_context_length(512)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(n_rot or head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0 if gguf_arch == "llama" else 1000000.0)
    if moe:
        w.add_expert_count(n_expert if metadata_expert_count is None else metadata_expert_count)
        w.add_expert_used_count(n_expert_used)
        if arch in ("qwen3moe", "qwen2moe"):
            w.add_expert_feed_forward_length(n_ff_exp)
        if n_ff_shexp:
            w.add_expert_shared_feed_forward_length(n_ff_shexp)
        if expert_gating:
            w.add_expert_gating_func(gguf.ExpertGatingFuncType[expert_gating.upper()])
        if expert_weights_norm is not None:
            w.add_expert_weights_norm(expert_weights_norm)
    if rope_scaling_factor:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope_scaling_factor)
    if sliding_window_pattern == "auto":
        sliding_window_pattern = 3 if arch == "gemma3" else None
    if arch == "phi3":
        if sliding_window is not None:
            w.add_sliding_window(sliding_window)
        if longrope:
            w.add_rope_scaling_orig_ctx_len(128)
            w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(512 / 128) / math.log(128)))
    if arch == "gemma2":
        if sliding_window is not None:
            w.add_sliding_window(sliding_window)
        if sliding_window_pattern is not None:
            w.add_sliding_window_pattern(sliding_window_pattern)
        if attn_softcap is not None:
            w.add_attn_logit_softcapping(attn_softcap)
        if softcap is not None:
            w.add_final_logit_softcapping(softcap)
    if arch == "gemma3":
        if sliding_window:
            w.add_sliding_window(sliding_window)
        if sliding_window_pattern is not None:
            if isinstance(sliding_window_pattern, int):
                w.add_sliding_window_pattern(sliding_window_pattern)
            else:
                w.add_sliding_window_pattern([bool(b) for b in sliding_window_pattern])
        w.add_rope_freq_base_swa(10000.0)
        if softcap:
            w.add_final_logit_softcapping(softcap)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0)
    if tokenizer is not None:
        tokenizer(w)

    kinds = {"F32": [QT.F32], "F16": [QT.F16], "mixed": [QT.Q8_0, QT.Q4_0, QT.Q5_0, QT.Q4_1, QT.Q5_1]}
    rotation = kinds[weight_type] if weight_type in kinds else [QT[weight_type]]
    counter = [0]

    def matrix(name, rows, cols, std=0.15, n_mat=None):
        shape = (rows, cols) if n_mat is None else (n_mat, rows, cols)
        a = (rng.standard_normal(shape) * std).astype(np.float32)
        if perturb_expert is not None and n_mat is not None and name.startswith(f"blk.{perturb_expert[0]}."):
            noise = np.random.Generator(np.random.PCG64(seed + 1000)).standard_normal((rows, cols))
            a[perturb_expert[1]] += (noise * std).astype(np.float32)
        qt = rotation[counter[0] % len(rotation)]
        counter[0] += 1
        if type_of is not None and type_of(name):
            qt = QT[type_of(name)]
        if qt == QT.F32:
            w.add_tensor(name, a)
        elif qt == QT.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            q = _quantize(a, qt)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)

    def vector(name, n, mean=1.0, std=0.1):
        w.add_tensor(name, (mean + std * rng.standard_normal(n)).astype(np.float32))

    matrix("token_embd.weight", n_vocab, n_embd, std=1.0)
    for il in range(n_layer):
        b = f"blk.{il}."
        vector(b + "attn_norm.weight", n_embd)
        if arch == "phi3" and fused_qkv:  # rows: Q, then K, then V
            matrix(b + "attn_qkv.weight", (n_head + 2 * n_head_kv) * head_dim, n_embd)
        else:
            matrix(b + "attn_q.weight", n_head * head_dim, n_embd)
            matrix(b + "attn_k.weight", n_head_kv * head_dim, n_embd)
            matrix(b + "attn_v.weight", n_head_kv * head_dim, n_embd)
        matrix(b + "attn_output.weight", n_embd, n_head * head_dim)
        if arch in ("qwen2", "qwen2moe"):
            vector(b + "attn_q.bias", n_head * head_dim, 0.0, 0.2)
            vector(b + "attn_k.bias", n_head_kv * head_dim, 0.0, 0.2)
            vector(b + "attn_v.bias", n_head_kv * head_dim, 0.0, 0.2)
        if arch in ("gemma3", "qwen3", "qwen3moe"):
            vector(b + "attn_q_norm.weight", head_dim)
            vector(b + "attn_k_norm.weight", head_dim)
        if arch == "olmoe":  # over the whole projections
            vector(b + "attn_q_norm.weight", n_head * head_dim)
            vector(b + "attn_k_norm.weight", n_head_kv * head_dim)
        if arch in ("gemma3", "gemma2"):
            vector(b + "post_attention_norm.weight", n_embd)
        vector(b + "ffn_norm.weight", n_embd)
        if moe:
            matrix(b + "ffn_gate_inp.weight", n_expert, n_embd, std=router_std)
            matrix(b + "ffn_gate_exps.weight", n_ff_exp, n_embd, n_mat=n_expert)
            matrix(b + "ffn_up_exps.weight", n_ff_exp, n_embd, n_mat=n_expert)
            matrix(b + "ffn_down_exps.weight", n_embd, n_ff_exp, n_mat=n_expert)
            sh = n_ff_shexp or (n_ff if arch == "qwen2moe" else 0)
            if sh:
                matrix(b + "ffn_gate_shexp.weight", sh, n_embd)
                matrix(b + "ffn_up_shexp.weight", sh, n_embd)
                matrix(b + "ffn_down_shexp.weight", n_embd, sh)
            if arch == "qwen2moe":
                vector(b + "ffn_gate_inp_shexp.weight", n_embd, 0.0, 0.5)
        elif arch == "phi3":  # rows: gate, then up
            matrix(b + "ffn_up.weight", 2 * n_ff, n_embd)
            matrix(b + "ffn_down.weight", n_embd, n_ff)
        else:
            matrix(b + "ffn_gate.weight", n_ff, n_embd)
            matrix(b + "ffn_up.weight", n_ff, n_embd)
            matrix(b + "ffn_down.weight", n_embd, n_ff)
        if arch in ("gemma3", "gemma2"):
            vector(b + "post_ffw_norm.weight", n_embd)
    vector("output_norm.weight", n_embd)
    if rope_freqs:
        vector("rope_freqs.weight", head_dim // 2, 1.5, 0.4)
    if arch == "phi3" and longrope:
        vector("rope_factors_short.weight", (n_rot or head_dim) // 2, 1.2, 0.15)
        vector("rope_factors_long.weight", (n_rot or head_dim) // 2, 3.0, 0.5)
    if tied_output is None:
        tied_output = arch in ("gemma3", "gemma2")
    if not tied_output:
        matrix("output.weight", n_vocab, n_embd, std=0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tiny_model_maker(base):
    """make(arch, **kwargs) -> path of a tiny model written under `base` once per distinct
    (arch, kwargs) and reused after (the tests' module-scoped `tiny` fixtures)."""
    cache = {}

    def make(arch, **kw):
        key = (arch, repr(sorted(kw.items())))
        if key not in cache:
            cache[key] = str(write_tiny_model(base / f"{arch}-{len(cache)}.gguf", arch, **kw))
        return cache[key]
    return make


def add_minimal_hparams(w, block_count: bool = True) -> None:
    """The hyper-parameters of a 1-layer, 32-wide, 8-token header (tests of loader errors)."""
    if block_count:
        w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(8)
