"""Tiny Hugging Face checkpoints (config.json, tokenizer.json, safetensors weights), rebuilt
from a seed with numpy + safetensors alone: tests need neither torch nor transformers.
tests/data/hf/make_hf_fixtures.py loads the same directories with transformers and records
its logits into tests/data/hf/<arch>.npz."""
import json
import os

import numpy as np

from tokenizer_reference import BYTE_TO_UNICODE

ARCHS = ("llama", "qwen2", "qwen3", "gemma3", "gemma2", "phi3", "llama3", "qwen3moe", "olmoe", "qwen2moe", "mixtral",
         "phi3_longrope_short", "phi3_longrope_long", "qwen2_yarn")
# variants: another architecture's weights with a different config.json
VARIANT_OF = {"qwen2_yarn": "qwen2"}
MOE_ARCHS = ("qwen3moe", "olmoe", "qwen2moe", "mixtral")
# converted and compared with llama.cpp's converter (tests/data/hf/llamacpp_comparison.json), not run
CONVERT_ONLY = ("gptoss",)
SPM_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "hf", "spm.model")
PROMPT = [5, 61, 200, 17, 99, 3, 140, 77, 250, 12, 33, 180]
N_GREEDY = 8


def tokenizer_json(pre: str) -> dict:
    """Byte-level BPE: the 256 byte symbols, a few merges, two special tokens."""
    b2u = BYTE_TO_UNICODE
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n")]:
        merges.append(f"{a} {b}")
        vocab[a + b] = len(vocab)
    added = [{"id": len(vocab) + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, c in enumerate(["<|endoftext|>", "<|im_end|>"])]
    if pre == "gpt2":
        pre_tok = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    else:
        rx = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
        pre_tok = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": pre_tok,
            "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                               "use_regex": False},
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges}}


def config(arch: str) -> dict:
    base = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
            "vocab_size": 272, "hidden_act": "silu", "torch_dtype": "float32", "bos_token_id": 263,
            "eos_token_id": 264, "initializer_range": 0.02, "use_cache": True}
    if arch == "llama":
        base.update(architectures=["LlamaForCausalLM"], model_type="llama", rope_theta=10000.0,
                    tie_word_embeddings=False, attention_bias=False, mlp_bias=False, head_dim=16)
    elif arch == "qwen2":
        base.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", rope_theta=1000000.0,
                    tie_word_embeddings=True, use_sliding_window=False, sliding_window=None)
    elif arch == "qwen3":
        base.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", rope_theta=1000000.0,
                    tie_word_embeddings=True, head_dim=32, attention_bias=False,
                    use_sliding_window=False, sliding_window=None)
    elif arch == "gemma3":  # SentencePiece vocabulary: tests/data/hf/spm.model (400 pieces)
        del base["hidden_act"]
        base.update(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", vocab_size=400,
                    hidden_activation="gelu_pytorch_tanh", head_dim=16, query_pre_attn_scalar=16,
                    sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                    rope_theta=1000000.0, rope_local_base_freq=10000.0, tie_word_embeddings=True,
                    final_logit_softcapping=None, attn_logit_softcapping=None, rms_norm_eps=1e-6,
                    bos_token_id=2, eos_token_id=1, pad_token_id=0)
    elif arch == "gemma2":
        base.update(config("gemma3"))
        del base["layer_types"], base["rope_local_base_freq"], base["hidden_act"]
        base.update(architectures=["Gemma2ForCausalLM"], model_type="gemma2", rope_theta=10000.0,
                    attn_logit_softcapping=5.0, final_logit_softcapping=3.0)
    elif arch == "llama3":  # Llama 3.1+ RoPE scaling, windows short enough to touch every branch
        base.update(config("llama"))
        base.update(rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    elif arch == "phi3":  # partial rotary (8 of 16 dims), a window shorter than the prompt
        base.update(architectures=["Phi3ForCausalLM"], model_type="phi3", rope_theta=10000.0, vocab_size=400,
                    tie_word_embeddings=False, partial_rotary_factor=0.5, sliding_window=5,
                    original_max_position_embeddings=256, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                    rope_scaling=None, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)
    elif arch == "qwen2_yarn":  # YaRN (Qwen2.5's long-context config), the original context inside the prompt
        base.update(config("qwen2"))
        base.update(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8})
    elif arch.startswith("phi3_longrope"):  # LongRoPE: short factors within the original context, long beyond
        base.update(config("phi3"))
        orig = 64 if arch.endswith("short") else 8  # the prompt and the engine's n_ctx (64) inside / outside
        rng = np.random.default_rng(7)
        base.update(original_max_position_embeddings=orig, max_position_embeddings=256, sliding_window=None,
                    rope_scaling={"type": "longrope", "long_factor": (1 + 4 * rng.random(4)).round(4).tolist(),
                                  "short_factor": (1 + rng.random(4)).round(4).tolist()})
    elif arch == "qwen3moe":
        base.update(config("qwen3"))
        base.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", tie_word_embeddings=False,
                    num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                    decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.0)
    elif arch == "qwen2moe":
        base.update(config("qwen2"))
        base.update(architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", tie_word_embeddings=False,
                    num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                    norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[], qkv_bias=True,
                    router_aux_loss_coef=0.0)
    elif arch == "olmoe":
        base.update(architectures=["OlmoeForCausalLM"], model_type="olmoe", rope_theta=10000.0, intermediate_size=32,
                    tie_word_embeddings=False, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
                    attention_bias=False, clip_qkv=None, router_aux_loss_coef=0.0, pad_token_id=1)
    elif arch == "mixtral":
        base.update(config("llama"))
        base.update(architectures=["MixtralForCausalLM"], model_type="mixtral", intermediate_size=48,
                    num_local_experts=4, num_experts_per_tok=2, sliding_window=None, router_aux_loss_coef=0.0,
                    router_jitter_noise=0.0)
        del base["mlp_bias"], base["attention_bias"]
    elif arch == "gptoss":  # MXFP4 experts (uint8 blocks + E8M0 scales), attention sinks, biases, YaRN
        base.update(architectures=["GptOssForCausalLM"], model_type="gpt_oss", intermediate_size=64, head_dim=16,
                    num_local_experts=4, num_experts_per_tok=2, sliding_window=8, rope_theta=150000.0,
                    layer_types=["sliding_attention", "full_attention"], max_position_embeddings=2048,
                    rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "truncate": False, "original_max_position_embeddings": 64},
                    attention_bias=True, swiglu_limit=7.0, tie_word_embeddings=False, router_aux_loss_coef=0.0,
                    quantization_config={"quant_method": "mxfp4", "modules_to_not_convert": [
                        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})
    return base


def _mxfp4(rng, *shape):
    """Random MXFP4 (blocks, scales) for a [*shape] matrix: 16 bytes of 4-bit codes and one E8M0
    exponent (bias 127; 2^-3 .. 2^0 here) per 32 values of the last axis."""
    *lead, cols = shape
    blocks = rng.integers(0, 256, size=(*lead, cols // 32, 16), dtype=np.uint8)
    scales = rng.integers(124, 128, size=(*lead, cols // 32), dtype=np.uint8)
    return blocks, scales


def weights(arch: str, seed: int = 0) -> dict:
    c = config(arch)
    arch = VARIANT_OF.get(arch, arch)
    rng = np.random.default_rng(seed)
    d, ff, nl = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    hd = c.get("head_dim") or d // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd

    def mat(*shape, s=0.15):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    gemma = arch.startswith("gemma")
    norm = (lambda n: mat(n, s=0.1)) if gemma else (lambda n: 1 + mat(n, s=0.1))  # gemma: 1 + w
    w = {"model.embed_tokens.weight": mat(c["vocab_size"], d, s=0.5 / (8 if gemma else 1)),
         "model.norm.weight": norm(d)}
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(c["vocab_size"], d, s=0.3)
    for il in range(nl):
        p = f"model.layers.{il}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        if gemma:
            w[p + "pre_feedforward_layernorm.weight"] = norm(d)
            w[p + "post_feedforward_layernorm.weight"] = norm(d)
        if arch.startswith("phi3"):
            w[p + "self_attn.qkv_proj.weight"] = mat(q + 2 * kv, d)
        else:
            w[p + "self_attn.q_proj.weight"] = mat(q, d)
            w[p + "self_attn.k_proj.weight"] = mat(kv, d)
            w[p + "self_attn.v_proj.weight"] = mat(kv, d)
        w[p + "self_attn.o_proj.weight"] = mat(d, q)
        if arch in ("qwen2", "qwen2moe"):
            for n, k in (("q", q), ("k", kv), ("v", kv)):
                w[p + f"self_attn.{n}_proj.bias"] = mat(k, s=0.1)
        if arch in ("qwen3", "gemma3", "qwen3moe"):
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
        if arch == "olmoe":  # over the whole projections
            w[p + "self_attn.q_norm.weight"] = norm(q)
            w[p + "self_attn.k_norm.weight"] = norm(kv)
        if arch == "gptoss":
            for n, k in (("q", q), ("k", kv), ("v", kv)):
                w[p + f"self_attn.{n}_proj.bias"] = mat(k, s=0.1)
            w[p + "self_attn.o_proj.bias"] = mat(d, s=0.1)
            w[p + "self_attn.sinks"] = mat(c["num_attention_heads"], s=1.0)
            n_exp = c["num_local_experts"]
            w[p + "mlp.router.weight"] = mat(n_exp, d, s=1.0)
            w[p + "mlp.router.bias"] = mat(n_exp, s=0.1)
            e = p + "mlp.experts."
            w[e + "gate_up_proj_blocks"], w[e + "gate_up_proj_scales"] = _mxfp4(rng, n_exp, 2 * ff, d)
            w[e + "gate_up_proj_bias"] = mat(n_exp, 2 * ff, s=0.1)
            w[e + "down_proj_blocks"], w[e + "down_proj_scales"] = _mxfp4(rng, n_exp, d, ff)
            w[e + "down_proj_bias"] = mat(n_exp, d, s=0.1)
        if arch in MOE_ARCHS:
            n_exp = c.get("num_experts") or c["num_local_experts"]
            eff = c.get("moe_intermediate_size") or ff
            moe = "block_sparse_moe" if arch == "mixtral" else "mlp"
            w[p + f"{moe}.gate.weight"] = mat(n_exp, d, s=1.0)  # wide router margins: F16 picks the same experts
            names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
            for e in range(n_exp):
                w[p + f"{moe}.experts.{e}.{names[0]}.weight"] = mat(eff, d)
                w[p + f"{moe}.experts.{e}.{names[1]}.weight"] = mat(eff, d)
                w[p + f"{moe}.experts.{e}.{names[2]}.weight"] = mat(d, eff)
            if arch == "qwen2moe":
                sff = c["shared_expert_intermediate_size"]
                w[p + "mlp.shared_expert.gate_proj.weight"] = mat(sff, d)
                w[p + "mlp.shared_expert.up_proj.weight"] = mat(sff, d)
                w[p + "mlp.shared_expert.down_proj.weight"] = mat(d, sff)
                w[p + "mlp.shared_expert_gate.weight"] = mat(1, d, s=0.3)
        elif arch.startswith("phi3"):
            w[p + "mlp.gate_up_proj.weight"] = mat(2 * ff, d)
        elif arch == "gptoss":
            pass
        else:
            w[p + "mlp.gate_proj.weight"] = mat(ff, d)
            w[p + "mlp.up_proj.weight"] = mat(ff, d)
        if arch not in MOE_ARCHS + CONVERT_ONLY:
            w[p + "mlp.down_proj.weight"] = mat(d, ff)
    return w


def write_checkpoint(directory, arch: str, shards: int = 1, dtype=np.float32) -> str:
    """A checkpoint directory for arch; llama is written in two shards with an index."""
    from safetensors.numpy import save_file

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config(arch), f, indent=1)
    if arch.startswith(("gemma", "phi3")):
        import shutil
        shutil.copy(SPM_MODEL, os.path.join(directory, "tokenizer.model"))
    else:
        with open(os.path.join(directory, "tokenizer.json"), "w") as f:
            json.dump(tokenizer_json("gpt2" if arch == "llama" else "qwen2"), f)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "add_bos_token": False,
                   "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"}, f)
    w = {k: v if v.dtype == np.uint8 else v.astype(dtype) for k, v in weights(arch).items()}
    names = sorted(w)
    if shards == 1:
        save_file(w, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    else:
        parts = [names[i::shards] for i in range(shards)]
        weight_map = {}
        for i, part in enumerate(parts):
            fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            save_file({k: w[k] for k in part}, os.path.join(directory, fn), metadata={"format": "pt"})
            weight_map.update({k: fn for k in part})
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return str(directory)
