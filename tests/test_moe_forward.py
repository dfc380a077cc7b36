"""Mixture-of-experts models (qwen3moe, olmoe, qwen2moe, llama with experts = Mixtral) beyond the
parametrized forward tests of test_model_forward.py (which compare every arch with the float64
reference): the tiny fixtures really route tokens to different experts, only the selected
experts matter, batches / decode steps of several streams and thread counts do not change
results, the gating keys are honoured, malformed files fail naming the key or tensor, the GPU
offload declines MoE models, and the memory plan, `edgellm info` and `edgellm run` handle them."""
import numpy as np
import pytest

from reference.fixtures import add_minimal_hparams, tiny_model_maker, MOE_ARCHS, write_tiny_model
from reference.forward import ReferenceModel

core = pytest.importorskip("edgellm._core")

PROMPT = [3, 17, 42, 5, 9, 60, 11, 2, 33, 71, 8, 19, 50, 4]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model_maker(tmp_path_factory.mktemp("tiny_moe"))


def engine_logits(path, ids, n_threads=2, **model_kw):
    model = core.Model(path, n_threads=n_threads, **model_kw)
    return core.ModelRunner(model, n_ctx=128, kv_type="F32").eval(ids, all_logits=True)


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_config_and_tokens_route_to_different_experts(tiny, arch):
    path = tiny(arch)
    cfg = core.Model(path, n_threads=1).config
    assert (cfg["n_expert"], cfg["n_expert_used"], cfg["n_ff_exp"]) == (8, 2, 64)
    assert cfg["expert_gating"] == "softmax"
    assert cfg["expert_weights_norm"] == (arch in ("qwen3moe", "mixtral"))
    assert cfg["n_ff_shexp"] == (128 if arch == "qwen2moe" else 0)
    ref = ReferenceModel(path)
    ref.forward(PROMPT)
    assert len(ref.routes) == 3
    for routes in ref.routes:
        assert routes.shape == (len(PROMPT), 2)
        assert len(set(routes.ravel().tolist())) >= 3       # several experts used in every layer
        assert len({tuple(sorted(r)) for r in routes.tolist()}) >= 3  # tokens pick different pairs


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_only_selected_experts_change_the_logits(tiny, arch):
    ids = PROMPT[:3]  # 3 tokens x 2 experts: at least 2 of the 8 experts idle in every layer
    base_path = tiny(arch)
    ref = ReferenceModel(base_path)
    ref.forward(ids)
    layer = 1
    used = set(ref.routes[layer].ravel().tolist())
    idle = min(set(range(8)) - used)
    chosen = int(ref.routes[layer][0][0])
    base = engine_logits(base_path, ids)
    # the idle expert's weights are never read: bit-identical logits
    np.testing.assert_array_equal(engine_logits(tiny(arch, perturb_expert=(layer, idle)), ids), base)
    # a selected expert's are
    moved = engine_logits(tiny(arch, perturb_expert=(layer, chosen)), ids)
    assert np.abs(moved - base).max() > 1e-3
    np.testing.assert_allclose(moved, ReferenceModel(tiny(arch, perturb_expert=(layer, chosen))).forward(ids),
                               rtol=0, atol=1e-4)


@pytest.mark.parametrize("arch", ["qwen3moe", "mixtral"])
def test_batched_sequences_and_decode_step_equal_separate_runs(tiny, arch):
    path = tiny(arch, weight_type="Q8_0")
    model = core.Model(path, n_threads=2)
    a, b = PROMPT[:9], PROMPT[3:14]
    order = sorted([(0, i) for i in range(len(a))] + [(1, i) for i in range(len(b))], key=lambda sp: (sp[1], sp[0]))
    runner = core.BatchRunner(model, n_seqs=4, n_ctx=64)
    toks = [(a if s == 0 else b)[p] for s, p in order]
    out = runner.forward(toks, [p for _, p in order], [s for s, _ in order], [1] * len(order))
    sep = {0: engine_logits(path, a), 1: engine_logits(path, b)}
    for row, (s, p) in enumerate(order):
        np.testing.assert_allclose(out[row], sep[s][p], rtol=0, atol=1e-5)
    # two more streams, then one decode step of four streams whose tokens pick different experts
    c, d = PROMPT[6:10], PROMPT[1:6]
    runner.forward(c, list(range(len(c))), [2] * len(c), [0] * len(c))
    runner.forward(d, list(range(len(d))), [3] * len(d), [0] * len(d))
    seqs = [a, b, c, d]
    nxt = [7, 8, 90, 45]
    step = runner.forward(nxt, [len(s) for s in seqs], [0, 1, 2, 3], [1, 1, 1, 1])
    picks = set()
    for i, s in enumerate(seqs):
        np.testing.assert_allclose(step[i], engine_logits(path, s + [nxt[i]])[-1], rtol=0, atol=1e-5)
        ref = ReferenceModel(path)
        ref.forward(s + [nxt[i]])
        picks.add(tuple(sorted(ref.routes[0][-1].tolist())))
    assert len(picks) >= 2  # the step's tokens did not all choose the same experts


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_thread_count_and_chunking_do_not_change_results(tiny, arch):
    path = tiny(arch, weight_type="Q8_0")
    one = engine_logits(path, PROMPT, n_threads=1)
    for n in (2, 3):
        np.testing.assert_array_equal(engine_logits(path, PROMPT, n_threads=n), one)
    chunked = engine_logits(path, PROMPT, n_threads=2, max_batch_tokens=3)
    np.testing.assert_allclose(chunked, one, rtol=1e-6, atol=1e-5)
    runner = core.ModelRunner(core.Model(path, n_threads=2), n_ctx=64, kv_type="F32")
    rows = np.stack([runner.eval([t]) for t in PROMPT])
    np.testing.assert_allclose(rows, one, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("arch,gating,norm", [("mixtral", "sigmoid", False), ("olmoe", "softmax", True),
                                              ("qwen3moe", "sigmoid", True)])
def test_gating_keys_are_honoured(tiny, arch, gating, norm):
    path = tiny(arch, expert_gating=gating, expert_weights_norm=norm)
    cfg = core.Model(path, n_threads=1).config
    assert cfg["expert_gating"] == gating and cfg["expert_weights_norm"] is norm
    ref = ReferenceModel(path)
    assert ref.expert_sigmoid == (gating == "sigmoid") and ref.expert_norm is norm
    np.testing.assert_allclose(engine_logits(path, PROMPT), ref.forward(PROMPT), rtol=0, atol=1e-4)
    # and the keys matter: the default-gated file differs
    assert np.abs(engine_logits(tiny(arch), PROMPT) - engine_logits(path, PROMPT)).max() > 1e-3


@pytest.mark.parametrize("weight_type", ["F32", "Q8_0"])
def test_shared_expert_with_and_without_its_gate(tiny, weight_type):
    # qwen2moe: the shared expert x sigmoid(ffn_gate_inp_shexp . h); a llama file with
    # expert_shared_feed_forward_length: the shared expert added as it is
    for path in (tiny("qwen2moe", weight_type=weight_type), tiny("mixtral", weight_type=weight_type, n_ff_shexp=96)):
        ref = ReferenceModel(path, simulate_activation_quant=weight_type != "F32")
        assert ref.has("blk.0.ffn_down_shexp.weight")
        want = ref.forward(PROMPT)
        np.testing.assert_allclose(engine_logits(path, PROMPT), want, rtol=0, atol=1e-4 * np.abs(want).max())
    assert core.Model(tiny("mixtral", n_ff_shexp=96), n_threads=1).config["n_ff_shexp"] == 96
    # the shared expert matters
    assert np.abs(engine_logits(tiny("mixtral", n_ff_shexp=96), PROMPT) - engine_logits(tiny("mixtral"), PROMPT)).max() > 1e-2


def test_q4_experts_with_f32_router_match_reference(tiny):
    # the layout of real files: router F32, experts quantized, rows packed for the fast kernels
    path = tiny("qwen3moe", weight_type="Q8_0",
                type_of=lambda n: "F32" if "gate_inp" in n else ("Q4_0" if "_exps" in n else None))
    ref = ReferenceModel(path, simulate_activation_quant=True).forward(PROMPT)
    got = engine_logits(path, PROMPT)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-3 * np.abs(ref).max())


@pytest.mark.parametrize("repack", ["0", "1"])
def test_experts_packed_or_in_the_gguf_layout(tiny, monkeypatch, repack):
    # EDGELLM_REPACK=0 keeps every expert view in the GGUF blocks (the unpacked kernels)
    monkeypatch.setenv("EDGELLM_REPACK", repack)
    path = tiny("olmoe", weight_type="Q8_0", type_of=lambda n: "Q4_0" if "_exps" in n else None)
    ref = ReferenceModel(path, simulate_activation_quant=True).forward(PROMPT)
    np.testing.assert_allclose(engine_logits(path, PROMPT), ref, rtol=0, atol=2e-3 * np.abs(ref).max())


# ---- malformed files ----

def test_expert_count_mismatch_names_the_tensor(tiny, tmp_path):
    path = write_tiny_model(tmp_path / "m.gguf", "qwen3moe", metadata_expert_count=6)
    with pytest.raises(core.ModelFormatError,
                       match=r"tensor blk\.0\.ffn_gate_inp\.weight has shape \{64, 8\}, expected \{64, 6\}"):
        core.Model(str(path))
    # a router that agrees but expert tensors that do not
    import gguf
    from gguf import GGUFReader
    src = GGUFReader(tiny("olmoe"))
    out = tmp_path / "bad-exps.gguf"
    w = gguf.GGUFWriter(str(out), "olmoe")
    for f in src.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        w.add_key_value(f.name, f.contents(), f.types[0], f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
    for t in src.tensors:
        a = np.asarray(t.data).reshape([int(x) for x in reversed(t.shape)])
        if t.name == "blk.0.ffn_up_exps.weight":
            a = a[:6]
        w.add_tensor(t.name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(core.ModelFormatError,
                       match=r"tensor blk\.0\.ffn_up_exps\.weight has shape \{64, 64, 6\}, expected \{64, 64, 8\}"):
        core.Model(str(out))


def _header_only(tmp_path, arch, **keys):
    import gguf
    p = tmp_path / f"{arch}-{len(list(tmp_path.iterdir()))}.gguf"
    w = gguf.GGUFWriter(str(p), arch)
    add_minimal_hparams(w)
    for k, v in keys.items():
        w.add_uint32(f"{arch}.{k}", v)
    w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(p)


def test_bad_expert_keys(tmp_path):
    with pytest.raises(core.ModelFormatError, match=r"required key qwen3moe\.expert_count is missing or 0"):
        core.Model(_header_only(tmp_path, "qwen3moe"))
    with pytest.raises(core.ModelFormatError, match=r"required key olmoe\.expert_used_count is missing"):
        core.Model(_header_only(tmp_path, "olmoe", expert_count=4))
    with pytest.raises(core.ModelFormatError, match=r"llama\.expert_used_count = 5 must be between 1 and"):
        core.Model(_header_only(tmp_path, "llama", expert_count=4, expert_used_count=5))
    with pytest.raises(core.ModelFormatError, match=r"required tensor blk\.0\.ffn_gate_shexp\.weight is missing"):
        core.Model(write_tiny_model(tmp_path / "nosh.gguf", "qwen3moe", n_ff_shexp=64, type_of=None) and
                   _drop_tensors(tmp_path / "nosh.gguf", "_shexp."))
    with pytest.raises(core.ModelFormatError, match=r"expert_gating_func = 4 is not supported"):
        core.Model(_header_only(tmp_path, "qwen3moe", expert_count=4, expert_used_count=2, expert_gating_func=4))


def _drop_tensors(path, part):
    """Rewrites `path` without the tensors whose names contain `part`; returns the new path."""
    import gguf
    src = gguf.GGUFReader(str(path))
    out = str(path) + ".dropped.gguf"
    arch = src.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch)
    for f in src.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        w.add_key_value(f.name, f.contents(), f.types[0], f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
    for t in src.tensors:
        if part not in t.name:
            w.add_tensor(t.name, np.ascontiguousarray(np.asarray(t.data).reshape([int(x) for x in reversed(t.shape)])))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def test_gpu_offload_declines_moe_models(tiny, capfd):
    path = tiny("qwen3moe")
    got = engine_logits(path, PROMPT[:5], n_gpu_layers=-1)
    err = capfd.readouterr().err
    assert "mixture-of-experts layers (qwen3moe, 8 experts) are not supported on the GPU; running on the CPU" in err
    np.testing.assert_array_equal(got, engine_logits(path, PROMPT[:5]))


# ---- plan, info, run ----

@pytest.fixture(scope="module")
def vocab_moe(tmp_path_factory):
    from tiny_vocab_model import write_tiny_vocab_model
    return str(write_tiny_vocab_model(tmp_path_factory.mktemp("vmoe") / "moe.gguf", weight_type="Q8_0",
                                      arch="qwen3moe"))


def test_memory_plan_counts_experts(vocab_moe):
    from gguf import GGUFReader
    from edgellm import LLM
    p = LLM.plan(vocab_moe)
    tensors = GGUFReader(vocab_moe).tensors
    total = sum(int(t.n_elements) for t in tensors)
    experts = sum(int(t.n_elements) for t in tensors if "_exps." in t.name)
    assert p.n_expert == 8 and p.n_expert_used == 2
    assert p.params_total == total and p.params_active == total - experts + experts // 8 * 2
    # every expert is one matrix of its own: 2 layers x (4 attention + router + 3 x 8 experts) + output
    assert p.matrices_packed + p.matrices_mapped == 2 * (4 + 1 + 24) + 1
    # each expert's bytes counted once (packed copies are about the blocks' size)
    exp_bytes = sum(int(t.n_bytes) for t in tensors if "_exps." in t.name)
    assert exp_bytes * 0.95 < p.weights < 1.2 * p.file_bytes
    assert p.active_weight_bytes < p.file_bytes - exp_bytes * 0.7
    assert "active per token (2 of 8 experts" in p.table()


def test_info_and_run_on_a_tiny_moe(vocab_moe):
    import json
    from click.testing import CliRunner
    from edgellm.cli import main
    r = CliRunner().invoke(main, ["info", vocab_moe])
    assert r.exit_code == 0, r.output
    assert "architecture       qwen3moe" in r.output
    assert "experts            8 (2 used per token, expert FFN dim 64)" in r.output
    assert "active parameters" in r.output
    j = json.loads(CliRunner().invoke(main, ["info", vocab_moe, "--json"]).output)
    assert j["n_expert"] == 8 and j["n_expert_used"] == 2 and j["n_params_active"] < j["n_params"]
    r = CliRunner().invoke(main, ["run", vocab_moe, "--temp", "0", "-n", "12", "-t", "2", "the the the"])
    assert r.exit_code == 0, r.output
    assert r.output.strip()  # random weights: bytes, but twelve tokens of them
    import edgellm
    out = edgellm.LLM(vocab_moe, n_threads=2).generate(["the the the"],
                                                     edgellm.SamplingParams(temperature=0, max_tokens=12))[0]
    assert len(out.token_ids) == 12 and out.finish_reason == "length"


@pytest.mark.real_model
@pytest.mark.slow
def test_moe_peak_rss_within_plan(tmp_path):
    # A Mixtral-style synthetic (bench/make_synthetic.py: 32 experts of 1024, 4 used, Q4_K_M,
    # SmolLM2's tokenizer; ~160 MiB), measured as test_memory_plan measures the dense models:
    # load + two 500-token prompts, against the plan's total with the KV pages written.
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import require_model
    from edgellm import LLM
    from test_memory_plan import _PROBE

    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, str(root / "bench" / "make_synthetic.py"), "--arch", "llama", "--dim", "1024",
                    "--layers", "2", "--ffn", "1024", "--heads", "8", "--kv-heads", "8", "--experts", "32",
                    "--experts-used", "4", "--expert-ffn", "1024", "--vocab", "49152", "--type", "Q4_K_M",
                    "--out-dir", str(tmp_path), "--name", "moe", "--tokenizer-from", str(require_model("smollm2"))],
                   check=True, capture_output=True, timeout=600)
    path = str(tmp_path / "moe-Q4_K_M.gguf")
    env = dict(os.environ)
    env.pop("EDGELLM_MEMORY_LIMIT", None)
    out = subprocess.run([sys.executable, "-c", _PROBE, path, "512", "2"], env=env, capture_output=True, text=True,
                         timeout=600, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    p = LLM.plan(path, n_ctx=512).to_dict()
    assert p["n_expert"] == 32 and p["params_active"] < p["params_total"] / 2
    expected = max(p["load_peak"], p["total"] - p["kv_budget"] + r["kv_resident"])
    assert abs(r["peak"] - expected) <= 0.05 * expected, (r, expected)
