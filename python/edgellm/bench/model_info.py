"""What a benchmark row says about a model: "<arch> <params> <ftype>", size and parameters,
read from the GGUF header with the `gguf` package (no model load)."""
from __future__ import annotations

import os
from dataclasses import dataclass

# llama.cpp's llama_ftype numbers (general.file_type) -> the names `llama-quantize` takes.
FTYPE_NAMES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
    16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 25: "IQ4_NL", 30: "IQ4_XS", 32: "BF16", 38: "MXFP4_MOE",
}
FTYPE_IDS = {v: k for k, v in FTYPE_NAMES.items()}


@dataclass(frozen=True)
class ModelInfo:
    path: str
    arch: str
    n_params: int  # elements of all tensors
    size_bytes: int  # bytes of tensor data (what llama-bench calls size)
    # bytes of the weights a decode step reads: the matrices (token_embd excluded unless tied)
    # and, of a mixture of experts' 3-D expert tensors, the selected experts' share
    # (expert_used_count / expert_count): the active-parameter floor
    weight_bytes: int
    ftype: str
    n_layer: int
    n_embd: int
    n_vocab: int

    @property
    def label(self) -> str:
        return f"{self.arch} {format_params(self.n_params)} {self.ftype}"


def format_params(n: int) -> str:
    """135M, 268M, 1.7B: llama-bench's model size words (rounded)."""
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    return f"{round(n / 1e6)}M"


def format_size(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / (1 << 20):.2f} MiB"


def read_model_info(path: "str | os.PathLike[str]") -> ModelInfo:
    import gguf

    r = gguf.GGUFReader(str(path), "r")

    def value(key, default=None):
        f = r.fields.get(key)
        return f.contents() if f is not None else default

    arch = value("general.architecture", "?")
    n_params = size = weight = 0
    names = {t.name for t in r.tensors}
    tied = "output.weight" not in names
    n_expert = int(value(f"{arch}.expert_count", 0) or 0)
    n_expert_used = int(value(f"{arch}.expert_used_count", 0) or 0)
    n_vocab = 0
    for t in r.tensors:
        n_params += int(t.n_elements)
        size += int(t.n_bytes)
        if t.name == "token_embd.weight":
            n_vocab = int(t.shape[1]) if len(t.shape) > 1 else 0
        # A decode step reads every matrix once; the embedding table only one row, unless
        # it doubles as the output projection.
        if len(t.shape) == 3 and n_expert and n_expert_used and "_exps." in t.name:
            weight += int(t.n_bytes) // n_expert * n_expert_used  # only the selected experts' rows
        elif len(t.shape) >= 2 and (t.name != "token_embd.weight" or tied):
            weight += int(t.n_bytes)
    ft = value("general.file_type")
    ftype = FTYPE_NAMES.get(int(ft), f"ftype {ft}") if ft is not None else _dominant_type(r)
    return ModelInfo(path=str(path), arch=arch, n_params=n_params, size_bytes=size, weight_bytes=weight,
                     ftype=ftype, n_layer=int(value(f"{arch}.block_count", 0) or 0),
                     n_embd=int(value(f"{arch}.embedding_length", 0) or 0), n_vocab=n_vocab)


def _dominant_type(r) -> str:
    by_type = {}
    for t in r.tensors:
        by_type[t.tensor_type.name] = by_type.get(t.tensor_type.name, 0) + int(t.n_bytes)
    return max(by_type, key=by_type.get) if by_type else "?"
