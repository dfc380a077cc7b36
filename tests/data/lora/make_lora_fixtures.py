"""Records the LoRA ground truth for tests/test_lora.py: PEFT adapters (init_lora_weights=False,
then every lora_A / lora_B drawn again from a seeded normal, so each adapter moves the logits
well beyond the tolerance) on tests/hf_checkpoints.py's tiny random bases, saved as PEFT folders
(tests/data/lora/<name>/adapter_config.json + adapter_model.safetensors); the reference logits of
hc.PROMPT from the merged model (merge_and_unload), the base's, and the merged model's greedy
continuation (tests/data/lora/<name>.npz); and llama.cpp's convert_lora_to_gguf.py output for each
folder (F32: tests/data/lora/<name>.llamacpp.gguf). Needs torch, transformers, peft and llama.cpp's
converter ($LLAMA_CPP, default /work/peers/llama.cpp); run from the repository root:
    PYTHONPATH=tests /work/venv-ref/bin/python tests/data/lora/make_lora_fixtures.py
Recorded with torch 2.14.1 (CPU), transformers 5.25.0, peft 0.21.2."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

import hf_checkpoints as hc

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_CPP = os.environ.get("LLAMA_CPP", "/work/peers/llama.cpp")
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# name: (base arch, rank, alpha, target modules, seed)
ADAPTERS = {
    "llama_r4_qv": ("llama", 4, 8, ["q_proj", "v_proj"], 1),
    "llama_r16_all": ("llama", 16, 32, ALL, 2),
    "llama_r64_mlp_o": ("llama", 64, 16, ["o_proj", "gate_proj", "up_proj", "down_proj"], 3),
    "llama_r8_qk": ("llama", 8, 0.5, ["q_proj", "k_proj"], 4),
    "qwen2_r8_all": ("qwen2", 8, 16, ALL, 5),
    "phi3_r16_fused": ("phi3", 16, 32, ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"], 6),
}


def base_model(d):
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").float()
    model.eval()
    return model


def logits_and_greedy(model, ids):
    with torch.no_grad():
        logits = model(ids).logits[0].numpy().astype(np.float32)
        out = model.generate(ids, max_new_tokens=hc.N_GREEDY, do_sample=False, eos_token_id=None, pad_token_id=0)
    return logits, out[0, ids.shape[1]:].numpy().astype(np.int32)


def main():
    names = sys.argv[1:] or list(ADAPTERS)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            arch, r, alpha, targets, seed = ADAPTERS[name]
            base_dir = os.path.join(tmp, arch)
            if not os.path.isdir(base_dir):
                hc.write_checkpoint(base_dir, arch)
            ids = torch.tensor([hc.PROMPT])
            base_logits, _ = logits_and_greedy(base_model(base_dir), ids)
            cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, init_lora_weights=False,
                             lora_dropout=0.0, bias="none")
            model = get_peft_model(base_model(base_dir), cfg)
            g = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for pname, p in model.named_parameters():
                    if "lora_A" in pname or "lora_B" in pname:
                        p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            model.eval()
            out_dir = os.path.join(HERE, name)
            model.save_pretrained(out_dir)
            # the folder names its base by the fixture, not by this run's temporary directory
            cfg_path = os.path.join(out_dir, "adapter_config.json")
            c = json.load(open(cfg_path))
            c["base_model_name_or_path"] = f"tests/hf_checkpoints.py:{arch}"
            json.dump(c, open(cfg_path, "w"), indent=2, sort_keys=True)
            with torch.no_grad():
                unmerged = model(ids).logits[0].numpy()
            merged = model.merge_and_unload()
            logits, greedy = logits_and_greedy(merged, ids)
            assert np.abs(unmerged - logits).max() < 1e-4, name
            np.savez_compressed(os.path.join(HERE, f"{name}.npz"), logits=logits, base_logits=base_logits,
                                greedy=greedy)
            gguf_out = os.path.join(HERE, f"{name}.llamacpp.gguf")
            subprocess.run([sys.executable, os.path.join(LLAMA_CPP, "convert_lora_to_gguf.py"), "--base", base_dir,
                            "--outtype", "f32", "--outfile", gguf_out, out_dir], check=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(LLAMA_CPP, "gguf-py")), capture_output=True)
            print(name, "max |adapter - base| =", float(np.abs(logits - base_logits).max()), greedy.tolist())


if __name__ == "__main__":
    main()
