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


def greedy_within(path, ids, want, tol):
    """Teacher-forced greedy check: at each step the engine's top token is the reference's, or the
    reference's token is within `tol` of the engine's top logit (a tie below the tolerance the
    logits are held to, where the argmax is rounding noise). Returns the mismatches as
    (step, engine top, reference token, logit gap)."""
    model = core.Model(str(path), n_threads=2, n_ctx=64)
    runner = core.ModelRunner(model, n_ctx=64, kv_type="F32")
    bad = []
    logits = np.asarray(runner.eval(ids, all_logits=False)).reshape(-1)
    for step, t in enumerate(want):
        top = int(np.argmax(logits))
        gap = float(logits[top] - logits[t])
        if top != t and gap > tol:
            bad.append((step, top, int(t), gap))
        logits = np.asarray(runner.eval([int(t)], all_logits=False)).reshape(-1)
    return bad


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
    # F16 weights dot against F16 activations (docs/formats.md §2.4): close, not 1e-3 (the
    # rounding grows with the activations' size: 0.5 % of the largest logit, at least 0.02).
    ref = np.load(os.path.join(DATA, f"{arch}.npz"))
    out = tmp_path / "m.gguf"
    convert(ckpt(arch), str(out), "F16")
    got = engine_logits(out, hc.PROMPT)
    tol = max(2e-2, 5e-3 * np.abs(ref["logits"]).max())
    np.testing.assert_allclose(got, ref["logits"], rtol=0, atol=tol)
    # Greedy tokens, teacher-forced; a step where the reference's token trails the engine's top
    # by less than that tolerance is a tie the F16 rounding may break either way (qwen3moe's
    # step 7: 177 vs 120, 0.0009 apart in the engine's logits, 0.0003 the other way after a
    # change in the attention's summation order).
    assert greedy_within(out, hc.PROMPT, ref["greedy"].tolist(), tol) == []


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
                       capture_output=True)  # bytes: text mode would turn \r into \n
    err, stdout = r.stderr.decode(), r.stdout.decode()
    assert r.returncode == 0, err
    assert "100%" in err and "wrote" in stdout
    # stderr is a pipe here, not a terminal: plain lines, no bar redrawn with \r (issue 43 item 10)
    assert "\r" not in err and err.count("converting:") <= 11, err
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
    for arch in ("llama", "llama3", "qwen2", "qwen3") + hc.MOE_ARCHS + hc.CONVERT_ONLY:
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
    with pytest.raises(ConvertError, match="has no 'original_max_position_embeddings'"):
        plan(d)
    cfg["rope_parameters"]["original_max_position_embeddings"] = 64
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    meta = dict(plan(d).metadata)
    assert (meta["qwen3.rope.scaling.type"], meta["qwen3.rope.scaling.factor"]) == ("yarn", 4.0)
    assert meta["qwen3.rope.scaling.original_context_length"] == 64


def _gguf(path):
    import gguf

    r = gguf.GGUFReader(str(path))
    kv = {k: v.contents() for k, v in r.fields.items() if not k.startswith("GGUF.")}
    return kv, {t.name: t for t in r.tensors}


@pytest.mark.parametrize("arch", hc.MOE_ARCHS)
def test_moe_metadata_and_stacked_experts(ckpt, arch, tmp_path):
    out = tmp_path / "m.gguf"
    convert(ckpt(arch), str(out), "F16")
    kv, t = _gguf(out)
    cfg = hc.config(arch)
    a = {"mixtral": "llama"}.get(arch, arch)
    n_exp = cfg.get("num_experts") or cfg["num_local_experts"]
    eff = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    assert kv["general.architecture"] == a
    assert kv[f"{a}.expert_count"] == n_exp and kv[f"{a}.expert_used_count"] == 2
    assert kv.get(f"{a}.expert_feed_forward_length") == (eff if arch.startswith("qwen") else None)
    assert kv.get(f"{a}.expert_shared_feed_forward_length") == (48 if arch == "qwen2moe" else None)
    assert kv.get(f"{a}.expert_weights_norm") == {"qwen3moe": True, "mixtral": None}.get(arch, False)
    w = hc.weights(arch)
    moe, names = ("block_sparse_moe", ("w1", "w3", "w2")) if arch == "mixtral" else ("mlp", ("gate_proj", "up_proj",
                                                                                            "down_proj"))
    for il in range(cfg["num_hidden_layers"]):
        for kind, hf in zip(("gate", "up", "down"), names):
            x = t[f"blk.{il}.ffn_{kind}_exps.weight"]
            want = np.stack([w[f"model.layers.{il}.{moe}.experts.{e}.{hf}.weight"] for e in range(n_exp)])
            assert x.tensor_type.name == "F16" and list(x.shape) == list(reversed(want.shape))
            assert np.array_equal(np.asarray(x.data).reshape(want.shape), want.astype(np.float16)), (il, kind)
            assert f"blk.{il}.ffn_{kind}.weight" not in t
        router = t[f"blk.{il}.ffn_gate_inp.weight"]
        assert router.tensor_type.name == "F32"  # as llama.cpp keeps it
        assert np.array_equal(np.asarray(router.data).reshape(n_exp, -1), w[f"model.layers.{il}.{moe}.gate.weight"])
    shexp = {n for n in t if "shexp" in n}
    if arch == "qwen2moe":
        assert shexp == {f"blk.{il}.ffn_{k}_shexp.weight" for il in range(2) for k in ("gate_inp", "gate", "up", "down")}
        assert t["blk.0.ffn_gate_inp_shexp.weight"].tensor_type.name == "F32"
        assert list(t["blk.0.ffn_gate_inp_shexp.weight"].shape) == [64, 1]
    else:
        assert not shexp


def test_conversions_equal_llamacpps_recorded_output(ckpt, tmp_path):
    # llama.cpp's tensors and keys on these architectures, recorded by compare_llamacpp.py (on the
    # same weights with SmolLM2's / Qwen's vocabulary, where its F16 bytes equalled ours; llama3's
    # rope_freqs in the last bit, see test_equals_llamacpps_converter_where_it_runs).
    report = json.load(open(os.path.join(DATA, "llamacpp_comparison.json")))
    assert set(hc.MOE_ARCHS + hc.CONVERT_ONLY) <= set(report)
    for arch, e in report.items():
        assert set(e["bytes_differ"]) <= {"rope_freqs.weight"}, arch
        assert e["tensors_identical"] + len(e["bytes_differ"]) == len(e["llamacpp_tensors"]), arch
        out = tmp_path / f"{arch}.gguf"
        convert(ckpt(arch), str(out), "F16")
        kv, t = _gguf(out)
        theirs = e["llamacpp_tensors"]
        assert sorted(t) == sorted(theirs), arch
        for n, (typ, shape) in theirs.items():
            ours = [int(x) for x in t[n].shape]
            if n in ("token_embd.weight", "output.weight"):  # the vocabulary differs
                ours, shape = ours[:1], shape[:1]
            assert [t[n].tensor_type.name, ours] == [typ, shape], (arch, n)
        for k, v in e["llamacpp_keys"].items():
            if k in ("general.name", "general.size_label", "general.type") or k.endswith(".vocab_size"):
                continue
            assert k in kv, (arch, k)
            assert (kv[k] == v or (isinstance(v, float) and abs(kv[k] - v) <= 1e-6 * abs(v))), (arch, k, kv[k], v)


def test_fused_experts_of_transformers5_write_the_same_file(ckpt, tmp_path):
    # [E, 2 ff, d] gate_up_proj (gate rows first) and [E, d, ff] down_proj, no .weight suffix
    from safetensors.numpy import save_file

    w = hc.weights("qwen3moe")
    fused = {k: v for k, v in w.items() if ".experts." not in k}
    for il in range(2):
        p = f"model.layers.{il}.mlp.experts"
        fused[f"{p}.gate_up_proj"] = np.stack([np.concatenate([w[f"{p}.{e}.gate_proj.weight"], w[f"{p}.{e}.up_proj.weight"]])
                                               for e in range(6)])
        fused[f"{p}.down_proj"] = np.stack([w[f"{p}.{e}.down_proj.weight"] for e in range(6)])
    d = _copy(ckpt("qwen3moe"), tmp_path / "fused" / "m")
    save_file(fused, os.path.join(d, "model.safetensors"))
    convert(d, str(tmp_path / "fused.gguf"), "F16")
    convert(_copy(ckpt("qwen3moe"), tmp_path / "split" / "m"), str(tmp_path / "split.gguf"), "F16")
    assert (tmp_path / "fused.gguf").read_bytes() == (tmp_path / "split.gguf").read_bytes()


def test_norm_topk_prob_reaches_the_engine(ckpt, tmp_path):
    # the reference renormalises (qwen3moe's norm_topk_prob true): without it the logits move
    ref = np.load(os.path.join(DATA, "qwen3moe.npz"))
    d = _copy(ckpt("qwen3moe"), tmp_path / "c")
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["norm_topk_prob"] = False
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    assert dict(plan(d).metadata)["qwen3moe.expert_weights_norm"] is False
    convert(d, str(tmp_path / "m.gguf"), "F32")
    assert np.abs(engine_logits(tmp_path / "m.gguf", hc.PROMPT) - ref["logits"]).max() > 0.05


def test_moe_errors_name_the_expert_tensor(ckpt, tmp_path):
    from safetensors.numpy import save_file

    d = _copy(ckpt("qwen2moe"), tmp_path / "c")
    w = hc.weights("qwen2moe")
    del w["model.layers.1.mlp.experts.3.up_proj.weight"]
    save_file(w, os.path.join(d, "model.safetensors"))
    with pytest.raises(ConvertError, match=r"tensor model\.layers\.1\.mlp\.experts\.3\.up_proj\.weight not found"):
        plan(d)
    w = hc.weights("qwen2moe")
    w["model.layers.0.mlp.experts.2.down_proj.weight"] = w["model.layers.0.mlp.experts.2.down_proj.weight"][:, :16]
    save_file(w, os.path.join(d, "model.safetensors"))
    with pytest.raises(ConvertError, match=r"model\.safetensors: tensor model\.layers\.0\.mlp\.experts\.2\.down_proj"
                                           r"\.weight has shape \[64, 16\], config\.json implies \[64, 32\] for expert 2"):
        plan(d)
    w = hc.weights("qwen2moe")
    w["model.layers.0.mlp.experts.4.up_proj.weight"] = w["model.layers.0.mlp.experts.3.up_proj.weight"]
    save_file(w, os.path.join(d, "model.safetensors"))
    with pytest.raises(ConvertError, match=r"experts\.4\.up_proj\.weight: expert 4, but config\.json has 4 experts"):
        plan(d)
    del w["model.layers.0.mlp.experts.4.up_proj.weight"]
    del w["model.layers.0.mlp.shared_expert_gate.weight"]
    save_file(w, os.path.join(d, "model.safetensors"))
    with pytest.raises(ConvertError, match=r"tensor model\.layers\.0\.mlp\.shared_expert_gate\.weight not found"):
        plan(d)


def test_moe_config_errors(ckpt, tmp_path):
    d = _copy(ckpt("qwen3moe"), tmp_path / "c")
    path = os.path.join(d, "config.json")
    good = json.load(open(path))
    for change, err, msg in [
        ({"mlp_only_layers": [0]}, UnsupportedArchitectureError, r"dense FFN layers among the MoE ones"),
        ({"decoder_sparse_step": 2}, UnsupportedArchitectureError, r"decoder_sparse_step = 2"),
        ({"num_experts_per_tok": 7}, ConvertError, r"num_experts_per_tok = 7 must be between 1 and the expert count 6"),
        ({"num_experts": None}, ConvertError, r"config\.json has none of 'num_local_experts', 'num_experts'"),
        ({"moe_intermediate_size": None}, ConvertError, r"config\.json has no 'moe_intermediate_size'"),
    ]:
        json.dump(dict(good, **change), open(path, "w"))
        with pytest.raises(err, match=msg):
            plan(d)


def test_longrope_factors_and_keys(ckpt, tmp_path):
    for arch, attn in (("phi3_longrope_short", (1 + np.log(4) / np.log(64)) ** 0.5),
                       ("phi3_longrope_long", (1 + np.log(32) / np.log(8)) ** 0.5)):
        out = tmp_path / f"{arch}.gguf"
        convert(ckpt(arch), str(out), "F16")
        kv, t = _gguf(out)
        rs = hc.config(arch)["rope_scaling"]
        assert kv["phi3.rope.scaling.original_context_length"] == hc.config(arch)["original_max_position_embeddings"]
        assert kv["phi3.rope.scaling.attn_factor"] == pytest.approx(attn, rel=1e-6)
        for which in ("long", "short"):
            x = t[f"rope_factors_{which}.weight"]
            assert x.tensor_type.name == "F32"
            assert np.array_equal(np.asarray(x.data), np.asarray(rs[f"{which}_factor"], dtype=np.float32))
    d = _copy(ckpt("phi3_longrope_short"), tmp_path / "c")
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["rope_scaling"]["short_factor"] = cfg["rope_scaling"]["short_factor"][:3]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    with pytest.raises(ConvertError, match=r"short_factor must be a list of 4 numbers \(rotary dims / 2\), got 3"):
        plan(d)
    cfg["rope_scaling"] = dict(cfg["rope_scaling"], short_factor=cfg["rope_scaling"]["long_factor"], attention_factor=1.5)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    assert dict(plan(d).metadata)["phi3.rope.scaling.attn_factor"] == 1.5


def test_unstated_tie_follows_the_checkpoint(ckpt, tmp_path):
    d = _copy(ckpt("mixtral"), tmp_path / "c")
    cfg = json.load(open(os.path.join(d, "config.json")))
    del cfg["tie_word_embeddings"]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    assert "output.weight" in [t.plan.dst for t in plan(d).tensors]


def test_spm_added_tokens(ckpt, tmp_path):
    # Phi-3 style: tokens beside tokenizer.model in added_tokens.json and added_tokens_decoder
    d = _copy(ckpt("phi3"), tmp_path / "c")
    cfg = json.load(open(os.path.join(d, "config.json")))
    json.dump(dict(cfg, vocab_size=405), open(os.path.join(d, "config.json"), "w"))
    from safetensors.numpy import save_file

    w = hc.weights("phi3")
    for k in ("model.embed_tokens.weight", "lm_head.weight"):
        w[k] = np.concatenate([w[k], w[k][:5]])
    save_file(w, os.path.join(d, "model.safetensors"))
    json.dump({"<|user|>": 400, "<|end|>": 401}, open(os.path.join(d, "added_tokens.json"), "w"))
    tc = json.load(open(os.path.join(d, "tokenizer_config.json")))
    tc["added_tokens_decoder"] = {"401": {"content": "<|end|>", "special": True},
                                  "402": {"content": "<|assistant|>", "special": False},
                                  "403": {"content": "\u2581hello", "special": False},
                                  "2": {"content": "<s>", "special": True}}
    json.dump(tc, open(os.path.join(d, "tokenizer_config.json"), "w"))
    out = tmp_path / "m.gguf"
    convert(d, str(out), "F16")
    kv, _ = _gguf(out)
    toks, types, scores = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"], kv["tokenizer.ggml.scores"]
    assert toks[400:] == ["<|user|>", "<|end|>", "<|assistant|>", " hello", "[PAD404]"]
    assert types[400:] == [4, 3, 3, 4, 5]  # user-defined, control, control (looks special), user-defined, unused
    assert scores[400] == -1000.0 and toks[2] == "<s>" and types[2] == 3
    tok = core.Tokenizer.from_gguf(str(out))
    ids = tok.encode("hi<|user|>x<|end|>", add_special=False, parse_special=True)
    assert 400 in ids and 401 in ids
    json.dump({"<|user|>": 405}, open(os.path.join(d, "added_tokens.json"), "w"))
    with pytest.raises(ConvertError, match=r"added_tokens\.json: added token '<\|user\|>' has id 405, past "
                                           r"config\.json's vocab_size 405"):
        plan(d)


_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float32)


def _hf_mxfp4_values(blocks, scales):
    # the checkpoint's own reading: value 2j in byte j's low nibble, 2j + 1 in its high one, times 2^(e - 127)
    codes = np.stack((blocks & 15, blocks >> 4), axis=-1).reshape(blocks.shape[:-1] + (32,))
    return (_E2M1[codes] * np.exp2(scales.astype(np.float32) - 127)[..., None]).reshape(blocks.shape[:-2] + (-1,))


@pytest.mark.parametrize("out_type", ["F16", "Q8_0"])
def test_gptoss_mxfp4_experts_keep_their_values(ckpt, tmp_path, out_type):
    # gpt-oss is converted, not run here (the engine's gpt-oss is not in this tree yet): the GGUF's
    # MXFP4 experts, read by the engine's dequantizer, are the checkpoint's MXFP4 values
    out = tmp_path / "m.gguf"
    convert(ckpt("gptoss"), str(out), out_type)
    kv, t = _gguf(out)
    w, c = hc.weights("gptoss"), hc.config("gptoss")
    assert kv["general.architecture"] == "gpt-oss" and kv["gpt-oss.rope.scaling.type"] == "yarn"
    assert kv["gpt-oss.rope.scaling.factor"] == 32.0 and kv["gpt-oss.rope.scaling.original_context_length"] == 64
    assert kv["gpt-oss.attention.sliding_window"] == 8 and kv["gpt-oss.expert_feed_forward_length"] == 64
    for il in range(2):
        p = f"model.layers.{il}.mlp.experts."
        gate_up = _hf_mxfp4_values(w[p + "gate_up_proj_blocks"], w[p + "gate_up_proj_scales"])  # [E, 2 ff, d]
        down = _hf_mxfp4_values(w[p + "down_proj_blocks"], w[p + "down_proj_scales"])
        for kind, want in (("gate", gate_up[:, 0::2]), ("up", gate_up[:, 1::2]), ("down", down)):
            x = t[f"blk.{il}.ffn_{kind}_exps.weight"]
            assert x.tensor_type.name == "MXFP4" and list(x.shape) == list(reversed(want.shape))
            got = np.asarray(core.quant_dequantize("MXFP4", np.asarray(x.data), want.size)).reshape(want.shape)
            assert np.array_equal(got, want), (il, kind)
        bias = w[p + "gate_up_proj_bias"]
        for kind, want in (("gate", bias[:, 0::2]), ("up", bias[:, 1::2]), ("down", w[p + "down_proj_bias"])):
            b = t[f"blk.{il}.ffn_{kind}_exps.bias"]
            assert b.tensor_type.name == "F32" and np.array_equal(np.asarray(b.data).reshape(want.shape), want)
        assert np.array_equal(np.asarray(t[f"blk.{il}.attn_sinks.weight"].data), w[f"model.layers.{il}.self_attn.sinks"])
        assert t[f"blk.{il}.ffn_gate_inp.bias"].tensor_type.name == "F32"
        assert f"blk.{il}.post_attention_norm.weight" in t and f"blk.{il}.ffn_norm.weight" not in t


def test_gptoss_chunked_write_and_errors(ckpt, tmp_path, monkeypatch):
    import edgellm.convert.writer as writer
    from safetensors.numpy import save_file

    convert(ckpt("gptoss"), str(tmp_path / "whole.gguf"), "F16")
    monkeypatch.setattr(writer, "_CHUNK_ELEMS", 5000)  # one expert (64 x 64) a chunk
    convert(ckpt("gptoss"), str(tmp_path / "chunked.gguf"), "F16")
    assert (tmp_path / "whole.gguf").read_bytes() == (tmp_path / "chunked.gguf").read_bytes()
    d = _copy(ckpt("gptoss"), tmp_path / "c")
    w = hc.weights("gptoss")
    w["model.layers.1.mlp.experts.down_proj_scales"] = w["model.layers.1.mlp.experts.down_proj_scales"].astype(np.float32)
    save_file(w, os.path.join(d, "model.safetensors"))
    with pytest.raises(ConvertError, match=r"down_proj_scales has dtype F32, expected U8 \(MXFP4\)"):
        plan(d)
    del w["model.layers.1.mlp.experts.down_proj_scales"]
    save_file(w, os.path.join(d, "model.safetensors"))
    with pytest.raises(ConvertError, match=r"tensor model\.layers\.1\.mlp\.experts\.down_proj_scales not found"):
        plan(d)


def test_gptoss_matches_transformers_where_the_engine_runs_it(ckpt, tmp_path):
    # tests/data/hf/gptoss.npz: transformers' logits with the MXFP4 experts dequantized (exact);
    # runs once the engine has the gpt-oss architecture, skipped before
    ref = np.load(os.path.join(DATA, "gptoss.npz"))
    out = tmp_path / "m.gguf"
    convert(ckpt("gptoss"), str(out), "F32")
    try:
        core.Model(str(out), n_threads=1, n_ctx=64)
    except core.ModelFormatError as e:  # before the engine's gpt-oss: its YaRN or the architecture refused
        if ('architecture "gpt-oss"' in str(e) or 'scaling.type = "yarn"' in str(e)) and "not supported" in str(e):
            pytest.skip(f"the engine does not run gpt-oss yet ({e})")
        raise
    # The experts stay MXFP4 (as llama.cpp's converter writes them), so the engine rounds their
    # inputs to 8 bits: the converted file's exact logits are the float64 reference's on it.
    from reference.gpt_oss import GptOssReference
    np.testing.assert_allclose(GptOssReference(out).forward(hc.PROMPT), ref["logits"], rtol=0, atol=1e-3)
    np.testing.assert_allclose(engine_logits(out, hc.PROMPT),
                               GptOssReference(out, quantize_inputs=True).forward(hc.PROMPT), rtol=0, atol=1e-3)
    assert engine_greedy(out, hc.PROMPT, hc.N_GREEDY) == ref["greedy"].tolist()


def test_features_the_engine_does_not_run_are_refused(ckpt, tmp_path):
    # what the engine does not run (YaRN for gemma2, a non-default YaRN scale, a Qwen sliding window,
    # OLMoE's clip_qkv): no file is written
    for arch, change, msg in [
        ("gemma2", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
         r"rope_scaling type 'yarn' is not supported for gemma2"),
        ("qwen2", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                    "attention_factor": 0.5}},
         r"rope_scaling attention_factor = 0\.5 is not supported for qwen2"),
        ("qwen2", {"use_sliding_window": True, "sliding_window": 8}, r"use_sliding_window is not supported for qwen2"),
        ("olmoe", {"clip_qkv": 8.0}, r"clip_qkv = 8\.0 is not supported for olmoe"),
    ]:
        d = _copy(ckpt(arch), tmp_path / f"{arch}-{len(msg)}")
        cfg = json.load(open(os.path.join(d, "config.json")))
        json.dump(dict(cfg, **change), open(os.path.join(d, "config.json"), "w"))
        with pytest.raises(UnsupportedArchitectureError, match=msg):
            convert(d, str(tmp_path / f"{arch}.gguf"), "F16")
        assert not (tmp_path / f"{arch}.gguf").exists()
