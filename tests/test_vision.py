"""Vision input (Gemma 3): llama.cpp's projector files, preprocessing, the encoder and image
blocks in prefill, against transformers. The references (tests/data/vision/gemma3.npz) and the
GGUFs (llama.cpp's convert_hf_to_gguf.py, F32, and its --mmproj output) come from
tests/data/vision/make_vision_fixtures.py's tiny random Gemma3ForConditionalGeneration."""
import base64
import io
import os
import shutil

import numpy as np
import pytest

import vision_images

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
from edgellm import vision  # noqa: E402
from edgellm.sampling_params import SamplingParams  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vision")
MODEL = os.path.join(DATA, "gemma3-tiny.gguf")
MMPROJ = os.path.join(DATA, "mmproj-gemma3-tiny.gguf")
QUESTIONS = ["Describe this image.", "What is in the picture?", "Count the shapes."]
LOGPROB_TOL = 0.05


@pytest.fixture(scope="module")
def ref():
    return np.load(os.path.join(DATA, "gemma3.npz"))


@pytest.fixture(scope="module")
def llm():
    m = edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=2, kv_type="f32", max_seqs=4)
    yield m
    m.close()


def png(i: int) -> bytes:
    with open(os.path.join(DATA, f"image{i}.png"), "rb") as f:
        return f.read()


def data_uri(b: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(b).decode()


def messages(i: int, url=None):
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url or data_uri(png(i))}},
                                         {"type": "text", "text": QUESTIONS[i]}]}]


def greedy(n=8):
    return SamplingParams(temperature=0.0, max_tokens=n, logprobs=5)


def check_against_reference(ref, i, tokens, first_top):
    """Greedy tokens equal, first step's top-5 log-probs within LOGPROB_TOL of transformers'."""
    assert list(tokens) == ref[f"greedy_{i}"].tolist()
    lp = ref[f"logprobs_{i}"]
    want = np.argsort(-lp)[:5]
    got = {t: l for t, l in first_top}
    assert set(got) == set(want.tolist())
    for t in want:
        assert abs(got[int(t)] - float(lp[t])) <= LOGPROB_TOL, (t, got[int(t)], lp[t])


# ---- preprocessing ---------------------------------------------------------------------------

def test_preprocessing_equals_transformers_on_20_images(ref):
    """Each PNG (RGB, RGBA, L, LA, P; odd sizes and aspect ratios) decoded and preprocessed as
    transformers' Gemma3ImageProcessor (PIL backend) does: max abs difference <= 1e-5."""
    specs = vision_images.preprocessing_images()
    assert len(specs) == 20
    for j, spec in enumerate(specs):
        im = vision.open_image(vision_images.png_bytes(spec))
        px = vision.preprocess(im, 112, [0.5] * 3, [0.5] * 3)
        want = ref[f"pre_pixels_{j}"]
        assert px.shape == want.shape == (3, 112, 112)
        assert np.abs(px - want).max() <= 1e-5, j


def test_reference_images_pixels_and_prompt_ids(llm, ref):
    v = llm.chat_renderer.vision
    for i in range(3):
        assert np.abs(v.pixels(png(i)) - ref[f"pixels_{i}"]).max() <= 1e-5
        ids = llm.chat_renderer.request(messages(i), None, None, None, None, None)[0]
        assert list(ids) == ref[f"ids_{i}"].tolist()  # the processor's markup, tokenized alike
        assert [(p, e.shape) for p, _, e in ids.images] == [(9, (16, 64))]


# ---- the model against transformers ----------------------------------------------------------

def test_llm_chat_matches_transformers(llm, ref):
    for i in range(3):
        out = llm.chat(messages(i), greedy())
        check_against_reference(ref, i, [t.token_id for t in out.logprobs],
                                [(t.token_id, t.logprob) for t in out.logprobs[0].top_logprobs])


def test_same_image_again_reuses_the_cache(llm, ref):
    before = llm.stats()
    out = llm.chat(messages(2), greedy())
    after = llm.stats()
    check_against_reference(ref, 2, [t.token_id for t in out.logprobs],
                            [(t.token_id, t.logprob) for t in out.logprobs[0].top_logprobs])
    assert after["image_cache_hits"] == before["image_cache_hits"] + 1  # not encoded again
    assert after["images_encoded"] == before["images_encoded"]


def test_concurrent_image_requests_are_batched_and_exact(llm, ref):
    handles = [llm.submit_chat(messages(i), greedy()) for i in (0, 1, 2)]
    results = [h.result() for h in handles]
    for i, out in enumerate(results):
        check_against_reference(ref, i, [t.token_id for t in out.logprobs],
                                [(t.token_id, t.logprob) for t in out.logprobs[0].top_logprobs])


def test_prefix_cache_keys_image_blocks_by_pixels(tmp_path, ref):
    """A page-sized prefix that ends inside the image block: a second request with the same image
    hits the prefix cache, one with another image must not (its answer is its own reference)."""
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=2, kv_type="f32", page_size=16) as m:
        m.chat(messages(0), greedy(1))
        out = m.chat(messages(0), greedy())
        check_against_reference(ref, 0, [t.token_id for t in out.logprobs],
                                [(t.token_id, t.logprob) for t in out.logprobs[0].top_logprobs])
        same = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(png(1))}},
                                             {"type": "text", "text": QUESTIONS[0]}]}]
        out1 = m.chat(same, greedy(1))
        out0 = m.chat(messages(0), greedy(1))
        assert out0.logprobs[0].top_logprobs[0].logprob == pytest.approx(
            float(np.sort(ref["logprobs_0"])[-1]), abs=LOGPROB_TOL)
        assert out1.logprobs[0].top_logprobs != out0.logprobs[0].top_logprobs
        st = m.stats()
        assert st["prefix_cache_hits"] >= 2, st


# ---- files and mismatches --------------------------------------------------------------------

def test_mmproj_found_beside_the_model(tmp_path, capfd):
    shutil.copy(MODEL, tmp_path / "model.gguf")
    shutil.copy(MMPROJ, tmp_path / "mmproj-model-f32.gguf")
    with edgellm.LLM(str(tmp_path / "model.gguf"), n_ctx=128, n_threads=1) as m:
        assert m.takes_images and m.mmproj.endswith("mmproj-model-f32.gguf")
    assert "mmproj-model-f32.gguf" in capfd.readouterr().err
    with edgellm.LLM(str(tmp_path / "model.gguf"), n_ctx=128, n_threads=1, mmproj=False) as m:
        assert not m.takes_images
    # one that does not fit the model beside it: said, and the model loads text-only
    shutil.copy(MODEL, tmp_path / "mmproj-model-f32.gguf")
    capfd.readouterr()
    with edgellm.LLM(str(tmp_path / "model.gguf"), n_ctx=128, n_threads=1) as m:
        assert not m.takes_images
    assert "not using" in capfd.readouterr().err


def test_mismatched_projector_is_a_typed_error(tmp_path):
    with pytest.raises(edgellm.ModelFormatError, match="not a projector"):
        edgellm.LLM(MODEL, mmproj=MODEL, n_ctx=128, n_threads=1)
    smol = os.path.expanduser("~/.cache/edgellm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.exists(smol):
        with pytest.raises(edgellm.ModelFormatError, match="does not fit a 'llama' text model"):
            edgellm.LLM(smol, mmproj=MMPROJ, n_ctx=128, n_threads=1)


def test_text_only_model_refuses_images():
    with edgellm.LLM(MODEL, n_ctx=128, n_threads=1, mmproj=False) as m:
        with pytest.raises(vision.ImageError, match="takes no images"):
            m.chat(messages(0), greedy(1))
        with pytest.raises(edgellm.InvalidRequestError):
            m.chat(messages(0), greedy(1))


# ---- bad images ------------------------------------------------------------------------------

def _png_header(w, h):
    """A PNG claiming w x h pixels with one tiny IDAT: a decompression bomb's header."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


@pytest.mark.parametrize("data, match", [
    (b"", "empty"),
    (b"not an image at all", "not recognised"),
    (png(0)[:200], "corrupt or truncated"),
    (_png_header(100000, 100000), "exceeds the limit"),
    (_png_header(9000, 9000), "exceeds the limit"),
    (_png_header(50, 50), "corrupt or truncated"),
    (b"BM" + b"\0" * 60, "not recognised"),
])
def test_bad_image_data_is_a_typed_error(llm, data, match):
    with pytest.raises(vision.ImageError, match=match):
        llm.chat(messages(0, data_uri(data)), greedy(1))


@pytest.mark.parametrize("url, match", [
    ("data:image/png;base64,@@@", "not valid base64"),
    ("file:///etc/passwd", "file:// URLs are refused"),
    ("http://127.0.0.1:9/x.png", "not fetched"),
    ("ftp://x/y.png", "must be a data: URI"),
])
def test_image_urls_are_checked(llm, url, match):
    with pytest.raises(vision.ImageError, match=match):
        llm.chat(messages(0, url), greedy(1))


def test_file_urls_under_the_media_path(tmp_path, ref):
    (tmp_path / "a.png").write_bytes(png(1))
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=2, kv_type="f32", media_path=str(tmp_path)) as m:
        out = m.chat(messages(1, f"file://{tmp_path}/a.png"), greedy())
        check_against_reference(ref, 1, [t.token_id for t in out.logprobs],
                                [(t.token_id, t.logprob) for t in out.logprobs[0].top_logprobs])
        with pytest.raises(vision.ImageError, match="outside the media path"):
            m.chat(messages(1, f"file://{tmp_path}/../a.png"), greedy(1))


def test_formats_jpeg_webp_gif_first_frame(llm):
    from PIL import Image
    arr = vision_images.image_array(40, 60, 3, 7)
    im = Image.fromarray(arr, "RGB")
    for fmt in ("JPEG", "WEBP", "GIF"):
        buf = io.BytesIO()
        if fmt == "GIF":
            im.save(buf, format="GIF", save_all=True, append_images=[Image.new("RGB", (60, 40), (255, 0, 0))])
        else:
            im.save(buf, format=fmt)
        px = llm.chat_renderer.vision.pixels(buf.getvalue())
        assert px.shape == (3, 112, 112) and np.isfinite(px).all()
        if fmt == "GIF":  # the first frame, not the red second one
            assert abs(float(px[0].mean()) - 1.0) > 0.1


def test_fuzzed_images_end_in_typed_errors():
    """Truncations and byte flips of every format: ImageError or pixels, nothing else."""
    from PIL import Image
    rng = np.random.default_rng(1)
    arr = vision_images.image_array(23, 31, 3, 3)
    seeds = []
    for fmt in ("PNG", "JPEG", "WEBP", "GIF"):
        buf = io.BytesIO()
        Image.fromarray(arr, "RGB").save(buf, format=fmt)
        seeds.append(buf.getvalue())
    n = 0
    for _ in range(250):
        for s in seeds:
            b = bytearray(s)
            if rng.random() < 0.5:
                b = b[:int(rng.integers(0, len(b)))]
            else:
                for _ in range(int(rng.integers(1, 8))):
                    b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
            try:
                px = vision.preprocess(vision.open_image(bytes(b)), 32, [0.5] * 3, [0.5] * 3)
                assert px.shape == (3, 32, 32)
            except vision.ImageError:
                pass
            n += 1
    assert n == 1000


def test_engine_refuses_bad_image_blocks(llm):
    ids = llm.chat_renderer.request(messages(0), None, None, None, None, None)[0]
    core = SamplingParams(max_tokens=1).to_core(llm.n_vocab)
    ch = edgellm._core.OutputChannel()
    pos, h, emb = ids.images[0]
    with pytest.raises(edgellm.InvalidRequestError, match="floats"):
        llm._engine.submit(list(ids), core, ch, True, [(pos, h, emb[:, :10])])
    with pytest.raises(edgellm.InvalidRequestError, match="not a block of the prompt"):
        llm._engine.submit(list(ids), core, ch, True, [(len(ids) - 2, h, emb)])
    with pytest.raises(edgellm.InvalidRequestError, match="prompt_logprobs"):
        core2 = SamplingParams(max_tokens=1, prompt_logprobs=1).to_core(llm.n_vocab)
        llm._engine.submit(list(ids), core2, ch, True, [(pos, h, emb)])


# ---- the server ------------------------------------------------------------------------------

def _server(model, ctx_size=256, **cfg):
    from edgellm.server import ServerConfig, create_app
    from edgellm.server.admission import default_loader
    from server_helpers import AppServer, free_port

    port = free_port()
    config = ServerConfig(model=model, model_path=model, port=port, ctx_size=ctx_size, threads=2, parallel=4,
                          **cfg)
    s = AppServer()

    def loader(c):
        llm = default_loader(c)
        return llm
    s.start(create_app(config, loader=loader, params_factory=SamplingParams), port)
    return s.wait_ready()


def check_openai_chat(url, llm, ref, messages_of, n=3):
    """OpenAI chat completions with image_url parts: greedy tokens' bytes those of transformers' tokens,
    the first step's top-5 log-probs (with bytes) within LOGPROB_TOL of transformers'."""
    import httpx
    for i in range(n):
        r = httpx.post(url + "/v1/chat/completions", timeout=120, json={
            "messages": messages_of(i), "temperature": 0, "max_tokens": 8, "logprobs": True, "top_logprobs": 5})
        assert r.status_code == 200, r.text
        content = r.json()["choices"][0]["logprobs"]["content"]
        assert [bytes(c["bytes"]) for c in content] == [llm.token_to_piece(t) for t in ref[f"greedy_{i}"]]
        lp = ref[f"logprobs_{i}"]
        first = content[0]["top_logprobs"]
        assert len(first) == 5 and all("bytes" in t for t in first)
        got = sorted(t["logprob"] for t in first)
        assert np.allclose(got, sorted(float(lp[t]) for t in np.argsort(-lp)[:5]), atol=LOGPROB_TOL)


def test_openai_image_url_matches_transformers(llm, ref):
    import httpx
    s = _server(MODEL, mmproj=MMPROJ)
    try:
        models = httpx.get(s.url + "/v1/models").json()["data"][0]
        assert "image" in models["meta"]["modalities"]
        assert httpx.get(s.url + "/props").json()["modalities"]["vision"] is True
        for i in range(3):
            r = httpx.post(s.url + "/v1/chat/completions", timeout=120, json={
                "messages": messages(i), "temperature": 0, "max_tokens": 8, "logprobs": True, "top_logprobs": 5})
            assert r.status_code == 200, r.text
            content = r.json()["choices"][0]["logprobs"]["content"]
            # greedy tokens: each one's bytes are those of transformers' token
            assert [bytes(c["bytes"]) for c in content] == [llm.token_to_piece(t) for t in ref[f"greedy_{i}"]]
            lp = ref[f"logprobs_{i}"]
            want = np.argsort(-lp)[:5]
            first = content[0]["top_logprobs"]
            assert len(first) == 5 and all("bytes" in t for t in first)
            got = sorted(t["logprob"] for t in first)
            assert np.allclose(got, sorted(float(lp[t]) for t in want), atol=LOGPROB_TOL)
            assert len(content) == 8
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60, json={
            "messages": messages(0, "data:image/png;base64,AAAA"), "max_tokens": 1})
        assert r.status_code == 400 and "image" in r.json()["error"]["message"]
    finally:
        s.stop()


def test_openai_image_to_a_text_only_model_is_a_400(tmp_path):
    import httpx
    shutil.copy(MODEL, tmp_path / "model.gguf")  # without its projector beside it
    s = _server(str(tmp_path / "model.gguf"))
    try:
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60, json={"messages": messages(0), "max_tokens": 1})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "messages[0].content[0].type" and "takes no images" in err["message"]
    finally:
        s.stop()


def test_generate_with_image_and_mmproj(llm, ref, tmp_path):
    """`edgellm generate MODEL PROMPT --image FILE --mmproj FILE`: one chat turn, transformers' tokens."""
    from click.testing import CliRunner
    from edgellm.cli import main

    shutil.copy(MODEL, tmp_path / "model.gguf")  # no projector beside it: --mmproj names it
    r = CliRunner().invoke(main, ["generate", str(tmp_path / "model.gguf"), QUESTIONS[1], "--image",
                                  os.path.join(DATA, "image1.png"), "--mmproj", MMPROJ, "--temp", "0", "-n", "8",
                                  "-c", "256", "-t", "2"])
    assert r.exit_code == 0, r.output
    want = b"".join(llm.token_to_piece(t) for t in ref["greedy_1"]).decode("utf-8", "replace")
    assert r.stdout.rstrip("\n") == want
    r = CliRunner().invoke(main, ["generate", str(tmp_path / "model.gguf"), "x", "--image",
                                  os.path.join(DATA, "image1.png"), "-c", "256", "-n", "1"])
    assert r.exit_code != 0 and "takes no images" in r.output


def _turn(image: int, question: str):
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(png(image))}},
                                         {"type": "text", "text": question}]}]


def _first_top(out):
    return [(t.token_id, t.logprob) for t in out.logprobs[0].top_logprobs]


def test_prefix_hit_ending_inside_an_image_block_is_exact():
    """16-token pages: a second question about the same image reuses page 0 (positions 0-15), which
    ends inside the image block (9-24); the rest of the block is computed against those keys. Its
    answer equals a run without the prefix cache; another image with the same page-0 text does
    not reuse it."""
    kw = dict(n_ctx=256, n_threads=2, kv_type="f32", page_size=16)
    with edgellm.LLM(MODEL, mmproj=MMPROJ, prefix_cache=False, **kw) as plain:
        want_same = plain.chat(_turn(0, QUESTIONS[1]), greedy())
        want_other = plain.chat(_turn(1, QUESTIONS[0]), greedy())
    with edgellm.LLM(MODEL, mmproj=MMPROJ, **kw) as m:
        m.chat(_turn(0, QUESTIONS[0]), greedy(1))
        hit0 = m.stats()["prefix_cache_hit_tokens"]
        got_same = m.chat(_turn(0, QUESTIONS[1]), greedy())
        hit1 = m.stats()["prefix_cache_hit_tokens"]
        got_other = m.chat(_turn(1, QUESTIONS[0]), greedy())
        hit2 = m.stats()["prefix_cache_hit_tokens"]
    assert hit1 - hit0 == 16 and hit2 == hit1  # page 0 only, and never for the other image
    for got, want in ((got_same, want_same), (got_other, want_other)):
        assert [t.token_id for t in got.logprobs] == [t.token_id for t in want.logprobs]
        assert np.allclose([l for _, l in _first_top(got)], [l for _, l in _first_top(want)], atol=1e-4)


def test_small_batches_never_split_an_image_block(ref):
    """max_batch_tokens 20: the prompt's first chunk stops before the 16-token block, which goes
    whole into the next; a block longer than a batch is refused."""
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=2, kv_type="f32", max_batch_tokens=20) as m:
        out = m.chat(messages(2), greedy())
        check_against_reference(ref, 2, [t.token_id for t in out.logprobs], _first_top(out))
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=2, max_batch_tokens=12) as m:
        with pytest.raises(edgellm.InvalidRequestError, match="exceed max_batch_tokens"):
            m.chat(messages(0), greedy(1))


def test_f16_projector_matches_transformers(ref):
    """The projector as published (llama.cpp's --outtype f16: F16 tower matrices, F32 embeddings)."""
    with edgellm.LLM(MODEL, mmproj=os.path.join(DATA, "mmproj-gemma3-tiny-f16.gguf"), n_ctx=256, n_threads=2,
                     kv_type="f32") as m:
        for i in range(3):
            out = m.chat(messages(i), greedy())
            check_against_reference(ref, i, [t.token_id for t in out.logprobs], _first_top(out))


def test_persistent_cache_keys_images_by_pixels(tmp_path, ref):
    """cache_dir: after a restart the same image's pages come from disk; another image's do not."""
    kw = dict(n_ctx=256, n_threads=2, kv_type="f32", page_size=16, cache_dir=str(tmp_path))
    with edgellm.LLM(MODEL, mmproj=MMPROJ, **kw) as m:
        m.chat(messages(0), greedy())
    with edgellm.LLM(MODEL, mmproj=MMPROJ, **kw) as m:
        out = m.chat(messages(0), greedy())
        disk = m.stats()["cache_disk_hit_tokens"]
        other = m.chat(_turn(1, QUESTIONS[0]), greedy(1))
        assert m.stats()["cache_disk_hit_tokens"] == disk
    assert disk >= 32
    check_against_reference(ref, 0, [t.token_id for t in out.logprobs], _first_top(out))
    assert _first_top(other) != _first_top(out)
