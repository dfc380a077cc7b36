"""Bad images through vision's preprocessing entry point (open_image + preprocess, what every API's
image goes through): 1,200 fuzzed inputs — truncations, byte flips, header sizes rewritten to
decompression bombs, other formats, random bytes — each ending in pixels or an ImageError, with the
process's peak memory bounded; and the requests that cannot fit (more images than the context
holds) or cannot be read (a projector that does not fit its model) as typed errors."""
import io
import resource
import shutil

import numpy as np
import pytest

edgellm = pytest.importorskip("edgellm")
Image = pytest.importorskip("PIL.Image")
from edgellm import vision  # noqa: E402
from test_vision import MMPROJ, MODEL, QUESTIONS, data_uri, png  # noqa: E402

from bad_images import encoded, gif_of_size, png_of_size, with_size  # noqa: E402


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def test_fuzzed_images_end_in_typed_errors_with_bounded_memory():
    seeds = [encoded("PNG"), encoded("JPEG"), encoded("WEBP", lossless=True), encoded("GIF"),
             encoded("PNG", optimize=True), encoded("WEBP", quality=50)]
    others = [encoded("BMP"), encoded("TIFF"), encoded("ICO"), encoded("PPM"), b"", b"\x00" * 64,
              b"RIFF\xff\xff\xff\xffWEBPVP8X", b"GIF89a", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff"]
    rng = np.random.default_rng(40)
    cap = 1 << 20  # a smaller cap than the server's keeps the test quick; the rule is the same
    before = _peak_rss()
    outcomes = {"pixels": 0, "error": 0}
    n = 0
    for k in range(1200):
        kind = k % 6
        b = bytearray(seeds[int(rng.integers(len(seeds)))])
        if kind == 0:
            b = b[:int(rng.integers(0, len(b)))]
        elif kind == 1:
            for _ in range(int(rng.integers(1, 8))):
                b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
        elif kind == 2:  # a header claiming a huge (or empty) image
            w, h = (int(x) for x in rng.choice([0, 1, 4097, 65535, 1 << 20, 1 << 31], 2))
            b = bytearray(with_size(bytes(b), w, h))
        elif kind == 3:
            b = bytearray(others[int(rng.integers(len(others)))])
        elif kind == 4:
            b = bytearray(rng.integers(0, 256, int(rng.integers(1, 512)), dtype=np.uint8).tobytes())
        else:  # a splice of two formats
            o = seeds[int(rng.integers(len(seeds)))]
            cut = int(rng.integers(0, min(len(b), len(o))))
            b = b[:cut] + o[cut:]
        try:
            px = vision.preprocess(vision.open_image(bytes(b), cap), 32, [0.5] * 3, [0.5] * 3)
            assert px.shape == (3, 32, 32) and np.isfinite(px).all()
            outcomes["pixels"] += 1
        except vision.ImageError:
            outcomes["error"] += 1
        n += 1
    assert n == 1200 and outcomes["pixels"] > 100 and outcomes["error"] > 500, outcomes
    assert _peak_rss() - before < 256 << 20  # never a bomb's pixels: at most a capped image


@pytest.mark.parametrize("data, match", [
    (png_of_size(100_000, 100_000), "exceeds the limit"),
    (png_of_size(9000, 9000), "exceeds the limit of 67108864 pixels"),  # under Pillow's own limit
    (gif_of_size(65535, 65535), "exceeds the limit"),
    (encoded("BMP"), "not recognised"),
    (encoded("TIFF"), "not recognised"),
    (b"not an image at all", "not recognised"),
])
def test_bombs_and_unknown_formats_are_refused_before_decoding(data, match):
    before = _peak_rss()
    with pytest.raises(vision.ImageError, match=match):
        vision.open_image(data)
    assert _peak_rss() - before < 64 << 20


def test_gif_and_webp_first_frame():
    for fmt in ("GIF", "WEBP"):
        buf = io.BytesIO()
        a = Image.new("RGB", (16, 16), (255, 0, 0))
        a.save(buf, format=fmt, save_all=True, append_images=[Image.new("RGB", (16, 16), (0, 0, 255))],
               **({"lossless": True} if fmt == "WEBP" else {}))
        px = vision.preprocess(vision.open_image(buf.getvalue()), 16, [0.0] * 3, [1.0] * 3)
        assert np.allclose(px[:, 8, 8], [1.0, 0.0, 0.0], atol=0.01), fmt  # red, not the blue 2nd frame


def test_more_images_than_the_context_holds():
    """17 images of 16 tokens in a 256-token context: a ContextLengthError (a 400), nothing run."""
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=1, max_seqs=1) as m:
        parts = [{"type": "image_url", "image_url": {"url": data_uri(png(i % 3))}} for i in range(17)]
        with pytest.raises(edgellm.ContextLengthError):
            m.chat([{"role": "user", "content": parts + [{"type": "text", "text": QUESTIONS[0]}]}],
                   edgellm.SamplingParams(max_tokens=1))
        assert m.stats()["requests_finished"] == 0


def test_a_projector_that_does_not_fit_is_a_typed_error_and_a_400(tmp_path, smollm2_path):
    """An mmproj of another text model (here: a projector beside SmolLM2, whose width and architecture
    differ) is a ModelFormatError at load naming the mismatch; found beside a model it is skipped
    (text only), so an image to it is a 400."""
    import httpx
    from test_vision import _server

    smol = smollm2_path
    with pytest.raises(edgellm.ModelFormatError, match="projector"):
        edgellm.LLM(str(smol), mmproj=MMPROJ, n_ctx=128, n_threads=1)
    shutil.copy(smol, tmp_path / "smol.gguf")
    shutil.copy(MMPROJ, tmp_path / "mmproj-wrong.gguf")
    s = _server(str(tmp_path / "smol.gguf"))
    try:
        r = httpx.post(s.url + "/v1/chat/completions", timeout=60, json={"max_tokens": 1, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(png(0))}}]}]})
        assert r.status_code == 400 and "takes no images" in r.json()["error"]["message"]
    finally:
        s.stop()
