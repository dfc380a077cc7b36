"""The conversion itself: plan every tensor and its output type, write the GGUF header,
metadata and tensor infos, then stream the tensors one by one, in chunks of rows (read →
transform → convert → write → free), so peak memory is one chunk and its output (a permuted
Q/K matrix is read whole).

Output types: F32, F16 and BF16 for every matrix; the quantized file types take the tensor
types llama-quantize would (edgellm/bench/quantize.py's plan_types) and edgellm's own block
quantizers. 1-D tensors (norms, biases) are always F32."""
from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, List, Optional

import numpy as np

from . import encoder
from .checkpoint import Checkpoint
from .config import arch_of, hparams, llama3_rope_factors, longrope_factors, metadata
from .errors import ConvertError
from .tensors import TensorPlan, _strip_prefix, load_transformed, plan_tensors
from .tokenizer import vocab_metadata
from .gguf_out import add_kv, describe, gguf_file
from .vlm import llamacpp_text_keys, text_view, vlm_arch

_CHUNK_ELEMS = 1 << 24  # rows read, converted and written at a time: 64 MiB of float32
OUT_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q6_K")


@dataclass
class PlannedTensor:
    plan: TensorPlan
    ne: tuple  # ggml order
    type: str
    nbytes: int


@dataclass
class ConversionPlan:
    arch: str
    hf_arch: str
    file_type: str
    metadata: list
    tensors: List[PlannedTensor]

    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def describe(self) -> str:
        return describe(f"architecture {self.hf_arch} -> {self.arch}, file type {self.file_type}, "
                        f"{len(self.metadata)} metadata keys, {len(self.tensors)} tensors",
                        ((t.plan.dst, t.type, t.ne, t.nbytes, t.plan.src) for t in self.tensors),
                        self.total_bytes())


class _Shim:
    """What bench.quantize.plan_types reads of a tensor (name, ggml shape, type name)."""

    class _T:
        name = "F32"

    tensor_type = _T()

    def __init__(self, name, ne):
        self.name, self.shape = name, ne


def _row_bytes(t: str, ne0: int) -> int:
    from .. import _core

    be, bb = _core.dtype_info(t)
    return ne0 // be * bb


def plan(hf_dir: str, out_type: str = "F16") -> ConversionPlan:
    from ..bench.quantize import plan_types

    out_type = out_type.upper()
    if out_type not in OUT_TYPES:
        raise ConvertError(f"unsupported output type {out_type!r}; choose one of {', '.join(OUT_TYPES)}")
    ckpt = Checkpoint(hf_dir)
    if encoder.is_encoder(ckpt.config):  # BERT family, sentence-transformers folders (convert/encoder.py)
        gguf_arch, hf_arch, kv, tplans = encoder.plan(ckpt)
        out = []
        for p in tplans:
            ne = tuple(reversed(p.shape))
            t = encoder.tensor_type(p.dst, ne[0], out_type)
            n_rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
            out.append(PlannedTensor(p, ne, t, n_rows * _row_bytes(t, ne[0])))
        cp = ConversionPlan(gguf_arch, hf_arch, out_type, kv, out)
        cp.checkpoint = ckpt
        return cp
    vlm = vlm_arch(ckpt.config)
    if vlm is not None:  # the language model of a vision-language checkpoint (its projector: vlm.py)
        ckpt = text_view(ckpt)
    hf_arch, spec = arch_of(ckpt.config, os.path.join(ckpt.dir, "config.json"))
    hp = hparams(ckpt.config, os.path.join(ckpt.dir, "config.json"), spec)
    if ckpt.config.get("tie_word_embeddings") is None:  # unstated: tied exactly when there is no lm_head
        hp.tied = not any(_strip_prefix(n) == "lm_head.weight" for n in ckpt.names())
    kv = [("general.name", os.path.basename(ckpt.dir.rstrip("/")))]
    kv += metadata(ckpt.config, os.path.join(ckpt.dir, "config.json"), spec, hp)
    # the tensors first: their shapes, checked against the files, bound vocab_size before the
    # vocabulary is padded to it
    tplans = plan_tensors(ckpt, spec, hp)
    kv += vocab_metadata(ckpt.dir, hp.n_vocab, ckpt.config)
    if spec.gguf_arch == "qwen3" and is_qwen3_reranker(ckpt.dir, ckpt.config):
        kv, tplans = _qwen3_reranker(ckpt, hp, kv, tplans)
    if vlm is not None:
        kv = llamacpp_text_keys(kv, ckpt.config, spec.gguf_arch)
        kv.append(("general.type", "model"))
    factors = llama3_rope_factors(ckpt.config, hp) if spec.gguf_arch == "llama" else None
    if factors is not None:
        tplans.insert(0, TensorPlan("(config.json rope_scaling llama3)", "rope_freqs.weight", factors.shape,
                                    value=factors))
    if spec.gguf_arch == "phi3":
        n_rot = dict(kv)["phi3.rope.dimension_count"]
        long_short = longrope_factors(ckpt.config, os.path.join(ckpt.dir, "config.json"), hp, n_rot)
        if long_short is not None:
            for i, which in ((1, "short"), (0, "long")):
                tplans.insert(0, TensorPlan(f"(config.json rope_scaling {which}_factor)",
                                            f"rope_factors_{which}.weight", long_short[i].shape, value=long_short[i]))
    shims = [_Shim(p.dst, tuple(reversed(p.shape))) for p in tplans]
    types = plan_types(shims, out_type, hp.n_layer)
    out = []
    for p, q in zip(tplans, types):
        ne = tuple(reversed(p.shape))
        t = q.dst_type or "F32"
        if p.mxfp4_scales is not None:
            t = "MXFP4"  # gpt-oss's experts keep their MXFP4 codes whatever the output type
        elif not p.dst.endswith(".weight"):
            t = "F32"  # biases (gpt-oss's are 2-D per expert), as llama.cpp keeps them
        n_rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
        out.append(PlannedTensor(p, ne, t, n_rows * _row_bytes(t, ne[0])))
    cp = ConversionPlan(spec.gguf_arch, vlm or hf_arch, out_type, kv, out)
    cp.checkpoint = ckpt
    return cp


# ---- decoder rerankers (Qwen3-Reranker), as llama.cpp's convert_hf_to_gguf.py writes them ------

QWEN3_RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
    "<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n")
_RANK_POOLING = 4  # llama.cpp's LLAMA_POOLING_TYPE_RANK


def is_qwen3_reranker(directory: str, config: dict) -> bool:
    """llama.cpp's test (conversion/qwen.py _is_qwen3_reranker): the folder's name, config.json's
    _name_or_path / model_type / architectures naming qwen3-reranker, a README headed
    "# Qwen3-Reranker", or a *ForSequenceClassification architecture."""
    readme = os.path.join(directory, "README.md")
    text = ""
    if os.path.isfile(readme):
        with open(readme, encoding="utf-8", errors="replace") as f:
            text = f.read().lower()
    if "# qwen3-reranker" in text:
        return True
    arch = str((config.get("architectures") or [""])[0] or "")
    hints = [os.path.basename(os.path.normpath(directory)), str(config.get("_name_or_path", "")),
             str(config.get("model_type", "")), arch]
    if any("qwen3-reranker" in h.lower() for h in hints if h):
        return True
    return "sequenceclassification" in arch.lower()


def _qwen3_reranker(ckpt: Checkpoint, hp, kv: list, tplans: list):
    """The reranker's layout: pooling rank, the "yes" / "no" rows of the LM head as
    cls.output.weight (in that order) in place of output.weight, the "rerank" chat template."""
    tokens = dict(kv).get("tokenizer.ggml.tokens") or []
    ids = {}
    for word in ("yes", "no"):
        if word not in tokens:
            raise ConvertError(f"{ckpt.dir}: a Qwen3 reranker's vocabulary has no token {word!r} to score")
        ids[word] = tokens.index(word)
    head = next((n for n in ckpt.names() if _strip_prefix(n) == ("model.embed_tokens.weight" if hp.tied
                                                                   else "lm_head.weight")), None)
    if head is None:
        raise ConvertError(f"{ckpt.dir}: a Qwen3 reranker needs its LM head (lm_head.weight) to take the "
                           "yes / no rows from")
    rows = np.stack([ckpt.load_f32(head, (ids[w], ids[w] + 1))[0] for w in ("yes", "no")]).astype(np.float32)
    plans = [TensorPlan(f"{head} rows {ids['yes']} (yes), {ids['no']} (no)", "cls.output.weight", rows.shape,
                        value=rows)]
    plans += [p for p in tplans if p.dst != "output.weight"]
    kv = kv + [("qwen3.pooling_type", _RANK_POOLING), ("qwen3.classifier.output_labels", ["yes", "no"]),
           ("tokenizer.chat_template.rerank", QWEN3_RERANK_TEMPLATE), ("tokenizer.chat_templates", ["rerank"])]
    return kv, plans


def _encode(x: np.ndarray, t: str, pool) -> np.ndarray:
    from ..bench.quantize import _convert

    if t == "F32":
        return x
    if t == "F16":
        return x.astype(np.float16)
    ne0 = x.shape[-1]
    n_rows = x.size // ne0
    return _convert("F32", t, x.reshape(n_rows, ne0), ne0, n_rows, pool)


def convert(hf_dir: str, out_path: str, out_type: str = "F16", n_threads: int = 0,
            progress: Optional[Callable[[int, int, str], None]] = None) -> ConversionPlan:
    """Writes out_path (via a temporary file beside it, renamed when complete)."""
    import gguf

    from ..bench.model_info import FTYPE_IDS

    cp = plan(hf_dir, out_type)
    ckpt = cp.checkpoint
    with gguf_file(out_path, cp.arch) as w:
        for key, value in cp.metadata:
            add_kv(w, key, value)
        w.add_file_type(FTYPE_IDS[cp.file_type])
        if cp.file_type not in ("F32", "F16", "BF16") or dict(cp.metadata).get("general.type") == "model":
            w.add_quantization_version(gguf.GGML_QUANT_VERSION)  # (VLM text files: always, as llama.cpp)
        for t in cp.tensors:
            shape = tuple(reversed(t.ne))
            if t.type == "F32":
                w.add_tensor_info(t.plan.dst, shape, np.dtype(np.float32), t.nbytes)
            elif t.type == "F16":
                w.add_tensor_info(t.plan.dst, shape, np.dtype(np.float16), t.nbytes)
            else:
                byte_shape = shape[:-1] + (_row_bytes(t.type, t.ne[0]),)
                w.add_tensor_info(t.plan.dst, byte_shape, np.dtype(np.uint8), t.nbytes,
                                  raw_dtype=gguf.GGMLQuantizationType[t.type])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        # The data section, written here rather than by write_tensor_data (which takes a whole
        # tensor): each tensor at the writer's aligned offsets, in chunks of rows.
        fout = w.fout[0]
        align = w.data_alignment
        done, total = 0, cp.total_bytes()
        with ThreadPoolExecutor(max_workers=n_threads or os.cpu_count() or 1) as pool:
            for t in cp.tensors:
                fout.write(bytes(gguf.GGUFWriter.ggml_pad(fout.tell(), align) - fout.tell()))
                n_rows = t.plan.shape[0] if len(t.plan.shape) > 1 else 1
                row_elems = int(np.prod(t.plan.shape)) // n_rows
                step = n_rows if t.plan.permute_heads else max(1, _CHUNK_ELEMS // row_elems)
                for r0 in range(0, n_rows, step):
                    rows = None if step >= n_rows else (r0, min(n_rows, r0 + step))
                    x = load_transformed(ckpt, t.plan, rows)
                    data = x if t.plan.mxfp4_scales is not None else _encode(x, t.type, pool)
                    del x
                    np.ascontiguousarray(data).tofile(fout)
                    del data
                fout.write(bytes(gguf.GGUFWriter.ggml_pad(t.nbytes, align) - t.nbytes))
                done += t.nbytes
                if progress is not None:
                    progress(done, total, t.plan.dst)
    return cp


_last_step = [-1]  # the last tenth reported to a non-terminal


def stderr_progress(done: int, total: int, name: str) -> None:
    """A bar redrawn in place (\r) on a terminal; elsewhere (a log file, a pipe) one plain line
    per tenth of the bytes, so the file holds no carriage returns."""
    pct = 100 * done // max(total, 1)
    if not sys.stderr.isatty():
        step = pct // 10
        if step < _last_step[0]:
            _last_step[0] = -1  # a new conversion
        if step > _last_step[0]:
            _last_step[0] = step
            sys.stderr.write(f"converting: {pct:3d}% {name}\n")
            sys.stderr.flush()
        return
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {pct:3d}% {name[:40]:40s}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()
