"""Vision input (Qwen2.5-VL): dynamic resolution against transformers' Qwen2VLImageProcessorPil,
the vision tower (2-D rotary ViT with window attention, patch merger) of llama.cpp's --mmproj file
against transformers', and the whole model (the 'qwen2vl' text architecture with M-RoPE positions
for the image grid) through LLM.chat and the OpenAI API, on a tiny random
Qwen2_5_VLForConditionalGeneration (tests/data/vision/qwen25vl.npz, qwen25vl-tiny.gguf and
mmproj-qwen25vl-tiny.gguf, recorded by tests/data/vision/make_qwen25vl_fixtures.py)."""
import os

import numpy as np
import pytest

import vision_images

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
from edgellm import vision  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vision")
MMPROJ = os.path.join(DATA, "mmproj-qwen25vl-tiny.gguf")
MODEL = os.path.join(DATA, "qwen25vl-tiny.gguf")
QUESTIONS = ["Describe this image.", "What is in the picture?", "Count the shapes."]
BOUNDS = [(3136, 12845056), (3136, 28 * 28 * 48)]  # make_qwen25vl_fixtures.BOUNDS
PATCH, MERGE, TEMPORAL = 14, 2, 2


@pytest.fixture(scope="module")
def ref():
    return np.load(os.path.join(DATA, "qwen25vl.npz"))


def image_of_patches(flat, grid):
    """transformers' flattened patches ([gh gw, 3 T P P] in 2 x 2 merge order, the frame repeated
    over T) back to float32 [3, H, W], checking the T copies are one frame."""
    _, gh, gw = grid
    p = flat.reshape(gh // MERGE, gw // MERGE, MERGE, MERGE, 3, TEMPORAL, PATCH, PATCH)
    assert np.array_equal(p[:, :, :, :, :, 0], p[:, :, :, :, :, 1])
    return p[:, :, :, :, :, 0].transpose(4, 0, 2, 5, 1, 3, 6).reshape(3, gh * PATCH, gw * PATCH)


@pytest.mark.parametrize("k", range(len(BOUNDS)))
def test_preprocessing_equals_transformers_on_20_images(ref, k):
    """Each PNG (RGB, RGBA, L, LA, P; odd sizes and aspect ratios) decoded and resized as
    transformers' Qwen2-VL image processor does: the same grid, pixels within 1e-5."""
    lo, hi = BOUNDS[k]
    specs = vision_images.preprocessing_images()
    assert len(specs) == 20
    shrunk = grown = 0
    for j, spec in enumerate(specs):
        im = vision.open_image(vision_images.png_bytes(spec))
        px, (gh, gw) = vision.qwen2vl_frame(im, PATCH, MERGE, lo, hi)
        grid = ref[f"pre_grid_{k}_{j}"].tolist()
        assert [1, gh, gw] == grid, j
        want = image_of_patches(ref[f"pre_pixels_{k}_{j}"], grid)
        assert px.shape == want.shape and np.abs(px - want).max() <= 1e-5, j
        shrunk += gh * gw * PATCH * PATCH < im.size[0] * im.size[1] * 0.7
        grown += gh * gw * PATCH * PATCH > im.size[0] * im.size[1] * 1.5
    assert grown > 0 and (k == 0 or shrunk > 0)  # both bounds of the budget were exercised


def test_extreme_aspect_ratio_is_a_typed_error():
    from PIL import Image
    with pytest.raises(vision.ImageError, match="aspect ratio"):
        vision.qwen2vl_frame(Image.new("RGB", (402, 2)))


# ---- the encoder -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def encoder():
    return edgellm._core.VisionEncoder(MMPROJ, 2)


def test_tower_matches_transformers(ref, encoder):
    """Grids of 6x8 (one window and a cut one), 10x14 (windows cut at both edges) and 4x4 patches:
    the merged embeddings within 1e-4 of transformers' (values up to ~8)."""
    assert encoder.projector == "qwen2.5vl_merger" and encoder.n_embd_text == 64
    for i in range(3):
        grid = ref[f"tower_grid_{i}"].tolist()
        got = encoder.encode(image_of_patches(ref[f"tower_pixels_{i}"], grid))
        want = ref[f"tower_embd_{i}"]
        assert got.shape == want.shape == (grid[1] * grid[2] // 4, 64)
        assert np.abs(got - want).max() <= 1e-4, i


@pytest.mark.parametrize("shape", [(3, 30, 28), (3, 28, 0), (2, 28, 28), (3, 28 * 300, 28 * 300)])
def test_bad_pixel_shapes_are_typed_errors(encoder, shape):
    with pytest.raises(edgellm.InvalidRequestError):
        encoder.encode(np.zeros(shape, np.float32))


def test_mismatched_projector_is_a_typed_error():
    with pytest.raises(edgellm.ModelFormatError, match="does not fit a 'llama' text model"):
        edgellm.LLM(os.path.join(DATA, "smolvlm-tiny.gguf"), mmproj=MMPROJ, n_ctx=128, n_threads=1)


# ---- the model against transformers ----------------------------------------------------------

@pytest.fixture(scope="module")
def llm():
    m = edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=2, kv_type="f32", max_seqs=4)
    yield m
    m.close()


def png(i):
    with open(os.path.join(DATA, f"qwen25vl_image{i}.png"), "rb") as f:
        return f.read()


def messages(i):
    from test_vision import data_uri
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(png(i))}},
                                         {"type": "text", "text": QUESTIONS[i]}]}]


def test_prompt_ids_and_grids(llm, ref):
    for i in range(3):
        ids = llm.chat_renderer.request(messages(i), None, None, None, None, None)[0]
        assert list(ids) == ref[f"ids_{i}"].tolist()
        _, gh, gw = ref[f"tower_grid_{i}"].tolist()
        assert [(e.shape[0], g) for _, _, e, g in ids.images] == [(gh * gw // 4, (gh // 2, gw // 2))]


def test_llm_chat_matches_transformers(llm, ref):
    """M-RoPE: the image's rows and columns turn their sections, the text after it continues from
    the image's largest position (a 3 x 4, 5 x 7 and 2 x 2 grid)."""
    from test_vision import _first_top, check_against_reference, greedy
    for i in range(3):
        out = llm.chat(messages(i), greedy())
        check_against_reference(ref, i, [t.token_id for t in out.logprobs], _first_top(out))
    # a second question about the same image: its KV from the prefix cache, the same answer
    before = llm.stats()
    out = llm.chat(messages(1), greedy())
    check_against_reference(ref, 1, [t.token_id for t in out.logprobs], _first_top(out))
    assert llm.stats()["prefix_cache_hit_tokens"] > before["prefix_cache_hit_tokens"]


def test_openai_image_url_matches_transformers(llm, ref):
    from test_vision import _server, check_openai_chat
    s = _server(MODEL, mmproj=MMPROJ)
    try:
        check_openai_chat(s.url, llm, ref, messages)
    finally:
        s.stop()


def test_concurrent_image_requests_are_batched_and_exact(llm, ref):
    """Three sequences with their own M-RoPE grids (and the text positions they move) in one batch."""
    from test_vision import _first_top, check_against_reference, greedy
    handles = [llm.submit_chat(messages(i), greedy()) for i in (0, 1, 2)]
    for i, h in enumerate(handles):
        out = h.result()
        check_against_reference(ref, i, [t.token_id for t in out.logprobs], _first_top(out))
