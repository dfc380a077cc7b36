"""gpt-oss (GGUF arch "gpt-oss"): a tiny random-weight file written with the `gguf` package, and a
float64 numpy forward written from the model's published math (docs/formats.md §4.9), independent
of the C++ engine.

    write_gpt_oss(path)                          # F32, 3 layers (0 and 2 windowed), 8 experts, 3 used
    write_gpt_oss(path, expert_type="MXFP4")     # the experts as the released files store them
    ref = GptOssReference(path)
    logits = ref.forward([1, 2, 3])              # [n_tokens, n_vocab], positions 0..n-1

The reference reads every weight back through gguf's dequantize, so a quantized file is compared
on its dequantized weights; `quantize_inputs` additionally rounds each matmul input the way the
engine's activation format for that weight type does (tests/reference/forward.py).

What the forward does, per layer (llama.cpp's LLM_ARCH_OPENAI_MOE):
    h = rmsnorm(x) * attn_norm
    q, k, v = Wq h + bq, Wk h + bk, Wv h + bv; NEOX RoPE with YaRN on q and k; q /= sqrt(head_dim)
    attention per head over the causal keys (on even layers only the last `window`), softmax whose
    denominator also holds exp(sink_head); x += Wo · attn + bo
    h = rmsnorm(x) * post_attention_norm
    router logits r = Wr h + br; the top-k experts by r (ties to the lower id); weights softmax(r_topk)
    per expert: g = Wg h + bg, u = Wu h + bu, g = min(g, 7), u = clip(u, -7, 7),
                a = (u + 1) * g * sigmoid(1.702 g), d = Wd a + bd;  x += sum_j w_j d_j
then rmsnorm(x) * output_norm and the output head.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

ALPHA, LIMIT = 1.702, 7.0


def write_gpt_oss(
    path,
    *,
    n_embd: int = 64,
    n_layer: int = 3,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 32,
    n_expert: int = 8,
    n_expert_used: int = 3,
    n_ff_exp: int = 64,
    n_vocab: int = 96,
    sliding_window: Optional[int] = 4,
    yarn_factor: Optional[float] = 4.0,
    orig_ctx: int = 64,
    yarn_betas: Optional[Sequence[float]] = (32.0, 1.0),
    weight_type: str = "F32",
    expert_type: Optional[str] = None,
    gate_up_std: float = 0.9,
    sink_mean: float = 0.5,
    seed: int = 0,
    tokenizer: Optional[Callable[["gguf.GGUFWriter"], None]] = None,
    drop: Sequence[str] = (),
    shape_of: Optional[Callable[[str, tuple], tuple]] = None,
    gating_func: Optional[int] = None,
    yarn_truncate: Optional[bool] = None,
):
    """Writes a tiny gpt-oss model. 2-D / 3-D weights as `weight_type` (F32, F16, Q8_0), the
    expert tensors as `expert_type` when given (e.g. MXFP4); norms, biases, sinks and the router
    stay F32 (as llama.cpp's converter and quantizer keep them). gate_up_std is the experts'
    gate / up weight scale: large enough that the SwiGLU clamp at 7 bites. drop: tensor names
    left out; shape_of(name, shape) may change a tensor's numpy shape (malformed files);
    gating_func writes gpt-oss.expert_gating_func; yarn_truncate writes
    gpt-oss.rope.scaling.yarn_truncate (absent: the arch's rule, unrounded correction dims)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    w = gguf.GGUFWriter(str(path), "gpt-oss")
    w.add_name("tiny-gpt-oss")
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff_exp)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    if yarn_factor:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(yarn_factor)
        w.add_rope_scaling_orig_ctx_len(orig_ctx)
        if yarn_betas:
            w.add_rope_scaling_yarn_beta_fast(yarn_betas[0])
            w.add_rope_scaling_yarn_beta_slow(yarn_betas[1])
        if yarn_truncate is not None:
            w.add_bool("gpt-oss.rope.scaling.yarn_truncate", yarn_truncate)
    if sliding_window is not None:
        w.add_sliding_window(sliding_window)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_expert_used)
    w.add_expert_feed_forward_length(n_ff_exp)
    if gating_func is not None:
        w.add_uint32("gpt-oss.expert_gating_func", gating_func)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0)
    if tokenizer is not None:
        tokenizer(w)

    def put(name, a, qt):
        if name in drop:
            return
        if shape_of is not None:
            new = shape_of(name, a.shape)
            if new != a.shape:
                a = np.resize(a, new)
        if qt == QT.F32:
            w.add_tensor(name, a.astype(np.float32))
        elif qt == QT.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            q = quantize(a.astype(np.float32), qt)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)

    wt = QT[weight_type]
    et = QT[expert_type] if expert_type else wt

    def matrix(name, shape, std=0.15, qt=None):
        put(name, (rng.standard_normal(shape) * std).astype(np.float32), wt if qt is None else qt)

    def vector(name, shape, mean=0.0, std=0.2):
        put(name, (mean + std * rng.standard_normal(shape)).astype(np.float32), QT.F32)

    matrix("token_embd.weight", (n_vocab, n_embd), std=1.0)
    for il in range(n_layer):
        b = f"blk.{il}."
        vector(b + "attn_norm.weight", (n_embd,), 1.0, 0.1)
        matrix(b + "attn_q.weight", (n_head * head_dim, n_embd))
        matrix(b + "attn_k.weight", (n_head_kv * head_dim, n_embd))
        matrix(b + "attn_v.weight", (n_head_kv * head_dim, n_embd))
        vector(b + "attn_q.bias", (n_head * head_dim,))
        vector(b + "attn_k.bias", (n_head_kv * head_dim,))
        vector(b + "attn_v.bias", (n_head_kv * head_dim,))
        matrix(b + "attn_output.weight", (n_embd, n_head * head_dim))
        vector(b + "attn_output.bias", (n_embd,))
        vector(b + "attn_sinks.weight", (n_head,), sink_mean, 1.0)
        vector(b + "post_attention_norm.weight", (n_embd,), 1.0, 0.1)
        matrix(b + "ffn_gate_inp.weight", (n_expert, n_embd), std=0.6, qt=QT.F32)
        vector(b + "ffn_gate_inp.bias", (n_expert,), 0.0, 0.5)
        matrix(b + "ffn_gate_exps.weight", (n_expert, n_ff_exp, n_embd), std=gate_up_std, qt=et)
        matrix(b + "ffn_up_exps.weight", (n_expert, n_ff_exp, n_embd), std=gate_up_std, qt=et)
        matrix(b + "ffn_down_exps.weight", (n_expert, n_embd, n_ff_exp), std=0.03, qt=et)
        vector(b + "ffn_gate_exps.bias", (n_expert, n_ff_exp), 0.0, 0.3)
        vector(b + "ffn_up_exps.bias", (n_expert, n_ff_exp), 0.0, 0.3)
        vector(b + "ffn_down_exps.bias", (n_expert, n_embd), 0.0, 0.1)
    vector("output_norm.weight", (n_embd,), 1.0, 0.1)
    matrix("output.weight", (n_vocab, n_embd), std=0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _field(r: gguf.GGUFReader, key: str, default=None):
    f = r.fields.get(key)
    return default if f is None else f.contents()


def yarn_table(n_rot: int, base: float, factor: float, orig_ctx: int, beta_fast: float, beta_slow: float,
               truncate: bool = True):
    """Per rotated pair i: the inverse frequency after YaRN's ramp, and the magnitude scale
    (llama.cpp's ggml_rope_yarn_corr_dims, rope_yarn; extrapolation factor 1). truncate: the
    correction dims rounded (floor / ceil) as llama.cpp does; False keeps them as computed (the
    gpt-oss reference implementation, transformers' truncate=false)."""
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv = base ** (-2.0 * i / n_rot)
    if not factor:
        return inv, 1.0
    s = 1.0 / factor

    def corr(n_rotations):
        return n_rot * math.log(orig_ctx / (n_rotations * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = corr(beta_fast), corr(beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(0.0, lo), min(n_rot - 1.0, hi)
    ramp = 1.0 - np.clip((i - lo) / max(0.001, hi - lo), 0.0, 1.0)
    mscale = 1.0 + 0.1 * math.log(factor) if factor > 1 else 1.0
    return inv * (s * (1 - ramp) + ramp), mscale


class GptOssReference:
    def __init__(self, path, quantize_inputs: bool = False):
        r = gguf.GGUFReader(str(path))
        assert _field(r, "general.architecture") == "gpt-oss"
        k = lambda s, d=None: _field(r, f"gpt-oss.{s}", d)  # noqa: E731
        self.n_embd = int(k("embedding_length"))
        self.n_layer = int(k("block_count"))
        self.n_head = int(k("attention.head_count"))
        self.n_head_kv = int(k("attention.head_count_kv"))
        self.hd = int(k("attention.key_length"))
        assert int(k("rope.dimension_count", self.hd)) == self.hd  # gpt-oss rotates whole heads
        self.eps = float(k("attention.layer_norm_rms_epsilon"))
        self.n_expert = int(k("expert_count"))
        self.k = int(k("expert_used_count"))
        n_swa = int(k("attention.sliding_window"))
        self.window = [n_swa if il % 2 == 0 else 0 for il in range(self.n_layer)]
        factor = k("rope.scaling.factor") if k("rope.scaling.type") == "yarn" else None
        self.inv_freq, self.mscale = yarn_table(
            self.hd, float(k("rope.freq_base", 10000.0)), float(factor) if factor else 0.0,
            int(k("rope.scaling.original_context_length", k("context_length"))),
            float(k("rope.scaling.yarn_beta_fast", 32.0)), float(k("rope.scaling.yarn_beta_slow", 1.0)),
            bool(k("rope.scaling.yarn_truncate", False)))
        self.quantize_inputs = quantize_inputs
        self.tensors = {t.name: t for t in r.tensors}
        self._w = {}
        self.routes = []        # per layer: [n_tokens, k] chosen experts (best first)
        self.clamped = 0        # gate or up values the SwiGLU clamp changed in the last forward

    def w(self, name):
        if name not in self._w:
            t = self.tensors[name]
            shape = [int(x) for x in reversed(t.shape)]
            a = np.asarray(t.data)
            if t.tensor_type not in (QT.F32, QT.F16):
                a = dequantize(a, t.tensor_type)
            self._w[name] = np.asarray(a, dtype=np.float64).reshape(shape)
        return self._w[name]

    def _in(self, x, name):
        if not self.quantize_inputs:
            return x
        from reference.forward import quantize_activations
        return quantize_activations(x, self.tensors[name].tensor_type)

    def mm(self, x, name, expert=None):
        W = self.w(name) if expert is None else self.w(name)[expert]
        return self._in(x, name) @ W.T

    def rmsnorm(self, x, w):
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps) * w

    def rope(self, x, pos):  # x [T, heads, hd], NEOX over the whole head
        theta = np.asarray(pos, dtype=np.float64)[:, None] * self.inv_freq[None, :]
        c = (np.cos(theta) * self.mscale)[:, None, :]
        s = (np.sin(theta) * self.mscale)[:, None, :]
        half = self.hd // 2
        x0, x1 = x[..., :half], x[..., half:]
        return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)

    def attention(self, q, k, v, sinks, window):
        T = q.shape[0]
        group = self.n_head // self.n_head_kv
        out = np.zeros((T, self.n_head, self.hd))
        pos = np.arange(T)
        mask = pos[None, :] > pos[:, None]
        if window:
            mask |= (pos[:, None] - pos[None, :]) >= window
        for h in range(self.n_head):
            s = q[:, h, :] @ k[:, h // group, :].T
            s = np.where(mask, -np.inf, s)
            mx = np.maximum(s.max(axis=1), sinks[h])
            e = np.exp(s - mx[:, None])
            p = e / (e.sum(axis=1) + np.exp(sinks[h] - mx))[:, None]
            out[:, h, :] = p @ v[:, h // group, :]
        return out

    def moe(self, h, b):
        r = self.mm(h, b + "ffn_gate_inp.weight") + self.w(b + "ffn_gate_inp.bias")
        out = np.zeros_like(h)
        routes = np.zeros((h.shape[0], self.k), dtype=np.int64)
        for t in range(h.shape[0]):
            top = np.argsort(-r[t], kind="stable")[: self.k]
            routes[t] = top
            z = r[t, top] - r[t, top].max()
            wts = np.exp(z) / np.exp(z).sum()
            for j, e in enumerate(top):
                g = self.mm(h[t:t + 1], b + "ffn_gate_exps.weight", e)[0] + self.w(b + "ffn_gate_exps.bias")[e]
                u = self.mm(h[t:t + 1], b + "ffn_up_exps.weight", e)[0] + self.w(b + "ffn_up_exps.bias")[e]
                gc, uc = np.minimum(g, LIMIT), np.clip(u, -LIMIT, LIMIT)
                self.clamped += int((gc != g).sum() + (uc != u).sum())
                a = (uc + 1.0) * gc / (1.0 + np.exp(-ALPHA * gc))
                d = self.mm(a[None, :], b + "ffn_down_exps.weight", e)[0] + self.w(b + "ffn_down_exps.bias")[e]
                out[t] += wts[j] * d
        self.routes.append(routes)
        return out

    def forward(self, ids):
        ids = list(ids)
        T = len(ids)
        pos = np.arange(T)
        self.routes, self.clamped = [], 0
        x = self.w("token_embd.weight")[ids].copy()
        for il in range(self.n_layer):
            b = f"blk.{il}."
            h = self.rmsnorm(x, self.w(b + "attn_norm.weight"))
            q = (self.mm(h, b + "attn_q.weight") + self.w(b + "attn_q.bias")).reshape(T, self.n_head, self.hd)
            kk = (self.mm(h, b + "attn_k.weight") + self.w(b + "attn_k.bias")).reshape(T, self.n_head_kv, self.hd)
            v = (self.mm(h, b + "attn_v.weight") + self.w(b + "attn_v.bias")).reshape(T, self.n_head_kv, self.hd)
            q = self.rope(q, pos) / math.sqrt(self.hd)
            kk = self.rope(kk, pos)
            a = self.attention(q, kk, v, self.w(b + "attn_sinks.weight"), self.window[il]).reshape(T, -1)
            x = x + self.mm(a, b + "attn_output.weight") + self.w(b + "attn_output.bias")
            h = self.rmsnorm(x, self.w(b + "post_attention_norm.weight"))
            x = x + self.moe(h, b)
        x = self.rmsnorm(x, self.w("output_norm.weight"))
        return self.mm(x, "output.weight")
