"""LoRA adapters (docs/formats.md §1.8, cpp/src/model/lora*.{h,cpp}, edgellm/convert/lora.py):
PEFT adapters on tests/hf_checkpoints.py's tiny random bases, recorded by
tests/data/lora/make_lora_fixtures.py (transformers + peft: the merged model's logits; llama.cpp's
convert_lora_to_gguf.py output). The engine runs the adapter unmerged, beside the base matmul."""
import json
import os
import shutil

import numpy as np
import pytest

import hf_checkpoints as hc

core = pytest.importorskip("edgellm._core")
from edgellm.convert import ConvertError, convert  # noqa: E402
from edgellm.convert.lora import convert_lora  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "lora")
ADAPTERS = ["llama_r4_qv", "llama_r16_all", "llama_r64_mlp_o", "llama_r8_qk", "qwen2_r8_all", "phi3_r16_fused"]


def arch_of(name):
    return name.split("_")[0]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """arch -> (HF folder, F32 GGUF) of the tiny base."""
    root = tmp_path_factory.mktemp("lora_base")
    cache = {}

    def make(arch):
        if arch not in cache:
            d = hc.write_checkpoint(root / arch, arch)
            out = root / f"{arch}.gguf"
            convert(str(d), str(out), "F32")
            cache[arch] = (str(d), str(out))
        return cache[arch]

    return make


@pytest.fixture(scope="module")
def engines(base):
    cache = {}

    def make(arch):
        if arch not in cache:
            cache[arch] = core.Engine(base(arch)[1], n_threads=2, n_ctx=128, kv_type="f32", max_seqs=8)
        return cache[arch]

    yield make
    for e in cache.values():
        e.close()


@pytest.fixture(scope="module")
def ours(base, tmp_path_factory):
    """name -> our conversion (F32) of the PEFT folder."""
    root = tmp_path_factory.mktemp("lora_ours")
    cache = {}

    def make(name):
        if name not in cache:
            out = root / f"{name}.gguf"
            convert_lora(os.path.join(DATA, name), str(out), base(arch_of(name))[0], "F32")
            cache[name] = str(out)
        return cache[name]

    return make


@pytest.mark.parametrize("name", ADAPTERS)
def test_logits_equal_the_merged_reference(engines, ours, name):
    ref = np.load(os.path.join(DATA, f"{name}.npz"))
    eng = engines(arch_of(name))
    base_logits = eng.eval_logits(hc.PROMPT)
    np.testing.assert_allclose(base_logits, ref["base_logits"], rtol=0, atol=1e-3)
    assert np.abs(ref["logits"] - ref["base_logits"]).max() > 0.1  # the adapter matters
    for path in (ours(name), os.path.join(DATA, f"{name}.llamacpp.gguf")):
        ad = eng.load_lora(path)
        got = eng.eval_logits(hc.PROMPT, lora=[(ad, 1.0)])
        np.testing.assert_allclose(got, ref["logits"], rtol=0, atol=1e-3, err_msg=path)
        # a prompt of more than 64 tokens takes the two-stage path (LoraScratch): its first rows
        # are the short prompt's
        long = eng.eval_logits(hc.PROMPT * 8, lora=[(ad, 1.0)])
        np.testing.assert_allclose(long[: len(hc.PROMPT)], got, rtol=0, atol=1e-4)
        # scale 0 is the base, exactly
        np.testing.assert_array_equal(eng.eval_logits(hc.PROMPT, lora=[(ad, 0.0)]), base_logits)


@pytest.mark.parametrize("name", ADAPTERS)
def test_our_file_equals_llamacpps(ours, name):
    import gguf

    a = gguf.GGUFReader(ours(name))
    b = gguf.GGUFReader(os.path.join(DATA, f"{name}.llamacpp.gguf"))
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    assert set(ta) == set(tb)
    for n in ta:
        assert list(ta[n].shape) == list(tb[n].shape), n
        np.testing.assert_array_equal(np.asarray(ta[n].data), np.asarray(tb[n].data), err_msg=n)
    for key in ("general.architecture", "general.type", "adapter.type", "adapter.lora.alpha"):
        fa, fb = a.fields[key], b.fields[key]
        assert fa.contents() == fb.contents(), key


def test_greedy_tokens_of_the_merged_model(engines, ours):
    name = "llama_r16_all"
    ref = np.load(os.path.join(DATA, f"{name}.npz"))
    eng = engines("llama")
    ad = eng.load_lora(ours(name))
    toks = _greedy(eng, hc.PROMPT, hc.N_GREEDY, [(ad, 1.0)])
    assert toks == ref["greedy"].tolist()


def _wait(ch):
    while True:
        ev = ch.pop(1.0)
        if ev is not None and ev.finished:
            assert not ev.error, ev.error
            return list(ev.token_ids), [lp[1] for lp in ev.logprobs]


def _params(n):
    from edgellm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=n, logprobs=1).to_core()


def _greedy(eng, prompt, n, lora, logprobs=False):
    ch = core.OutputChannel()
    eng.submit(list(prompt), _params(n), ch, stream=False, lora=lora)
    toks, lps = _wait(ch)
    return (toks, lps) if logprobs else toks


def test_a_mixed_batch_equals_each_request_alone(engines, ours):
    """The base and three adapters (one at scale 0.5, one a mix of two) in one batch give, per
    request, exactly the tokens and log-probs they give alone."""
    eng = engines("llama")
    a = eng.load_lora(ours("llama_r4_qv"))
    b = eng.load_lora(ours("llama_r16_all"))
    c = eng.load_lora(ours("llama_r64_mlp_o"))
    mixes = [None, [(a, 1.0)], [(b, 0.5)], [(c, 1.0)], [(a, 1.0), (c, 0.7)], None, [(b, 0.5)]]
    prompts = [hc.PROMPT[: 4 + i] for i in range(len(mixes))]
    alone = [_greedy(eng, p, 10, m, logprobs=True) for p, m in zip(prompts, mixes)]
    chans = []
    for p, m in zip(prompts, mixes):
        ch = core.OutputChannel()
        eng.submit(list(p), _params(10), ch, stream=False, lora=m)
        chans.append(ch)
    together = [_wait(ch) for ch in chans]
    assert together == alone
    assert len({tuple(t) for t, _ in alone[:5]}) >= 4  # the adapters do change the outputs


def _corrupt(src, dst, fn):
    shutil.copy(src, dst)
    data = bytearray(open(dst, "rb").read())
    fn(data)
    open(dst, "wb").write(bytes(data))
    return str(dst)


def test_bad_adapters_are_typed_errors(engines, ours, base, tmp_path):
    eng = engines("llama")
    good = ours("llama_r16_all")
    # another architecture's adapter
    with pytest.raises(core.ModelFormatError, match="architecture \"qwen2\""):
        eng.load_lora(ours("qwen2_r8_all"))
    # a model file is not an adapter
    with pytest.raises(core.ModelFormatError, match="not a LoRA adapter"):
        eng.load_lora(base("llama")[1])
    # truncated
    with pytest.raises(core.ModelFormatError):
        eng.load_lora(_corrupt(good, tmp_path / "trunc.gguf", lambda d: d.__delitem__(slice(len(d) // 2, None))))
    # garbage
    with pytest.raises(core.ModelFormatError):
        eng.load_lora(_corrupt(good, tmp_path / "garbage.gguf", lambda d: d.__setitem__(slice(0, 8), b"\0" * 8)))
    with pytest.raises(core.ModelFormatError):
        eng.load_lora(str(tmp_path / "missing.gguf"))


def _write_adapter(path, arch, tensors, alpha=8.0):
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    for n, t in tensors.items():
        w.add_tensor(n, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_rank_shape_and_pairing_errors_name_the_tensor(engines, tmp_path):
    eng = engines("llama")
    r = np.random.default_rng(0)
    f = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    q = "blk.0.attn_q.weight"
    with pytest.raises(core.ModelFormatError, match="rank mismatch.*attn_q"):
        eng.load_lora(_write_adapter(tmp_path / "rank.gguf", "llama", {q + ".lora_a": f(8, 64), q + ".lora_b": f(64, 4)}))
    with pytest.raises(core.ModelFormatError, match="attn_q.weight.lora_b"):
        eng.load_lora(_write_adapter(tmp_path / "shape.gguf", "llama", {q + ".lora_a": f(4, 64), q + ".lora_b": f(32, 4)}))
    with pytest.raises(core.ModelFormatError, match="has no blk.0.attn_q.weight.lora_b"):
        eng.load_lora(_write_adapter(tmp_path / "half.gguf", "llama", {q + ".lora_a": f(4, 64)}))
    with pytest.raises(core.ModelFormatError, match="blk.9.attn_q.weight.lora_a adapts no matrix"):
        eng.load_lora(_write_adapter(tmp_path / "layer.gguf", "llama",
                                     {"blk.9.attn_q.weight.lora_a": f(4, 64), "blk.9.attn_q.weight.lora_b": f(64, 4)}))
    with pytest.raises(core.ModelFormatError, match="not a LoRA tensor"):
        eng.load_lora(_write_adapter(tmp_path / "plain.gguf", "llama", {q: f(64, 64)}))


def test_peft_conversion_errors(base, tmp_path):
    src = os.path.join(DATA, "llama_r4_qv")
    # another base: phi3 has fused projections only
    with pytest.raises(ConvertError, match="adapts self_attn.q_proj, which is not a projection of phi3"):
        convert_lora(src, str(tmp_path / "x.gguf"), base("phi3")[0])
    # another base whose shapes differ
    wide = tmp_path / "wide"
    shutil.copytree(base("llama")[0], wide)
    cfg = json.load(open(wide / "config.json"))
    json.dump(dict(cfg, intermediate_size=128), open(wide / "config.json", "w"))
    with pytest.raises(ConvertError, match="do not fit the base"):
        convert_lora(os.path.join(DATA, "llama_r64_mlp_o"), str(tmp_path / "x.gguf"), str(wide))
    d = tmp_path / "dora"
    shutil.copytree(src, d)
    cfg = json.load(open(d / "adapter_config.json"))
    json.dump(dict(cfg, use_dora=True), open(d / "adapter_config.json", "w"))
    with pytest.raises(ConvertError, match="use_dora"):
        convert_lora(str(d), str(tmp_path / "x.gguf"), base("llama")[0])
    # no --base and a base_model_name_or_path that is not a folder
    with pytest.raises(ConvertError, match="--base"):
        convert_lora(src, str(tmp_path / "x.gguf"))
    # a truncated safetensors file
    t = tmp_path / "trunc"
    shutil.copytree(src, t)
    st = t / "adapter_model.safetensors"
    data = open(st, "rb").read()
    open(st, "wb").write(data[: len(data) - 100])
    with pytest.raises(ConvertError):
        convert_lora(str(t), str(tmp_path / "x.gguf"), base("llama")[0])
    assert not os.path.exists(tmp_path / "x.gguf")


def test_cli_converts_a_peft_folder(base, tmp_path):
    from click.testing import CliRunner

    from edgellm.cli import main

    out = tmp_path / "a.gguf"
    r = CliRunner().invoke(main, ["convert", os.path.join(DATA, "llama_r4_qv"), str(out), "--base",
                                  base("llama")[0], "--type", "F32"])
    assert r.exit_code == 0, r.output
    assert "LoRA adapter" in r.output and out.exists()


def _cached(eng, prompt, lora):
    ch = core.OutputChannel()
    eng.submit(list(prompt), _params(2), ch, stream=False, lora=lora)
    while True:
        ev = ch.pop(1.0)
        if ev is not None and ev.finished:
            return ev.cached_tokens, list(ev.token_ids)


def test_prefix_cache_keys_pages_by_adapter(base, ours):
    eng = core.Engine(base("llama")[1], n_threads=2, n_ctx=128, kv_type="f32", page_size=16)
    try:
        a = eng.load_lora(ours("llama_r16_all"))
        prompt = (hc.PROMPT * 4)[:40]
        assert _cached(eng, prompt, None)[0] == 0
        assert _cached(eng, prompt, None)[0] == 32  # the base's own pages
        first = _cached(eng, prompt, [(a, 1.0)])
        assert first[0] == 0  # never the base's pages
        again = _cached(eng, prompt, [(a, 1.0)])
        assert again == (32, first[1])  # its own, with the same result
        assert _cached(eng, prompt, [(a, 0.5)])[0] == 0  # another scale is another mix
    finally:
        eng.close()


def test_prompt_lookup_drafts_keep_adapter_results(base, ours):
    """n-gram speculation on a repetitive prompt: the verified tokens are the adapter's."""
    spec = core.Engine(base("llama")[1], n_threads=2, n_ctx=128, kv_type="f32", speculative="ngram",
                       spec_adaptive=False)
    plain = core.Engine(base("llama")[1], n_threads=2, n_ctx=128, kv_type="f32", speculative="off")
    try:
        prompt = hc.PROMPT * 3
        outs = []
        for eng in (spec, plain):
            ad = eng.load_lora(ours("llama_r4_qv"))
            outs.append(_greedy(eng, prompt, 24, [(ad, 1.0)], logprobs=True))
        assert outs[0][0] == outs[1][0]
        np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=0, atol=1e-4)
        assert spec.stats()["spec_drafted"] > 0
    finally:
        spec.close()
        plain.close()


def test_llm_surface_load_select_unload(base, ours):
    import edgellm
    from edgellm import LLM, SamplingParams

    llm = LLM(base("llama")[1], n_ctx=64, n_threads=2, kv_type="f32",
              lora={"qv": ours("llama_r4_qv"), "all": (ours("llama_r16_all"), 0.5)})
    try:
        assert [(e.id, e.name, e.scale, e.rank) for e in llm.loras] == [(0, "qv", 1.0, 4), (1, "all", 0.5, 16)]
        sizes = [e.nbytes for e in llm.loras]
        assert llm.memory_plan.lora_adapters == 2 and llm.memory_plan.lora_bytes == sum(sizes) > 0
        assert "LoRA adapters" in llm.memory_plan.table()
        greedy = lambda lora: llm.generate(hc.PROMPT, SamplingParams(temperature=0, max_tokens=6, lora=lora)).token_ids  # noqa: E731
        base_toks = greedy(None)
        eng = llm._engine
        want_all = _greedy(eng, hc.PROMPT, 6, [(llm.engine_client.loras.get("all").adapter, 0.5)])
        assert greedy("all") == want_all  # the loaded default scale
        assert greedy([("all", 0.5)]) == want_all == greedy([{"id": 1, "scale": 0.5}]) == greedy({"all": 0.5})
        assert greedy([("all", 0.0)]) == base_toks
        assert greedy("qv") != base_toks
        np.testing.assert_array_equal(llm.eval_logits(hc.PROMPT, lora=[("qv", 0.0)]), llm.eval_logits(hc.PROMPT))
        with pytest.raises(edgellm.InvalidRequestError, match="already loaded"):
            llm.load_lora("qv", ours("llama_r4_qv"))
        total = llm.memory_plan.total
        llm.unload_lora("qv")
        assert llm.memory_plan.total == total - sizes[0] and llm.memory_plan.lora_adapters == 1
        with pytest.raises(edgellm.LoraNotFoundError, match="'qv' is not loaded"):
            greedy("qv")
        with pytest.raises(edgellm.LoraNotFoundError):
            llm.unload_lora("qv")
        with pytest.raises(edgellm.InvalidRequestError):
            SamplingParams(lora=[("a", float("nan"))])
        llm.load_lora("qv2", ours("llama_r4_qv"))
        assert [e.id for e in llm.loras] == [1, 2]
        with pytest.raises(edgellm.ModelFormatError):
            llm.load_lora("bad", base("llama")[1])
    finally:
        llm.close()


def test_unload_while_running_finishes_the_running_request(base, ours):
    from edgellm import LLM, LoraNotFoundError, SamplingParams

    llm = LLM(base("llama")[1], n_ctx=64, n_threads=2, kv_type="f32", lora={"a": ours("llama_r16_all")})
    try:
        want = llm.generate(hc.PROMPT, SamplingParams(temperature=0, max_tokens=40, lora="a",
                                                      ignore_eos=True)).token_ids
        stream = llm.stream_chunks(hc.PROMPT, SamplingParams(temperature=0, max_tokens=40, lora="a", ignore_eos=True))
        it = iter(stream)
        first = next(it)
        llm.unload_lora("a")
        with pytest.raises(LoraNotFoundError):
            llm.generate(hc.PROMPT, SamplingParams(max_tokens=2, lora="a"))
        got = list(first.token_ids) + [t for c in it for t in c.token_ids]
        assert got == want
    finally:
        llm.close()


def test_run_cli_answers_with_the_adapter(base, ours):
    from click.testing import CliRunner

    from edgellm.cli import main

    def answer(*extra):
        r = CliRunner().invoke(main, ["run", base("llama")[1], "-n", "12", "--temp", "0", "--seed", "1",
                                      *extra, "hello there"])
        assert r.exit_code == 0, r.output
        return r.output

    plain = answer()
    with_lora = answer("--lora", ours("llama_r16_all"))
    assert with_lora != plain
    assert answer("--lora", f"x={ours('llama_r16_all')}:0") == plain  # scale 0: the base
    r = CliRunner().invoke(main, ["run", base("llama")[1], "--lora", base("llama")[1], "hi"])
    assert r.exit_code != 0 and "not a LoRA adapter" in r.output
