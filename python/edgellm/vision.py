"""Vision input: images in chat messages, for a text model loaded with its projector file
(`LLM(model, mmproj=PATH)`; llama.cpp's `convert_hf_to_gguf.py --mmproj` layout).

The one internal representation of an image is an OpenAI content part,
{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}} (every API converts to
it). For one chat request `VisionInput.prepare` reads each part's bytes (data URI; a file:// URL
only under `media_path`; http(s) only with `allow_remote`), decodes them with Pillow (JPEG, PNG,
WebP, GIF's first frame) after checking the pixel count from the header, and preprocesses them as
the model's Hugging Face processor does into frames, the encoder's inputs (RGB with transparency
composited on white, resized, rescale 1/255, normalised by the projector's mean / std; Gemma 3: one
bilinear square; SmolVLM: Lanczos-resized tiles and the global image). The template renders
{"type": "image"} parts as the model's marker (Gemma 3: "<start_of_image>", SmolVLM: "<image>"),
which is expanded to the processor's markup for that image (_Family.markup: one run of image
tokens per frame). The encoder (_core.VisionEncoder) turns each frame into the text model's input
embeddings, kept in a small LRU keyed by a hash of the pixels (the engine's prefix cache is keyed
by the same hash); the engine gets them with the prompt ids (PromptIds.images, one block a frame).
"""
from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import io
import os
import re
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple

if TYPE_CHECKING:  # numpy is imported where images are read: a text-only model never loads it
    import numpy as np

from . import _core
from ._core import InvalidRequestError, ModelFormatError

# Content-part types that carry an image, per API (all converted to IMAGE_URL first).
IMAGE_URL = "image_url"
IMAGE_PART_TYPES = (IMAGE_URL, "image", "input_image")
# Formats decoded (Pillow's names) and the largest image accepted, in pixels, checked from the
# header before any decoding (a decompression bomb never allocates its pixels).
FORMATS = ("JPEG", "PNG", "WEBP", "GIF")
MAX_PIXELS = 64 * 1024 * 1024
MAX_IMAGE_BYTES = 32 * 1024 * 1024
# Encoded images kept for requests to come (a second question about the same image).
EMBEDDING_CACHE_BYTES = 256 * 1024 * 1024


class ImageError(InvalidRequestError):
    """An image that cannot be used: unreadable URL, unknown format, corrupt or truncated data,
    too many pixels, or a model that takes no images. An InvalidRequestError (a 400 in the server)."""


class PromptIds(list):
    """Prompt ids with the image blocks they hold: `images` = [(pos, pixel hash, float32
    [n_tokens, n_embd] embeddings)], what Engine.submit takes."""
    images: list = []


# ---- the family's markup and preprocessing ---------------------------------------------------

class _Family:
    """What a projector type needs from the text side: its template marker, the frames (encoder
    inputs) one image becomes with their layout, and the markup that layout becomes in the prompt
    (one run of image tokens per frame, in the frames' order)."""
    name = marker = image_token = ""

    def frames(self, im, enc) -> Tuple[List[np.ndarray], Any]:
        raise NotImplementedError

    def markup(self, layout, n_tokens: int) -> str:
        raise NotImplementedError

    def block(self, layout, n_tokens: int) -> Tuple[int, Optional[Tuple[int, int]]]:
        """(tokens of each frame's block, its M-RoPE grid (rows, cols) or None)."""
        return n_tokens, None


class _Gemma3(_Family):
    """transformers' Gemma3Processor / Gemma3ImageProcessor (BILINEAR, no pan-and-scan): one
    frame, "\\n\\n<start_of_image>" + n x "<image_soft_token>" + "<end_of_image>\\n\\n"."""
    name, marker, image_token = "gemma3", "<start_of_image>", "<image_soft_token>"

    def frames(self, im, enc):
        return [preprocess(im, enc.image_size, enc.image_mean, enc.image_std, "bilinear")], None

    def markup(self, layout, n_tokens):
        return "\n\n<start_of_image>" + self.image_token * n_tokens + "<end_of_image>\n\n"


class _Idefics3(_Family):
    """transformers' SmolVLMProcessor / SmolVLMImageProcessor (Idefics3's): tiles row by row, then
    the global image (idefics3_frames); each tile "<fake_token_around_image><row_r_col_c>" + its
    tokens, a newline after each row, then "\\n<fake_token_around_image><global-img>" + its tokens +
    "<fake_token_around_image>" (an image that is one tile: the global part alone)."""
    name, marker, image_token = "idefics3", "<image>", "<image>"
    FAKE, GLOBAL = "<fake_token_around_image>", "<global-img>"

    def frames(self, im, enc):
        return idefics3_frames(im, enc.image_size, enc.preproc_image_size, enc.image_mean, enc.image_std)

    def markup(self, layout, n_tokens):
        rows, cols = layout
        run = self.image_token * n_tokens
        tiles = "".join("".join(f"{self.FAKE}<row_{r + 1}_col_{c + 1}>{run}" for c in range(cols)) + "\n"
                        for r in range(rows))
        return tiles + ("\n" if rows else "") + f"{self.FAKE}{self.GLOBAL}{run}{self.FAKE}"


class _Qwen25VL(_Family):
    """transformers' Qwen2_5_VLProcessor (Qwen2VLImageProcessor: qwen2vl_frame's dynamic resolution
    within Qwen2.5-VL's published pixel bounds): one frame of rows x cols merged tokens, the
    template's "<|image_pad|>" repeated rows x cols times; the block's grid gives the text model
    its M-RoPE positions."""
    name, marker, image_token = "qwen2.5vl_merger", "<|image_pad|>", "<|image_pad|>"
    MERGE = 2

    def frames(self, im, enc):
        frame, (gh, gw) = qwen2vl_frame(im, enc.patch_size, self.MERGE, mean=enc.image_mean, std=enc.image_std)
        return [frame], (gh // self.MERGE, gw // self.MERGE)

    def markup(self, layout, n_tokens):
        return self.image_token * (layout[0] * layout[1])

    def block(self, layout, n_tokens):
        return layout[0] * layout[1], tuple(layout)


FAMILIES = {f.name: f for f in (_Gemma3(), _Idefics3(), _Qwen25VL())}
# text architectures each projector type feeds
TEXT_ARCHS = {"gemma3": ("gemma3",), "idefics3": ("llama",), "qwen2.5vl_merger": ("qwen2vl",)}


def open_image(data: bytes, max_pixels: int = MAX_PIXELS):
    """Pillow image of `data` (first frame), size checked before decoding; ImageError otherwise."""
    from PIL import Image

    if not data:
        raise ImageError("image data is empty")
    try:
        im = Image.open(io.BytesIO(data), formats=list(FORMATS))
    except Image.UnidentifiedImageError:
        raise ImageError("image format not recognised (JPEG, PNG, WebP and GIF are supported)") from None
    except Image.DecompressionBombError as e:  # Pillow's own header check, past twice its limit
        raise ImageError(f"image exceeds the limit of {max_pixels} pixels ({e})") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        raise ImageError(f"image header cannot be read: {e}") from None
    w, h = im.size
    if w <= 0 or h <= 0:
        raise ImageError(f"image has no pixels ({w}x{h})")
    if w * h > max_pixels:
        raise ImageError(f"image of {w}x{h} = {w * h} pixels exceeds the limit of {max_pixels} pixels")
    try:
        im.seek(0)  # GIF / animated WebP: the first frame
        im.load()
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError, MemoryError) as e:
        raise ImageError(f"image data is corrupt or truncated: {e}") from None
    return im


def to_rgb(im):
    """RGB as transformers' convert_to_rgb makes it: transparency composited on white."""
    from PIL import Image

    if "A" in im.getbands() or im.info.get("transparency") is not None:
        im = im.convert("RGBA")
        background = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, im).convert("RGB")
    return im.convert("RGB")


def preprocess(im, size: int, mean, std, resample: str = "bilinear") -> np.ndarray:
    """float32 [3, size, size]: resized (stretched) with PIL's `resample`, / 255, (x - mean) / std."""
    from PIL import Image

    filt = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC,
            "lanczos": Image.Resampling.LANCZOS}[resample]
    rgb = to_rgb(im)
    if rgb.size != (size, size):
        rgb = rgb.resize((size, size), resample=filt)
    return _normalize(rgb, mean, std)


def _normalize(rgb, mean, std) -> np.ndarray:
    """float32 [3, h, w] of an RGB PIL image: / 255, (x - mean) / std."""
    import numpy as np

    # the float64 formula on the 256 values a channel can hold, then a table look-up per pixel:
    # the same floats as evaluating it per pixel, without 3 float64 passes over the image
    v = np.arange(256, dtype=np.float64) * (1.0 / 255.0)
    lut = ((v[None, :] - np.asarray(mean, np.float64)[:, None]) / np.asarray(std, np.float64)[:, None]).astype(np.float32)
    px = np.asarray(rgb, dtype=np.uint8)
    out = np.empty((3,) + px.shape[:2], np.float32)
    for c in range(3):
        np.take(lut[c], px[:, :, c], out=out[c])
    return out


def idefics3_frames(im, tile: int, longest: int, mean, std) -> Tuple[List[np.ndarray], Tuple[int, int]]:
    """SmolVLM's / Idefics3's image processor (transformers' SmolVLMImageProcessorPil, Lanczos at
    every step): the longest edge resized to `longest` (the other by the aspect ratio, rounded up to
    even, at most 4096), then both edges up to multiples of `tile`; past one tile it is cut into
    rows x cols tiles (row-major) followed by the whole resized to tile x tile (the global image).
    Returns (float32 [3, tile, tile] frames, (rows, cols)), (0, 0) for an image of one tile."""
    import math

    from PIL import Image

    lanczos = Image.Resampling.LANCZOS
    rgb = to_rgb(im)
    w, h = rgb.size
    aspect = w / h
    if w >= h:
        w = longest
        h = int(w / aspect)
        h += h % 2
    else:
        h = longest
        w = int(h * aspect)
        w += w % 2
    h, w = max(h, 1), max(w, 1)
    aspect = w / h
    if w >= h and w > 4096:
        w, h = 4096, int(4096 / aspect)
    elif h > w and h > 4096:
        h, w = 4096, int(4096 * aspect)
    h, w = max(h, 1), max(w, 1)
    rgb = rgb.resize((w, h), resample=lanczos)
    aspect = w / h
    if w >= h:
        w = math.ceil(w / tile) * tile
        h = math.ceil(int(w / aspect) / tile) * tile
    else:
        h = math.ceil(h / tile) * tile
        w = math.ceil(int(h * aspect) / tile) * tile
    rgb = rgb.resize((w, h), resample=lanczos)
    if h <= tile and w <= tile:
        return [_normalize(rgb, mean, std)], (0, 0)
    rows, cols = (h - tile) // tile + 1, (w - tile) // tile + 1
    frames = [_normalize(rgb.crop((c * tile, r * tile, (c + 1) * tile, (r + 1) * tile)), mean, std)
              for r in range(rows) for c in range(cols)]
    frames.append(_normalize(rgb.resize((tile, tile), resample=lanczos), mean, std))
    return frames, (rows, cols)


# Qwen2.5-VL's preprocessor_config.json: the pixel budget of one image, and CLIP's mean / std
QWEN2VL_MIN_PIXELS, QWEN2VL_MAX_PIXELS = 56 * 56, 12845056
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


def qwen2vl_frame(im, patch: int = 14, merge: int = 2, min_pixels: int = QWEN2VL_MIN_PIXELS,
                  max_pixels: int = QWEN2VL_MAX_PIXELS, mean=CLIP_MEAN, std=CLIP_STD
                  ) -> Tuple[np.ndarray, Tuple[int, int]]:
    """Qwen2-VL's / Qwen2.5-VL's dynamic resolution (transformers' Qwen2VLImageProcessorPil):
    both edges rounded to multiples of patch x merge (28 px), scaled (keeping the aspect ratio) into
    [min_pixels, max_pixels], bicubic resize. Returns (float32 [3, H, W], (H / patch, W / patch));
    an aspect ratio over 200 is an ImageError."""
    import math

    from PIL import Image

    rgb = to_rgb(im)
    width, height = rgb.size
    if max(height, width) / min(height, width) > 200:
        raise ImageError(f"image of {width}x{height} has an aspect ratio over 200 (Qwen2-VL takes up to 200)")
    factor = patch * merge
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    rgb = rgb.resize((w, h), resample=Image.Resampling.BICUBIC)
    return _normalize(rgb, mean, std), (h // patch, w // patch)


def pixel_hash(pixels: np.ndarray) -> int:
    """64-bit hash of a preprocessed image (the engine's prefix-cache key for its block)."""
    return int.from_bytes(hashlib.blake2b(pixels.tobytes(), digest_size=8).digest(), "little")


# ---- reading an image part -----------------------------------------------------------------

_DATA_URI = re.compile(r"data:([\w/+.-]*)((?:;[\w=.+-]+)*?)(;base64)?,", re.ASCII)


# llama.cpp's media marker (mtmd_default_marker()): where a /completion prompt places each of its
# multimodal_data images, in order (/props answers it as media_marker)
MEDIA_MARKER = "<__media__>"


def image_part(part: Mapping, where: str) -> dict:
    """Any API's image content part as the one internal shape, {"type": "image_url",
    "image_url": {"url": URL}}: OpenAI's image_url, the Responses API's input_image
    ({"image_url": URL}; file_id refused), Anthropic's image block (source base64 or url; its
    URL under the same media rules as any), a bare {"type": "image", "url"/"image": URL}."""
    kind = part.get("type")
    url: Any = None
    if kind == IMAGE_URL:
        v = part.get("image_url")
        url = v.get("url") if isinstance(v, Mapping) else v
    elif kind == "input_image":
        if part.get("file_id") is not None:
            raise ImageError(f"'{where}.file_id': uploaded files are not supported; send "
                             "'image_url' (a data: URI)")
        url = part.get("image_url")
    elif kind == "image" and isinstance(part.get("source"), Mapping):
        src = part["source"]
        if src.get("type") == "base64":
            mime = src.get("media_type")
            return base64_part(src.get("data"), f"{where}.source.data",
                               mime if isinstance(mime, str) else "application/octet-stream")
        if src.get("type") != "url":
            raise ImageError(f"'{where}.source.type' must be 'base64' or 'url', got {src.get('type')!r}")
        url = src.get("url")
    elif kind == "image":
        url = part.get("url") or part.get("image")
    if not isinstance(url, str) or not url:
        raise ImageError(f"'{where}' has no image URL (a data: URI with the image)")
    return {"type": IMAGE_URL, "image_url": {"url": url}}


def base64_part(data: Any, where: str, mime: str = "application/octet-stream") -> dict:
    """Base64 image bytes (Ollama's `images`, llama.cpp's `multimodal_data`, Anthropic's base64
    source; a data: URI is taken as it is) as an image_url part."""
    if not isinstance(data, str) or not data:
        raise ImageError(f"'{where}' must be a non-empty string of base64 image data")
    url = data if data.startswith("data:") else f"data:{mime};base64,{data}"
    return {"type": IMAGE_URL, "image_url": {"url": url}}


def image_url_of(part: Mapping, where: str) -> str:
    """The URL of an image content part of any API's shape (image_part)."""
    return image_part(part, where)["image_url"]["url"]


def read_url(url: str, media_path: Optional[str], allow_remote: bool, where: str) -> bytes:
    """The bytes of a data: URI, a file:// URL under media_path, or (allow_remote) http(s)."""
    if url.startswith("data:"):
        m = _DATA_URI.match(url)
        if not m:
            raise ImageError(f"'{where}': malformed data URI")
        body = url[m.end():]
        if len(body) > MAX_IMAGE_BYTES * 4 // 3 + 4:
            raise ImageError(f"'{where}': image larger than {MAX_IMAGE_BYTES} bytes")
        if not m.group(3):
            from urllib.parse import unquote_to_bytes
            return unquote_to_bytes(body)
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise ImageError(f"'{where}': data URI is not valid base64") from None
    if url.startswith("file://"):
        if not media_path:
            raise ImageError(f"'{where}': file:// URLs are refused (the server allows them only under --media-path)")
        from urllib.parse import unquote, urlparse
        path = os.path.realpath(unquote(urlparse(url).path))
        root = os.path.realpath(media_path)
        if os.path.commonpath([path, root]) != root:
            raise ImageError(f"'{where}': {url!r} is outside the media path")
        try:
            with open(path, "rb") as f:
                return _read_capped(f, where)
        except OSError as e:
            raise ImageError(f"'{where}': cannot read {url!r}: {e.strerror}") from None
    if url.startswith(("http://", "https://")):
        if not allow_remote:
            raise ImageError(f"'{where}': remote image URLs are not fetched (start the server with "
                             "--allow-remote-media, or send a data: URI)")
        import urllib.request
        try:
            with urllib.request.urlopen(url, timeout=20) as r:  # noqa: S310 - the operator allowed it
                return _read_capped(r, where)
        except OSError as e:
            raise ImageError(f"'{where}': cannot fetch {url!r}: {e}") from None
    raise ImageError(f"'{where}': image URL must be a data: URI (or file:// / http(s) where the server allows them)")


def _read_capped(stream, where: str) -> bytes:
    data = stream.read(MAX_IMAGE_BYTES + 1)
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageError(f"'{where}': image larger than {MAX_IMAGE_BYTES} bytes")
    return data


def file_part(path: str) -> dict:
    """An image_url content part holding the file at `path` as a data: URI (the CLI's --image)."""
    with open(path, "rb") as f:
        data = _read_capped(f, path)
    return {"type": IMAGE_URL, "image_url": {"url": "data:application/octet-stream;base64," +
                                             base64.b64encode(data).decode("ascii")}}


class ImageRef:
    """One image part of a request: its URL, where it is, and (once read) its frames and layout,
    so that the prompt's markup and its blocks come from one decoding."""
    __slots__ = ("url", "where", "frames", "layout")

    def __init__(self, url: str, where: str):
        self.url, self.where = url, where
        self.frames: Optional[List[np.ndarray]] = None
        self.layout: Any = None


def has_images(messages) -> bool:
    for m in messages or ():
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, (list, tuple)):
            if any(isinstance(p, Mapping) and p.get("type") in IMAGE_PART_TYPES for p in content):
                return True
    return False


def refuse_images(messages) -> None:
    """ImageError when a text-only model is sent an image."""
    if has_images(messages):
        raise ImageError("this model takes no images (load it with its projector: mmproj=PATH / --mmproj)")


# ---- the encoder ------------------------------------------------------------------------------

def of(llm) -> Optional["VisionInput"]:
    """The projector an LLM (or AsyncLLM) was loaded with, or None."""
    inner = getattr(llm, "llm", llm)
    return getattr(getattr(inner, "chat_renderer", None), "vision", None)


def find_mmproj(model_path: str) -> Optional[str]:
    """The one mmproj*.gguf beside `model_path` (None when there is none or several)."""
    d = os.path.dirname(os.path.abspath(str(model_path)))
    try:
        found = sorted(f for f in os.listdir(d) if f.lower().startswith("mmproj") and f.lower().endswith(".gguf"))
    except OSError:
        return None
    return os.path.join(d, found[0]) if len(found) == 1 else None


class VisionInput:
    """A loaded projector for one text model, and the per-request image work."""

    def __init__(self, path: str, tok, n_embd: int, arch: str, n_threads: int = 0,
                 media_path: Optional[str] = None, allow_remote: bool = False):
        try:
            import PIL  # noqa: F401 - decoding needs it; say so at load, not at the first image
        except ImportError:
            raise ImportError("images need Pillow: pip install 'edgellm[vision]'") from None
        self.path = str(path)
        self.encoder = _core.VisionEncoder(self.path, n_threads)
        e = self.encoder
        self.family = FAMILIES.get(e.projector)
        if self.family is None:
            raise ModelFormatError(f"{self.path}: projector type '{e.projector}' is not supported")
        if arch not in TEXT_ARCHS.get(e.projector, ()):
            raise ModelFormatError(f"{self.path}: a '{e.projector}' projector does not fit a '{arch}' text model")
        if e.n_embd_text != n_embd:
            raise ModelFormatError(f"{self.path}: the projector embeds into width {e.n_embd_text}, but the text "
                                   f"model's embedding width is {n_embd}")
        self.tok = tok
        ids = list(tok.encode(self.family.image_token, False, True))
        if len(ids) != 1:
            raise ModelFormatError(f"{self.path}: the text model's vocabulary has no "
                                   f"'{self.family.image_token}' token")
        self.image_token_id = ids[0]
        self.n_tokens: int = e.n_tokens
        self.media_path = media_path
        self.allow_remote = allow_remote
        self._cache: "collections.OrderedDict[int, np.ndarray]" = collections.OrderedDict()
        self._cache_bytes = 0
        self._lock = threading.Lock()
        self._encoding: Dict[int, threading.Event] = {}  # pixel hash -> set when its encode ends
        self.images_encoded = 0
        self.encode_cache_hits = 0
        self.encode_joins = 0

    def describe(self) -> dict:
        e = self.encoder
        return {"path": self.path, "projector": e.projector, "image_size": e.image_size,
                "tokens_per_image": e.n_tokens}

    # ---- one request ----
    def messages_for_template(self, messages) -> Tuple[list, List[ImageRef]]:
        """Messages with each image part as {"type": "image"} (what HF templates render) and the
        images (ImageRef) in order."""
        out, urls = [], []
        for i, m in enumerate(messages):
            content = m.get("content") if isinstance(m, Mapping) else None
            if not isinstance(content, (list, tuple)):
                out.append(m)
                continue
            parts = []
            for j, p in enumerate(content):
                if isinstance(p, Mapping) and p.get("type") in IMAGE_PART_TYPES:
                    where = f"messages[{i}].content[{j}]"
                    urls.append(ImageRef(image_url_of(p, where), where))
                    parts.append({"type": "image"})
                else:
                    parts.append(p)
            out.append({**m, "content": parts})
        return out, urls

    def expand(self, text: str, images: List[ImageRef]) -> str:
        """The rendered prompt with each template marker replaced by the processor's markup for
        that image (read and preprocessed here when its markup depends on its size)."""
        fam = self.family
        pieces = text.split(fam.marker)
        if len(pieces) - 1 != len(images):
            raise ImageError(f"the chat template placed {len(pieces) - 1} image markers for {len(images)} "
                             f"images (it must render {{'type': 'image'}} parts as '{fam.marker}')")
        out = [pieces[0]]
        for ref, rest in zip(images, pieces[1:]):
            out += [fam.markup(self.prepare(ref).layout, self.n_tokens), rest]
        return "".join(out)

    def prepare(self, ref: ImageRef) -> ImageRef:
        """`ref` with its frames and layout (read, decoded and preprocessed once)."""
        if ref.frames is None:
            data = read_url(ref.url, self.media_path, self.allow_remote, ref.where)
            ref.frames, ref.layout = self.family.frames(open_image(data), self.encoder)
        return ref

    def pixels(self, data: bytes) -> np.ndarray:
        """The image's frames (encoder inputs) stacked: float32 [n_frames, 3, size, size] (Gemma 3:
        one frame)."""
        import numpy as np

        frames, _ = self.family.frames(open_image(data), self.encoder)
        return np.stack(frames) if len(frames) > 1 else frames[0]

    def embeddings(self, pixels: np.ndarray) -> Tuple[int, np.ndarray]:
        """(pixel hash, float32 [n_tokens, n_embd]); encoded once per distinct image while cached.
        Concurrent requests for an image that is being encoded wait for that encode (counted in
        image_encode_joins) instead of encoding it again."""
        h = pixel_hash(pixels)
        while True:
            with self._lock:
                hit = self._cache.get(h)
                if hit is not None:
                    self._cache.move_to_end(h)
                    self.encode_cache_hits += 1
                    return h, hit
                running = self._encoding.get(h)
                if running is None:
                    done = self._encoding[h] = threading.Event()
                    break
                self.encode_joins += 1
            running.wait()  # then the cache has it (or that encode failed: try again here)
        try:
            emb = self.encoder.encode(pixels)
            with self._lock:
                self.images_encoded += 1
                if h not in self._cache:
                    self._cache[h] = emb
                    self._cache_bytes += emb.nbytes
                    while self._cache_bytes > EMBEDDING_CACHE_BYTES and len(self._cache) > 1:
                        _, old = self._cache.popitem(last=False)
                        self._cache_bytes -= old.nbytes
        finally:
            with self._lock:
                del self._encoding[h]
            done.set()
        return h, emb

    def raw_prompt_ids(self, text: str, parts: List[Mapping], tokenize, where: str) -> PromptIds:
        """A raw prompt (llama.cpp's /completion: `text` with MEDIA_MARKER where each image part
        goes) as ids with its image blocks: each marker becomes the processor's markup, and
        `tokenize` (special tokens parsed, BOS added) reads the result."""
        found = text.count(MEDIA_MARKER)
        if found != len(parts):
            raise ImageError(f"'{where}.prompt_string' holds {found} media markers '{MEDIA_MARKER}' "
                             f"for {len(parts)} multimodal_data images")
        refs = [ImageRef(image_url_of(p, f"{where}.multimodal_data[{k}]"), f"{where}.multimodal_data[{k}]")
                for k, p in enumerate(parts)]
        text = self.expand(text.replace(MEDIA_MARKER, self.family.marker), refs)
        return self.attach(tokenize(text), refs)

    def attach(self, ids: List[int], images: List[ImageRef]) -> PromptIds:
        """Prompt ids with each image frame's block found (runs of the image token, in order) and
        its embeddings attached."""
        runs, i = [], 0
        tid = self.image_token_id
        while i < len(ids):
            if ids[i] == tid:
                j = i
                while j < len(ids) and ids[j] == tid:
                    j += 1
                runs.append((i, j - i))
                i = j
            else:
                i += 1
        fam = self.family
        frames = [(f, fam.block(ref.layout, self.n_tokens)) for ref in images for f in self.prepare(ref).frames]
        if [n for _, n in runs] != [n for _, (n, _) in frames]:
            raise ImageError(f"the prompt holds image blocks {[n for _, n in runs]} for {len(images)} images of "
                             f"blocks {[n for _, (n, _) in frames]} (image-token text in the messages?)")
        out = PromptIds(ids)
        out.images = []
        for (pos, _), (pixels, (_, grid)) in zip(runs, frames):
            h, emb = self.embeddings(pixels)
            out.images.append((pos, h, emb) if grid is None else (pos, h, emb, grid))
        return out

    def stats(self) -> dict:
        with self._lock:
            return {"images_encoded": self.images_encoded, "image_cache_hits": self.encode_cache_hits,
                    "image_encode_joins": self.encode_joins, "image_cache_entries": len(self._cache)}
