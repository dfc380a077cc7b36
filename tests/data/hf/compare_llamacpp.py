"""Converts tests/hf_checkpoints.py's tiny checkpoints with llama.cpp's convert_hf_to_gguf.py
(needs torch and transformers; $LLAMA_CPP, default /opt/peer/llama.cpp) and with edgellm's converter, both to
F16, and records what differs into tests/data/hf/llamacpp_comparison.json: tensor set, shapes,
types, bytes of every tensor, and the metadata keys the engine reads. llama.cpp identifies a
BPE pre-tokenizer by hashing its output, so these checkpoints carry the real SmolLM2 vocabulary (qwen2: Qwen2.5-Coder's)
(rebuilt as tokenizer.json from the cached GGUF, as tests/test_convert_tokenizer.py does).
Run from the repository root: PYTHONPATH=python:tests python tests/data/hf/compare_llamacpp.py"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import hf_checkpoints as hc

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_CPP = os.environ.get("LLAMA_CPP", "/opt/peer/llama.cpp")
# the BPE checkpoints: llama.cpp reads a SentencePiece model's settings with protobuf, not installed here
ARCHS = ("llama", "llama3", "qwen2", "qwen3", "qwen3moe", "olmoe", "qwen2moe", "mixtral", "gptoss")
IGNORED_KEYS = {"general.name", "general.file_type", "general.quantization_version", "general.alignment"}


def smollm_checkpoint(d, arch):
    import gguf  # noqa: F401
    from edgellm import _core
    from edgellm.models import model_path
    from test_convert_tokenizer import hf_tokenizer

    hc.write_checkpoint(d, arch)
    # transformers 5 rebuilds a Qwen2 tokenizer's pipeline itself: a qwen2 checkpoint gets Qwen's vocabulary
    model, pre = ("qwen2.5-coder-0.5b", "qwen2") if arch in ("qwen2", "qwen2moe") else ("smollm2", "smollm")
    src = _core.Tokenizer.from_gguf(str(model_path(model)))
    hf_tokenizer(src, pre).save(os.path.join(d, "tokenizer.json"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    n = len(src.tokens)
    cfg.update(vocab_size=n, bos_token_id=1, eos_token_id=2)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
               "add_bos_token": False}, open(os.path.join(d, "tokenizer_config.json"), "w"))
    from safetensors.numpy import save_file
    rng = np.random.default_rng(1)
    w = hc.weights(arch)
    w["model.embed_tokens.weight"] = (rng.standard_normal((n, cfg["hidden_size"])) * 0.5).astype(np.float32)
    if "lm_head.weight" in w:
        w["lm_head.weight"] = (rng.standard_normal((n, cfg["hidden_size"])) * 0.3).astype(np.float32)
    for f in os.listdir(d):
        if f.endswith(".safetensors"):
            os.unlink(os.path.join(d, f))
    save_file(w, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def read(path):
    import gguf

    r = gguf.GGUFReader(path)
    kv = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k in IGNORED_KEYS:
            continue
        v = f.contents()
        kv[k] = v if not isinstance(v, float) else float(np.float32(v))
    tensors = {t.name: (t.tensor_type.name, [int(x) for x in t.shape], np.asarray(t.data).tobytes()) for t in r.tensors}
    return kv, tensors


def main():
    from edgellm.convert import convert

    report = {}
    for arch in sys.argv[1:] or ARCHS:
        with tempfile.TemporaryDirectory() as d:
            ck = os.path.join(d, "ck")
            smollm_checkpoint(ck, arch)
            theirs, ours = os.path.join(d, "theirs.gguf"), os.path.join(d, "ours.gguf")
            env = dict(os.environ, PYTHONPATH=os.path.join(LLAMA_CPP, "gguf-py"))
            r = subprocess.run([sys.executable, os.path.join(LLAMA_CPP, "convert_hf_to_gguf.py"), ck,
                                "--outfile", theirs, "--outtype", "f16"], capture_output=True, text=True, env=env)
            if r.returncode != 0:
                report[arch] = {"llama.cpp failed": r.stderr[-2000:]}
                continue
            if os.environ.get("KEEP_THEIRS"):  # a copy of llama.cpp's file, to look at
                import shutil
                shutil.copy(theirs, os.path.join(os.environ["KEEP_THEIRS"], f"{arch}.gguf"))
            convert(ck, ours, "F16")
            kt, tt = read(theirs)
            ko, to = read(ours)
            entry = {
                "tensors_only_llamacpp": sorted(set(tt) - set(to)),
                "tensors_only_edgellm": sorted(set(to) - set(tt)),
                "type_or_shape_differs": sorted(n for n in set(tt) & set(to) if tt[n][:2] != to[n][:2]),
                "bytes_differ": sorted(n for n in set(tt) & set(to) if tt[n][2] != to[n][2]),
                "max_rel_diff_f32": {n: float(np.max(np.abs(np.frombuffer(tt[n][2], np.float32) -
                                                        np.frombuffer(to[n][2], np.float32)) /
                                                 np.abs(np.frombuffer(tt[n][2], np.float32))))
                                     for n in set(tt) & set(to) if tt[n][2] != to[n][2] and tt[n][0] == "F32"},
                "tensors_identical": sum(1 for n in set(tt) & set(to) if tt[n] == to[n]),
                "keys_only_llamacpp": sorted(set(kt) - set(ko)),
                "keys_only_edgellm": sorted(set(ko) - set(kt)),
                "values_differ": {k: [repr(kt[k])[:80], repr(ko[k])[:80]] for k in sorted(set(kt) & set(ko))
                                  if kt[k] != ko[k]},
                # what CI checks without llama.cpp (test_convert.py): llama.cpp's tensors and keys
                "llamacpp_tensors": {n: [tt[n][0], tt[n][1]] for n in sorted(tt)},
                "llamacpp_keys": {k: (v if not isinstance(v, list) else f"[{len(v)} items]")
                                  for k, v in sorted(kt.items()) if not k.startswith("tokenizer.")},
            }
            report[arch] = entry
            print(arch, json.dumps({k: v for k, v in entry.items() if not k.startswith("llamacpp_")}, indent=1)[:1500])
    out = os.path.join(HERE, "llamacpp_comparison.json")
    old = json.load(open(out)) if os.path.exists(out) else {}
    old.update(report)
    with open(out, "w") as f:
        json.dump(old, f, indent=1)


if __name__ == "__main__":
    main()
