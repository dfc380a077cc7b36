"""The forward pass of every architecture against the independent numpy reference
(tests/reference/forward.py), on tiny random-weight models written by tests/reference/fixtures.py.

- F32 weights, F32 KV cache: logits equal the float64 reference to ~1e-4.
- Quantized weights: equal to the reference when it rounds matmul inputs the way the engine
  quantizes activations (Q8_0 blocks), so the quantized kernels are checked tightly too.
- Sliding windows (gemma3, gemma2, phi3): prompts longer than the window; tokens outside every
  window of the last position cannot change its logits.
- phi3: fused attn_qkv / ffn_up, partial rotary, LongRoPE's factors picked by the context;
  gemma2: attention and final logit soft-capping, alternating windows, the defaults of its keys.
- Batches: two sequences in one batch equal separate runs; chunked evaluation equals one batch;
  thread counts do not change results.
"""
import numpy as np
import pytest

from reference.fixtures import add_minimal_hparams, tiny_model_maker, ARCHS, write_tiny_model
from reference.forward import ReferenceModel

core = pytest.importorskip("edgellm._core")

PROMPT = [3, 17, 42, 5, 9, 60, 11, 2, 33, 71, 8, 19, 50, 4]  # longer than the gemma3 window (4)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """tiny(arch, **kwargs) -> path of a cached tiny model."""
    return tiny_model_maker(tmp_path_factory.mktemp("tiny_models"))


def engine_logits(path, ids, kv_type="F32", n_threads=2, **runner_kw):
    model = core.Model(path, n_threads=n_threads)
    runner = core.ModelRunner(model, n_ctx=128, kv_type=kv_type, **runner_kw)
    return runner.eval(ids, all_logits=True)


@pytest.mark.parametrize("arch", ARCHS)
def test_f32_weights_match_reference(tiny, arch):
    path = tiny(arch)
    ref = ReferenceModel(path).forward(PROMPT)
    got = engine_logits(path, PROMPT)
    assert got.shape == ref.shape == (len(PROMPT), 96)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_q8_family_weights_match_reference_with_activation_rounding(tiny, arch):
    # Q8_0, Q4_0 and Q5_0 weights all dot against Q8_0 activations.
    path = tiny(arch, weight_type="Q8_0", type_of=lambda n: "Q4_0" if "ffn" in n else ("Q5_0" if "attn_v" in n else None))
    ref = ReferenceModel(path, simulate_activation_quant=True).forward(PROMPT)
    got = engine_logits(path, PROMPT)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-3 * scale)


@pytest.mark.parametrize("weight_type", ["F16", "mixed"])
def test_other_weight_types_stay_close_to_exact(tiny, weight_type):
    # F16 and the Q4_1/Q5_1 family (Q8_1 activations): same answer up to activation rounding.
    path = tiny("llama", weight_type=weight_type)
    exact = ReferenceModel(path).forward(PROMPT)
    got = engine_logits(path, PROMPT)
    scale = np.abs(exact).max()
    assert np.abs(got - exact).max() < (0.005 if weight_type == "F16" else 0.08) * scale
    assert (got.argmax(1) == exact.argmax(1)).mean() >= 0.85


@pytest.mark.parametrize("kv_type,tol,agree", [("F16", 0.01, 1.0), ("Q8_0", 0.06, 0.85)])
def test_kv_cache_types(tiny, kv_type, tol, agree):
    path = tiny("qwen3")
    exact = ReferenceModel(path).forward(PROMPT)
    got = engine_logits(path, PROMPT, kv_type=kv_type)
    assert np.abs(got - exact).max() < tol * np.abs(exact).max()
    assert (got.argmax(1) == exact.argmax(1)).mean() >= agree


def test_gemma3_window_pattern_as_bool_array_and_softcap(tiny):
    path = tiny("gemma3", n_layer=3, sliding_window_pattern=[False, True, True], softcap=5.0, rope_scaling_factor=2.0)
    model = core.Model(path, n_threads=1)
    cfg = model.config
    assert cfg["layer_window"] == [0, 4, 4]
    assert cfg["logit_softcap"] == 5.0 and cfg["rope_freq_scale"] == 0.5 and cfg["rope_freq_scale_swa"] == 1.0
    ref = ReferenceModel(path).forward(PROMPT)
    assert np.abs(ref).max() <= 5.0
    np.testing.assert_allclose(engine_logits(path, PROMPT), ref, rtol=0, atol=1e-4)


def test_llama_rope_freq_factors_and_untied_gemma(tiny):
    for path in (tiny("llama", rope_freqs=True), tiny("gemma3", tied_output=False, sliding_window=0)):
        np.testing.assert_allclose(engine_logits(path, PROMPT), ReferenceModel(path).forward(PROMPT), rtol=0, atol=1e-4)


def test_phi3_longrope_factors_follow_the_context(tiny):
    # Original context 128 of 512 trained: a model run at n_ctx 512 (the default here) takes the
    # long factors, at 64 the short ones; both with the attention factor on cos/sin, n_rot 24 of 32.
    path = tiny("phi3", n_rot=24)
    cfg = core.Model(path).config
    assert cfg["n_ctx_orig"] == 128 and cfg["n_rot"] == 24 and cfg["rope_type"] == "neox"
    assert abs(cfg["rope_attn_factor"] - (1 + np.log(4) / np.log(128)) ** 0.5) < 1e-6
    assert cfg["layer_window"] == [4, 4, 4]  # attention.sliding_window on every layer
    long_ = engine_logits(path, PROMPT)
    short = core.ModelRunner(core.Model(path, n_threads=2, n_ctx=64), n_ctx=64, kv_type="F32").eval(PROMPT, all_logits=True)
    np.testing.assert_allclose(long_, ReferenceModel(path).forward(PROMPT), rtol=0, atol=1e-4)
    np.testing.assert_allclose(short, ReferenceModel(path, n_ctx=64).forward(PROMPT), rtol=0, atol=1e-4)
    assert np.abs(long_ - short).max() > 1e-2
    # Phi-3-mini-4k style: no LongRoPE, separate q/k/v tensors, no window (0 = Phi-4's "none").
    plain = tiny("phi3", longrope=False, fused_qkv=False, sliding_window=0)
    assert core.Model(plain).config["layer_window"] == [0, 0, 0]
    np.testing.assert_allclose(engine_logits(plain, PROMPT), ReferenceModel(plain).forward(PROMPT), rtol=0, atol=1e-4)
    # A window as long as the trained context is none (Phi-3.5 stores 262144 of 131072).
    assert core.Model(tiny("phi3", sliding_window=512)).config["layer_window"] == [0, 0, 0]


def test_phi3_missing_and_misshaped_fused_tensors_are_named(tmp_path):
    import gguf
    src = gguf.GGUFReader(str(write_tiny_model(tmp_path / "ok.gguf", "phi3")))

    def rewrite(name, drop=(), reshape=None):
        w = gguf.GGUFWriter(str(tmp_path / name), "phi3")
        for f in src.fields.values():
            if f.name.startswith("GGUF.") or f.name == "general.architecture":
                continue
            t = f.types[0]
            if t == gguf.GGUFValueType.ARRAY:
                w.add_key_value(f.name, f.contents(), t, sub_type=f.types[-1])
            else:
                w.add_key_value(f.name, f.contents(), t)
        for t in src.tensors:
            if t.name in drop:
                continue
            a = np.asarray(t.data)
            if t.name == reshape:
                a = a[: a.shape[0] // 2]
            w.add_tensor(t.name, a)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return str(tmp_path / name)

    with pytest.raises(core.ModelFormatError, match=r"required tensor blk\.0\.attn_qkv\.weight is missing"):
        core.Model(rewrite("noqkv.gguf", drop={"blk.0.attn_qkv.weight"}))
    with pytest.raises(core.ModelFormatError, match=r"blk\.1\.ffn_up\.weight has shape \{64, 128\}, expected \{64, 256\}"):
        core.Model(rewrite("halfup.gguf", reshape="blk.1.ffn_up.weight"))
    with pytest.raises(core.ModelFormatError, match=r"rope_factors_long\.weight is missing"):
        core.Model(rewrite("nolong.gguf", drop={"rope_factors_long.weight"}))


def test_gemma2_softcaps_windows_and_defaults(tiny):
    path = tiny("gemma2", n_layer=4, softcap=8.0, attn_softcap=2.0)
    cfg = core.Model(path).config
    assert cfg["layer_window"] == [4, 0, 4, 0]  # period 2: even layers local
    assert cfg["attn_softcap"] == 2.0 and cfg["logit_softcap"] == 8.0
    assert cfg["embed_scale"] == pytest.approx(8.0) and cfg["attn_scale"] == pytest.approx(32 ** -0.5)
    assert cfg["rope_freq_base_swa"] == cfg["rope_freq_base"] and cfg["rope_type"] == "neox"
    got = engine_logits(path, PROMPT)
    np.testing.assert_allclose(got, ReferenceModel(path).forward(PROMPT), rtol=0, atol=1e-4)
    assert np.abs(got).max() <= 8.0
    # The attention cap bites: without it the answer differs.
    loose = tiny("gemma2", n_layer=4, softcap=8.0, attn_softcap=0.0)
    assert core.Model(loose).config["attn_softcap"] == 0.0
    assert np.abs(engine_logits(loose, PROMPT) - got).max() > 1e-3
    # Keys absent: window 4096 on even layers, caps 50 and 30 (llama.cpp's defaults).
    bare = tiny("gemma2", sliding_window=None, attn_softcap=None, softcap=None)
    cfg = core.Model(bare).config
    assert cfg["layer_window"] == [4096, 0, 4096] and cfg["attn_softcap"] == 50.0 and cfg["logit_softcap"] == 30.0
    np.testing.assert_allclose(engine_logits(bare, PROMPT), ReferenceModel(bare).forward(PROMPT), rtol=0, atol=1e-4)
    # query_pre_attn_scalar is n_embd / n_head for the 27B (46 layers), else head_dim.
    assert core.Model(tiny("gemma2", n_layer=46)).config["attn_scale"] == pytest.approx((64 / 4) ** -0.5)
    # A chunked prompt, windows crossing pages, Q8_0 weights: still the reference.
    q8 = tiny("gemma2", weight_type="Q8_0")
    model = core.Model(q8, n_threads=2, max_batch_tokens=5)
    runner = core.ModelRunner(model, n_ctx=64, kv_type="F32", page_size=4)
    ids = (PROMPT * 2)[:25]
    ref = ReferenceModel(q8, simulate_activation_quant=True).forward(ids)
    np.testing.assert_allclose(runner.eval(ids, all_logits=True), ref, rtol=0, atol=2e-3 * np.abs(ref).max())


def test_local_layers_ignore_keys_outside_the_window(tiny):
    # All layers local (pattern 0), window 4, 2 layers: the last position (13) sees positions
    # >= 13 - 2 * 3 = 7 at most, so tokens 0..6 cannot matter; token 10 does.
    path = tiny("gemma3", n_layer=2, sliding_window=4, sliding_window_pattern=0)
    assert core.Model(path).config["layer_window"] == [4, 4]
    base = engine_logits(path, PROMPT)[-1]
    far = list(PROMPT)
    far[:7] = [90, 91, 92, 93, 94, 95, 1]
    near = list(PROMPT)
    near[10] = 90
    np.testing.assert_array_equal(engine_logits(path, far)[-1], base)
    assert np.abs(engine_logits(path, near)[-1] - base).max() > 1e-3
    # and the reference, which masks p_q - p_k >= window, agrees
    np.testing.assert_allclose(engine_logits(path, far), ReferenceModel(path).forward(far), rtol=0, atol=1e-4)


def test_window_longer_prompt_than_pages_with_trimming(tiny):
    # Runner pages of 4 tokens with a window of 4: pages leave the window and are returned
    # while the prompt is fed in chunks; results still match the reference.
    path = tiny("gemma3", sliding_window=4, sliding_window_pattern=2)
    ids = (PROMPT * 3)[:40]
    model = core.Model(path, n_threads=2, max_batch_tokens=8)
    runner = core.ModelRunner(model, n_ctx=64, kv_type="F32", page_size=4)
    got = runner.eval(ids, all_logits=True)
    np.testing.assert_allclose(got, ReferenceModel(path).forward(ids), rtol=0, atol=1e-4)


def test_two_sequences_in_one_batch_equal_separate_runs(tiny):
    path = tiny("qwen2")
    model = core.Model(path, n_threads=2)
    a, b = PROMPT[:9], PROMPT[3:14]
    # Interleaved tokens of two sequences; every token wants logits.
    order = [(0, i) for i in range(len(a))] + [(1, i) for i in range(len(b))]
    order.sort(key=lambda sp: (sp[1], sp[0]))
    runner = core.BatchRunner(model, n_seqs=2, n_ctx=64)
    toks = [(a if s == 0 else b)[p] for s, p in order]
    out = runner.forward(toks, [p for _, p in order], [s for s, _ in order], [1] * len(order))
    sep_a = engine_logits(path, a)
    sep_b = engine_logits(path, b)
    for row, (s, p) in enumerate(order):
        np.testing.assert_allclose(out[row], (sep_a if s == 0 else sep_b)[p], rtol=0, atol=1e-5)
    # decode step: one token each, in one batch, continuing both
    step = runner.forward([7, 8], [len(a), len(b)], [0, 1], [1, 1])
    np.testing.assert_allclose(step[0], engine_logits(path, a + [7])[-1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(step[1], engine_logits(path, b + [8])[-1], rtol=0, atol=1e-5)


def test_only_flagged_rows_produce_logits(tiny):
    path = tiny("llama")
    runner = core.BatchRunner(core.Model(path), n_seqs=1, n_ctx=64)
    out = runner.forward(PROMPT[:5], list(range(5)), [0] * 5, [0, 1, 0, 0, 1])
    full = engine_logits(path, PROMPT[:5])
    assert out.shape == (2, 96)
    np.testing.assert_allclose(out, full[[1, 4]], rtol=0, atol=1e-5)


def test_chunked_and_incremental_eval_equal_one_batch(tiny):
    path = tiny("gemma3")
    whole = engine_logits(path, PROMPT)
    model = core.Model(path, n_threads=2, max_batch_tokens=3)  # eval splits into chunks of 3
    runner = core.ModelRunner(model, n_ctx=64, kv_type="F32")
    # chunks of 3 queries take the row-wise attention path, the whole prompt the tiled one
    np.testing.assert_allclose(runner.eval(PROMPT, all_logits=True), whole, rtol=1e-6, atol=1e-5)
    runner.reset()
    assert runner.n_past == 0
    rows = [runner.eval([t]) for t in PROMPT]
    assert runner.n_past == len(PROMPT)
    # one token at a time: row-wise attention again; equal to float rounding (relative 1e-6 of
    # logits up to ~70)
    np.testing.assert_allclose(np.stack(rows), whole, rtol=1e-6, atol=1e-5)


def test_thread_count_does_not_change_results(tiny):
    path = tiny("qwen3", weight_type="Q8_0")
    one = engine_logits(path, PROMPT, n_threads=1)
    for n in (2, 3):
        np.testing.assert_array_equal(engine_logits(path, PROMPT, n_threads=n), one)


def test_greedy_follows_argmax_and_stops(tiny):
    path = tiny("llama")
    ref = ReferenceModel(path)
    runner = core.ModelRunner(core.Model(path), n_ctx=64, kv_type="F32")
    out = runner.greedy(PROMPT[:4], 6)
    ids = list(PROMPT[:4])
    for _ in range(6):
        ids.append(int(ref.forward(ids)[-1].argmax()))
    assert out == ids[4:]
    runner.reset()
    stopped = runner.greedy(PROMPT[:4], 6, stop_ids=[out[1]])
    assert stopped == out[:2]


# ---- errors ----

def test_context_length_and_bad_ids(tiny):
    path = tiny("llama")
    runner = core.ModelRunner(core.Model(path), n_ctx=16, kv_type="F32")
    runner.eval(PROMPT[:10])
    with pytest.raises(core.ContextLengthError, match=r"10 tokens in the context \+ 7 new = 17 exceeds n_ctx = 16"):
        runner.eval(PROMPT[:7])
    assert runner.n_past == 10  # nothing appended
    with pytest.raises(core.InvalidRequestError, match="token id 96"):
        runner.eval([1, 96])
    with pytest.raises(core.InvalidRequestError, match="kv_type"):
        core.ModelRunner(core.Model(path), kv_type="Q4_0")


def test_batch_larger_than_max_batch_tokens_is_rejected(tiny):
    model = core.Model(tiny("llama"), max_batch_tokens=4)
    runner = core.BatchRunner(model, n_seqs=1, n_ctx=64)
    with pytest.raises(core.InvalidRequestError, match="exceeds max_batch_tokens = 4"):
        runner.forward(PROMPT[:5], list(range(5)), [0] * 5, [1] * 5)


def test_unsupported_arch_and_missing_key_and_bad_shape(tmp_path):
    import gguf

    def write(arch, drop_key=None, bad_tensor=None):
        p = tmp_path / f"{arch}-{drop_key}-{bad_tensor}.gguf"
        w = gguf.GGUFWriter(str(p), arch)
        add_minimal_hparams(w, block_count=drop_key != "block_count")
        w.add_tensor("token_embd.weight", np.zeros((8, 32 if bad_tensor != "token_embd" else 16), np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return str(p)

    with pytest.raises(core.ModelFormatError, match=r"mamba.*not supported.*gemma2, gemma3, gpt-oss, llama, olmoe, phi3, qwen2, qwen2vl, qwen2moe, qwen3, qwen3moe"):
        core.Model(write("mamba"))
    with pytest.raises(core.ModelFormatError, match=r"llama\.block_count"):
        core.Model(write("llama", drop_key="block_count"))
    with pytest.raises(core.ModelFormatError, match=r"token_embd\.weight has shape \{16, 8\}, expected \{32, 8\}"):
        core.Model(write("llama", bad_tensor="token_embd"))
    with pytest.raises(core.ModelFormatError, match=r"required tensor output_norm\.weight is missing"):
        core.Model(write("llama"))
