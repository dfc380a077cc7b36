#!/usr/bin/env python3
"""Random-weight GGUF models of realistic shapes, for speed measurements on sizes the test
models do not cover. Speed does not depend on weight values, only on shapes and types.

Default: SmolLM2-1.7B's shape (arch llama, dim 2048, 24 layers, FFN 8192, 32 heads, 32 KV
heads, vocab 49152, tied embeddings) with SmolLM2's tokenizer metadata copied from the real
SmolLM2-135M file (same vocabulary), in Q4_0, Q4_K_M and Q8_0:

    python bench/make_synthetic.py                      # -> ~/.cache/edgellm/synthetic/
    python bench/make_synthetic.py --type Q8_0 --layers 4 --out-dir /tmp/syn

Other shapes: --preset phi3.5-mini (arch phi3: dim 3072, 32 layers, 32 heads, FFN 8192, vocab
32064, fused attn_qkv / ffn_up, LongRoPE factors, untied output) and --preset gemma2-2b (arch
gemma2: dim 2304, 26 layers, 8 heads / 4 KV heads of 256, FFN 9216, vocab 256000, soft-caps,
alternating 4096-token windows). Their tokenizer is a placeholder SentencePiece vocabulary of
the right size (<unk> <s> </s>, the 256 byte tokens, then filler pieces) unless --tokenizer-from
names a GGUF with exactly that many tokens:

    python bench/make_synthetic.py --preset phi3.5-mini --type Q4_K_M

--preset qwen3-30b-a3b: a mixture of experts with Qwen3-30B-A3B's shape (arch qwen3moe, dim
2048, 32 heads / 4 KV heads of 128, 128 experts of 768 with 8 used per token, vocab 151936,
untied output) but 6 layers instead of 48 (--layers), with the tokenizer of the cached
Qwen2.5-Coder-0.5B (the same 151936-token vocabulary); ~2.5 GiB at Q4_K_M. Its decode floor is
the active bytes (bench/compare.py): the attention, the router and 8 of 128 experts per layer.

    python bench/make_synthetic.py --preset qwen3-30b-a3b --type Q4_K_M

--preset gpt-oss-20b: gpt-oss-20b's layer shape (arch gpt-oss: dim 2880, 64 heads / 8 KV heads of
64, 32 experts of 2880 with 4 used per token, vocab 201088, sliding window 128 on every other layer,
YaRN x32 from 4096, attention sinks, Q/K/V/O / router / expert biases) with 4 layers instead of 24
and its experts in MXFP4 as the released file has them (--type sets the other matrices); the
tokenizer is the SentencePiece placeholder (timing only):

    python bench/make_synthetic.py --preset gpt-oss-20b --type Q8_0

Tensor types follow llama-quantize's mix (python/edgellm/bench/quantize.py: plan_types), e.g.
Q4_K_M puts Q6_K on the tied embedding/output and on half the attn_v/ffn_down.

Weights are generated directly in quantized form, not by quantizing float weights: the
quant bytes (4/6/8-bit values, K-quant 6-bit sub-block scales) are uniform random bytes and the
fp16 block scales are drawn from a range that gives weights of standard deviation ~0.02. Every
block is valid and the value statistics are realistic enough for timing; K-quant quantization of
1.7B floats would take minutes, this takes seconds (bounded by disk writes).
"""
import argparse
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = Path(__file__).resolve().parent

# fp16 block-scale ranges (lo, hi) giving weight std ~0.02 with uniform random quants:
#   Q4_0: w = d·(q-8), std(q-8) ≈ 4.6      Q8_0: w = d·q, std(q) ≈ 74
#   Q4_K: w = d·sc·q - dmin·m, sc,m < 64   Q6_K: w = d·sc·(q-32), sc int8, std ≈ 74·18.5
#   Q5_0/Q5_1/Q4_1 appear only as fallbacks for odd shapes.
SCALE = {"Q4_0": (0.003, 0.006), "Q4_1": (0.001, 0.003), "Q5_0": (0.0015, 0.003), "Q5_1": (0.0006, 0.0015),
         "Q8_0": (0.0002, 0.0004), "Q4_K": (1e-4, 2e-4), "Q5_K": (5e-5, 1e-4), "Q6_K": (1e-5, 2e-5),
         # IQ4_NL: w = d·level, std(level) ≈ 65;  IQ4_XS: w = d·(ls−32)·level, std(ls−32) ≈ 18
         "IQ4_NL": (2e-4, 4e-4), "IQ4_XS": (1e-5, 2.2e-5)}
# Byte offsets of the fp16 fields inside each block (docs/formats.md §2.2-2.3).
FP16_AT = {"MXFP4": [], "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q4_K": [0, 2], "Q5_K": [0, 2],
           "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0]}
BLOCK = {"MXFP4": (32, 17), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34),
         "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210), "IQ4_NL": (32, 18), "IQ4_XS": (256, 136)}


def use_edgellm():
    """The installed edgellm package when there is one (CI, a pip install), else this tree's
    python/ (a dev build found through EDGELLM_BUILD_DIR)."""
    try:
        import edgellm  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(HERE.parent / "python"))


def random_blocks(rng, qtype, n_rows, ne0):
    be, bb = BLOCK[qtype]
    nblk = n_rows * (ne0 // be)
    raw = np.frombuffer(rng.bytes(nblk * bb), dtype=np.uint8).reshape(nblk, bb).copy()
    if qtype == "MXFP4":  # E8M0 scale byte 2^(e - 128) (ggml's half), levels up to ±12: std ~0.02
        raw[:, 0] = rng.integers(119, 121, size=nblk, dtype=np.uint8)
        return raw.reshape(n_rows, (ne0 // be) * bb)
    lo, hi = SCALE[qtype]
    for off in FP16_AT[qtype]:
        d = rng.uniform(lo, hi, size=nblk).astype(np.float16)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(nblk, 2)
    return raw.reshape(n_rows, (ne0 // be) * bb)


# Shapes of real models (those the defaults do not give); each sets the arguments it names.
PRESETS = {
    "phi3.5-mini": dict(arch="phi3", dim=3072, layers=32, ffn=8192, heads=32, kv_heads=32, head_dim=96,
                        vocab=32064, ctx=131072, tied=False, rope_base=10000.0, eps=1e-5, name="phi3.5-mini-shape"),
    "gemma2-2b": dict(arch="gemma2", dim=2304, layers=26, ffn=9216, heads=8, kv_heads=4, head_dim=256,
                      vocab=256000, ctx=8192, tied=True, rope_base=10000.0, eps=1e-6, name="gemma2-2b-shape"),
    # Gemma 3 4B's text model (the width its vision projector embeds into; bench/vision_speed.py gives
    # it Gemma 3's real vocabulary: the cached 270M's 262144 tokens + <image_soft_token> and 63 more)
    "gemma3-4b": dict(arch="gemma3", dim=2560, layers=34, ffn=10240, heads=8, kv_heads=4, head_dim=256,
                      vocab=262208, ctx=131072, tied=True, rope_base=1000000.0, eps=1e-6, name="gemma3-4b-shape"),
    # Qwen3-30B-A3B's shape with fewer layers
    "qwen3-30b-a3b": dict(arch="qwen3moe", dim=2048, layers=6, ffn=6144, heads=32, kv_heads=4, head_dim=128,
                          experts=128, experts_used=8, expert_ffn=768, vocab=151936, ctx=40960, tied=False,
                          rope_base=1000000.0, eps=1e-6, tokenizer="qwen2.5-coder-0.5b", name="qwen3-30b-a3b-shape"),
    # gpt-oss-20b's shape with 4 of its 24 layers
    "gpt-oss-20b": dict(arch="gpt-oss", dim=2880, layers=4, ffn=2880, heads=64, kv_heads=8, head_dim=64,
                        experts=32, experts_used=4, expert_ffn=2880, vocab=201088, ctx=131072, tied=False,
                        rope_base=150000.0, eps=1e-5, name="gpt-oss-20b-shape"),
}


def shapes(a):
    """(name, ne in ggml order) of the model, file order: a llama layer; phi3 with fused attn_qkv
    and ffn_up (gate rows, then up rows) and LongRoPE divisors; gemma2 with its sandwich norms;
    qwen3moe with per-head Q/K norms and a mixture-of-experts FFN (router + 3-D expert tensors
    {n_in, n_out, n_expert}); the output head tied to the embedding unless a.tied is False."""
    hd = a.head_dim or a.dim // a.heads
    out = [("token_embd.weight", (a.dim, a.vocab))]
    for i in range(a.layers):
        b = f"blk.{i}."
        out.append((b + "attn_norm.weight", (a.dim,)))
        if a.arch == "phi3":  # Q, K, V rows in one tensor
            out.append((b + "attn_qkv.weight", (a.dim, (a.heads + 2 * a.kv_heads) * hd)))
        else:
            out += [(b + "attn_q.weight", (a.dim, a.heads * hd)), (b + "attn_k.weight", (a.dim, a.kv_heads * hd)),
                    (b + "attn_v.weight", (a.dim, a.kv_heads * hd))]
        out.append((b + "attn_output.weight", (a.heads * hd, a.dim)))
        if a.arch == "gpt-oss":  # biases, sinks; the pre-FFN norm is post_attention_norm
            out += [(b + "attn_q.bias", (a.heads * hd,)), (b + "attn_k.bias", (a.kv_heads * hd,)),
                    (b + "attn_v.bias", (a.kv_heads * hd,)), (b + "attn_output.bias", (a.dim,)),
                    (b + "attn_sinks.weight", (a.heads,)), (b + "post_attention_norm.weight", (a.dim,))]
        if a.arch in ("qwen3moe", "gemma3"):
            out += [(b + "attn_q_norm.weight", (hd,)), (b + "attn_k_norm.weight", (hd,))]
        if a.arch in ("gemma2", "gemma3"):
            out.append((b + "post_attention_norm.weight", (a.dim,)))
        if a.arch != "gpt-oss":
            out.append((b + "ffn_norm.weight", (a.dim,)))
        if a.experts:
            out += [(b + "ffn_gate_inp.weight", (a.dim, a.experts)),
                    (b + "ffn_gate_exps.weight", (a.dim, a.expert_ffn, a.experts)),
                    (b + "ffn_up_exps.weight", (a.dim, a.expert_ffn, a.experts)),
                    (b + "ffn_down_exps.weight", (a.expert_ffn, a.dim, a.experts))]
            if a.arch == "gpt-oss":
                out += [(b + "ffn_gate_inp.bias", (a.experts,)), (b + "ffn_gate_exps.bias", (a.expert_ffn, a.experts)),
                        (b + "ffn_up_exps.bias", (a.expert_ffn, a.experts)),
                        (b + "ffn_down_exps.bias", (a.dim, a.experts))]
        elif a.arch == "phi3":  # gate rows, then up rows
            out += [(b + "ffn_up.weight", (a.dim, 2 * a.ffn)), (b + "ffn_down.weight", (a.ffn, a.dim))]
        else:
            out += [(b + "ffn_gate.weight", (a.dim, a.ffn)), (b + "ffn_up.weight", (a.dim, a.ffn)),
                    (b + "ffn_down.weight", (a.ffn, a.dim))]
        if a.arch in ("gemma2", "gemma3"):
            out.append((b + "post_ffw_norm.weight", (a.dim,)))
    out.append(("output_norm.weight", (a.dim,)))
    if not a.tied:
        out.append(("output.weight", (a.dim, a.vocab)))
    if a.arch == "phi3":  # LongRoPE divisors (1 + 0.1 N(0, 1): positive)
        out += [("rope_factors_long.weight", (hd // 2,)), ("rope_factors_short.weight", (hd // 2,))]
    return out


def placeholder_spm_vocab(n_vocab):
    """(key, value, type, sub_type) of a SentencePiece vocabulary of n_vocab pieces: <unk> <s> </s>,
    the byte tokens, filler pieces, <|endoftext|> last (llama.cpp's Phi-3 fix-ups look it up);
    enough to load, tokenize and generate for timing."""
    import gguf

    T = gguf.GGUFValueType
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581p{i}" for i in range(n_vocab - len(tokens) - 1)] + ["<|endoftext|>"]
    types = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 260) + [3]
    scores = [0.0] * 259 + [-float(i) for i in range(n_vocab - 259)]
    return [("tokenizer.ggml.model", "llama", T.STRING, None), ("tokenizer.ggml.tokens", tokens, T.ARRAY, T.STRING),
            ("tokenizer.ggml.scores", scores, T.ARRAY, T.FLOAT32), ("tokenizer.ggml.token_type", types, T.ARRAY, T.INT32),
            ("tokenizer.ggml.bos_token_id", 1, T.UINT32, None), ("tokenizer.ggml.eos_token_id", 2, T.UINT32, None),
            ("tokenizer.ggml.unknown_token_id", 0, T.UINT32, None)]


def write_model(a, ftype, out_path, tokenizer_fields):
    use_edgellm()
    import gguf
    from edgellm.bench.model_info import FTYPE_IDS
    from edgellm.bench.quantize import plan_types

    rng = np.random.default_rng(a.seed)
    tensors = [SimpleNamespace(name=n, shape=ne, tensor_type=gguf.GGMLQuantizationType.F32) for n, ne in shapes(a)]
    plans = plan_types(tensors, "Q8_0" if ftype == "MXFP4" else ftype, a.layers)
    if ftype == "MXFP4":  # a dense model in MXFP4: the layer matrices; the embedding / head stay Q8_0
        from edgellm.bench.quantize import Plan
        plans = [Plan(p.name, p.src_type, "MXFP4" if p.dst_type and p.name.startswith("blk.") else p.dst_type, p.ne)
                 for p in plans]
    if a.arch == "gpt-oss":  # the released file's layout: MXFP4 experts, F32 biases and sinks
        from edgellm.bench.quantize import Plan
        plans = [Plan(p.name, p.src_type, "MXFP4" if p.name.endswith("_exps.weight") else
                      (None if p.name.endswith(".bias") else p.dst_type), p.ne) for p in plans]
    w = gguf.GGUFWriter(str(out_path), a.arch)
    w.add_name(f"synthetic-{a.arch}-{a.dim}x{a.layers}-{ftype}")
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.dim)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    hd = a.head_dim or a.dim // a.heads
    if a.head_dim:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(a.rope_base)
    w.add_layer_norm_rms_eps(a.eps)
    if a.experts:
        w.add_expert_count(a.experts)
        w.add_expert_used_count(a.experts_used)
        w.add_expert_feed_forward_length(a.expert_ffn)
    if a.arch == "phi3":  # Phi-3.5-mini's: LongRoPE from 4096 to 131072 tokens, a window beyond it
        w.add_rope_scaling_orig_ctx_len(4096)
        w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(a.ctx / 4096) / np.log(4096))))
        w.add_sliding_window(262144)
    if a.arch == "gpt-oss":  # gpt-oss-20b's
        w.add_sliding_window(128)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
        w.add_rope_scaling_yarn_beta_fast(32.0)
        w.add_rope_scaling_yarn_beta_slow(1.0)
    if a.arch == "gemma3":  # Gemma 3 4B's: 1024-token windows on 5 of 6 layers, their own RoPE base
        w.add_sliding_window(1024)
        w.add_float32("gemma3.rope.freq_base_swa", 10000.0)
    if a.arch == "gemma2":  # Gemma 2 2B's
        w.add_sliding_window(4096)
        w.add_attn_logit_softcapping(50.0)
        w.add_final_logit_softcapping(30.0)
    w.add_vocab_size(a.vocab)
    w.add_file_type(FTYPE_IDS["MXFP4_MOE" if ftype == "MXFP4" else ftype])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for f in tokenizer_fields:
        if isinstance(f, gguf.ReaderField):  # (a NamedTuple: tested first)
            w.add_key_value(f.name, f.contents(), f.types[0], sub_type=f.types[-1] if len(f.types) > 1 else None)
        else:
            w.add_key_value(*f)
    for p in plans:
        ne = p.ne
        np_shape = tuple(reversed(ne))
        t = p.dst_type or "F32"
        if t in ("F32", "F16"):
            dt = np.dtype(np.float32 if t == "F32" else np.float16)
            w.add_tensor_info(p.name, np_shape, dt, int(np.prod(ne)) * dt.itemsize)
        else:
            be, bb = BLOCK[t]
            rb = ne[0] // be * bb
            n_rows = int(np.prod(ne[1:]))
            w.add_tensor_info(p.name, np_shape[:-1] + (rb,), np.dtype(np.uint8), n_rows * rb,
                              raw_dtype=gguf.GGMLQuantizationType[t])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for p in plans:
        ne = p.ne
        t = p.dst_type or "F32"
        if t == "F32":
            data = (1.0 + 0.1 * rng.standard_normal(int(np.prod(ne)))).astype(np.float32)
        elif t == "F16":  # std 0.02, as the quantized types
            data = (0.02 * rng.standard_normal(int(np.prod(ne)), dtype=np.float32)).astype(np.float16)
        else:
            data = random_blocks(rng, t, int(np.prod(ne[1:])), ne[0])
        w.write_tensor_data(data)
    w.close()
    return {p.name: p.dst_type or "F32" for p in plans}


def tokenizer_fields_from(path, vocab):
    import gguf

    r = gguf.GGUFReader(str(path), "r")
    fields = [f for k, f in r.fields.items() if k.startswith("tokenizer.")]
    toks = r.fields.get("tokenizer.ggml.tokens")
    if toks is None:
        raise SystemExit(f"{path} has no tokenizer.ggml.tokens")
    n = len(toks.data)
    if n != vocab:
        raise SystemExit(f"--vocab {vocab} differs from the {n} tokens of {path}")
    return fields


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--type", dest="types", action="append", choices=["Q4_0", "Q4_K_M", "Q8_0", "Q4_1", "Q5_0",
                                                                      "Q5_1", "Q4_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS",
                                                                      "MXFP4", "F16"],
                   help="repeatable; default Q4_0, Q4_K_M and Q8_0 (MXFP4: every layer matrix MXFP4, the "
                        "embedding Q8_0, file type MXFP4_MOE as llama.cpp names it)")
    p.add_argument("--out-dir", default=os.path.expanduser("~/.cache/edgellm/synthetic"))
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="a real model's shape and architecture (the options below given explicitly override it)")
    p.add_argument("--arch", choices=["llama", "phi3", "gemma2", "gemma3", "qwen3moe", "gpt-oss"], default="llama")
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--ffn", type=int, default=8192)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=32)
    p.add_argument("--head-dim", type=int, default=0, help="0: dim / heads")
    p.add_argument("--experts", type=int, default=0, help="mixture of experts: expert count (0: dense)")
    p.add_argument("--experts-used", type=int, default=0)
    p.add_argument("--expert-ffn", type=int, default=0)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--rope-base", type=float, default=130000.0)
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--untied", dest="tied", action="store_false", help="write output.weight")
    p.add_argument("--tokenizer-from", default=None,
                   help="GGUF whose tokenizer.* keys are copied (default: the cached SmolLM2-135M)")
    p.add_argument("--name", default="smollm2-1.7b-shape")
    p.add_argument("--seed", type=int, default=0)
    if "--preset" in sys.argv[1:]:  # its values become the defaults: --layers 4 --preset phi3.5-mini is a 4-layer Phi
        preset = PRESETS[sys.argv[sys.argv.index("--preset") + 1]]
        p.set_defaults(**{k: v for k, v in preset.items() if k != "tokenizer"})
    a = p.parse_args()
    tokenizer_model = PRESETS[a.preset].get("tokenizer", "smollm2") if a.preset else "smollm2"
    if a.experts and not (0 < a.experts_used <= a.experts and a.expert_ffn > 0):
        raise SystemExit("--experts needs --experts-used (1..experts) and --expert-ffn")
    if a.tokenizer_from is None and a.arch in ("phi3", "gemma2", "gemma3", "gpt-oss"):
        fields = placeholder_spm_vocab(a.vocab)
    else:
        if a.tokenizer_from is None:
            use_edgellm()
            from edgellm.models import model_path
            a.tokenizer_from = str(model_path(tokenizer_model))
        fields = tokenizer_fields_from(a.tokenizer_from, a.vocab)
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for ftype in a.types or ["Q4_0", "Q4_K_M", "Q8_0"]:
        out = out_dir / f"{a.name}-{ftype}.gguf"
        tmp = out.with_suffix(".gguf.part")
        t0 = time.perf_counter()
        types = write_model(a, ftype, tmp, fields)
        os.replace(tmp, out)
        mix = {}
        for t in types.values():
            mix[t] = mix.get(t, 0) + 1
        print(f"{out}: {out.stat().st_size / 2**30:.2f} GiB, {mix}, {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
