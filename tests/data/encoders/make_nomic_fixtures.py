"""Records the nomic-bert references of tests/test_encoders_nomic.py (issue 41: nomic-embed-text
v1 / v1.5 shapes), with the shared reference venv (torch, transformers; not edgellm requirements):

    /work/venv-ref/bin/python tests/data/encoders/make_nomic_fixtures.py

The reference model is transformers' own NomicBertModel (transformers >= 5 has the class: rotary
positions with rotate-half, SwiGLU MLP down(silu(gate x) * up x), post-LayerNorm layers, token
types, no biases but the norms'), a tiny random-weight one. It is saved the way the hub's
nomic-embed-text checkpoints are laid out (nomic's remote-code config keys and tensor names:
n_embd, n_positions 8192 / max_trained_positions 2048, rotary_emb_base, encoder.layers.N.attn.Wqkv,
mlp.fc11 (up) / fc12 (gate) / fc2, norm1 / norm2, emb_ln; transformers' conversion_mapping for
"nomic_bert" names the same correspondence), which is what llama.cpp's convert_hf_to_gguf.py reads.

Writes, beside this script:
  tiny-nomic/               the checkpoint (hub layout), the tiny WordPiece tokenizer of tiny-reranker/,
                            a sentence-transformers mean Pooling module
  tiny-nomic.llamacpp.gguf  llama.cpp's conversion of it (--outtype f32), kept with git add -f
  nomic_embeddings.npz      mean-pooled last hidden states of TEXTS from transformers' NomicBertModel
Recorded with torch 2.x CPU, transformers 5.25.0."""
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_cpp_convert import llama_cpp_convert  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = ["what is a panda", "it is a bear", "the giant panda is a bear species endemic to china.",
         "pandas eat bamboo", "the weather is nice today", "hi", "x",
         " ".join(["the panda and the bear are in china with bamboo"] * 12)]


def main():
    import torch
    from safetensors.torch import save_file
    from transformers import NomicBertConfig, NomicBertModel, PreTrainedTokenizerFast

    out = os.path.join(HERE, "tiny-nomic")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "1_Pooling"))
    src_tok = os.path.join(HERE, "tiny-reranker")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src_tok, f), out)
    tok = PreTrainedTokenizerFast.from_pretrained(out)
    n_vocab = len(tok)

    torch.manual_seed(47)
    cfg = NomicBertConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=64, max_position_embeddings=2048, type_vocab_size=2, layer_norm_eps=1e-12,
                          hidden_act="silu", initializer_range=0.3, pad_token_id=0,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
    model = NomicBertModel(cfg).eval()
    with torch.no_grad():  # norms away from their 1 / 0 init, so every one is tested
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layernorm" in name:
                p.add_(torch.randn_like(p) * 0.2)

    emb = []
    with torch.no_grad():
        for t in TEXTS:
            enc = tok(t, return_tensors="pt")
            h = model(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"]).last_hidden_state[0]
            emb.append(h.mean(0).numpy())
    n_tok = [len(tok(t)["input_ids"]) for t in TEXTS]
    np.savez(os.path.join(HERE, "nomic_embeddings.npz"), texts=np.array(TEXTS), embeddings=np.array(emb, np.float32),
             n_tokens=np.array(n_tok))

    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    hub = {"embeddings.word_embeddings.weight": sd["embeddings.word_embeddings.weight"],
           "embeddings.token_type_embeddings.weight": sd["embeddings.token_type_embeddings.weight"],
           "emb_ln.weight": sd["embeddings.LayerNorm.weight"], "emb_ln.bias": sd["embeddings.LayerNorm.bias"]}
    for i in range(cfg.num_hidden_layers):
        p, q = f"layers.{i}.", f"encoder.layers.{i}."
        hub[q + "attn.Wqkv.weight"] = torch.cat([sd[p + f"self_attn.{x}_proj.weight"] for x in "qkv"], 0)
        hub[q + "attn.out_proj.weight"] = sd[p + "self_attn.o_proj.weight"]
        hub[q + "mlp.fc11.weight"] = sd[p + "mlp.up_proj.weight"]
        hub[q + "mlp.fc12.weight"] = sd[p + "mlp.gate_proj.weight"]
        hub[q + "mlp.fc2.weight"] = sd[p + "mlp.down_proj.weight"]
        for a, b in (("norm1", "post_attention_layernorm"), ("norm2", "post_mlp_layernorm")):
            hub[q + a + ".weight"], hub[q + a + ".bias"] = sd[p + b + ".weight"], sd[p + b + ".bias"]
    save_file({k: v.contiguous() for k, v in hub.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"architectures": ["NomicBertModel"], "model_type": "nomic_bert", "vocab_size": n_vocab,
                   "n_embd": 32, "n_head": 4, "n_layer": 2, "n_inner": 64, "n_positions": 8192,
                   "max_trained_positions": 2048, "rotary_emb_base": 1000, "rotary_emb_fraction": 1.0,
                   "rotary_emb_interleaved": False, "rotary_emb_scale_base": None, "activation_function": "swiglu",
                   "qkv_proj_bias": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False, "prenorm": False,
                   "causal": False, "layer_norm_epsilon": 1e-12, "type_vocab_size": 2, "pad_token_id": 0,
                   # transformers' NomicBertConfig names (AutoConfig, which llama.cpp's converter loads,
                   # reads these and keeps the others)
                   "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
                   "max_position_embeddings": 2048, "layer_norm_eps": 1e-12, "hidden_act": "silu",
                   "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0}},
                  f, indent=1)
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}, f)
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}],
                  f, indent=1)
    llama_cpp_convert(out, out + ".llamacpp.gguf", pre="default")


if __name__ == "__main__":
    main()
