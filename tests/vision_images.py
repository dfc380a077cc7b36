"""Images the vision tests feed edgellm and transformers alike, made from a seed with numpy:
tests/data/vision/make_vision_fixtures.py records transformers' pixel values of the same arrays."""
import io

import numpy as np

# (height, width, mode): odd sizes, both aspect ratios, and each mode an image file arrives in.
PREPROCESSING_SHAPES = [
    (37, 53, "RGB"), (53, 37, "RGB"), (1, 1, "RGB"), (7, 300, "RGB"), (300, 7, "RGB"), (111, 113, "RGB"),
    (112, 112, "RGB"), (129, 97, "RGBA"), (64, 201, "RGBA"), (45, 45, "L"), (99, 31, "L"), (17, 250, "LA"),
    (250, 17, "P"), (95, 141, "P"), (224, 224, "RGB"), (333, 211, "RGB"), (13, 17, "RGBA"), (200, 3, "L"),
    (81, 159, "RGB"), (150, 149, "RGB")]


def image_array(h: int, w: int, channels: int, seed: int) -> np.ndarray:
    """Smooth gradients, a few rectangles and noise: uint8 [h, w, channels]."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.empty((h, w, channels), np.float32)
    for c in range(channels):
        fx, fy = rng.uniform(0.02, 0.3, 2)
        a[..., c] = 127 + 100 * np.sin(fx * x + rng.uniform(0, 6)) * np.cos(fy * y + rng.uniform(0, 6))
    for _ in range(3):
        y0, x0 = rng.integers(0, h), rng.integers(0, w)
        a[y0:y0 + rng.integers(1, h + 1), x0:x0 + rng.integers(1, w + 1)] = rng.uniform(0, 255, channels)
    a += rng.normal(0, 12, a.shape)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def to_pil(spec):
    """(array, mode) -> a PIL image of that mode ("P": quantized to a 32-colour palette)."""
    from PIL import Image

    arr, mode = spec
    if mode == "P":
        return Image.fromarray(arr, "RGB").quantize(32)
    if arr.shape[2] == 1:
        return Image.fromarray(arr[..., 0], "L")
    return Image.fromarray(arr, {2: "LA", 3: "RGB", 4: "RGBA"}[arr.shape[2]])


def preprocessing_images():
    """The 20 (array, mode) pairs of PREPROCESSING_SHAPES."""
    channels = {"RGB": 3, "RGBA": 4, "L": 1, "LA": 2, "P": 3}
    return [(image_array(h, w, channels[m], 100 + i), m) for i, (h, w, m) in enumerate(PREPROCESSING_SHAPES)]


def png_bytes(spec) -> bytes:
    buf = io.BytesIO()
    to_pil(spec).save(buf, format="PNG")
    return buf.getvalue()
