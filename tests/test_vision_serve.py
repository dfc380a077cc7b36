"""Projectors of a many-model `edgellm serve` (--mmproj MODEL=PATH, llama-server's folder of a model
and its mmproj*.gguf in --models-dir) and the projector in `edgellm info` and the memory plan, on
the tiny Gemma 3 fixture (tests/data/vision)."""
import json
import shutil
import subprocess
import sys

import click
import httpx
import pytest

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
from test_server_models import _serve, _stop, _wait_up  # noqa: E402
from test_vision import MMPROJ, MODEL, data_uri, messages, png  # noqa: E402


def _chat(url, model):
    return httpx.post(url + "/v1/chat/completions", timeout=120, json={
        "model": model, "messages": messages(0), "max_tokens": 2, "temperature": 0})


def test_each_model_its_projector(tmp_path):
    shutil.copy(MODEL, tmp_path / "a.gguf")
    shutil.copy(MODEL, tmp_path / "b.gguf")
    (tmp_path / "dir" / "vis").mkdir(parents=True)
    shutil.copy(MODEL, tmp_path / "dir" / "vis" / "gemma3-tiny.gguf")
    shutil.copy(MMPROJ, tmp_path / "dir" / "vis" / "mmproj-gemma3-tiny.gguf")
    shutil.copy(MMPROJ, tmp_path / "dir" / "mmproj-stray.gguf")  # a projector is never a model
    a = str(tmp_path / "a.gguf")
    proc, url = _serve(a, str(tmp_path / "b.gguf"), "--models-dir", str(tmp_path / "dir"),
                       "--mmproj", f"{a}={MMPROJ}", "-c", "256", "-t", "1", "-np", "2")
    try:
        _wait_up(proc, url)
        ids = sorted(m["id"] for m in httpx.get(url + "/v1/models").json()["data"])
        assert ids == ["a", "b", "vis"]
        assert _chat(url, "a").status_code == 200     # --mmproj a.gguf=...
        assert _chat(url, "vis").status_code == 200   # found beside it in its folder
        r = _chat(url, "b")                           # none given, none beside it
        assert r.status_code == 400 and "takes no images" in r.json()["error"]["message"]
        cards = {m["id"]: m["meta"] for m in httpx.get(url + "/v1/models").json()["data"]}
        assert cards["a"]["mmproj"] == MMPROJ and cards["vis"]["modalities"] == ["text", "image"]
        assert "mmproj" not in cards["b"]
        # the projector's bytes are in each model's memory plan
        assert cards["a"]["memory_bytes"] > cards["b"]["memory_bytes"]
    finally:
        _stop(proc)


def test_mmproj_option_errors():
    from edgellm.commands.serve import _projectors

    assert _projectors((MMPROJ,), ("m.gguf",), {}, False) == (MMPROJ, {})
    assert _projectors((f"m.gguf={MMPROJ}",), ("m.gguf", "n.gguf"), {}, True) == (None, {"m.gguf": MMPROJ})
    assert _projectors((f"chat={MMPROJ}",), ("m.gguf",), {"chat": "m.gguf"}, True) == (None, {"chat": MMPROJ})
    for given, models, many, match in [
            ((MMPROJ,), ("m.gguf", "n.gguf"), True, "MODEL=PATH"),
            ((f"x.gguf={MMPROJ}",), ("m.gguf", "n.gguf"), True, "no MODEL given"),
            (("m.gguf=/nowhere.gguf",), ("m.gguf", "n.gguf"), True, "not a file"),
            ((MMPROJ, MMPROJ), ("m.gguf",), False, "one --mmproj")]:
        with pytest.raises(click.BadParameter, match=match):
            _projectors(given, models, {}, many)


def test_info_and_plan_count_the_projector(tmp_path):
    from edgellm.memory_plan import plan

    shutil.copy(MODEL, tmp_path / "m.gguf")
    bare = plan(str(tmp_path / "m.gguf"), 256, 1)
    shutil.copy(MMPROJ, tmp_path / "mmproj-m.gguf")
    p = plan(str(tmp_path / "m.gguf"), 256, 1)  # found beside the model, as LLM finds it
    with edgellm.ModelFile(MMPROJ) as mf:
        nbytes = sum(t.nbytes for t in mf.tensors.values())
    assert p.projector == str(tmp_path / "mmproj-m.gguf") and p.projector_bytes == nbytes
    assert p.total == bare.total + nbytes and "vision projector" in p.table()
    assert plan(str(tmp_path / "m.gguf"), 256, 1, mmproj=False).total == bare.total
    with edgellm.LLM(str(tmp_path / "m.gguf"), n_ctx=256, n_threads=1, max_seqs=1) as llm:
        assert llm.memory_plan.projector_bytes == nbytes  # what was loaded is in its plan
        assert llm.chat(messages(0, data_uri(png(0))), edgellm.SamplingParams(max_tokens=1)).text is not None
    out = subprocess.run([sys.executable, "-m", "edgellm", "info", str(tmp_path / "m.gguf"), "--json"],
                         capture_output=True, text=True, check=True).stdout
    proj = json.loads(out)["projector"]
    assert proj["projector_type"] == "gemma3" and proj["bytes"] == nbytes and proj["image_size"] == 112


def test_eight_concurrent_image_requests_are_batched_and_exact():
    """8 requests about 3 images: each image encoded once (the others are cache hits), every
    answer transformers' (the first 8 tokens), and the engine runs them together: 64 tokens each
    take far fewer steps than the 8 x 64 that one after another would."""
    import numpy as np
    from test_vision import DATA, check_against_reference

    ref = np.load(f"{DATA}/gemma3.npz")
    n_new = 64
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=1, max_seqs=8, kv_type="f32",
                     prefix_cache=False) as m:
        prompts = [m.chat_renderer.request(messages(i % 3), None, None, None, None, None)[0] for i in range(8)]
        st = m.stats()
        assert (st["images_encoded"], st["image_cache_hits"]) == (3, 5)
        params = edgellm.SamplingParams(temperature=0, max_tokens=n_new, ignore_eos=True, logprobs=5)
        handles = [m.submit(p, params) for p in prompts]
        outs = [h.result() for h in handles]
        steps = m.stats()["steps"]
    for i, out in enumerate(outs):
        assert len(out.token_ids) == n_new
        check_against_reference(ref, i % 3, out.token_ids[:8], [(t.token_id, t.logprob) for t in
                                                                 out.logprobs[0].top_logprobs])
    assert steps < 8 * n_new // 2, steps  # one after another: >= 512 steps


def test_concurrent_requests_for_one_image_encode_it_once():
    """8 requests about the same image arriving together: one encodes it, the other 7 wait for that
    encode (image_encode_joins) and take its result from the cache — not 8 encodes. A stand-in
    encoder holds the first encode until the other 7 have joined it, or until 8 encodes are running
    (what happens without the join), so the outcome does not depend on timing."""
    import threading

    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=1, max_seqs=8, kv_type="f32",
                     prefix_cache=False) as m:
        v = m.chat_renderer.vision
        real, cond = v.encoder, threading.Condition()
        inside = [0]

        class Gate:
            def __getattr__(self, name):
                return getattr(real, name)

            def encode(self, pixels):
                with cond:
                    inside[0] += 1
                    for _ in range(60000):  # a bound so a broken join cannot hang the suite
                        if getattr(v, "encode_joins", 0) + inside[0] >= 8:
                            break
                        cond.wait(0.005)
                return real.encode(pixels)

        v.encoder = Gate()
        barrier = threading.Barrier(8)
        prompts, errors = [None] * 8, []

        def one(i):
            try:
                barrier.wait()
                prompts[i] = m.chat_renderer.request(messages(0), None, None, None, None, None)[0]
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        st = m.stats()
        assert (st["images_encoded"], st.get("image_encode_joins"), st["image_cache_hits"]) == (1, 7, 7), st
        # the 8 prompts carry the same embeddings
        assert all(p.images[0][1] == prompts[0].images[0][1] for p in prompts)


def test_a_projector_that_does_not_fit_its_model_is_named(tmp_path, smollm2_path):
    """--mmproj MODEL=PATH of a projector for another text model (SmolLM2's width and architecture
    are not Gemma 3's): that model's load fails with a typed error naming the mismatch (500
    model_load_failed: the operator's file, not the request), the other models still serve."""
    smol = str(smollm2_path)
    shutil.copy(MODEL, tmp_path / "a.gguf")
    a = str(tmp_path / "a.gguf")
    proc, url = _serve(a, smol, "--mmproj", f"{smol}={MMPROJ}", "--mmproj", f"{a}={MMPROJ}",
                       "-c", "256", "-t", "1", "-np", "1")
    try:
        _wait_up(proc, url)
        r = httpx.post(url + "/v1/chat/completions", timeout=120, json={
            "model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
        err = r.json()["error"]
        assert r.status_code == 500 and err["code"] == "model_load_failed", r.text
        assert "mmproj-gemma3-tiny.gguf" in err["message"] and "projector does not fit" in err["message"]
        assert _chat(url, "a").status_code == 200
    finally:
        _stop(proc)
