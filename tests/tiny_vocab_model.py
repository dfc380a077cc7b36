"""A tiny llama model with a real (byte-level BPE) tokenizer, for the tests of the measuring
commands (bench, perplexity, quantize), which need text in and tokens out.

Vocabulary: the 256 byte-level symbols of GPT-2's byte map, three merged tokens and
<|endoftext|> as BOS/EOS (add_bos on), so 260 ids. Weights are seeded random F32 (or Q8_0).
arch="qwen3moe" / "olmoe" / "qwen2moe" / "mixtral" (a llama-arch file with experts) make the
same model a mixture of experts (8 experts of 64, 2 used per token; qwen3moe: per-head Q/K
norms, olmoe: Q/K norms over the whole projections, qwen2moe: Q/K/V biases and a gated shared
expert of 128).
"""
from __future__ import annotations

import numpy as np

N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF = 64, 2, 2, 1, 32, 128
N_EXPERT, N_EXPERT_USED, N_FF_EXP = 8, 2, 64


def byte_symbols():
    """GPT-2's byte -> printable character map, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def vocab():
    tokens = byte_symbols() + ["Ġt", "he", "Ġthe", "<|endoftext|>"]
    types = [1] * (len(tokens) - 1) + [3]
    merges = ["Ġ t", "h e", "Ġt he"]
    return tokens, types, merges


def add_tokenizer(w, tokens, types, merges, chat_template=None):
    """This vocabulary's tokenizer keys (<|endoftext|> = 259 as BOS/EOS, add_bos on)."""
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(259)  # <|endoftext|>
    w.add_eos_token_id(259)
    w.add_add_bos_token(True)
    if chat_template is not None:
        w.add_chat_template(chat_template)


def write_tiny_vocab_model(path, weight_type: str = "F32", seed: int = 0, tied: bool = False,
                           chat_template: str = None, control_tokens=(), arch: str = "llama"):
    """control_tokens: more CONTROL tokens (e.g. "<|im_start|>") after <|endoftext|>."""
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf.quants import quantize

    tokens, types, merges = vocab()
    tokens, types = tokens + list(control_tokens), types + [3] * len(control_tokens)
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)
    assert arch in ("llama", "qwen3moe", "olmoe", "qwen2moe", "mixtral")
    moe = arch != "llama"
    n_kv = N_HEAD if arch == "olmoe" else N_HEAD_KV  # OLMoE is multi-head (llama.cpp sizes attn_k_norm by n_embd)
    w = gguf.GGUFWriter(str(path), "llama" if arch == "mixtral" else arch)
    w.add_name(f"tiny-vocab-{arch}")
    w.add_context_length(1024)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF if arch in ("llama", "qwen3moe", "qwen2moe") else N_FF_EXP)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(n_kv)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    if moe:
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_EXPERT_USED)
        if arch in ("qwen3moe", "qwen2moe"):
            w.add_expert_feed_forward_length(N_FF_EXP)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0 if weight_type == "F32" else 7)
    add_tokenizer(w, tokens, types, merges, chat_template)

    def matrix(name, rows, cols, std=0.2, n_mat=None):
        a = (rng.standard_normal((rows, cols) if n_mat is None else (n_mat, rows, cols)) * std).astype(np.float32)
        if weight_type == "F32":
            w.add_tensor(name, a)
        else:
            q = quantize(a, QT[weight_type])
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=QT[weight_type])

    def vector(name, n):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    matrix("token_embd.weight", n_vocab, N_EMBD, std=1.0)
    for il in range(N_LAYER):
        b = f"blk.{il}."
        vector(b + "attn_norm.weight", N_EMBD)
        matrix(b + "attn_q.weight", N_HEAD * HEAD_DIM, N_EMBD)
        matrix(b + "attn_k.weight", n_kv * HEAD_DIM, N_EMBD)
        matrix(b + "attn_v.weight", n_kv * HEAD_DIM, N_EMBD)
        matrix(b + "attn_output.weight", N_EMBD, N_HEAD * HEAD_DIM)
        if arch == "qwen2moe":
            for name, n in (("attn_q.bias", N_HEAD * HEAD_DIM), ("attn_k.bias", n_kv * HEAD_DIM),
                            ("attn_v.bias", n_kv * HEAD_DIM)):
                w.add_tensor(b + name, (0.2 * rng.standard_normal(n)).astype(np.float32))
        if arch == "qwen3moe":
            vector(b + "attn_q_norm.weight", HEAD_DIM)
            vector(b + "attn_k_norm.weight", HEAD_DIM)
        if arch == "olmoe":
            vector(b + "attn_q_norm.weight", N_HEAD * HEAD_DIM)
            vector(b + "attn_k_norm.weight", n_kv * HEAD_DIM)
        vector(b + "ffn_norm.weight", N_EMBD)
        if moe:
            matrix(b + "ffn_gate_inp.weight", N_EXPERT, N_EMBD, std=0.6)
            matrix(b + "ffn_gate_exps.weight", N_FF_EXP, N_EMBD, n_mat=N_EXPERT)
            matrix(b + "ffn_up_exps.weight", N_FF_EXP, N_EMBD, n_mat=N_EXPERT)
            matrix(b + "ffn_down_exps.weight", N_EMBD, N_FF_EXP, n_mat=N_EXPERT)
            if arch == "qwen2moe":
                matrix(b + "ffn_gate_shexp.weight", N_FF, N_EMBD)
                matrix(b + "ffn_up_shexp.weight", N_FF, N_EMBD)
                matrix(b + "ffn_down_shexp.weight", N_EMBD, N_FF)
                w.add_tensor(b + "ffn_gate_inp_shexp.weight", (0.5 * rng.standard_normal(N_EMBD)).astype(np.float32))
        else:
            matrix(b + "ffn_gate.weight", N_FF, N_EMBD)
            matrix(b + "ffn_up.weight", N_FF, N_EMBD)
            matrix(b + "ffn_down.weight", N_EMBD, N_FF)
    vector("output_norm.weight", N_EMBD)
    if not tied:
        matrix("output.weight", n_vocab, N_EMBD, std=0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_vocab_arch_model(path, arch: str, chat_template: str = None, control_tokens=(), **kw):
    """A tests/reference/fixtures.py model of `arch` (phi3, gemma2, ...) with this module's
    byte-level BPE vocabulary (plus control_tokens) and optionally a chat template."""
    from reference.fixtures import write_tiny_model

    tokens, types, merges = vocab()
    tokens, types = tokens + list(control_tokens), types + [3] * len(control_tokens)

    return write_tiny_model(path, arch, n_vocab=len(tokens),
                            tokenizer=lambda w: add_tokenizer(w, tokens, types, merges, chat_template), **kw)


TEXT = ("When in the course of human events, it becomes necessary for one people to dissolve the political "
        "bands which have connected them with another, and to assume among the powers of the earth the "
        "separate and equal station to which the laws of nature entitle them, a decent respect to the "
        "opinions of mankind requires that they should declare the causes which impel them to the separation. ")
