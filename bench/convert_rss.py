"""Peak RSS of `edgellm convert` on a 1B-shaped checkpoint (Llama-3.2-1B's shapes: hidden 2048,
16 layers, FFN 8192, 32 heads / 8 KV heads, vocabulary 128256, tied embeddings), random BF16
weights written with numpy (safetensors layout by hand: numpy has no bfloat16), converted to
F16 in a child process whose ru_maxrss is reported against the largest tensor. With --moe, a
mixture-of-experts checkpoint with Qwen3-30B-A3B's layer shapes (hidden 2048, 128 experts of
width 768, 32 / 4 heads of 128; 2 layers, vocabulary 32000): its largest output tensor is one
stacked ffn_*_exps (128 per-expert matrices in the checkpoint).
    PYTHONPATH=python python bench/convert_rss.py [--moe] [WORKDIR]"""
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile

import numpy as np

SHAPE = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
             num_key_value_heads=8, vocab_size=128256, head_dim=64)


MOE_SHAPE = dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
                 num_experts_per_tok=8, num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=4,
                 head_dim=128, vocab_size=32000)


def moe_shapes():
    c = MOE_SHAPE
    h, eff, hd = c["hidden_size"], c["moe_intermediate_size"], c["head_dim"]
    shapes = {"model.embed_tokens.weight": (c["vocab_size"], h), "model.norm.weight": (h,),
              "lm_head.weight": (c["vocab_size"], h)}
    for il in range(c["num_hidden_layers"]):
        p = f"model.layers.{il}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (c["num_attention_heads"] * hd, h),
                       p + "self_attn.k_proj.weight": (c["num_key_value_heads"] * hd, h),
                       p + "self_attn.v_proj.weight": (c["num_key_value_heads"] * hd, h),
                       p + "self_attn.o_proj.weight": (h, c["num_attention_heads"] * hd),
                       p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                       p + "mlp.gate.weight": (c["num_experts"], h)})
        for e in range(c["num_experts"]):
            q = p + f"mlp.experts.{e}."
            shapes.update({q + "gate_proj.weight": (eff, h), q + "up_proj.weight": (eff, h),
                           q + "down_proj.weight": (h, eff)})
    cfg = dict(MOE_SHAPE, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", max_position_embeddings=40960,
               rms_norm_eps=1e-6, rope_theta=1000000.0, hidden_act="silu", tie_word_embeddings=False,
               norm_topk_prob=True)
    largest = c["num_experts"] * eff * h  # one stacked ffn_*_exps
    return shapes, cfg, largest


def write_checkpoint(d, moe=False):
    h, ff, nl, nkv, hd, nv = (SHAPE[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                  "num_key_value_heads", "head_dim", "vocab_size"))
    shapes = {"model.embed_tokens.weight": (nv, h), "model.norm.weight": (h,)}
    for il in range(0 if moe else nl):
        p = f"model.layers.{il}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (nkv * hd, h),
                       p + "self_attn.v_proj.weight": (nkv * hd, h), p + "self_attn.o_proj.weight": (h, h),
                       p + "mlp.gate_proj.weight": (ff, h), p + "mlp.up_proj.weight": (ff, h),
                       p + "mlp.down_proj.weight": (h, ff)})
    cfg = dict(SHAPE, architectures=["LlamaForCausalLM"], model_type="llama", max_position_embeddings=131072,
               rms_norm_eps=1e-5, rope_theta=500000.0, hidden_act="silu", tie_word_embeddings=True)
    largest = max(int(np.prod(s)) for s in shapes.values())
    if moe:
        shapes, cfg, largest = moe_shapes()
    header, off = {}, 0
    for k, s in shapes.items():
        n = int(np.prod(s)) * 2
        header[k] = {"dtype": "BF16", "shape": list(s), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header).encode()
    rng = np.random.default_rng(0)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for k, s in shapes.items():
            n = int(np.prod(s))
            for i in range(0, n, 1 << 24):  # bf16 of N(0, 0.02): the top halves of float32s
                x = (rng.standard_normal(min(1 << 24, n - i), dtype=np.float32) * 0.02).view(np.uint32)
                (x >> 16).astype(np.uint16).tofile(f)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import hf_checkpoints as hc
    tj = hc.tokenizer_json("gpt2")
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w"))
    return largest


CHILD = """
import resource, sys, time
from edgellm.convert import convert
t0 = time.time()
convert(sys.argv[1], sys.argv[2], "F16")
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.time() - t0)
"""


def main():
    args = [a for a in sys.argv[1:] if a != "--moe"]
    work = args[0] if args else tempfile.mkdtemp(prefix="convert-rss-")
    os.makedirs(work, exist_ok=True)
    ck = os.path.join(work, "ck")
    os.makedirs(ck, exist_ok=True)
    largest = write_checkpoint(ck, moe="--moe" in sys.argv[1:])
    base = subprocess.run([sys.executable, "-c", "import resource, edgellm.convert; "
                           "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                          capture_output=True, text=True, check=True)
    r = subprocess.run([sys.executable, "-c", CHILD, ck, os.path.join(work, "out.gguf")],
                       capture_output=True, text=True, check=True)
    peak_kib, secs = r.stdout.split()
    peak, baseline = int(peak_kib) * 1024, int(base.stdout) * 1024
    size = os.path.getsize(os.path.join(ck, "model.safetensors"))
    print(f"checkpoint {size / 2**30:.2f} GiB BF16; largest tensor {largest} elements = "
          f"{largest * 2 / 2**20:.0f} MiB BF16 + {largest * 2 / 2**20:.0f} MiB F16 output")
    print(f"peak RSS {peak / 2**20:.0f} MiB (imports alone: {baseline / 2**20:.0f} MiB); "
          f"bound 1.2 x (largest + output) = {1.2 * largest * 4 / 2**20:.0f} MiB; {float(secs):.0f} s")
    for f in ("out.gguf", os.path.join("ck", "model.safetensors")):
        os.unlink(os.path.join(work, f))


if __name__ == "__main__":
    main()
