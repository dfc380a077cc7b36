"""Fuzz harness for `edgellm convert`'s readers (python/edgellm/convert/): a safetensors shard,
config.json, tokenizer.json and model.safetensors.index.json, each fed to the real `plan()` of a
small, otherwise valid checkpoint, then every planned tensor read (`load_transformed`).

Input: byte 0 picks the file (mod 5: shard, config.json, tokenizer.json, index,
tokenizer_config.json), the rest is that file's content. Only `ConvertError` (UnsupportedArchitectureError included) or success
may come out; any other exception is a finding. The memory one input costs must stay under
MEMORY_BASE + MEMORY_PER_BYTE * len(input): a reader that allocates from a size it has not
checked against the file (a header length, a vocab_size, a shape) is a finding too. Measured
as the process's peak RSS over the call (Linux: VmHWM, reset before each input through
/proc/self/clear_refs), or with `--memory tracemalloc` as tracemalloc's peak (exact, numpy
buffers included, ~4x slower).

Runs under atheris (coverage-guided libFuzzer for Python) when it is installed, else under a
seeded, coverage-agnostic mutation loop in this file (byte flips, interesting numbers, JSON
tokens, splices). Both mutate half the time at the JSON level (a node of the parsed file, or
of a shard's header, replaced by a value of another type, an extreme number, another node,
or dropped), half at the byte level. Usage:

    python fuzz/fuzz_convert.py [--seconds S] [--runs N] [--seed K] [--engine atheris|mutate]
                                [--memory rss|tracemalloc] [--work DIR] [--artifacts DIR] [FILE...]

FILEs (or folders of them) are replayed only (fuzz/regressions/convert/). Needs the edgellm
package with its extension importable (EDGELLM_BUILD_DIR=build/dev PYTHONPATH=python, or an
installed package); scripts/fuzz.sh runs it as target `convert`."""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import shutil
import signal
import struct
import sys
import tempfile
import time
import tracemalloc

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # tests/hf_checkpoints.py: the tokenizer and config
import hf_checkpoints as hc  # noqa: E402

MEMORY_BASE = 4 << 20  # the fixed files of the checkpoint, the plan, interpreter noise
MEMORY_PER_BYTE = 64  # JSON text -> Python objects: "[{}," is 4 bytes -> a 64-byte dict + a pointer
TIME_LIMIT_S = 10
FILES = ("model.safetensors", "config.json", "tokenizer.json", "model.safetensors.index.json",
         "tokenizer_config.json")

# ---- the base checkpoint: llama, 1 layer, hidden 8, vocabulary 32, F16, tied embeddings ------------


def base_config() -> dict:
    c = hc.config("llama")
    c.update(hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=2,
             num_key_value_heads=1, head_dim=4, max_position_embeddings=64, tie_word_embeddings=True,
             vocab_size=32, bos_token_id=24, eos_token_id=25)
    return c


def base_tokenizer(pre: str = "gpt2") -> dict:
    """tests/hf_checkpoints.py's byte-level BPE cut to 24 tokens (+ its 2 special ones at 24, 25)."""
    tj = hc.tokenizer_json(pre)
    tj["model"]["vocab"] = {t: i for t, i in tj["model"]["vocab"].items() if i < 24}
    for k, a in enumerate(tj["added_tokens"]):
        a["id"] = 24 + k
    return tj


def base_tensors(config: dict, dtype=np.float16) -> dict:
    h, ff, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    q, kv = config["num_attention_heads"] * config["head_dim"], config["num_key_value_heads"] * config["head_dim"]
    rng = np.random.default_rng(0)
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    for il in range(config["num_hidden_layers"]):
        p = f"model.layers.{il}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                       p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                       p + "mlp.gate_proj.weight": (ff, h), p + "mlp.up_proj.weight": (ff, h),
                       p + "mlp.down_proj.weight": (h, ff)})
    return {k: (rng.standard_normal(s) * 0.1).astype(dtype) for k, s in sorted(shapes.items())}


def safetensors_bytes(tensors: dict, metadata: dict | None = None) -> bytes:
    """A safetensors file as the library writes it (header padded to 8 bytes with spaces)."""
    header, blobs, off = {}, [], 0
    names = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.uint16): "BF16"}
    for k, a in tensors.items():
        raw = a.tobytes()
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def base_tokenizer_config() -> dict:
    return {"bos_token": "<|endoftext|>", "eos_token": {"content": "<|im_end|>"}, "add_bos_token": False,
            "chat_template": "{{ x }}", "added_tokens_decoder": {"24": {"content": "<|endoftext|>", "special": True}}}


def write_base(directory: str, sharded: bool) -> None:
    """The valid checkpoint every input is written into (one file replaced)."""
    os.makedirs(directory, exist_ok=True)
    cfg = base_config()
    files = {"config.json": json.dumps(cfg).encode(),
             "tokenizer.json": json.dumps(base_tokenizer()).encode(),
             "tokenizer_config.json": json.dumps(base_tokenizer_config()).encode(),
             # read by a vision-language config's projector plan (convert/vlm.py)
             "preprocessor_config.json": json.dumps({"image_mean": [0.5] * 3, "image_std": [0.5] * 3}).encode()}
    t = base_tensors(cfg)
    if sharded:
        names = sorted(t)
        a, b = names[::2], names[1::2]
        files["model-00001-of-00002.safetensors"] = safetensors_bytes({k: t[k] for k in a})
        files["model-00002-of-00002.safetensors"] = safetensors_bytes({k: t[k] for k in b})
        wm = {**{k: "model-00001-of-00002.safetensors" for k in a}, **{k: "model-00002-of-00002.safetensors" for k in b}}
        files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": wm}).encode()
    else:
        files["model.safetensors"] = safetensors_bytes(t, {"format": "pt"})
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def seeds() -> list:
    """Valid and near-valid inputs of every target: the base files and variants that reach the
    RoPE, MoE, gemma and phi3 branches of config.json, the Sequence pre-tokenizer, BF16/F32 shards."""
    cfg = base_config()
    t = base_tensors(cfg)
    out = [bytes([0]) + safetensors_bytes(t, {"format": "pt"}),
           bytes([0]) + safetensors_bytes({k: v.astype(np.float32) for k, v in t.items()}),
           bytes([0]) + safetensors_bytes({k: (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
                                           for k, v in t.items()}),
           bytes([0]) + safetensors_bytes(dict(list(t.items())[:3]))]
    out.append(bytes([1]) + json.dumps(cfg).encode())
    for arch in hc.ARCHS + ("gptoss",):
        c = hc.config(arch)
        out.append(bytes([1]) + json.dumps(c).encode())
        keep = {k: c[k] for k in c if k not in base_config() or k in ("architectures", "rope_scaling", "rope_theta")}
        out.append(bytes([1]) + json.dumps({**cfg, **keep}).encode())
    out.append(bytes([1]) + json.dumps({**cfg, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}).encode())
    # vision-language wrappers of the base text model (convert/vlm.py: the text view, the projector's plan)
    siglip = {"hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 28, "patch_size": 14, "layer_norm_eps": 1e-6}
    for arch, extra in (("SmolVLMForConditionalGeneration", {"scale_factor": 2}),
                        ("Gemma3ForConditionalGeneration", {"mm_tokens_per_image": 4}),
                        ("Qwen2_5_VLForConditionalGeneration", {"model_type": "qwen2_5_vl"})):
        text = dict(cfg)
        vision = dict(siglip)
        if arch.startswith("Qwen"):
            text["rope_scaling"] = {"type": "mrope", "mrope_section": [1, 1]}
            vision = {"depth": 2, "num_heads": 2, "hidden_size": 8, "intermediate_size": 8, "patch_size": 14,
                      "fullatt_block_indexes": [1]}
        out.append(bytes([1]) + json.dumps({"architectures": [arch], "text_config": text, "vision_config": vision,
                                            **extra}).encode())
    for pre in ("gpt2", "qwen2"):
        out.append(bytes([2]) + json.dumps(base_tokenizer(pre)).encode())
    tj = base_tokenizer()
    tj["model"]["merges"] = [m.split(" ") for m in tj["model"]["merges"]]
    tj["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>"}}]}
    out.append(bytes([2]) + json.dumps(tj).encode())
    names = sorted(t)
    wm = {k: "model-00001-of-00002.safetensors" if i % 2 == 0 else "model-00002-of-00002.safetensors"
          for i, k in enumerate(names)}
    out.append(bytes([3]) + json.dumps({"metadata": {}, "weight_map": wm}).encode())
    tc = base_tokenizer_config()
    out.append(bytes([4]) + json.dumps(tc).encode())
    out.append(bytes([4]) + json.dumps({**tc, "chat_template": [{"name": "default", "template": "t"}],
                                        "add_bos_token": None, "add_eos_token": True}).encode())
    return out


# ---- one input ------------------------------------------------------------------------------


class RssMeter:
    """Peak RSS over a call: VmHWM reset to the current RSS through /proc/self/clear_refs."""

    def __init__(self):
        self.clear = os.open("/proc/self/clear_refs", os.O_WRONLY)
        self.status = os.open("/proc/self/status", os.O_RDONLY)
        self.start()
        self.stop()  # fails here, not mid-run, where the kernel lacks it

    def _read(self):
        text = os.pread(self.status, 8192, 0).decode()
        hwm = rss = None
        for line in text.splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) << 10
            elif line.startswith("VmRSS:"):
                rss = int(line.split()[1]) << 10
        return hwm, rss

    def start(self) -> None:
        os.write(self.clear, b"5")
        self.before = self._read()[1]

    def stop(self) -> int:
        return self._read()[0] - self.before


class TraceMeter:
    def __init__(self):
        tracemalloc.start()

    def start(self) -> None:
        tracemalloc.reset_peak()
        self.before = tracemalloc.get_traced_memory()[0]

    def stop(self) -> int:
        return tracemalloc.get_traced_memory()[1] - self.before


class Harness:
    def __init__(self, root: str, memory: str = "rss"):
        from edgellm.convert import ConvertError, plan  # noqa: F401  (imported after atheris instruments)
        from edgellm.convert.tensors import load_transformed

        from edgellm.convert.checkpoint import Checkpoint
        from edgellm.convert.vlm import load_vision, plan_mmproj, vlm_arch

        self.ConvertError, self.plan, self.load = ConvertError, plan, load_transformed
        self.Checkpoint, self.plan_mmproj, self.load_vision, self.vlm_arch = Checkpoint, plan_mmproj, load_vision, vlm_arch
        self.dirs = []
        for i, name in enumerate(FILES):
            d = os.path.join(root, f"t{i}")
            write_base(d, sharded=name == "model.safetensors.index.json")
            self.dirs.append(d)
        self.executions = 0
        self.outcomes = {}
        self.meter = RssMeter() if memory == "rss" else TraceMeter()
        self.max_peak = 0  # the most one input cost

    def run(self, data: bytes) -> None:
        if not data:
            return
        target = data[0] % len(FILES)
        body = data[1:]
        path = os.path.join(self.dirs[target], FILES[target])
        with open(path, "wb") as f:
            f.write(body)
        self.executions += 1
        self.meter.start()
        outcome = "ok"
        try:
            cp = self.plan(self.dirs[target], "F16")
            for t in cp.tensors:
                self.load(cp.checkpoint, t.plan)
            del cp
            ck = self.Checkpoint(self.dirs[target])
            if self.vlm_arch(ck.config) is not None:  # the projector too (convert/vlm.py)
                mp = self.plan_mmproj(ck, "F16")
                for t in mp.tensors:
                    self.load_vision(ck, t)
        except self.ConvertError as e:
            outcome = type(e).__name__
        peak = self.meter.stop()
        bound = MEMORY_BASE + MEMORY_PER_BYTE * len(body)
        self.max_peak = max(self.max_peak, peak)
        if peak > bound:
            raise MemoryBoundExceeded(f"{FILES[target]} of {len(body)} bytes: the reader allocated {peak} bytes, "
                                      f"over the bound {bound}")
        key = (FILES[target], outcome)
        self.outcomes[key] = self.outcomes.get(key, 0) + 1


class MemoryBoundExceeded(AssertionError):
    pass


class UnitTimeout(AssertionError):
    pass


def _alarm(signum, frame):
    raise UnitTimeout(f"one input ran past {TIME_LIMIT_S} s")


# ---- the seeded mutation loop (no atheris) -----------------------------------------------------

_TOKENS = [b"-1", b"0", b"1", b"1e30", b"-1e30", b"64.7", b"NaN", b"Infinity", b"18446744073709551615",
           b"9223372036854775808", b"4294967296", b"1" + b"0" * 30, b"null", b"true", b"false", b"[]", b"{}",
           b'""', b"[[[[[[[[", b'"../../etc/passwd"', b'"/etc/passwd"', b'"\\ud800"', b'"x"', b",", b":",
           b'"shape"', b'"dtype"', b'"data_offsets"', b'"F16"', b'"BF16"', b'"U8"', b'"I64"', b'"vocab_size"',
           b'"hidden_size"', b'"num_attention_heads"', b'"rope_scaling"', b'"Sequence"', b'"pretokenizers"',
           b'"weight_map"', b'"added_tokens"', b'"merges"', b'"vocab"', b'"model"', b'"id"', b'"content"']
_INTERESTING = [0, 1, 0x7F, 0x80, 0xFF, 0x22, 0x5B, 0x7B, 0x2C, 0x30]


# values a JSON-aware mutation puts in place of a node: wrong types, extremes, escapes
_VALUES = [-1, 0, 1, 2, 3, 7, 2**31, 2**32, 2**63, 2**64, 10**30, 1e30, -1e30, 64.7, 0.5, -0.0, float("nan"),
           float("inf"), "", "x", "F16", "U8", "I64", "../x", "/etc/passwd", "\ud800", None, True, False, [], {},
           [0], [0, 0], [[0]], {"a": 1}, "model.embed_tokens.weight", "Sequence", "ByteLevel", "BPE",
           "LlamaForCausalLM", "Qwen2MoeForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM", "GptOssForCausalLM",
           "llama3", "yarn", "longrope", "linear"]


def _nodes(tree, limit: int = 4096) -> list:
    """(parent, key) of the tree's nodes, breadth first, at most limit."""
    out, queue = [], [tree]
    while queue and len(out) < limit:
        node = queue.pop(0)
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            if isinstance(v, (dict, list)):
                queue.append(v)
    return out


def json_mutate(rng: random.Random, data: bytes):
    try:
        return _json_mutate(rng, data)
    except (ValueError, RecursionError):  # a tree json cannot print (too deep): no mutant
        return None


def _json_mutate(rng: random.Random, data: bytes):
    """A structure-aware mutant of data (the JSON of the file, or of a shard's header, changed at
    one to three nodes), or None when data holds no parseable JSON."""
    if not data:
        return None
    target, body = data[0] % len(FILES), data[1:]
    if target == 0:
        if len(body) < 8:
            return None
        n = struct.unpack("<Q", body[:8])[0]
        text, rest = body[8:8 + n], body[8 + n:]
    else:
        text, rest = body, b""
    try:
        tree = json.loads(text)
    except (ValueError, RecursionError):
        return None
    nodes = _nodes(tree)
    if not nodes:
        return None
    for _ in range(rng.choice((1, 1, 2, 3))):
        parent, key = rng.choice(nodes)
        op = rng.randrange(6)
        if op <= 2:  # another value (a copy: _VALUES's lists and dicts must not join the tree)
            parent[key] = copy.deepcopy(rng.choice(_VALUES))
        elif op == 3:  # another node's value
            other_parent, other_key = rng.choice(nodes)
            parent[key] = json.loads(json.dumps(other_parent[other_key]))
        elif op == 4 and isinstance(parent, dict):  # drop the key
            del parent[key]
        elif op == 4:  # wrap it
            parent[key] = [parent[key]]
        elif isinstance(parent[key], int) and not isinstance(parent[key], bool):  # a near number
            parent[key] = parent[key] + rng.choice((-1, 1, -parent[key], parent[key], 1 << 32))
        else:  # a dict as a list of its values, a list as a dict
            v = parent[key]
            parent[key] = list(v.values()) if isinstance(v, dict) else {str(i): x for i, x in enumerate(v)} \
                if isinstance(v, list) else v
        nodes = _nodes(tree)
        if not nodes:
            break
    try:
        out = json.dumps(tree).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        return None
    if target == 0:
        out = struct.pack("<Q", len(out)) + out + rest
    return bytes([data[0]]) + out


def mutate(rng: random.Random, data: bytes, pool: list) -> bytes:
    """A mutant of data (pool: inputs of the same target, for splicing): JSON-aware half the
    time, bytes otherwise."""
    if rng.random() < 0.5:
        out = json_mutate(rng, data)
        if out is not None:
            return out
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 4, 8))):
        op = rng.randrange(9)
        n = len(b)
        if op == 0 and n:  # flip a bit
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # an interesting byte
            b[rng.randrange(n)] = rng.choice(_INTERESTING)
        elif op == 2 and n > 1:  # delete a run
            i = rng.randrange(n)
            del b[i:i + rng.randrange(1, min(64, n - i) + 1)]
        elif op == 3:  # insert a JSON token
            b[rng.randrange(n + 1):0] = rng.choice(_TOKENS)
        elif op == 4 and n:  # replace a number with another
            i = rng.randrange(n)
            j = i
            while j < n and (48 <= b[j] <= 57 or b[j] in b"-.eE+"):
                j += 1
            b[i:j] = rng.choice(_TOKENS[:12])
        elif op == 5 and n >= 8:  # a u64 (safetensors header length, offsets) at a random place
            i = rng.randrange(n - 7)
            b[i:i + 8] = struct.pack("<Q", rng.choice((0, 1, 7, 8, n, n - 8, 1 << 30, 1 << 36, 100_000_001,
                                                       (1 << 64) - 1, rng.randrange(1 << 64))))
        elif op == 6 and pool:  # splice with another input
            other = rng.choice(pool)
            i, j = rng.randrange(n + 1), rng.randrange(len(other) + 1)
            b = b[:i] + other[j:j + rng.randrange(1, 256)] + b[i:]
        elif op == 7 and n:  # duplicate a run
            i = rng.randrange(n)
            run = b[i:i + rng.randrange(1, 32)]
            b[i:i] = run * rng.randrange(1, 8)
        elif op == 8 and n:  # truncate
            del b[rng.randrange(n):]
    if b and rng.random() < 0.05:
        b[0] = rng.randrange(len(FILES))  # another target, same body
    return bytes(b[:1 << 20])


def mutation_loop(h: Harness, seed_inputs: list, seconds: float, runs: int, seed: int, artifacts: str) -> int:
    rng = random.Random(seed)
    pools = [[s for s in seed_inputs if s[0] % len(FILES) == t] for t in range(len(FILES))]
    start = time.monotonic()
    signal.signal(signal.SIGALRM, _alarm)
    last = start
    while True:
        if runs and h.executions >= runs:
            break
        if seconds and time.monotonic() - start >= seconds:
            break
        if h.executions < len(seed_inputs):
            data = seed_inputs[h.executions]
        else:
            pool = pools[rng.randrange(len(FILES))]  # each file as often
            data = mutate(rng, rng.choice(pool), pool)
        rc = run_one(h, data, artifacts)
        if rc:
            return rc
        pool = pools[data[0] % len(FILES)] if data else []
        if data and rng.random() < 0.002 and len(pool) < 4096:
            pool.append(data)  # keep a few mutants (coverage-agnostic: kept at random)
        now = time.monotonic()
        if now - last >= 30:
            last = now
            print(f"#{h.executions} {h.executions / (now - start):.0f} exec/s", flush=True)
    return 0


def run_one(h, data: bytes, artifacts: str) -> int:
    """h.run(data) within TIME_LIMIT_S (SIGALRM set to _alarm); 1 and the input saved on any
    escape (a finding), else 0."""
    signal.alarm(TIME_LIMIT_S)
    try:
        h.run(data)
    except BaseException as e:  # noqa: BLE001 -- every escape is a finding
        signal.alarm(0)
        if isinstance(e, KeyboardInterrupt):
            raise
        return report_finding(data, e, artifacts)
    signal.alarm(0)
    return 0


def arguments(doc: str, target: str, extra=None) -> argparse.Namespace:
    """The Python harnesses' command line (fuzz_convert, fuzz_images); args.engine resolved:
    replay with FILEs, else atheris where it imports, else the mutation loop."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=0)
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--engine", choices=("atheris", "mutate", "auto"), default="auto")
    ap.add_argument("--work", default=None, help="atheris: the corpus folder it grows")
    ap.add_argument("--artifacts", default=f"build/fuzz/artifacts/{target}")
    ap.add_argument("files", nargs="*")
    if extra is not None:
        extra(ap)
    args = ap.parse_args()
    if args.engine == "auto":
        try:
            import atheris  # noqa: F401
            args.engine = "atheris"
        except ImportError:
            args.engine = "mutate"
    if args.files:
        args.engine = "replay"
    return args


def report_finding(data: bytes, e: BaseException, artifacts: str) -> int:
    import hashlib
    import traceback

    os.makedirs(artifacts, exist_ok=True)
    out = os.path.join(artifacts, "crash-" + hashlib.sha1(data).hexdigest())
    with open(out, "wb") as f:
        f.write(data)
    print("FINDING: " + "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:], flush=True)
    print(f"input written to {out}", flush=True)
    return 1


def replay(h: Harness, paths: list, artifacts: str) -> int:
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if not f.endswith(".md"))
        else:
            files.append(p)
    signal.signal(signal.SIGALRM, _alarm)
    for p in files:
        with open(p, "rb") as f:
            data = f.read()
        signal.alarm(TIME_LIMIT_S)
        try:
            h.run(data)
        except BaseException as e:  # noqa: BLE001
            signal.alarm(0)
            print(f"{p}:", flush=True)
            return report_finding(data, e, artifacts)
        signal.alarm(0)
    print(f"replayed {len(files)} inputs: clean", flush=True)
    return 0


def main() -> int:
    args = arguments(__doc__, "convert", lambda ap: ap.add_argument(
        "--memory", choices=("rss", "tracemalloc"), default="rss"))
    engine = args.engine

    tmp_root = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    root = tempfile.mkdtemp(prefix="edgellm-fuzz-convert-", dir=tmp_root)
    if engine == "atheris":  # atheris ends the process from C (no finally): remove the folder now,
        atexit_rmtree(root)  # at exit, through a child that waits for this process
    try:
        if engine == "atheris":
            import atheris

            import edgellm  # noqa: F401  (the package and its extension, uninstrumented)
            with atheris.instrument_imports(include=["edgellm.convert"]):
                import edgellm.convert.writer  # noqa: F401
            return run_atheris(Harness(root, args.memory), args)
        h = Harness(root, args.memory)
        t0 = time.monotonic()
        if engine == "replay":
            rc = replay(h, args.files, args.artifacts)
        else:
            rc = mutation_loop(h, seeds(), args.seconds, args.runs, args.seed, args.artifacts)
        dt = time.monotonic() - t0
        print(f"[fuzz_convert] engine {engine}: {h.executions} executions in {dt:.0f} s "
              f"({h.executions / max(dt, 1e-9):.0f}/s), seed {args.seed}, most memory one input "
              f"cost ({args.memory}) {h.max_peak >> 10} KiB (bound {MEMORY_BASE >> 20} MiB + {MEMORY_PER_BYTE} x its "
              f"bytes)", flush=True)
        for (name, outcome), n in sorted(h.outcomes.items()):
            print(f"  {name:32s} {outcome:32s} {n}")
        print(f"stat::number_of_executed_units: {h.executions}", flush=True)  # as libFuzzer says it
        return rc
    finally:
        shutil.rmtree(root, ignore_errors=True)


def atexit_rmtree(path: str) -> None:
    """Removes path once this process has exited (atheris.Fuzz() exits from C, past Python's
    finally blocks and atexit handlers): a forked child waits for the parent to go, then
    removes the folder."""
    parent = os.getpid()
    if os.fork() == 0:
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # hold no pipe of the caller's open
                os.dup2(null, fd)
            while True:
                try:
                    os.kill(parent, 0)
                except ProcessLookupError:
                    break
                time.sleep(1)
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os._exit(0)


def run_atheris(h: Harness, args) -> int:
    import atheris

    work = args.work or os.path.join("build", "fuzz", "corpus", "convert")
    seed_dir = os.path.join(work, "..", "convert-seeds")
    os.makedirs(work, exist_ok=True)
    os.makedirs(seed_dir, exist_ok=True)
    for i, s in enumerate(seeds()):
        with open(os.path.join(seed_dir, f"seed-{i:03d}"), "wb") as f:
            f.write(s)
    os.makedirs(args.artifacts, exist_ok=True)
    lf = [sys.argv[0], work, seed_dir, f"-timeout={TIME_LIMIT_S}", "-rss_limit_mb=2048", "-max_len=65536",
          "-print_final_stats=1", f"-artifact_prefix={args.artifacts.rstrip('/')}/", f"-seed={args.seed}",
          f"-dict={os.path.join(HERE, 'dict', 'convert.dict')}"]
    if args.runs:
        lf.append(f"-runs={args.runs}")
    if args.seconds:
        lf.append(f"-max_total_time={int(args.seconds)}")
    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        out = json_mutate(rng, data) if rng.random() < 0.5 else None
        return out[:max_size] if out is not None else atheris.Mutate(data, max_size)

    atheris.Setup(lf, h.run, custom_mutator=custom_mutator)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
