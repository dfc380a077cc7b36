"""`edgellm convert` (edgellm/convert/): tiny Hugging Face checkpoints (tests/hf_checkpoints.py,
rebuilt from a seed without torch) converted to GGUF and run by the engine, against the logits
and greedy tokens transformers gave on the same checkpoints (tests/data/hf/<arch>.npz, recorded
by tests/data/hf/make_hf_fixtures.py); plus the plan, the tokenizer keys and the typed errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import hf_checkpoints as hc

core = pytest.importorskip("edgellm._core")
from edgellm.convert import ConvertError, UnsupportedArchitectureError, convert, plan  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "hf")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    base = tmp_path_factory.mktemp("hf")
    cache = {}

    def make(arch):
        if arch not in cache:
            cache[arch] = hc.write_checkpoint(base / arch, arch, shards=2 if arch == "llama" else 1)
        return cache[arch]

    return make


def engine_logits(path, ids):
    # n_ctx as the runner's: the model picks LongRoPE's long or short factors by it
    model = core.Model(str(path), n_threads=2, n_ctx=64)
    runner = core.ModelRunner(model, n_ctx=64, kv_type="F32")
    return np.asarray(runner.eval(ids, all_logits=True))


def engine_greedy(path, ids, n):
    model = core.Model(str(path), n_threads=2, n_ctx=64)
    runner = core.ModelRunner(model, n_ctx=64, kv_type="F32")
    out = []
    logits = np.asarray(runner.eval(ids, all_logits=False)).reshape(-1)
    for _ in range(n):
        t = int(np.argmax(logits))
        out.append(t)
        logits = np.asarray(runner.eval([t], all_logits=False)).reshape(-1)
    return out


@pytest.mark.parametrize("arch", hc.ARCHS)
def test_f32_conversion_matches_transformers(ckpt, arch, tmp_path):
    ref = np.load(os.path.join(DATA, f"{arch}.npz"))
    out = tmp_path / "m.gguf"
    convert(ckpt(arch), str(out), "F32")
    got = engine_logits(out, hc.PROMPT)
    assert got.shape == ref["logits"].shape
    np.testing.assert_allclose(got, ref["logits"], rtol=0, atol=1e-3)
    assert engine_greedy(out, hc.PROMPT, hc.N_GREEDY) == ref["greedy"].tolist()


@pytest.mark.parametrize("arch", hc.ARCHS)
def test_f16_conversion_keeps_greedy_tokens(ckpt, arch, tmp_path):
    # F16 weights dot against F16 activations (docs/formats.md §2.4): close, not 1e-3.
    ref = np.load(os.path.join(DATA, f"{arch}.npz"))
    out = tmp_path / "m.gguf"
    convert(ckpt(arch), str(out), "F16")
    got = engine_logits(out, hc.PROMPT)
    np.testing.assert_allclose(got, ref["logits"], rtol=0, atol=2e-2)
    assert engine_greedy(out, hc.PROMPT, hc.N_GREEDY) == ref["greedy"].tolist()


def test_quantized_output_equals_edgellm_quantize_of_the_f32_conversion(ckpt, tmp_path):
    import gguf

    from edgellm.bench.quantize import quantize_file

    convert(ckpt("llama"), str(tmp_path / "f32.gguf"), "F32")
    quantize_file(str(tmp_path / "f32.gguf"), str(tmp_path / "requant.gguf"), "Q4_K_M")
    convert(ckpt("llama"), str(tmp_path / "direct.gguf"), "Q4_K_M")
    a = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "direct.gguf")).tensors}
    b = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "requant.gguf")).tensors}
    assert list(a) == list(b)
    for n in a:
        assert a[n].tensor_type == b[n].tensor_type, n
        assert np.array_equal(np.asarray(a[n].data), np.asarray(b[n].data)), n
    assert a["blk.0.attn_norm.weight"].tensor_type.name == "F32"
    # rows of 64 are no multiple of 256: the K-quants fall back (Q4_K -> Q5_0, Q6_K -> Q8_0)
    assert a["blk.0.attn_q.weight"].tensor_type.name == "Q5_0"
    assert engine_logits(tmp_path / "direct.gguf", hc.PROMPT).shape == (len(hc.PROMPT), 272)


def test_bf16_source_equals_its_f32_widening(tmp_path):
    # BF16 shards (numpy has no bfloat16: written by hand) convert to the float32 of their bits.
    import struct

    d = hc.write_checkpoint(tmp_path / "bf", "qwen3")
    w = hc.weights("qwen3")
    header, blobs, off = {}, [], 0
    for k in sorted(w):
        bits = (w[k].view(np.uint32) >> 16).astype(np.uint16)
        header[k] = {"dtype": "BF16", "shape": list(w[k].shape), "data_offsets": [off, off + bits.nbytes]}
        blobs.append(bits.tobytes())
        off += bits.nbytes
    h = json.dumps(header).encode()
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    from edgellm.convert.checkpoint import Checkpoint

    ck = Checkpoint(d)
    x = ck.load_f32("model.layers.1.mlp.up_proj.weight")
    want = (w["model.layers.1.mlp.up_proj.weight"].view(np.uint32) & 0xFFFF0000).view(np.float32)
    assert np.array_equal(x, want)
    convert(d, str(tmp_path / "bf.gguf"), "BF16")
    assert engine_logits(tmp_path / "bf.gguf", hc.PROMPT).shape == (len(hc.PROMPT), 272)


def test_llama_metadata_and_permuted_rows(ckpt, tmp_path):
    import gguf

    out = tmp_path / "m.gguf"
    convert(ckpt("llama"), str(out), "F32")
    r = gguf.GGUFReader(str(out))
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    assert f["general.architecture"] == "llama"
    assert f["llama.block_count"] == 2 and f["llama.attention.head_count_kv"] == 2
    assert f["llama.rope.dimension_count"] == 16 and f["tokenizer.ggml.pre"] == "gpt2"
    assert f["tokenizer.ggml.bos_token_id"] == 263 and f["tokenizer.ggml.eos_token_id"] == 264
    assert f["tokenizer.ggml.add_bos_token"] is False and "messages" in f["tokenizer.chat_template"]
    t = {x.name: x for x in r.tensors}
    assert "output.weight" in t and len(t) == 2 + 1 + 2 * 9
    q = hc.weights("llama")["model.layers.0.self_attn.q_proj.weight"]
    got = np.asarray(t["blk.0.attn_q.weight"].data).reshape(q.shape)
    # head 0: rows 0, 8, 1, 9, ... of the HF matrix (head_dim 16, halves of 8)
    assert np.array_equal(got[0], q[0]) and np.array_equal(got[1], q[8]) and np.array_equal(got[2], q[1])


def test_cli_dry_run_prints_the_plan_and_writes_nothing(ckpt, tmp_path):
    out = tmp_path / "x.gguf"
    r = subprocess.run([sys.executable, "-m", "edgellm", "convert", ckpt("qwen2"), str(out), "--type", "q4_0",
                        "--dry-run"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Qwen2ForCausalLM -> qwen2" in r.stdout
    assert "blk.1.attn_q.bias" in r.stdout and "Q4_0" in r.stdout and "total" in r.stdout
    assert not out.exists()


def test_cli_converts_with_progress(ckpt, tmp_path):
    out = tmp_path / "x.gguf"
    r = subprocess.run([sys.executable, "-m", "edgellm", "convert", ckpt("qwen3"), str(out), "--type", "f16"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "100%" in r.stderr and "wrote" in r.stdout
    assert core.Model(str(out), n_threads=1) is not None


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return str(dst)


def test_unsupported_architecture_names_itself_and_the_supported(ckpt, tmp_path):
    d = _copy(ckpt("qwen2"), tmp_path / "c")
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["architectures"] = ["FalconForCausalLM"]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    with pytest.raises(UnsupportedArchitectureError, match="FalconForCausalLM.*supported: .*LlamaForCausalLM"):
        plan(d)
    r = subprocess.run([sys.executable, "-m", "edgellm", "convert", d, str(tmp_path / "o.gguf")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "FalconForCausalLM" in r.stderr


def test_missing_shard_names_the_file(ckpt, tmp_path):
    d = _copy(ckpt("llama"), tmp_path / "c")
    os.unlink(os.path.join(d, "model-00002-of-00002.safetensors"))
    with pytest.raises(ConvertError, match=r"model-00002-of-00002\.safetensors: shard not found"):
        plan(d)


def test_missing_tensor_and_shape_mismatch_name_file_and_tensor(ckpt, tmp_path):
    from safetensors.numpy import save_file

    d = _copy(ckpt("qwen3"), tmp_path / "c")
    w = hc.weights("qwen3")
    del w["model.layers.1.mlp.down_proj.weight"]
    save_file(w, os.path.join(d, "model.safetensors"))
    with pytest.raises(ConvertError, match=r"tensor model\.layers\.1\.mlp\.down_proj\.weight not found"):
        plan(d)
    w = hc.weights("qwen3")
    w["model.layers.0.self_attn.k_proj.weight"] = w["model.layers.0.self_attn.k_proj.weight"][:32]
    save_file(w, os.path.join(d, "model.safetensors"))
    with pytest.raises(ConvertError, match=r"model\.safetensors: tensor model\.layers\.0\.self_attn\.k_proj\.weight "
                                           r"has shape \[32, 64\], config\.json implies \[64, 64\]"):
        plan(d)


@pytest.mark.slow
def test_equals_llamacpps_converter_where_it_runs(tmp_path):
    # tests/data/hf/compare_llamacpp.py (needs torch, transformers and llama.cpp's converter;
    # its last output is tests/data/hf/llamacpp_comparison.json): same tensors, shapes, types,
    # bit-identical F16 bytes, equal values of every key both write.
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    llama_cpp = os.environ.get("LLAMA_CPP", "/opt/peer/llama.cpp")
    if not os.path.exists(os.path.join(llama_cpp, "convert_hf_to_gguf.py")):
        pytest.skip("llama.cpp's convert_hf_to_gguf.py not found ($LLAMA_CPP)")
    import shutil

    from conftest import require_model

    require_model("smollm2"), require_model("qwen2.5-coder-0.5b")
    script = tmp_path / "compare_llamacpp.py"
    shutil.copy(os.path.join(DATA, "compare_llamacpp.py"), script)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.load(open(tmp_path / "llamacpp_comparison.json"))
    for arch in ("llama", "llama3", "qwen2", "qwen3"):
        e = report[arch]
        assert e.get("tensors_identical"), (arch, e)
        # rope_freqs.weight (llama3): llama.cpp's torch pow and numpy's differ in the last bit
        differ = [n for n in e["bytes_differ"] if not (n == "rope_freqs.weight" and e["max_rel_diff_f32"][n] < 1e-6)]
        assert not (e["tensors_only_llamacpp"] or e["tensors_only_edgellm"] or e["type_or_shape_differs"]
                    or differ or e["values_differ"]), (arch, e)
        assert set(e["keys_only_llamacpp"]) <= {"general.size_label", "general.type"}, (arch, e)


@pytest.mark.parametrize("out_type", ["F16", "Q8_0"])
def test_row_chunks_write_the_same_file(ckpt, tmp_path, monkeypatch, out_type):
    import edgellm.convert.writer as writer

    convert(ckpt("qwen2"), str(tmp_path / "whole.gguf"), out_type)
    monkeypatch.setattr(writer, "_CHUNK_ELEMS", 200)  # 3 rows of 64 a chunk
    convert(ckpt("qwen2"), str(tmp_path / "chunked.gguf"), out_type)
    assert (tmp_path / "whole.gguf").read_bytes() == (tmp_path / "chunked.gguf").read_bytes()


def test_transformers5_rope_parameters_spelling(ckpt, tmp_path):
    d = _copy(ckpt("qwen3"), tmp_path / "c")
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta")}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    assert dict(plan(d).metadata)["qwen3.rope.freq_base"] == 1000000.0
    cfg["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    with pytest.raises(UnsupportedArchitectureError, match="rope_scaling type 'yarn'"):
        plan(d)
