"""Facts about the loaded model for the banner and `/show info|template`: its name, the
quantization it was published as, sizes from the GGUF metadata, the chat template in use."""
from __future__ import annotations

import os
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["model_name", "quantization", "info_rows", "template_text"]

# llama.cpp's llama_ftype numbers (general.file_type) -> the name people quote.
_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
    16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
    22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
    28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 38: "MXFP4_MOE",
}


def _metadata(llm) -> Dict[str, Any]:
    try:
        md = llm.metadata
        return md if isinstance(md, dict) else {}
    except Exception:  # a model file we cannot re-read must not break the banner
        return {}


def model_name(llm) -> str:
    """The model as the banner and /show info name it: its file's name without .gguf
    ("SmolLM2-135M-Instruct.Q4_1"), which the user chose or fetched and can find again --
    not the file's general.name, often a training run's tag ("Smollm2 135M 8k Lc100K Mix1
    Ep2"); that only when there is no path."""
    path = str(getattr(llm, "model_path", "") or "")
    base = os.path.basename(path)
    if base:
        return base[:-5] if base.lower().endswith(".gguf") else base
    name = _metadata(llm).get("general.name")
    return name.strip() if isinstance(name, str) and name.strip() else "model"


def _tensor_types(path: str) -> Tuple[Optional[str], Optional[int]]:
    """(the type holding the most bytes, the parameter count), read from the tensor table."""
    try:
        from ..model_file import ModelFile
        with ModelFile(path) as mf:
            by_bytes: Counter = Counter()
            n_params = 0
            for t in mf.tensors.values():
                by_bytes[str(t.type)] += t.nbytes
                n_params += t.n_elements
        top = by_bytes.most_common(1)
        return (top[0][0] if top else None), n_params
    except Exception:
        return None, None


def quantization(llm) -> str:
    ftype = _metadata(llm).get("general.file_type")
    if isinstance(ftype, int) and ftype in _FILE_TYPES:
        return _FILE_TYPES[ftype]
    dominant, _ = _tensor_types(str(getattr(llm, "model_path", "")))
    return dominant or "unknown"


def _count(n: Optional[int]) -> str:
    if not n:
        return "-"
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{suffix}"
    return str(n)


def info_rows(llm) -> List[Tuple[str, str]]:
    """`/show info`: Ollama's Model section (architecture, parameters, context length,
    embedding length, quantization) plus what this session runs with."""
    md = _metadata(llm)
    arch = md.get("general.architecture")
    _, n_params = _tensor_types(str(getattr(llm, "model_path", "")))
    show = lambda v: "-" if v is None else str(v)  # noqa: E731
    return [
        ("name", model_name(llm)),
        ("architecture", show(arch)),
        ("parameters", _count(n_params)),
        ("context length", show(md.get(f"{arch}.context_length"))),
        ("embedding length", show(md.get(f"{arch}.embedding_length"))),
        ("quantization", quantization(llm)),
        ("file", show(getattr(llm, "model_path", None))),
        ("session context", show(getattr(llm, "n_ctx", None))),
        ("threads", show(getattr(llm, "n_threads", None))),
        ("ISA", show(getattr(llm, "isa", None))),
    ] + _speculative_rows(llm)


def _speculative_rows(llm) -> List[Tuple[str, str]]:
    """Speculative decoding: the mode, the draft model and the session's acceptance so far."""
    mode = getattr(llm, "speculative", None)
    if not isinstance(mode, str):
        return []
    rows = [("speculative", mode)]
    draft = getattr(llm, "draft_model_path", None)
    if draft:
        rows.append(("draft model", str(draft)))
    try:
        st = llm.stats()
    except Exception:  # noqa: BLE001 - a stand-in or closed engine: nothing to add
        return rows
    if isinstance(st, dict) and st.get("spec_drafted"):
        rows.append(("drafted / accepted", f"{st['spec_drafted']} / {st.get('spec_accepted', 0)} "
                                           f"({100.0 * st.get('spec_acceptance', 0.0):.1f}%)"))
    return rows


def template_text(llm) -> str:
    """The chat template the model is rendered with, as Jinja source."""
    from ..chat_template import BUILTIN_TEMPLATES

    chosen = llm.chat_template
    if chosen in BUILTIN_TEMPLATES:
        return f"{{# built-in template {chosen!r} #}}\n{BUILTIN_TEMPLATES[chosen]}"
    return str(chosen)
