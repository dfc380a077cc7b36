"""A straightforward float64 forward pass for the architectures edgellm runs (llama, gemma3,
qwen2, qwen3, phi3, gemma2; the mixtures of experts qwen3moe, olmoe, qwen2moe and llama with
experts), written from the published math and independent of the C++ engine: weights are
read and dequantized with the `gguf` package, every activation is a float64 numpy array, and
attention is a dense masked softmax over the whole sequence.

    ref = ReferenceModel(path)            # or ReferenceModel(path, dtype=np.float32) for big models
    ref = ReferenceModel(path, n_ctx=64)  # the context it runs (LongRoPE picks factors by it)
    logits = ref.forward([1, 2, 3])       # [n_tokens, n_vocab], positions 0..n-1
    acts = ref.forward(ids, trace=True)   # also returns per-layer residual streams

It is slow and memory hungry by design (dense weights); use it on tiny fixtures, or on a real
model for a few tokens when hunting a mismatch.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


class ReferenceModel:
    def __init__(self, path: str, dtype=np.float64, simulate_activation_quant: bool = False,
                 n_ctx: Optional[int] = None):
        self.path = str(path)
        self.dtype = dtype
        # With simulate_activation_quant, each matmul input is rounded the way the engine
        # quantizes it for the weight's type (Q8_0 / Q8_1 / Q8_K blocks, or F16), so quantized
        # kernels can be checked tightly; without it this is the exact reference.
        self.simulate = simulate_activation_quant
        r = gguf.GGUFReader(self.path)
        self.reader = r
        self.arch = arch = _field(r, "general.architecture")
        if arch not in ("llama", "gemma3", "qwen2", "qwen3", "phi3", "gemma2", "qwen3moe", "olmoe", "qwen2moe"):
            raise ValueError(f"reference forward: unsupported arch {arch}")
        k = lambda s, d=None: _field(r, f"{arch}.{s}", d)  # noqa: E731
        self.n_embd = int(k("embedding_length"))
        self.n_layer = int(k("block_count"))
        self.n_head = int(k("attention.head_count"))
        self.n_head_kv = int(k("attention.head_count_kv", self.n_head))
        self.hd_k = int(k("attention.key_length", self.n_embd // self.n_head))
        self.hd_v = int(k("attention.value_length", self.n_embd // self.n_head))
        self.eps = float(k("attention.layer_norm_rms_epsilon"))
        self.n_rot = int(k("rope.dimension_count", self.hd_k))
        self.freq_base = float(k("rope.freq_base", 10000.0))
        factor = k("rope.scaling.factor", None)
        self.freq_scale = 1.0 / float(factor) if factor else 1.0
        self.neox = arch != "llama"
        self.window = [0] * self.n_layer
        self.freq_base_local = self.freq_base
        self.freq_scale_local = self.freq_scale
        self.attn_scale = 1.0 / math.sqrt(self.hd_k)
        self.embed_scale = 1.0
        self.softcap = 0.0
        self.attn_softcap = 0.0
        self.gelu = arch in ("gemma3", "gemma2")
        # RoPE's cos and sin are multiplied by the attention factor (LongRoPE's
        # sqrt(1 + ln(s) / ln(orig_ctx)) as the converter computes it).
        self.rope_attn_factor = float(k("rope.scaling.attn_factor", 1.0))
        n_ctx_train = int(k("context_length"))
        self.n_ctx = n_ctx if n_ctx else min(n_ctx_train, 4096)  # the engine's default n_ctx
        # LongRoPE (Phi-3): the long factors when the context run exceeds the original one.
        self.n_ctx_orig = int(k("rope.scaling.original_context_length", n_ctx_train))
        self.rope_factors = None
        if "rope_freqs.weight" in {t.name for t in r.tensors}:
            self.rope_factors = "rope_freqs.weight"
        elif "rope_factors_long.weight" in {t.name for t in r.tensors}:
            long = self.n_ctx > self.n_ctx_orig
            self.rope_factors = "rope_factors_long.weight" if long else "rope_factors_short.weight"
        if arch == "phi3":
            n_swa = int(k("attention.sliding_window", 0))
            if 0 < n_swa < n_ctx_train:  # every layer; a window beyond the context is none
                self.window = [n_swa] * self.n_layer
        if arch == "gemma2":
            n_swa = int(k("attention.sliding_window", 4096))
            pattern = k("attention.sliding_window_pattern", 2)  # layers 0, 2, 4, ... local
            self._sliding_layers(n_swa, pattern)
            self.freq_base_local = float(k("rope.freq_base_swa", self.freq_base))
            # query_pre_attn_scalar: head_dim, except the 27B (46 layers): n_embd / n_head
            if self.n_layer == 46:
                self.attn_scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
            self.embed_scale = math.sqrt(self.n_embd)
            self.attn_softcap = float(k("attn_logit_softcapping", 50.0))
            self.softcap = float(k("final_logit_softcapping", 30.0))
        if arch == "gemma3":
            n_swa = int(k("attention.sliding_window", 0))
            pattern = k("attention.sliding_window_pattern", 6)
            self._sliding_layers(n_swa, pattern)
            self.freq_base_local = float(k("rope.freq_base_swa", 10000.0))
            self.freq_scale_local = 1.0
            if self.n_layer == 62:
                self.attn_scale = 1.0 / math.sqrt(self.n_embd // self.n_head)
            self.embed_scale = math.sqrt(self.n_embd)
            self.softcap = float(k("final_logit_softcapping", 0.0) or 0.0)
        # Mixture of experts: each token's FFN is the gate-weighted sum of its top-k experts'
        # SwiGLU FFNs. Router probabilities are a softmax over all experts (sigmoid with
        # expert_gating_func 2); the top-k probabilities are renormalised to sum 1 for
        # qwen3moe and Mixtral (llama), used as they are for olmoe, unless
        # expert_weights_norm says otherwise. A shared expert (ffn_*_shexp, every token) adds its
        # SwiGLU FFN, scaled by sigmoid(ffn_gate_inp_shexp · h) where that gate exists (qwen2moe).
        self.n_expert = int(k("expert_count", 0) or 0)
        self.n_expert_used = int(k("expert_used_count", 0) or 0)
        self.expert_sigmoid = int(k("expert_gating_func", 1) or 1) == 2
        self.expert_norm = bool(k("expert_weights_norm", arch in ("qwen3moe", "llama")))
        self.expert_scale = float(k("expert_weights_scale", 0.0) or 0.0)
        self.routes: List[np.ndarray] = []  # per layer, [n_tokens, k] experts chosen (last forward)
        self._tensors = {t.name: t for t in r.tensors}
        self._cache: Dict[str, np.ndarray] = {}

    # ---- weights ----

    def _sliding_layers(self, n_swa: int, pattern) -> None:
        """Gemma 2/3: a per-layer list, or every n-th layer global (n == 0: all local)."""
        if n_swa <= 0:
            return
        for il in range(self.n_layer):
            if isinstance(pattern, list):
                swa = bool(pattern[il])
            else:
                n = int(pattern)
                swa = n == 0 or il % n < n - 1
            self.window[il] = n_swa if swa else 0
    def has(self, name: str) -> bool:
        return name in self._tensors

    def w(self, name: str) -> np.ndarray:
        """The tensor as a dense array in numpy order (rows = ggml ne[1])."""
        if name not in self._cache:
            t = self._tensors[name]
            shape = [int(x) for x in reversed(t.shape)]  # numpy order
            if t.tensor_type in (QT.F32, QT.F16):
                a = np.asarray(t.data).astype(self.dtype)
            else:
                a = dequantize(np.asarray(t.data), t.tensor_type).astype(self.dtype)
            self._cache[name] = a.reshape(shape)
        return self._cache[name]

    def opt(self, name: str) -> Optional[np.ndarray]:
        return self.w(name) if self.has(name) else None

    def mm(self, x: np.ndarray, name: str, expert: Optional[int] = None) -> np.ndarray:
        """x @ W.T for the weight `name` (of a 3-D expert tensor: its matrix `expert`)."""
        if self.simulate:
            x = quantize_activations(x, self._tensors[name].tensor_type)
        w = self.w(name) if expert is None else self.w(name)[expert]
        return x @ w.T

    def moe(self, h: np.ndarray, b: str) -> np.ndarray:
        """The mixture-of-experts FFN of one layer on h [n, n_embd]."""
        logits = self.mm(h, b + "ffn_gate_inp.weight")  # [n, n_expert]
        if self.expert_sigmoid:
            p = 1.0 / (1.0 + np.exp(-logits))
        else:
            z = np.exp(logits - logits.max(axis=1, keepdims=True))
            p = z / z.sum(axis=1, keepdims=True)
        out = np.zeros_like(h)
        chosen = np.zeros((h.shape[0], self.n_expert_used), dtype=np.int64)
        for t in range(h.shape[0]):
            top = sorted(range(self.n_expert), key=lambda e: (-p[t, e], e))[: self.n_expert_used]
            chosen[t] = top
            g = p[t, top]
            if self.expert_norm:
                g = g / g.sum()
            if self.expert_scale > 0:
                g = g * self.expert_scale
            x = h[t : t + 1]
            for e, ge in zip(top, g):
                a = self.silu(self.mm(x, b + "ffn_gate_exps.weight", e)) * self.mm(x, b + "ffn_up_exps.weight", e)
                out[t] += ge * self.mm(a, b + "ffn_down_exps.weight", e)[0]
        self.routes.append(chosen)
        if self.has(b + "ffn_gate_shexp.weight"):
            a = self.silu(self.mm(h, b + "ffn_gate_shexp.weight")) * self.mm(h, b + "ffn_up_shexp.weight")
            s = self.mm(a, b + "ffn_down_shexp.weight")
            gate = self.opt(b + "ffn_gate_inp_shexp.weight")
            if gate is not None:
                s = s / (1.0 + np.exp(-(h @ gate)))[:, None]
            out = out + s
        return out

    # ---- blocks ----
    def rmsnorm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.eps) * weight

    def rope(self, x: np.ndarray, pos: np.ndarray, base: float, scale: float) -> np.ndarray:
        """x: [n, heads, hd]; rotates the first n_rot dims of every head."""
        half = self.n_rot // 2
        inv = base ** (-2.0 * np.arange(half) / self.n_rot)
        if self.rope_factors:
            inv = inv / self.w(self.rope_factors)
        theta = pos[:, None].astype(np.float64) * inv[None, :] * scale  # [n, half]
        cos = (np.cos(theta) * self.rope_attn_factor)[:, None, :].astype(self.dtype)
        sin = (np.sin(theta) * self.rope_attn_factor)[:, None, :].astype(self.dtype)
        out = x.copy()
        if self.neox:
            a, b = x[..., :half], x[..., half:self.n_rot]
            out[..., :half] = a * cos - b * sin
            out[..., half:self.n_rot] = a * sin + b * cos
        else:
            a, b = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]
            out[..., 0:self.n_rot:2] = a * cos - b * sin
            out[..., 1:self.n_rot:2] = a * sin + b * cos
        return out

    def attention(self, q, k, v, pos, window):
        """q [n, H, hd_k], k [n, Hkv, hd_k], v [n, Hkv, hd_v] -> [n, H * hd_v]; causal, and with a
        window w the key at p_k is masked for the query at p_q when p_q - p_k >= w. Scores are
        soft-capped (c tanh(s / c), Gemma 2) before the mask and softmax."""
        n = q.shape[0]
        group = self.n_head // self.n_head_kv
        diff = pos[:, None] - pos[None, :]
        mask = diff < 0
        if window > 0:
            mask |= diff >= window
        out = np.zeros((n, self.n_head, self.hd_v), dtype=self.dtype)
        for h in range(self.n_head):
            kh = h // group
            s = q[:, h, :] @ k[:, kh, :].T
            if self.attn_softcap > 0:
                s = self.attn_softcap * np.tanh(s / self.attn_softcap)
            s = np.where(mask, -np.inf, s)
            s = s - s.max(axis=1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=1, keepdims=True)
            out[:, h, :] = p @ v[:, kh, :]
        return out.reshape(n, self.n_head * self.hd_v)

    @staticmethod
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    @staticmethod
    def silu(x):
        return x / (1.0 + np.exp(-x))

    # ---- forward ----
    def forward(self, ids: Sequence[int], trace: bool = False):
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        pos = np.arange(n)
        x = self.w("token_embd.weight")[ids].astype(self.dtype) * self.embed_scale
        layers: List[np.ndarray] = []
        self.routes = []
        for il in range(self.n_layer):
            b = f"blk.{il}."
            h = self.rmsnorm(x, self.w(b + "attn_norm.weight"))
            if self.has(b + "attn_qkv.weight"):  # Phi-3: one matrix, rows Q then K then V
                qkv = self.mm(h, b + "attn_qkv.weight")
                nq, nk = self.n_head * self.hd_k, self.n_head_kv * self.hd_k
                q, k, v = qkv[:, :nq].copy(), qkv[:, nq:nq + nk].copy(), qkv[:, nq + nk:].copy()
            else:
                q = self.mm(h, b + "attn_q.weight")
                k = self.mm(h, b + "attn_k.weight")
                v = self.mm(h, b + "attn_v.weight")
            for name, arr in (("attn_q.bias", q), ("attn_k.bias", k), ("attn_v.bias", v)):
                bias = self.opt(b + name)
                if bias is not None:
                    arr += bias
            if self.arch == "olmoe":  # RMS norms over the whole Q and K projections
                q = self.rmsnorm(q, self.w(b + "attn_q_norm.weight"))
                k = self.rmsnorm(k, self.w(b + "attn_k_norm.weight"))
            q = q.reshape(n, self.n_head, self.hd_k)
            k = k.reshape(n, self.n_head_kv, self.hd_k)
            v = v.reshape(n, self.n_head_kv, self.hd_v)
            if self.arch != "olmoe" and self.has(b + "attn_q_norm.weight"):
                q = self.rmsnorm(q, self.w(b + "attn_q_norm.weight"))
                k = self.rmsnorm(k, self.w(b + "attn_k_norm.weight"))
            local = self.window[il] > 0
            base = self.freq_base_local if local else self.freq_base
            scale = self.freq_scale_local if local else self.freq_scale
            q = self.rope(q, pos, base, scale) * self.attn_scale
            k = self.rope(k, pos, base, scale)
            a = self.attention(q, k, v, pos, self.window[il])
            o = self.mm(a, b + "attn_output.weight")
            bo = self.opt(b + "attn_output.bias")
            if bo is not None:
                o += bo
            if self.has(b + "post_attention_norm.weight"):
                o = self.rmsnorm(o, self.w(b + "post_attention_norm.weight"))
            x = x + o
            h = self.rmsnorm(x, self.w(b + "ffn_norm.weight"))
            if self.n_expert > 0:
                d = self.moe(h, b)
            else:
                if self.has(b + "ffn_gate.weight"):
                    g = self.mm(h, b + "ffn_gate.weight")
                    u = self.mm(h, b + "ffn_up.weight")
                else:  # Phi-3: ffn_up holds gate rows, then up rows
                    gu = self.mm(h, b + "ffn_up.weight")
                    g, u = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
                act = self.gelu_tanh(g) if self.gelu else self.silu(g)
                d = self.mm(act * u, b + "ffn_down.weight")
            if self.has(b + "post_ffw_norm.weight"):
                d = self.rmsnorm(d, self.w(b + "post_ffw_norm.weight"))
            x = x + d
            if trace:
                layers.append(x.copy())
        x = self.rmsnorm(x, self.w("output_norm.weight"))
        logits = self.mm(x, "output.weight" if self.has("output.weight") else "token_embd.weight")
        if self.softcap > 0:
            logits = self.softcap * np.tanh(logits / self.softcap)
        return (logits, layers) if trace else logits


_Q8_BLOCK_TYPES = {QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.IQ4_NL, QT.MXFP4}
_K_TYPES = {QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_XS}


def quantize_activations(x: np.ndarray, weight_type) -> np.ndarray:
    """x rounded through the activation format llama.cpp pairs with weight_type (docs/formats.md §2.4):
    Q8_0/Q8_1 (32-blocks, d = amax/127 stored as fp16), Q8_K (256-blocks, f32 d = -max/127),
    F16; F32 weights take x as is."""
    shape = x.shape
    if weight_type in _Q8_BLOCK_TYPES:
        b = x.reshape(-1, 32).astype(np.float64)
        d = np.abs(b).max(axis=1, keepdims=True) / 127.0
        inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0)
        q = np.sign(b * inv) * np.floor(np.abs(b * inv) + 0.5)  # roundf: ties away from zero
        d16 = d.astype(np.float16).astype(np.float64)
        return (q * d16).reshape(shape).astype(x.dtype)
    if weight_type in _K_TYPES:
        b = x.reshape(-1, 256).astype(np.float64)
        idx = np.abs(b).argmax(axis=1)
        mx = b[np.arange(len(b)), idx][:, None]
        iscale = np.where(mx != 0, -127.0 / np.where(mx != 0, mx, 1), 0.0)
        q = np.minimum(127, np.round(iscale * b))
        d = np.where(iscale != 0, 1.0 / np.where(iscale != 0, iscale, 1), 0.0).astype(np.float32)
        return (q * d.astype(np.float64)).reshape(shape).astype(x.dtype)
    if weight_type == QT.F16:
        return x.astype(np.float16).astype(x.dtype)
    if weight_type == QT.BF16:
        u = x.astype(np.float32).view(np.uint32)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        return u.astype(np.uint32).view(np.float32).astype(x.dtype)
    return x


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
