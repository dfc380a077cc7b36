"""gpt-oss (GGUF arch "gpt-oss") on tiny random-weight files (tests/reference/gpt_oss.py) against
the float64 reference: attention sinks, alternating sliding-window layers, YaRN RoPE, Q/K/V/O
biases, the biased router with a softmax over the top-k logits, biased experts with the clamped
SwiGLU; MXFP4 experts; decode through the KV cache past the window equal to recomputing; each
feature changes the logits (none is silently skipped); malformed files fail naming the key or
tensor; the GPU offload declines; plan, `edgellm info` and `edgellm run`, and the chat side
routes to harmony."""
import math

import numpy as np
import pytest

from reference.gpt_oss import GptOssReference, write_gpt_oss

core = pytest.importorskip("edgellm._core")

PROMPT = [3, 17, 42, 5, 9, 60, 11, 2, 33, 71, 8, 19, 50, 4]  # 14 tokens: > 3 windows of 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    base = tmp_path_factory.mktemp("tiny_gptoss")
    cache = {}

    def make(**kw):
        key = repr(sorted(kw.items()))
        if key not in cache:
            cache[key] = str(write_gpt_oss(base / f"gpt-oss-{len(cache)}.gguf", **kw))
        return cache[key]

    return make


def engine_logits(path, ids, n_threads=2, kv_type="F32", **model_kw):
    model = core.Model(path, n_threads=n_threads, **model_kw)
    return core.ModelRunner(model, n_ctx=128, kv_type=kv_type).eval(ids, all_logits=True)


def test_config(tiny):
    cfg = core.Model(tiny(), n_threads=1).config
    assert cfg["arch"] == "gpt-oss"
    assert cfg["n_swa"] == 4 and list(cfg["layer_window"]) == [4, 0, 4]  # layers 0, 2, ... windowed
    assert (cfg["n_expert"], cfg["n_expert_used"], cfg["n_ff_exp"]) == (8, 3, 64)
    assert cfg["expert_gating"] == "softmax_weight" and cfg["expert_weights_norm"] is False
    assert cfg["rope_type"] == "neox" and cfg["rope_yarn"] is True
    assert cfg["rope_freq_scale"] == pytest.approx(0.25)
    assert cfg["rope_attn_factor"] == pytest.approx(1 + 0.1 * math.log(4), rel=1e-6)
    assert (cfg["rope_yarn_beta_fast"], cfg["rope_yarn_beta_slow"]) == (32.0, 1.0)
    assert cfg["swiglu_alpha"] == pytest.approx(1.702) and cfg["swiglu_limit"] == 7.0


def test_forward_matches_reference(tiny):
    path = tiny()
    ref = GptOssReference(path)
    want = ref.forward(PROMPT)
    assert ref.clamped > 50  # the SwiGLU clamp bites
    for routes in ref.routes:  # tokens pick different expert sets in every layer
        assert len({tuple(sorted(r)) for r in routes.tolist()}) >= 4
    np.testing.assert_allclose(engine_logits(path, PROMPT), want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("variant", [
    dict(yarn_factor=None),                 # plain RoPE
    dict(sliding_window=0),                 # no window layers
    dict(sink_mean=6.0),                    # sinks that take most of the softmax
    dict(yarn_betas=(16.0, 2.0)),           # the file's YaRN betas
    dict(yarn_truncate=True),               # llama.cpp's rounded correction dims (key in the file)
])
def test_each_feature_is_computed(tiny, variant):
    # the same weights with one feature changed: the engine follows the reference, and the
    # logits move (sinks, windows and YaRN are all in the computation, none skipped)
    path = tiny(**variant)
    want = GptOssReference(path).forward(PROMPT)
    got = engine_logits(path, PROMPT)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    assert np.abs(got - engine_logits(tiny(), PROMPT)).max() > 1e-3


def test_window_longer_than_the_prompt_is_full_attention(tiny):
    np.testing.assert_allclose(engine_logits(tiny(sliding_window=64), PROMPT),
                               engine_logits(tiny(sliding_window=0), PROMPT), rtol=0, atol=1e-5)


def test_unclamped_experts(tiny):
    path = tiny(gate_up_std=0.1)
    ref = GptOssReference(path)
    want = ref.forward(PROMPT)
    assert ref.clamped == 0
    np.testing.assert_allclose(engine_logits(path, PROMPT), want, rtol=0, atol=1e-4)


def test_sinks_change_the_result(tiny):
    a, b = engine_logits(tiny(), PROMPT), engine_logits(tiny(sink_mean=6.0), PROMPT)
    assert np.abs(a - b).max() > 1e-2


@pytest.mark.parametrize("repack", ["0", "1"])
def test_mxfp4_experts_match_reference_on_dequantized_weights(tiny, monkeypatch, repack):
    # the released files' layout: experts MXFP4, everything else wider (here Q8_0 / F32)
    monkeypatch.setenv("EDGELLM_REPACK", repack)
    path = tiny(expert_type="MXFP4", weight_type="Q8_0")
    ref = GptOssReference(path, quantize_inputs=True)
    want = ref.forward(PROMPT)
    got = engine_logits(path, PROMPT)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * np.abs(want).max())
    # (against the unrounded-input reference a token may pick another expert: the Q8 rounding of
    # the router's input moves near-tied logits, so only the simulated one is compared)
    assert np.argmax(got, axis=1).tolist() == np.argmax(want, axis=1).tolist()


@pytest.mark.parametrize("kv_type", ["F32", "F16"])
def test_decode_through_the_kv_cache_equals_recompute(tiny, kv_type):
    # one token per step through the paged cache, 14 positions past a window of 4: the decode
    # path (row-wise attention, windows cut inside pages) against the whole prompt at once. The
    # clamp region's gate values (~8) amplify last-bit differences of the two paths' matmul
    # order (and, with F16 rows, a flipped rounding of K / V) about 50×; a window, sink or RoPE
    # error is O(1).
    tol = 5e-5 if kv_type == "F32" else 2e-3
    path = tiny()
    full = engine_logits(path, PROMPT, kv_type=kv_type)
    runner = core.ModelRunner(core.Model(path, n_threads=2), n_ctx=64, kv_type=kv_type)
    rows = np.stack([runner.eval([t]) for t in PROMPT])
    np.testing.assert_allclose(rows, full, rtol=0, atol=tol)
    # chunked prefill and thread counts
    np.testing.assert_allclose(engine_logits(path, PROMPT, max_batch_tokens=3, kv_type=kv_type), full,
                               rtol=0, atol=tol)
    np.testing.assert_array_equal(engine_logits(path, PROMPT, n_threads=1, kv_type=kv_type), full)
    if kv_type == "F32":
        want = GptOssReference(path).forward(PROMPT)
        np.testing.assert_allclose(full, want, rtol=0, atol=1e-4)
        np.testing.assert_allclose(rows, want, rtol=0, atol=1e-4)


def test_batched_streams_equal_separate_runs(tiny):
    path = tiny(weight_type="Q8_0")
    model = core.Model(path, n_threads=2)
    a, b = PROMPT[:9], PROMPT[2:14]
    order = sorted([(0, i) for i in range(len(a))] + [(1, i) for i in range(len(b))], key=lambda sp: (sp[1], sp[0]))
    runner = core.BatchRunner(model, n_seqs=2, n_ctx=64)
    toks = [(a if s == 0 else b)[p] for s, p in order]
    out = runner.forward(toks, [p for _, p in order], [s for s, _ in order], [1] * len(order))
    sep = {0: engine_logits(path, a), 1: engine_logits(path, b)}
    for row, (s, p) in enumerate(order):
        np.testing.assert_allclose(out[row], sep[s][p], rtol=0, atol=1e-5)


# ---- malformed files ----

@pytest.mark.parametrize("kw,message", [
    (dict(drop=("blk.1.attn_sinks.weight",)), r"required tensor blk\.1\.attn_sinks\.weight is missing"),
    (dict(shape_of=lambda n, s: (5,) if n.endswith("attn_sinks.weight") else s),
     r"tensor blk\.0\.attn_sinks\.weight has shape \{5\}, expected \{4\}"),
    (dict(drop=("blk.0.ffn_gate_inp.bias",)), r"required tensor blk\.0\.ffn_gate_inp\.bias is missing"),
    (dict(drop=("blk.2.ffn_down_exps.bias",)), r"required tensor blk\.2\.ffn_down_exps\.bias is missing"),
    (dict(shape_of=lambda n, s: (8, 60) if n == "blk.0.ffn_up_exps.bias" else s),
     r"tensor blk\.0\.ffn_up_exps\.bias has shape \{60, 8\}, expected \{64, 8\}"),
    (dict(drop=("blk.0.attn_output.bias",)), r"required tensor blk\.0\.attn_output\.bias is missing"),
    (dict(drop=("blk.0.attn_q.bias",)), r"required tensor blk\.0\.attn_q\.bias is missing"),
    (dict(drop=("blk.0.post_attention_norm.weight",)), r"required tensor blk\.0\.post_attention_norm\.weight"),
    (dict(sliding_window=None), r"required key gpt-oss\.attention\.sliding_window is missing"),
    (dict(gating_func=1), r"gpt-oss\.expert_gating_func = softmax contradicts the arch"),
])
def test_malformed_files_fail_naming_the_key_or_tensor(tmp_path, kw, message):
    path = write_gpt_oss(tmp_path / "bad.gguf", **kw)
    with pytest.raises(core.ModelFormatError, match=message):
        core.Model(str(path))
    from edgellm import LLM
    with pytest.raises(core.ModelFormatError, match=message):
        LLM.plan(str(path))


def test_non_finite_sink_is_refused(tmp_path):
    import gguf
    src = gguf.GGUFReader(write_gpt_oss(tmp_path / "ok.gguf"))
    out = tmp_path / "nan.gguf"
    w = gguf.GGUFWriter(str(out), "gpt-oss")
    for f in src.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        w.add_key_value(f.name, f.contents(), f.types[0], f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
    for t in src.tensors:
        a = np.array(t.data).reshape([int(x) for x in reversed(t.shape)])
        if t.name == "blk.1.attn_sinks.weight":
            a[2] = np.nan
        w.add_tensor(t.name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(core.ModelFormatError, match=r"blk\.1\.attn_sinks\.weight has a non-finite value at 2"):
        core.Model(str(out))


def test_gpu_offload_declines(tiny, capfd):
    path = tiny()
    got = engine_logits(path, PROMPT[:5], n_gpu_layers=-1)
    err = capfd.readouterr().err
    assert "not supported on the GPU; running on the CPU" in err
    np.testing.assert_array_equal(got, engine_logits(path, PROMPT[:5]))


# ---- plan, info, run, chat ----

HARMONY_TOKENS = ["<|start|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|end|>", "<|return|>", "<|call|>"]


@pytest.fixture(scope="module")
def vocab_gptoss(tmp_path_factory):
    from tiny_vocab_model import add_tokenizer, vocab
    tokens, types, merges = vocab()
    tokens, types = tokens + HARMONY_TOKENS, types + [3] * len(HARMONY_TOKENS)
    path = tmp_path_factory.mktemp("vgptoss") / "gpt-oss.gguf"
    write_gpt_oss(path, n_vocab=len(tokens), expert_type="MXFP4", weight_type="Q8_0",
                  tokenizer=lambda w: add_tokenizer(w, tokens, types, merges))
    return str(path)


def test_memory_plan(vocab_gptoss):
    from gguf import GGUFReader
    from edgellm import LLM
    p = LLM.plan(vocab_gptoss)
    tensors = GGUFReader(vocab_gptoss).tensors
    total = sum(int(t.n_elements) for t in tensors)
    experts = sum(int(t.n_elements) for t in tensors if "_exps.weight" in t.name)
    assert p.n_expert == 8 and p.n_expert_used == 3
    assert p.params_total == total and p.params_active == total - experts + experts // 8 * 3
    # 3 layers x (4 attention + router + 3 x 8 experts) + output
    assert p.matrices_packed + p.matrices_mapped == 3 * (4 + 1 + 24) + 1
    assert "active per token (3 of 8 experts" in p.table()


def test_info_and_run(vocab_gptoss):
    import json
    from click.testing import CliRunner
    from edgellm.cli import main
    r = CliRunner().invoke(main, ["info", vocab_gptoss])
    assert r.exit_code == 0, r.output
    assert "architecture       gpt-oss" in r.output
    assert "experts            8 (3 used per token, expert FFN dim 64)" in r.output
    assert "rope scaling       yarn x4.0 (original context 64)" in r.output
    assert "sliding window     4" in r.output
    assert "attention sinks    yes" in r.output
    assert "MXFP4 x9" in r.output
    j = json.loads(CliRunner().invoke(main, ["info", vocab_gptoss, "--json"]).output)
    assert j["architecture"] == "gpt-oss" and j["attention_sinks"] is True and j["sliding_window"] == 4
    r = CliRunner().invoke(main, ["run", vocab_gptoss, "--temp", "0", "-n", "12", "-t", "2", "the the the"])
    assert r.exit_code == 0, r.output
    assert r.output.strip()


def test_chat_routes_to_harmony(vocab_gptoss):
    # no template in the file: the vocabulary's harmony tokens pick the built-in gpt-oss one, and
    # the output is parsed as harmony
    import edgellm
    from edgellm.chat_output import HARMONY
    llm = edgellm.LLM(vocab_gptoss, n_threads=2)
    assert llm.chat_renderer.template == "gpt-oss"
    assert llm.chat_renderer.chat_format.tool_format == HARMONY
    text = llm.apply_chat_template([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": "yo"}, {"role": "user", "content": "the"}])
    assert text == ("<|start|>system<|message|>be brief<|end|><|start|>user<|message|>hi<|end|>"
                    "<|start|>assistant<|message|>yo<|return|><|start|>user<|message|>the<|end|><|start|>assistant")
    out = llm.chat([{"role": "user", "content": "the the"}], edgellm.SamplingParams(temperature=0, max_tokens=8))
    assert out.finish_reason in ("length", "stop") and len(out.token_ids) <= 8
    # random weights write no harmony header: the parser's plain fallback makes it all content
    assert out.content == out.text and out.reasoning_content is None
