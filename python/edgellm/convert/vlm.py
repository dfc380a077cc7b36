"""Vision-language checkpoints (Gemma3ForConditionalGeneration, Idefics3 / SmolVLM,
Qwen2_5_VLForConditionalGeneration) → two GGUF files in llama.cpp's layout, as its
convert_hf_to_gguf.py writes them (without and with `--mmproj`):

- the text model, through the text converter (writer.plan) on a *text view* of the checkpoint:
  config.json's text_config as the config, the language model's tensors under their causal-LM
  names (model.*, lm_head.*), the vision tensors left out;
- the projector ("mmproj"): general.architecture "clip", the clip.* / clip.vision.* keys, the
  v.* (vision tower) and mm.* (projector) tensors, with llama.cpp's transforms (Gemma 3's
  soft-embedding norm stored as 1 + w, Qwen2.5-VL's fused QKV split and its Conv3D patch
  embedding split into two Conv2D kernels) and its tensor types (F32 file: all F32 but Gemma 3's
  input projection, F16; F16 file: matrices F16, 1-D tensors, norms and the embeddings F32).

tests/test_vision_convert.py holds both files to the ones llama.cpp's converter wrote from the
same checkpoints (tests/data/vision/hf-*)."""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from .checkpoint import Checkpoint, member, read_json, show
from .errors import ConvertError, UnsupportedArchitectureError
from .gguf_out import add_kv, describe, gguf_file

# HF class → (text class the text converter knows, projector type, config model_type)
VLM_ARCHS = {
    "Gemma3ForConditionalGeneration": ("Gemma3ForCausalLM", "gemma3"),
    "Idefics3ForConditionalGeneration": ("LlamaForCausalLM", "idefics3"),
    "SmolVLMForConditionalGeneration": ("LlamaForCausalLM", "idefics3"),
    "Qwen2_5_VLForConditionalGeneration": ("Qwen2_5_VLForCausalLM", "qwen2.5vl_merger"),
}
MMPROJ_TYPES = ("F32", "F16")


def vlm_arch(config: dict) -> Optional[str]:
    names = config.get("architectures")
    if isinstance(names, list):
        for n in names:  # (before config.json is checked: any JSON value may be here)
            if isinstance(n, str) and n in VLM_ARCHS:
                return n
    return None


def _is_vision_tensor(name: str) -> bool:
    return name.startswith(("vision_tower.", "multi_modal_projector.", "visual.", "model.visual.",
                            "model.vision_tower.", "model.multi_modal_projector.", "model.vision_model.",
                            "vision_model.", "model.connector.", "connector."))


def _text_name(name: str) -> str:
    """The language model's tensor under its causal-LM name."""
    for a, b in (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."),
                 ("model.language_model.", "model."), ("model.text_model.", "model.")):
        if name.startswith(a):
            return b + name[len(a):]
    return name


def text_view(ckpt: Checkpoint) -> Checkpoint:
    """The checkpoint as a causal LM: text_config (plus the top-level keys it lacks that the text
    converter reads) as config.json, the text tensors renamed, the vision ones left out."""
    arch = vlm_arch(ckpt.config)
    text = ckpt.config.get("text_config")
    if not isinstance(text, dict):
        raise ConvertError(f"{ckpt.dir}: config.json of {arch} has no text_config object")
    cfg = dict(text)
    for k in ("tie_word_embeddings", "rope_scaling", "rope_parameters", "rope_theta", "max_position_embeddings",
              "rms_norm_eps", "vocab_size"):
        if cfg.get(k) is None and ckpt.config.get(k) is not None:
            cfg[k] = ckpt.config[k]
    cfg["architectures"] = [VLM_ARCHS[arch][0]]
    view = Checkpoint.__new__(Checkpoint)
    view.dir, view.config, view.tensors = ckpt.dir, cfg, {}
    for name, t in ckpt.tensors.items():
        if _is_vision_tensor(name):
            continue
        view.tensors[_text_name(name)] = t
    return view


# ---- the projector ---------------------------------------------------------------------------------

@dataclass
class VisionTensor:
    src: str  # HF name
    dst: str  # GGUF name
    shape: Tuple[int, ...]  # numpy shape written
    type: str
    split: Optional[Tuple[int, int, int]] = None  # (axis, index, parts): a slice of the source
    plus_one: bool = False

    @property
    def ne(self) -> tuple:
        return tuple(reversed(self.shape))

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * (2 if self.type == "F16" else 4)


@dataclass
class MmprojPlan:
    projector: str
    file_type: str
    metadata: list
    tensors: List[VisionTensor]

    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def describe(self) -> str:
        return describe(f"projector {self.projector}, file type {self.file_type}, {len(self.metadata)} metadata keys, "
                        f"{len(self.tensors)} tensors",
                        ((t.dst, t.type, t.ne, t.nbytes, t.src) for t in self.tensors), self.total_bytes())


# SigLIP (Gemma 3, Idefics3 / SmolVLM): the tower's names after its prefix
_SIGLIP = {
    "embeddings.patch_embedding.weight": "v.patch_embd.weight",
    "embeddings.patch_embedding.bias": "v.patch_embd.bias",
    "embeddings.position_embedding.weight": "v.position_embd.weight",
    "post_layernorm.weight": "v.post_ln.weight",
    "post_layernorm.bias": "v.post_ln.bias",
}
_SIGLIP_LAYER = {
    "layer_norm1": "ln1", "layer_norm2": "ln2", "mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.out_proj": "attn_out",
}
_QWEN_LAYER = {
    "norm1": "ln1", "norm2": "ln2", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "attn.proj": "attn_out",
}
_QWEN_TOP = {
    "merger.ln_q.weight": "v.post_ln.weight",
    "merger.mlp.0.weight": "mm.0.weight", "merger.mlp.0.bias": "mm.0.bias",
    "merger.mlp.2.weight": "mm.2.weight", "merger.mlp.2.bias": "mm.2.bias",
}
_LAYER_RE = re.compile(r"^(?:encoder\.layers|blocks)\.([0-9]{1,6})\.(.+)\.(weight|bias)$")


def _vision_name(projector: str, rel: str) -> Optional[str]:
    """GGUF name of a tower tensor given its name below the tower's prefix; None: not one."""
    m = _LAYER_RE.match(rel)
    if m:
        table = _QWEN_LAYER if projector == "qwen2.5vl_merger" else _SIGLIP_LAYER
        base = table.get(m.group(2))
        return f"v.blk.{m.group(1)}.{base}.{m.group(3)}" if base else None
    return (_QWEN_TOP if projector == "qwen2.5vl_merger" else _SIGLIP).get(rel)


def _source_names(ckpt: Checkpoint, projector: str) -> List[Tuple[str, str]]:
    """(HF name, name below the tower's prefix or an mm.* GGUF name) of every projector tensor."""
    out = []
    for name in ckpt.names():
        if projector == "gemma3":
            for p in ("vision_tower.vision_model.", "model.vision_tower.vision_model.", "vision_model."):
                if name.startswith(p):
                    out.append((name, name[len(p):]))
                    break
            else:
                rel = None
                for p in ("multi_modal_projector.", "model.multi_modal_projector."):
                    if name.startswith(p):
                        rel = name[len(p):].replace("_weight", ".weight")
                if rel == "mm_input_projection.weight":
                    out.append((name, "=mm.input_projection.weight"))
                elif rel == "mm_soft_emb_norm.weight":
                    out.append((name, "=mm.soft_emb_norm.weight"))
                elif rel is not None:
                    raise ConvertError(f"{ckpt.info(name).file}: tensor {show(name)} of the Gemma 3 projector is not "
                                       f"known")
        elif projector == "idefics3":
            for p in ("model.vision_model.", "vision_model."):
                if name.startswith(p):
                    out.append((name, name[len(p):]))
                    break
            else:
                if name in ("model.connector.modality_projection.proj.weight", "connector.modality_projection.proj.weight"):
                    out.append((name, "=mm.model.fc.weight"))
                elif name.startswith(("model.connector.", "connector.")):
                    raise ConvertError(f"{ckpt.info(name).file}: tensor {show(name)} of the Idefics3 connector is "
                                       f"not known")
        else:
            for p in ("visual.", "model.visual."):
                if name.startswith(p):
                    out.append((name, name[len(p):]))
    return out


def _mmproj_type(dst: str, src: str, ndim: int, projector: str, file_type: str) -> str:
    """llama.cpp's tensor type rules for an mmproj file (convert_hf_to_gguf.py prepare_tensors and
    the MmprojModel / Gemma3VisionModel / SmolVLMModel / Qwen2VLVisionModel tensor_force_quant)."""
    if projector == "gemma3" and "input_projection" in dst:
        force = "F16"
    elif projector in ("gemma3", "idefics3") and ".embeddings." in src:
        force = "F32"
    elif ".patch_embd.weight" in dst:
        force = file_type
    elif ".position_embd." in dst:
        force = "F32"
    else:
        force = None
    if ndim <= 1 or dst.endswith("_norm.weight"):
        return "F32"
    if force is not None:
        return force
    if not dst.endswith(".weight"):
        return "F32"
    return file_type


def _preprocessor(ckpt: Checkpoint) -> dict:
    """preprocessor_config.json merged with processor_config.json (its image_processor object
    lifted), as llama.cpp's MmprojModel reads them."""
    cfg: Dict = {}
    for name, sub in (("preprocessor_config.json", "media_proc_cfg"), ("processor_config.json", "image_processor")):
        path = os.path.join(ckpt.dir, name)
        if os.path.exists(path):
            c = read_json(member(ckpt.dir, name))
            if isinstance(c.get(sub), dict):
                c = {**c, **c[sub]}
            cfg.update(c)
    return cfg


def _int(v, what: str, path: str, lo: int = 1) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < 1 << 31:
        raise ConvertError(f"{path}: config.json {what} = {show(v)} must be an integer of at least {lo}")
    return v


def _eps(v, what: str, path: str) -> float:
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 < v < 1):
        raise ConvertError(f"{path}: config.json {what} = {show(v)} must be a number between 0 and 1")
    return float(v)


def _floats(v, what: str, path: str) -> List[float]:
    if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                        and math.isfinite(x) for x in v)):
        raise ConvertError(f"{path}: {what} = {show(v)} must be a list of three numbers")
    return [float(x) for x in v]


def plan_mmproj(ckpt: Checkpoint, file_type: str = "F16") -> MmprojPlan:
    arch = vlm_arch(ckpt.config)
    if arch is None:
        raise UnsupportedArchitectureError(f"{ckpt.dir}: not a vision-language checkpoint "
                                           f"(one of {', '.join(sorted(VLM_ARCHS))})")
    file_type = file_type.upper()
    if file_type not in MMPROJ_TYPES:
        raise ConvertError(f"projector type {file_type!r}: choose F32 or F16")
    projector = VLM_ARCHS[arch][1]
    path = os.path.join(ckpt.dir, "config.json")
    g = ckpt.config
    v = g.get("vision_config")
    if not isinstance(v, dict):
        raise ConvertError(f"{path}: config.json of {arch} has no vision_config object")
    text = {**g, **(g.get("text_config") or {})}
    n_embd_text = _int(text.get("hidden_size"), "text_config.hidden_size", path)
    pre = _preprocessor(ckpt)
    v = dict(v)
    if projector == "qwen2.5vl_merger":
        v.setdefault("image_size", 560)
        v["num_attention_heads"] = v.get("num_heads")
        v["num_hidden_layers"] = v.get("depth")
    if arch == "SmolVLMForConditionalGeneration" or v.get("model_type") == "smolvlm_vision":
        v.setdefault("hidden_size", 1152)
        v.setdefault("num_attention_heads", 16)
        v.setdefault("intermediate_size", 3072)

    def vp(key):
        return _int(v.get(key), f"vision_config.{key}", path)

    hidden, n_layer, n_head = vp("hidden_size"), vp("num_hidden_layers"), vp("num_attention_heads")
    n_ff, patch, image_size = vp("intermediate_size"), vp("patch_size"), vp("image_size")
    if hidden % n_head:
        raise ConvertError(f"{path}: vision_config.hidden_size {hidden} is not a multiple of its {n_head} heads")
    kv: List[Tuple[str, object]] = [
        ("general.type", "mmproj"),
        ("general.name", os.path.basename(ckpt.dir.rstrip("/"))),
        ("general.file_type", {"F32": 0, "F16": 1}[file_type]),
        ("clip.has_vision_encoder", True),
        ("clip.vision.projection_dim", n_embd_text),
        ("clip.vision.image_size", image_size),
        ("clip.vision.patch_size", patch),
        ("clip.vision.embedding_length", hidden),
        ("clip.vision.feed_forward_length", n_ff),
        ("clip.vision.block_count", n_layer),
        ("clip.vision.attention.head_count", n_head),
        ("clip.vision.image_mean", _floats(pre.get("image_mean"), "preprocessor_config.json image_mean", ckpt.dir)),
        ("clip.vision.image_std", _floats(pre.get("image_std"), "preprocessor_config.json image_std", ckpt.dir)),
        ("clip.projector_type", projector),
    ]
    if projector == "gemma3":
        kv.append(("clip.vision.attention.layer_norm_epsilon", _eps(v.get("layer_norm_eps", 1e-6), "vision_config.layer_norm_eps", path)))
        kv.append(("clip.use_gelu", True))
        seq = _int(pre.get("image_seq_length", 256), "image_seq_length", ckpt.dir)
        scale = (image_size // patch) // int(seq ** 0.5)
        if scale > 0 and scale != 4:
            kv.append(("clip.vision.projector.scale_factor", scale))
    elif projector == "idefics3":
        kv.append(("clip.vision.attention.layer_norm_epsilon", _eps(v.get("layer_norm_eps", 1e-5), "vision_config.layer_norm_eps", path)))
        kv.append(("clip.vision.projector.scale_factor", _int(g.get("scale_factor", 2), "scale_factor", path)))
        kv.append(("clip.use_gelu", True))
        size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
        kv.append(("clip.vision.preproc_image_size",
                   _int(size.get("longest_edge", image_size), "size.longest_edge", ckpt.dir)))
    else:
        if g.get("model_type") not in (None, "qwen2_5_vl"):
            raise UnsupportedArchitectureError(f"{path}: model_type {show(g.get('model_type'))} is not Qwen2.5-VL")
        kv.append(("clip.use_silu", True))
        full = v.get("fullatt_block_indexes")
        if not (isinstance(full, list) and full and all(isinstance(x, int) for x in full)):
            raise ConvertError(f"{path}: config.json vision_config.fullatt_block_indexes = {show(full)} must be a "
                               f"non-empty list of layer indices")
        pattern = full[0] + 1
        if any(b - a != pattern for a, b in zip(full, full[1:])):
            raise ConvertError(f"{path}: vision_config.fullatt_block_indexes {show(full)} is not a regular pattern")
        kv.append(("clip.vision.n_wa_pattern", pattern))
        kv.append(("clip.vision.attention.layer_norm_epsilon", _eps(g.get("rms_norm_eps", 1e-6), "rms_norm_eps", path)))
    kv.append(("general.quantization_version", 2))

    tensors: List[VisionTensor] = []
    for src, rel in _source_names(ckpt, projector):
        shape = ckpt.info(src).shape
        where = f"{ckpt.info(src).file}: tensor {show(src)}"
        if rel.startswith("="):
            dst = rel[1:]
            tensors.append(VisionTensor(src, dst, shape, _mmproj_type(dst, src, len(shape), projector, file_type),
                                        plus_one=dst == "mm.soft_emb_norm.weight"))
            continue
        if projector == "qwen2.5vl_merger" and rel == "patch_embed.proj.weight":
            if len(shape) != 5 or shape[2] != 2:
                raise ConvertError(f"{where}: shape {list(shape)}; a Conv3D kernel of temporal size 2 expected")
            sub = shape[:2] + shape[3:]
            for i, dst in enumerate(("v.patch_embd.weight", "v.patch_embd.weight.1")):
                tensors.append(VisionTensor(src, dst, sub, _mmproj_type(dst, src, 4, projector, file_type),
                                            split=(2, i, 2)))
            continue
        m = _LAYER_RE.match(rel)
        if projector == "qwen2.5vl_merger" and m and m.group(2) == "attn.qkv":
            if shape[0] % 3:
                raise ConvertError(f"{where}: {shape[0]} rows do not split into Q, K and V")
            sub = (shape[0] // 3,) + tuple(shape[1:])
            for i, part in enumerate("qkv"):
                dst = f"v.blk.{m.group(1)}.attn_{part}.{m.group(3)}"
                tensors.append(VisionTensor(src, dst, sub, _mmproj_type(dst, src, len(sub), projector, file_type),
                                            split=(0, i, 3)))
            continue
        dst = _vision_name(projector, rel)
        if dst is None:
            if rel.startswith("head."):  # SigLIP's pooling head: unused by the projectors (llama.cpp skips it)
                continue
            raise ConvertError(f"{where}: not a known tensor of the {projector} vision tower")
        tensors.append(VisionTensor(src, dst, shape, _mmproj_type(dst, src, len(shape), projector, file_type)))
    names = {t.dst for t in tensors}
    need = {"v.patch_embd.weight", "v.post_ln.weight"} | {f"v.blk.{i}.attn_q.weight" for i in range(n_layer)}
    need |= {"gemma3": {"mm.input_projection.weight", "mm.soft_emb_norm.weight"}, "idefics3": {"mm.model.fc.weight"},
             "qwen2.5vl_merger": {"mm.0.weight", "mm.2.weight"}}[projector]
    missing = sorted(need - names)
    if missing:
        raise ConvertError(f"{ckpt.dir}: the {projector} projector lacks {', '.join(missing[:4])}"
                           f"{' ...' if len(missing) > 4 else ''}")
    extra = sorted(n for n in names if n.startswith("v.blk.") and int(n.split(".")[2]) >= n_layer)
    if extra:
        raise ConvertError(f"{ckpt.dir}: tensor {extra[0]} is past the vision tower's {n_layer} layers")
    return MmprojPlan(projector, file_type, kv, tensors)


def load_vision(ckpt: Checkpoint, t: VisionTensor) -> np.ndarray:
    x = ckpt.load_f32(t.src)
    if t.split is not None:  # Qwen2.5-VL: a third of the fused QKV (axis 0), a Conv3D time slice (axis 2)
        axis, i, parts = t.split
        if axis == 0:
            n = x.shape[0] // parts
            x = x[i * n:(i + 1) * n]
        else:
            x = x[:, :, i]
    if t.plus_one:
        x = x + np.float32(1.0)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape != tuple(t.shape):
        raise ConvertError(f"{ckpt.dir}: tensor {t.src} read as {list(x.shape)}, planned {list(t.shape)}")
    return x


def convert_mmproj(hf_dir: str, out_path: str, file_type: str = "F16") -> MmprojPlan:
    """Writes the projector GGUF of a vision-language checkpoint (via a temporary file beside
    out_path, renamed when complete)."""
    ckpt = Checkpoint(hf_dir)
    mp = plan_mmproj(ckpt, file_type)
    with gguf_file(out_path, "clip") as w:
        for key, value in mp.metadata:
            add_kv(w, key, value)
        for t in mp.tensors:
            x = load_vision(ckpt, t)
            w.add_tensor(t.dst, x.astype(np.float16) if t.type == "F16" else x)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    return mp


def mmproj_path_for(out_path: str) -> str:
    """The projector's file beside the text model: mmproj-<stem>.gguf, which `LLM(model)` finds
    on its own when it is the only mmproj*.gguf in the folder."""
    d, base = os.path.split(out_path)
    stem = base[:-5] if base.lower().endswith(".gguf") else base
    return os.path.join(d, f"mmproj-{stem}.gguf")


def llamacpp_text_keys(kv: list, text_config: dict, arch: str) -> list:
    """The text file's tokenizer keys as llama.cpp's converter writes them for these classes from a
    SentencePiece tokenizer.model with no tokenizer.json: the special-token ids of config.json's
    text_config (bos/eos/pad_token_id) over the model's own, no add_space_prefix key but Gemma 3's
    (false; absent, llama.cpp and the engine prefix a space as the SentencePiece 'llama' tokenizer
    does), and tokenizer.ggml.pre "default"."""
    d = dict(kv)
    if d.get("tokenizer.ggml.model") != "llama":
        return kv
    out = []
    for k, v in kv:
        if k == "tokenizer.ggml.add_space_prefix" and arch != "gemma3":
            continue
        for name, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("padding", "pad_token_id")):
            if k == f"tokenizer.ggml.{name}_token_id":
                c = text_config.get(key)
                if isinstance(c, int) and not isinstance(c, bool) and 0 <= c < len(d["tokenizer.ggml.tokens"]):
                    v = c
        out.append((k, v))
    have = {k for k, _ in out}
    for name, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("padding", "pad_token_id")):
        c = text_config.get(key)
        if f"tokenizer.ggml.{name}_token_id" not in have and isinstance(c, int) and not isinstance(c, bool) \
                and 0 <= c < len(d["tokenizer.ggml.tokens"]):
            out.append((f"tokenizer.ggml.{name}_token_id", c))
    if "tokenizer.ggml.pre" not in have:
        out.append(("tokenizer.ggml.pre", "default"))
    return out
