"""A PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) → a GGUF LoRA
adapter as llama.cpp's convert_lora_to_gguf.py writes it (docs/formats.md §1.8):
general.type = "adapter", adapter.type = "lora", adapter.lora.alpha, and for each adapted base
matrix <gguf name>.lora_a (PEFT's lora_A, [r, n_in]) and <gguf name>.lora_b (lora_B,
[n_out, r]). The base checkpoint's config.json gives the architecture, the GGUF names and the
shapes every pair is checked against; llama's Q/K row permutation is applied to B's rows (A is
unchanged: permuting W's rows permutes B·A's). rsLoRA's alpha / sqrt(r) is written as the alpha
that gives the same scale under alpha / r."""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from .checkpoint import Checkpoint, member, read_json, show
from .config import arch_of, hparams
from .errors import ConvertError
from .tensors import expected_shapes, layer_names, permute_rows
from .gguf_out import gguf_file

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
LORA_TYPES = ("F32", "F16")
# base_model.model.model.layers.3.self_attn.q_proj.lora_A(.default).weight
_NAME = re.compile(r"^(?:base_model\.model\.)?(model\.layers\.([0-9]{1,6})\.(.+))\.lora_([AB])(?:\.[A-Za-z0-9_]+)?\.weight$")


def is_adapter_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.lexists(os.path.join(path, CONFIG_FILE))


@dataclass
class LoraPair:
    src_a: str
    src_b: str
    dst: str  # GGUF base tensor name (blk.N.attn_q.weight)
    rank: int
    shape: Tuple[int, int]  # the base matrix's row-major [n_out, n_in]
    permute_heads: int = 0


@dataclass
class LoraPlan:
    arch: str
    alpha: float
    pairs: List[LoraPair] = field(default_factory=list)
    checkpoint: Optional[Checkpoint] = None

    def describe(self) -> str:
        lines = [f"LoRA adapter for {self.arch}, alpha {self.alpha:g}, {len(self.pairs)} matrices"]
        lines += [f"  {p.dst}  rank {p.rank}  {list(p.shape)}" for p in self.pairs]
        return "\n".join(lines)


def _number(cfg: dict, key: str, path: str, default=None):
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConvertError(f"{path}: {key} = {show(v)} is not a number >= 0")
    return v


def base_dir_of(adapter_dir: str, base: Optional[str]) -> str:
    """The base checkpoint directory: `base`, else adapter_config.json's base_model_name_or_path
    when that is a local directory."""
    if base:
        return base
    path = member(os.path.abspath(adapter_dir), CONFIG_FILE)
    name = read_json(path).get("base_model_name_or_path")
    if isinstance(name, str) and os.path.isdir(name):
        return name
    raise ConvertError(f"{path}: base_model_name_or_path = {show(name)} is not a local directory; give the base "
                       f"model's Hugging Face folder (its config.json) with --base")


def plan_lora(adapter_dir: str, base_dir: str) -> LoraPlan:
    """Every pair to write, checked against the base's config.json; ConvertError naming the
    file and tensor otherwise."""
    cfg_path = member(os.path.abspath(adapter_dir), CONFIG_FILE)
    cfg = read_json(cfg_path)
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise ConvertError(f"{cfg_path}: peft_type = {show(cfg.get('peft_type'))}; only LORA adapters are converted")
    for key in ("use_dora", "fan_in_fan_out"):
        if cfg.get(key):
            raise ConvertError(f"{cfg_path}: {key} = true is not supported")
    if cfg.get("alpha_pattern"):
        raise ConvertError(f"{cfg_path}: alpha_pattern (a different alpha per module) is not supported")
    if cfg.get("modules_to_save"):
        raise ConvertError(f"{cfg_path}: modules_to_save {show(cfg['modules_to_save'])}: full weights in an "
                           f"adapter are not supported (LoRA pairs only)")
    r = int(_number(cfg, "r", cfg_path, 8))
    alpha = float(_number(cfg, "lora_alpha", cfg_path, r))
    rank_pattern = cfg.get("rank_pattern") or {}
    if cfg.get("use_rslora"):
        # PEFT scales by alpha / sqrt(r); the GGUF rule is alpha / r: one alpha for every
        # matrix only when every rank is the same
        if rank_pattern:
            raise ConvertError(f"{cfg_path}: use_rslora with rank_pattern is not supported")
        alpha = alpha * math.sqrt(r)

    base = Checkpoint(base_dir)
    config_path = os.path.join(base.dir, "config.json")
    _, spec = arch_of(base.config, config_path)
    if spec.moe:
        raise ConvertError(f"{config_path}: LoRA adapters of mixture-of-experts models are not supported")
    hp = hparams(base.config, config_path, spec)
    names = layer_names(spec)
    shapes = expected_shapes(hp, spec)
    ckpt = Checkpoint.single_file(adapter_dir, WEIGHTS_FILE, cfg)
    halves = {}  # (layer, hf suffix) -> {"A": name, "B": name}
    for name in ckpt.names():
        m = _NAME.match(name)
        if not m:
            raise ConvertError(f"{ckpt.dir}/{WEIGHTS_FILE}: tensor {show(name)} is not a LoRA tensor of a layer "
                               f"(supported: the attention and FFN projections)")
        il, suffix = int(m.group(2)), m.group(3) + ".weight"
        if suffix not in names or not names[suffix].endswith(".weight") or "norm" in names[suffix]:
            raise ConvertError(f"{ckpt.dir}/{WEIGHTS_FILE}: tensor {show(name)} adapts {m.group(3)}, which is not "
                               f"a projection of {spec.gguf_arch} (supported: {', '.join(_targets(names))})")
        if il >= hp.n_layer:
            raise ConvertError(f"{ckpt.dir}/{WEIGHTS_FILE}: tensor {show(name)} is for layer {il}; the base has "
                               f"{hp.n_layer}")
        halves.setdefault((il, suffix), {})[m.group(4)] = name
    if not halves:
        raise ConvertError(f"{ckpt.dir}/{WEIGHTS_FILE}: no LoRA tensors")
    plan = LoraPlan(spec.gguf_arch, alpha, checkpoint=ckpt)
    for (il, suffix), ab in sorted(halves.items()):
        if set(ab) != {"A", "B"}:
            have = next(iter(ab.values()))
            raise ConvertError(f"{ckpt.dir}/{WEIGHTS_FILE}: tensor {show(have)} has no lora_{'B' if 'A' in ab else 'A'}")
        gguf = names[suffix]
        n_out, n_in = shapes[gguf]
        a, b = ckpt.info(ab["A"]), ckpt.info(ab["B"])
        if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[0] != b.shape[1]:
            raise ConvertError(f"{ckpt.dir}/{WEIGHTS_FILE}: rank mismatch: {ab['A']} has shape {list(a.shape)}, "
                               f"{ab['B']} {list(b.shape)}")
        rank = a.shape[0]
        if a.shape[1] != n_in or b.shape[0] != n_out:
            raise ConvertError(f"{ckpt.dir}/{WEIGHTS_FILE}: {ab['A']} {list(a.shape)} / {ab['B']} {list(b.shape)} "
                               f"do not fit the base's blk.{il}.{gguf} [{n_out}, {n_in}] (config.json of {base.dir})")
        heads = 0
        if spec.permute_qk and gguf.startswith(("attn_q.", "attn_k.")):
            heads = hp.n_head if gguf.startswith("attn_q.") else hp.n_head_kv
        plan.pairs.append(LoraPair(ab["A"], ab["B"], f"blk.{il}.{gguf}", rank, (n_out, n_in), heads))
    return plan


def _targets(names: dict) -> List[str]:
    return sorted(k[:-len(".weight")].split(".")[-1] for k, v in names.items()
                  if k.endswith("proj.weight"))


def convert_lora(adapter_dir: str, out_path: str, base_dir: Optional[str] = None, out_type: str = "F16") -> LoraPlan:
    """Writes out_path (via a temporary file beside it, renamed when complete)."""
    out_type = out_type.upper()
    if out_type not in LORA_TYPES:
        raise ConvertError(f"LoRA adapters are written as {' or '.join(LORA_TYPES)}, not {out_type}")
    plan = plan_lora(adapter_dir, base_dir_of(adapter_dir, base_dir))
    ckpt = plan.checkpoint
    dt = np.float32 if out_type == "F32" else np.float16
    with gguf_file(out_path, plan.arch) as w:
        w.add_string("general.type", "adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", float(plan.alpha))
        for p in plan.pairs:
            a = ckpt.load_f32(p.src_a)
            b = ckpt.load_f32(p.src_b)
            if p.permute_heads:
                b = permute_rows(b, p.permute_heads)
            w.add_tensor(p.dst + ".lora_a", np.ascontiguousarray(a.astype(dt)))
            w.add_tensor(p.dst + ".lora_b", np.ascontiguousarray(b.astype(dt)))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
    return plan
