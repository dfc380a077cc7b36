"""Vision input (SmolVLM / Idefics3): llama.cpp's projector files, the processor's tiling and
markup, the encoder (SigLIP, pixel shuffle, connector) and causal image blocks in prefill, against
transformers. The references (tests/data/vision/smolvlm.npz) and the GGUFs (llama.cpp's
convert_hf_to_gguf.py, F32, and its --mmproj output) come from
tests/data/vision/make_smolvlm_fixtures.py's tiny random SmolVLMForConditionalGeneration (64 px
tiles of 16 tokens, longest edge 192 px: up to 3 x 3 tiles + the global image)."""
import os

import numpy as np
import pytest

import vision_images
from test_vision import _first_top, _server, check_against_reference, check_openai_chat, data_uri, greedy

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
from edgellm import vision  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vision")
MODEL = os.path.join(DATA, "smolvlm-tiny.gguf")
MMPROJ = os.path.join(DATA, "mmproj-smolvlm-tiny.gguf")
GEMMA_MODEL = os.path.join(DATA, "gemma3-tiny.gguf")
GEMMA_MMPROJ = os.path.join(DATA, "mmproj-gemma3-tiny.gguf")
QUESTIONS = ["Describe this image.", "What is in the picture?", "Count the shapes."]
TILE, LONGEST, SEQ = 64, 192, 16


@pytest.fixture(scope="module")
def ref():
    return np.load(os.path.join(DATA, "smolvlm.npz"))


@pytest.fixture(scope="module")
def llm():
    m = edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=512, n_threads=2, kv_type="f32", max_seqs=4)
    yield m
    m.close()


def png(i: int) -> bytes:
    with open(os.path.join(DATA, f"smolvlm_image{i}.png"), "rb") as f:
        return f.read()


def messages(i: int, url=None, question=None):
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url or data_uri(png(i))}},
                                         {"type": "text", "text": question or QUESTIONS[i]}]}]


def check(ref, i, out):
    check_against_reference(ref, i, [t.token_id for t in out.logprobs], _first_top(out))


# ---- preprocessing and markup ----------------------------------------------------------------

def test_preprocessing_equals_transformers_on_20_images(ref):
    """Each PNG (RGB, RGBA, L, LA, P; odd sizes and aspect ratios) decoded, resized (Lanczos),
    tiled and given its global image as transformers' SmolVLMImageProcessor (PIL backend) does:
    the same grid and frames, max abs difference <= 1e-5."""
    specs = vision_images.preprocessing_images()
    assert len(specs) == 20
    grids = set()
    for j, spec in enumerate(specs):
        frames, grid = vision.idefics3_frames(vision.open_image(vision_images.png_bytes(spec)), TILE, LONGEST,
                                              [0.5] * 3, [0.5] * 3)
        want = ref[f"pre_pixels_{j}"]
        assert tuple(grid) == tuple(ref[f"pre_grid_{j}"].tolist()), j
        assert np.stack(frames).shape == want.shape, j
        assert np.abs(np.stack(frames) - want).max() <= 1e-5, j
        grids.add(tuple(grid))
    assert len(grids) >= 4  # wide, tall and square grids among them


def test_markup_is_the_processors():
    fam = vision.FAMILIES["idefics3"]
    f, g, t = "<fake_token_around_image>", "<global-img>", "<image>" * 2
    assert fam.markup((0, 0), 2) == f + g + t + f
    assert fam.markup((2, 1), 2) == (f + "<row_1_col_1>" + t + "\n" + f + "<row_2_col_1>" + t + "\n" +
                                     "\n" + f + g + t + f)


def test_reference_images_pixels_and_prompt_ids(llm, ref):
    v = llm.chat_renderer.vision
    assert v.describe()["projector"] == "idefics3" and v.n_tokens == SEQ
    for i in range(3):
        px = v.pixels(png(i))
        assert px.shape == ref[f"pixels_{i}"].shape and np.abs(px - ref[f"pixels_{i}"]).max() <= 1e-5
        ids = llm.chat_renderer.request(messages(i), None, None, None, None, None)[0]
        assert list(ids) == ref[f"ids_{i}"].tolist()  # the processor's markup, tokenized alike
        assert len(ids.images) == px.shape[0]  # one block per tile and the global image
        assert all(e.shape == (SEQ, 64) for _, _, e in ids.images)
        starts = [p for p, _, _ in ids.images]
        assert all(ids[p] == ids[starts[0]] for p in starts) and starts == sorted(starts)


# ---- the model against transformers ----------------------------------------------------------

def test_llm_chat_matches_transformers(llm, ref):
    for i in range(3):
        check(ref, i, llm.chat(messages(i), greedy()))


def test_same_image_again_reuses_encodings_and_kv(llm, ref):
    n_frames = ref["pixels_2"].shape[0]
    llm.chat(messages(2), greedy(1))
    before = llm.stats()
    out = llm.chat(messages(2), greedy())
    after = llm.stats()
    check(ref, 2, out)
    assert after["image_cache_hits"] == before["image_cache_hits"] + n_frames  # no tile encoded again
    assert after["images_encoded"] == before["images_encoded"]
    assert after["prefix_cache_hit_tokens"] > before["prefix_cache_hit_tokens"]


def test_concurrent_image_requests_are_batched_and_exact(llm, ref):
    handles = [llm.submit_chat(messages(i), greedy()) for i in (0, 1, 2)]
    for i, h in enumerate(handles):
        check(ref, i, h.result())


def test_small_batches_are_exact(ref):
    """max_batch_tokens 24: blocks of 16 causal image tokens never split, chunks cut between them."""
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=512, n_threads=2, kv_type="f32", max_batch_tokens=24) as m:
        check(ref, 1, m.chat(messages(1), greedy()))


def test_another_image_is_not_served_from_the_cache(ref):
    """16-token pages: the text before the first tile is shared, the tiles are not."""
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=512, n_threads=2, kv_type="f32", page_size=16) as m:
        m.chat(messages(0, question=QUESTIONS[2]), greedy(1))
        check(ref, 2, m.chat(messages(2), greedy()))
        check(ref, 0, m.chat(messages(0), greedy()))


# ---- files and mismatches --------------------------------------------------------------------

def test_mismatched_projectors_are_typed_errors():
    with pytest.raises(edgellm.ModelFormatError, match="'idefics3' projector does not fit a 'gemma3' text model"):
        edgellm.LLM(GEMMA_MODEL, mmproj=MMPROJ, n_ctx=128, n_threads=1)
    with pytest.raises(edgellm.ModelFormatError, match="'gemma3' projector does not fit a 'llama' text model"):
        edgellm.LLM(MODEL, mmproj=GEMMA_MMPROJ, n_ctx=128, n_threads=1)


def test_too_many_tiles_for_the_context_is_a_typed_error():
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=128, n_threads=1) as m:
        with pytest.raises(edgellm.InvalidRequestError):
            m.chat(messages(1), greedy(1))  # 10 frames x 16 tokens > 128


# ---- the server ------------------------------------------------------------------------------

def test_openai_image_url_matches_transformers(llm, ref):
    import httpx
    s = _server(MODEL, mmproj=MMPROJ, ctx_size=512)
    try:
        assert "image" in httpx.get(s.url + "/v1/models").json()["data"][0]["meta"]["modalities"]
        check_openai_chat(s.url, llm, ref, messages)
    finally:
        s.stop()
