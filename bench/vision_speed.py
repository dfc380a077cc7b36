#!/usr/bin/env python3
"""Vision speed on Gemma 3 4B's shapes, side by side with llama.cpp's llama-mtmd-cli (issue 40):

- encode: one 896 x 896 image through the SigLIP tower (896 px, 14 px patches -> 4096 patches,
  width 1152, 27 layers, FFN 4304, 16 heads), pooled 4 x 4 to 256 tokens and projected to the
  text width 2560 (edgellm: `VisionEncoder.encode` on the preprocessed pixels; peer: its
  "image slice encoded in N ms");
- TTFT: one image + 32 text tokens in a chat turn, to the first token, on a Gemma 3 4B-shaped
  text model (bench/make_synthetic.py --preset gemma3-4b, Q4_0 by default) (edgellm: LLM.chat
  with max_tokens 1, prefix cache off and the encoded-image cache emptied, the image decoded
  from its PNG each time; peer: -n 1, from its log line after loading to its exit).

Random weights (speed does not depend on their values): the projector is written here as an
mmproj GGUF in llama.cpp's layout (F16 matrices, as published projectors; llama-mtmd-cli loads
it), the text model by make_synthetic.py with the cached Gemma 3 270M's tokenizer (the same
vocabulary as 4B's) and the Gemma 3 chat template.

    python bench/vision_speed.py                          # full shapes, 2 threads, 3 reps
    python bench/vision_speed.py --vision-layers 2 --text-layers 2 --reps 1   # a quick proof

Ratios are peer time / edgellm time (> 1: edgellm faster). Wall-clock: run on a quiet machine;
the load average is printed with the figures. llama-mtmd-cli is looked up in
$LLAMA_CPP_BIN (default /work/peers/llama.cpp/build/bin); without it, edgellm's side alone."""
import argparse
import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_synthetic  # noqa: E402

# Gemma 3 4B's vision tower and projector (google/gemma-3-4b-it config.json vision_config)
IMAGE, PATCH, WIDTH, FFN, HEADS, TEXT_WIDTH = 896, 14, 1152, 4304, 16, 2560
TEXT_TOKENS = 32


def write_mmproj(path: Path, layers: int, seed: int = 0) -> None:
    """A Gemma 3 projector GGUF as llama.cpp's convert_hf_to_gguf.py --mmproj writes it (F16
    matrices; F32 norms, biases, embeddings), random weights at SigLIP-like scales."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_name("gemma3-4b-vision-shape")
    w.add_file_type(1)
    for k, v in (("clip.has_vision_encoder", True),):
        w.add_bool(k, v)
    for k, v in (("clip.vision.projection_dim", TEXT_WIDTH), ("clip.vision.image_size", IMAGE),
                 ("clip.vision.patch_size", PATCH), ("clip.vision.embedding_length", WIDTH),
                 ("clip.vision.feed_forward_length", FFN), ("clip.vision.block_count", layers),
                 ("clip.vision.attention.head_count", HEADS)):
        w.add_uint32(k, v)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_string("clip.projector_type", "gemma3")
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_bool("clip.use_gelu", True)
    w.add_quantization_version(2)
    n_patch = (IMAGE // PATCH) ** 2

    def f32(*shape, scale=0.02, base=0.0):
        return (base + scale * rng.standard_normal(shape)).astype(np.float32)

    def f16(*shape):
        return (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float16)

    w.add_tensor("mm.input_projection.weight", f16(WIDTH, TEXT_WIDTH))
    w.add_tensor("mm.soft_emb_norm.weight", f32(WIDTH, scale=0.1, base=1.0))
    w.add_tensor("v.patch_embd.weight", f32(WIDTH, 3, PATCH, PATCH))
    w.add_tensor("v.patch_embd.bias", f32(WIDTH))
    w.add_tensor("v.position_embd.weight", f32(n_patch, WIDTH))
    for i in range(layers):
        b = f"v.blk.{i}."
        for n in ("ln1", "ln2"):
            w.add_tensor(b + n + ".weight", f32(WIDTH, scale=0.1, base=1.0))
            w.add_tensor(b + n + ".bias", f32(WIDTH))
        for n in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(b + n + ".weight", f16(WIDTH, WIDTH))
            w.add_tensor(b + n + ".bias", f32(WIDTH))
        w.add_tensor(b + "ffn_up.weight", f16(FFN, WIDTH))
        w.add_tensor(b + "ffn_up.bias", f32(FFN))
        w.add_tensor(b + "ffn_down.weight", f16(WIDTH, FFN))
        w.add_tensor(b + "ffn_down.bias", f32(WIDTH))
    w.add_tensor("v.post_ln.weight", f32(WIDTH, scale=0.1, base=1.0))
    w.add_tensor("v.post_ln.bias", f32(WIDTH))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_text_model(path: Path, layers: int, ftype: str) -> None:
    import gguf

    make_synthetic.use_edgellm()
    from edgellm.models import model_path

    T = gguf.GGUFValueType
    a = SimpleNamespace(**make_synthetic.PRESETS["gemma3-4b"], experts=0, experts_used=0, expert_ffn=0, seed=0)
    a.layers = layers
    # Gemma 3 4B's vocabulary: the 270M's 262144 tokens, then <image_soft_token> (262144) and 63
    # unused ones, as the 4B GGUF has them
    fields = []
    for f in make_synthetic.tokenizer_fields_from(model_path("gemma3"), 262144):
        if f.name == "tokenizer.ggml.tokens":
            extra = ["<image_soft_token>"] + [f"<unused_vision_{i}>" for i in range(a.vocab - 262145)]
            fields.append((f.name, list(f.contents()) + extra, T.ARRAY, T.STRING))
        elif f.name == "tokenizer.ggml.scores":
            fields.append((f.name, list(f.contents()) + [0.0] * (a.vocab - 262144), T.ARRAY, T.FLOAT32))
        elif f.name == "tokenizer.ggml.token_type":
            fields.append((f.name, list(f.contents()) + [3] * (a.vocab - 262144), T.ARRAY, T.INT32))
        elif f.name != "tokenizer.chat_template":
            fields.append(f)
    tmpl = (HERE.parent / "tests" / "data" / "vision" / "hf-gemma3" / "chat_template.jinja").read_text()
    fields.append(("tokenizer.chat_template", tmpl, T.STRING, None))
    make_synthetic.write_model(a, ftype, path, fields)


def test_image(path: Path) -> bytes:
    from PIL import Image

    y, x = np.mgrid[0:IMAGE, 0:IMAGE]
    rgb = np.stack([(x * 255 // IMAGE), (y * 255 // IMAGE), ((x ^ y) & 255)], -1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, "PNG")
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def text_of_n_tokens(llm, n: int) -> str:
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly count "
             "purple lanterns near an old stone bridge beside the river ").split() * 4
    for k in range(1, len(words)):
        text = " ".join(words[:k])
        if len(llm.tokenize(text, add_special=False)) >= n:
            return text
    raise SystemExit("could not build the text prompt")


def ours(model: Path, mmproj: Path, png: bytes, threads: int, reps: int):
    import edgellm
    from edgellm.sampling_params import SamplingParams
    import base64

    def data_uri(b: bytes) -> str:
        return "data:image/png;base64," + base64.b64encode(b).decode()

    llm = edgellm.LLM(str(model), mmproj=str(mmproj), n_ctx=1024, n_threads=threads, prefix_cache=False,
                      max_seqs=1)
    v = llm.chat_renderer.vision
    px = v.pixels(png)
    encode = []
    for _ in range(reps):
        t0 = time.perf_counter()
        v.encoder.encode(px)
        encode.append(time.perf_counter() - t0)
    text = text_of_n_tokens(llm, TEXT_TOKENS)
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_uri(png)}},
                                         {"type": "text", "text": text}]}]
    n_prompt = len(llm.chat_renderer.request(msgs, None, None, None, None, None)[0])
    ttft = []
    for _ in range(reps):
        with v._lock:
            v._cache.clear()
            v._cache_bytes = 0
        t0 = time.perf_counter()
        llm.chat(msgs, SamplingParams(temperature=0, max_tokens=1))
        ttft.append(time.perf_counter() - t0)
    llm.close()
    return min(encode), min(ttft), n_prompt, text


def _stamp(line: str) -> float:
    """Seconds since the start of a llama.cpp log line's timestamp (m.ss.mmm.uuu)."""
    m, sec, ms, us = (int(x) for x in line.split()[0].split("."))
    return 60 * m + sec + ms / 1e3 + us / 1e6


def peer(bin_dir: Path, model: Path, mmproj: Path, image: Path, text: str, threads: int, reps: int):
    """llama-mtmd-cli, -n 1: encode from its "mtmd batch encoding done in N ms" (older builds:
    "image slice encoded in N ms"); TTFT from its log line after the model and projector are
    loaded (the experimental-CLI warning) to the process's exit after the first token (PNG
    decode, the text chunks, the encode, the image batch, one sampled token, and its teardown)."""
    exe = bin_dir / "llama-mtmd-cli"
    if not exe.exists():
        return None
    encode, ttft = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = subprocess.run([str(exe), "-m", str(model), "--mmproj", str(mmproj), "--image", str(image),
                            "-p", text, "-n", "1", "-t", str(threads), "-tb", str(threads), "--temp", "0",
                            "-c", "1024", "--no-warmup"], capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - t0
        log = r.stdout + r.stderr
        if r.returncode != 0:
            raise SystemExit(f"llama-mtmd-cli failed ({r.returncode}):\n{log[-3000:]}")
        enc = re.search(r"(?:mtmd batch encoding done|image slice encoded) in (\d+) ms", log)
        ready = next((ln for ln in log.splitlines() if "experimental CLI" in ln), None)
        if not (enc and ready):
            raise SystemExit(f"llama-mtmd-cli's log has no encode time or start line:\n{log[-3000:]}")
        encode.append(int(enc.group(1)) / 1000)
        ttft.append(wall - _stamp(ready))
    return min(encode), min(ttft), None


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default=os.path.expanduser("~/.cache/edgellm/synthetic"))
    p.add_argument("--vision-layers", type=int, default=27)
    p.add_argument("--text-layers", type=int, default=34)
    p.add_argument("--type", default="Q4_0", help="the text model's type (make_synthetic.py)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3, help="runs per side; the minimum is reported")
    p.add_argument("--peer-bin", default=os.environ.get("LLAMA_CPP_BIN", "/work/peers/llama.cpp/build/bin"))
    a = p.parse_args()
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mmproj = out / f"mmproj-gemma3-4b-vision-{a.vision_layers}l-F16.gguf"
    model = out / f"gemma3-4b-shape-{a.text_layers}l-{a.type}.gguf"
    image = out / "vision-896.png"
    if not mmproj.exists():
        t0 = time.perf_counter()
        write_mmproj(mmproj.with_suffix(".part"), a.vision_layers)
        os.replace(mmproj.with_suffix(".part"), mmproj)
        print(f"wrote {mmproj} ({mmproj.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.0f} s")
    if not model.exists():
        t0 = time.perf_counter()
        write_text_model(model.with_suffix(".part"), a.text_layers, a.type)
        os.replace(model.with_suffix(".part"), model)
        print(f"wrote {model} ({model.stat().st_size / 2**30:.2f} GiB) in {time.perf_counter() - t0:.0f} s")
    png = test_image(image)
    load = os.getloadavg()[0]
    e_enc, e_ttft, e_n, text = ours(model, mmproj, png, a.threads, a.reps)
    pr = peer(Path(a.peer_bin), model, mmproj, image, text, a.threads, a.reps)
    load = max(load, os.getloadavg()[0])
    print(f"shapes: vision {a.vision_layers} layers at {IMAGE} px ({(IMAGE // PATCH) ** 2} patches -> 256 tokens), "
          f"text {a.text_layers} layers {a.type}; {a.threads} threads, min of {a.reps}; load average {load:.1f}")
    print(f"edgellm: encode {e_enc * 1000:.0f} ms, TTFT {e_ttft * 1000:.0f} ms ({e_n} prompt tokens)")
    if pr is None:
        print(f"llama-mtmd-cli: not found in {a.peer_bin} (edgellm's side only)")
        return
    p_enc, p_ttft, p_n = pr
    print(f"llama-mtmd-cli: encode {p_enc * 1000:.0f} ms, TTFT {p_ttft * 1000:.0f} ms")
    print(f"ratio (peer / edgellm): encode {p_enc / e_enc:.2f}x, TTFT {p_ttft / e_ttft:.2f}x")


if __name__ == "__main__":
    main()
