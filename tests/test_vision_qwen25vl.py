"""Vision input (Qwen2.5-VL), so far its preprocessing: dynamic resolution against transformers'
Qwen2VLImageProcessorPil (tests/data/vision/qwen25vl.npz, recorded by
tests/data/vision/make_qwen25vl_fixtures.py). The encoder (2-D rotary ViT with window attention,
patch merger) and M-RoPE positions in the text model are not built yet."""
import os

import numpy as np
import pytest

import vision_images

pytest.importorskip("PIL")
from edgellm import vision  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vision")
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
