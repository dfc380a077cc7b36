"""`edgellm info MODEL.gguf [--json]`: what a GGUF file holds, without loading the model."""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, Optional

import click

# tokenizer.ggml.model -> what it is, and llama.cpp's per-type add_bos/add_eos defaults
_TOKENIZER_KINDS = {
    "llama": ("SPM llama", True, False),
    "gpt2": ("gpt2 BPE", False, False),
    "bert": ("WPM bert", True, True),
    "t5": ("UGM t5", False, True),
}
_SPECIAL = ("bos", "eos", "eot", "eom", "pad", "unk", "sep")
_SPECIAL_KEYS = {"pad": "padding", "unk": "unknown", "sep": "seperator"}  # GGUF spells "seperator"


def _count(n: int) -> str:
    """134515008 -> '134.52M'."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{suffix}"
    return str(n)


def _bytes(n: int) -> str:
    for div, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= div:
            return f"{n / div:.2f} {suffix}"
    return f"{n} B"


def summarize(mf) -> Dict[str, Any]:
    """The facts `edgellm info` prints, as one JSON-ready dict (stable keys)."""
    md = mf.metadata
    arch = md.get("general.architecture")
    a = lambda key, default=None: md.get(f"{arch}.{key}", default)  # noqa: E731

    n_embd = a("embedding_length")
    n_heads = a("attention.head_count")
    n_kv_heads = a("attention.head_count_kv", n_heads)
    head_dim = a("attention.key_length")
    if head_dim is None and isinstance(n_embd, int) and isinstance(n_heads, int) and n_heads > 0:
        head_dim = n_embd // n_heads

    types: Dict[str, Dict[str, int]] = {}
    for t in mf.tensors.values():
        e = types.setdefault(t.type, {"count": 0, "bytes": 0})
        e["count"] += 1
        e["bytes"] += t.nbytes

    # Mixture of experts: of each 3-D expert tensor a token uses expert_used_count / expert_count.
    n_expert = a("expert_count") or 0
    n_expert_used = a("expert_used_count") or 0
    n_params = sum(t.n_elements for t in mf.tensors.values())
    n_active = n_params
    if n_expert and n_expert_used:
        for name, t in mf.tensors.items():
            if "_exps." in name and len(t.shape) == 3:
                n_active -= t.n_elements - t.n_elements // n_expert * n_expert_used

    tok_model = md.get("tokenizer.ggml.model")
    kind, add_bos_default, add_eos_default = _TOKENIZER_KINDS.get(tok_model, (tok_model, False, False))
    tokens = md.get("tokenizer.ggml.tokens") or []
    tokenizer: Dict[str, Any] = {
        "model": tok_model,
        "kind": kind,
        "pre": md.get("tokenizer.ggml.pre"),
        "n_vocab": len(tokens) if tokens else a("vocab_size"),
    }
    for s in _SPECIAL:
        tid = md.get(f"tokenizer.ggml.{_SPECIAL_KEYS.get(s, s)}_token_id")
        tokenizer[f"{s}_id"] = tid
        tokenizer[f"{s}_text"] = tokens[tid] if isinstance(tid, int) and 0 <= tid < len(tokens) else None
    # Effective flags: the file's value, else llama.cpp's default for the tokenizer type.
    tokenizer["add_bos"] = bool(md.get("tokenizer.ggml.add_bos_token", add_bos_default))
    tokenizer["add_eos"] = bool(md.get("tokenizer.ggml.add_eos_token", add_eos_default))

    return {
        "path": mf.path,
        "gguf_version": mf.version,
        "architecture": arch,
        "name": md.get("general.name"),
        "n_params": n_params,
        "n_params_active": n_active,
        "n_expert": n_expert,
        "n_expert_used": n_expert_used,
        "n_ff_exp": a("expert_feed_forward_length"),
        "n_tensors": len(mf.tensors),
        "n_layers": a("block_count"),
        "n_heads": n_heads,
        "n_kv_heads": n_kv_heads,
        "n_embd": n_embd,
        "n_ff": a("feed_forward_length"),
        "head_dim": head_dim,
        "context_length": a("context_length"),
        "rope_freq_base": a("rope.freq_base"),
        "rope_scaling": a("rope.scaling.type"),
        "rope_scaling_factor": a("rope.scaling.factor"),
        "rope_orig_context": a("rope.scaling.original_context_length"),
        "sliding_window": a("attention.sliding_window"),
        "attention_sinks": any(n.endswith(".attn_sinks.weight") for n in mf.tensors),
        "file_type": md.get("general.file_type"),
        "file_size": mf.total_size,  # every shard of a split model
        "shards": len(mf.shard_paths),
        "tensor_types": dict(sorted(types.items(), key=lambda kv: -kv[1]["bytes"])),
        "tokenizer": tokenizer,
        "chat_template": isinstance(md.get("tokenizer.chat_template"), str),
    }


def projector_summary(mf) -> Dict[str, Any]:
    """A vision projector file's facts (llama.cpp's mmproj GGUF), for `edgellm info`."""
    md = mf.metadata
    return {"path": mf.path, "projector_type": md.get("clip.projector_type"),
            "image_size": md.get("clip.vision.image_size"),
            "patch_size": md.get("clip.vision.patch_size"),
            "n_layers": md.get("clip.vision.block_count"),
            "n_embd": md.get("clip.vision.embedding_length"),
            "n_params": sum(t.n_elements for t in mf.tensors.values()),
            "bytes": sum(t.nbytes for t in mf.tensors.values()), "file_size": mf.file_size}


def _text(s: Dict[str, Any]) -> str:
    def show(v: Optional[Any]) -> str:
        return "-" if v is None else str(v)

    tok = s["tokenizer"]
    lines = [
        ("file", f"{s['path']} ({_bytes(s['file_size'])}, GGUF v{s['gguf_version']}"
                 + (f", {s['shards']} shards" if s.get("shards", 1) > 1 else "") + ")"),
        ("architecture", show(s["architecture"])),
        ("name", show(s["name"])),
        ("parameters", f"{_count(s['n_params'])} ({s['n_params']:,} in {s['n_tensors']} tensors)"),
        ("layers", show(s["n_layers"])),
        ("heads", f"{show(s['n_heads'])} (kv heads {show(s['n_kv_heads'])}, head dim {show(s['head_dim'])})"),
        ("embedding dim", show(s["n_embd"])),
        ("FFN dim", show(s["n_ff"])),
    ]
    if s["n_expert"]:
        lines += [
            ("experts", f"{s['n_expert']} ({s['n_expert_used']} used per token, expert FFN dim "
                        f"{show(s['n_ff_exp'] or s['n_ff'])})"),
            ("active parameters", f"{_count(s['n_params_active'])} per token of {_count(s['n_params'])}"),
        ]
    lines += [
        ("context length", show(s["context_length"])),
        ("rope base", show(s["rope_freq_base"])),
    ]
    if s["rope_scaling"] not in (None, "none"):
        lines.append(("rope scaling", f"{s['rope_scaling']} x{show(s['rope_scaling_factor'])} "
                                      f"(original context {show(s['rope_orig_context'])})"))
    if s["sliding_window"]:
        lines.append(("sliding window", str(s["sliding_window"])))
    if s["attention_sinks"]:
        lines.append(("attention sinks", "yes (one logit per head)"))
    lines += [
        ("tensor types", ", ".join(f"{t} x{e['count']} ({_bytes(e['bytes'])})" for t, e in s["tensor_types"].items())),
        ("tokenizer", f"{show(tok['kind'])}, pre-tokenizer {show(tok['pre'])}, vocab {show(tok['n_vocab'])}"),
    ]
    specials = [f"{name} {tok[name + '_id']} {tok[name + '_text']!r}" for name in _SPECIAL
                if tok[name + "_id"] is not None]
    lines.append(("special tokens", ", ".join(specials) or "-"))
    lines.append(("add bos / eos", f"{tok['add_bos']} / {tok['add_eos']}"))
    lines.append(("chat template", "yes" if s["chat_template"] else "no"))
    v = s.get("projector")
    if v:
        lines.append(("vision projector", f"{v['path']} ({v['projector_type']}, {show(v['image_size'])} px, "
                                          f"{show(v['n_layers'])} layers, {_count(v['n_params'])} parameters, "
                                          f"{_bytes(v['bytes'])})"))
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in lines)


@click.command("info")
@click.argument("model", metavar="MODEL")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.option("--mmproj", "mmproj", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The model's vision projector GGUF [default: the one mmproj*.gguf beside it].")
def command(model: str, as_json: bool, mmproj: Optional[str] = None) -> None:
    """Show what a GGUF model file holds: architecture, sizes, tensor types, tokenizer.

    MODEL is a .gguf path or a known model name (fetched on first use)."""
    import edgellm
    from edgellm.models import ModelFetchError, UnknownModelError, resolve

    try:
        path = resolve(model)
    except (UnknownModelError, ModelFetchError, FileNotFoundError, OSError) as e:
        click.echo(f"Error: {e}", err=True)
        sys.exit(1)
    try:
        with edgellm.ModelFile(str(path)) as mf:
            summary = summarize(mf)
        from edgellm.vision import find_mmproj
        mmproj = mmproj or find_mmproj(str(path))
        if mmproj:
            with edgellm.ModelFile(mmproj) as mf:
                summary["projector"] = projector_summary(mf)
    except edgellm.ModelFormatError as e:
        click.echo(f"Error: {e}", err=True)
        sys.exit(1)
    click.echo(json.dumps(summary, indent=2) if as_json else _text(summary))
