"""Images to feed vision's decoding, good and bad: each format's encoding of one generated image
(a 2-frame GIF), and headers rewritten to claim other sizes (decompression bombs). Shared by
tests/test_vision_fuzz.py and fuzz/fuzz_images.py."""
import io
import struct
import zlib

from PIL import Image

import vision_images


def encoded(fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im = Image.fromarray(vision_images.image_array(23, 31, 3, 3), "RGB")
    if fmt == "GIF":  # two frames: the first is the image
        im.save(buf, format="GIF", save_all=True, append_images=[im.rotate(90)], **kw)
    else:
        im.save(buf, format=fmt, **kw)
    return buf.getvalue()


def png_of_size(w: int, h: int) -> bytes:
    """A PNG whose header says w x h, with one row of data (a bomb if decoded)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def gif_of_size(w: int, h: int) -> bytes:
    g = bytearray(encoded("GIF"))
    g[6:10] = struct.pack("<HH", w, h)  # the logical screen
    return bytes(g)


def with_size(data: bytes, w: int, h: int) -> bytes:
    """`data` with its header's size fields rewritten (PNG IHDR, GIF screen, JPEG SOF0, WebP VP8X)."""
    b = bytearray(data)
    if b.startswith(b"\x89PNG"):
        b[16:24] = struct.pack(">II", w, h)
    elif b.startswith(b"GIF8"):
        b[6:10] = struct.pack("<HH", w & 0xFFFF, h & 0xFFFF)
    elif b.startswith(b"\xff\xd8"):
        i = b.find(b"\xff\xc0")
        if i > 0:
            b[i + 5:i + 9] = struct.pack(">HH", h & 0xFFFF, w & 0xFFFF)
    elif b[8:12] == b"WEBP":
        i = b.find(b"VP8X")
        if i > 0:
            b[i + 12:i + 18] = ((w - 1) & 0xFFFFFF).to_bytes(3, "little") + ((h - 1) & 0xFFFFFF).to_bytes(3, "little")
    return bytes(b)


def seeds() -> list:
    """Each format, several encodings, and the bombs: the fuzzers' starting inputs."""
    out = [encoded("PNG"), encoded("JPEG"), encoded("WEBP", lossless=True), encoded("GIF"),
           encoded("PNG", optimize=True), encoded("WEBP", quality=50), encoded("BMP"), encoded("TIFF")]
    out += [with_size(s, 1 << 20, 1 << 20) for s in out[:4]]
    return out + [png_of_size(100_000, 100_000), gif_of_size(65535, 65535)]
