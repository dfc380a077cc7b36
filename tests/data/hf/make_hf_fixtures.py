"""Records transformers' reference logits for tests/hf_checkpoints.py's tiny checkpoints into
tests/data/hf/<arch>.npz (logits of PROMPT, float32; greedy continuation). Needs torch and
transformers (not requirements of edgellm); run from the repository root:
    PYTHONPATH=tests python tests/data/hf/make_hf_fixtures.py [ARCH ...]
(no ARCH: every one of hf_checkpoints.ARCHS; gptoss, not among them, also needs accelerate for
transformers' MXFP4 dequantization). Recorded with torch 2.13.0 (CPU) and transformers
5.24 for the MoE and LongRoPE checkpoints, earlier versions for the others."""
import os
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

import hf_checkpoints as hc

HERE = os.path.dirname(os.path.abspath(__file__))


def train_spm(path=os.path.join(HERE, "spm.model")):
    """tests/data/hf/spm.model (committed; not rerun by main): Gemma-like SentencePiece settings."""
    import sentencepiece as spm

    text = os.path.join(tempfile.mkdtemp(), "spm.txt")
    with open(text, "w") as f:
        f.write("\n".join(f"the quick brown fox {i} jumps over the lazy dog. "
                          f"Hello world, ünïcödé {i * 7} tokens here." for i in range(300)))
    spm.SentencePieceTrainer.train(input=text, model_prefix=path[:-len(".model")], vocab_size=400, model_type="bpe",
                                   byte_fallback=True, num_threads=1, add_dummy_prefix=False,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   split_digits=True, pad_id=0, eos_id=1, bos_id=2, unk_id=3, minloglevel=2)


def check_weights(arch, sd):
    """Every numpy weight is what transformers holds; transformers 5 keeps a MoE layer's experts
    stacked (mlp.experts.gate_up_proj [E, 2 ff, d], gate rows first; mlp.experts.down_proj)."""
    import re

    w = hc.weights(arch)
    expert = re.compile(r"^(model\.layers\.\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight$")
    kind = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
    for k, v in w.items():
        m = expert.match(k)
        if k.replace("block_sparse_moe.", "mlp.") in sd:  # transformers 5 names Mixtral's MoE block mlp
            got = sd[k.replace("block_sparse_moe.", "mlp.")].numpy()
        elif m:
            layer, e, name = m.group(1), int(m.group(2)), kind.get(m.group(3), m.group(3))
            if name == "down_proj":
                got = sd[f"{layer}.mlp.experts.down_proj"][e].numpy()
            else:
                fused = sd[f"{layer}.mlp.experts.gate_up_proj"][e].numpy()
                n = fused.shape[0] // 2
                got = fused[:n] if name == "gate_proj" else fused[n:]
        else:
            sys.exit(f"{arch}: transformers has no tensor {k}")
        if not np.array_equal(got, v):
            sys.exit(f"{arch}: {k} differs from the numpy weights")


def main():
    for arch in sys.argv[1:] or hc.ARCHS:
        with tempfile.TemporaryDirectory() as d:
            hc.write_checkpoint(d, arch, shards=2 if arch == "llama" else 1)
            extra = {}
            if arch == "gptoss":  # its MXFP4 experts dequantized (exactly: 4-bit codes times powers of 2)
                from transformers import Mxfp4Config
                extra["quantization_config"] = Mxfp4Config(dequantize=True)
            model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, output_loading_info=True,
                                                               attn_implementation="eager", **extra)
            model = model.float()
            bad = {k: v for k, v in info.items() if v and k != "mismatched_keys" or (k == "mismatched_keys" and v)}
            if bad:
                sys.exit(f"{arch}: transformers did not load the checkpoint as written: {bad}")
            if arch != "gptoss":  # (test_convert checks gpt-oss's MXFP4 values itself)
                check_weights(arch, model.state_dict())
            model.eval()
            ids = torch.tensor([hc.PROMPT])
            with torch.no_grad():
                logits = model(ids).logits[0].numpy().astype(np.float32)
                out = model.generate(ids, max_new_tokens=hc.N_GREEDY, do_sample=False, eos_token_id=None,
                                     pad_token_id=0)
            greedy = out[0, len(hc.PROMPT):].numpy().astype(np.int32)
            np.savez_compressed(os.path.join(HERE, f"{arch}.npz"), logits=logits, greedy=greedy)
            print(arch, logits.shape, greedy.tolist())


if __name__ == "__main__":
    main()
