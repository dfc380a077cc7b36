"""Models whose matrices are IQ4_NL, IQ4_XS or MXFP4 (docs/formats.md §2.6) run, through every
kernel table this machine has, packed (row-interleaved, the default) and in the GGUF layout
(EDGELLM_REPACK=0), and their logits equal the numpy reference (tests/reference/forward.py, which
decodes the weights with gguf's dequantize) when it rounds each matmul input the way that path
quantizes activations:

- packed weights: Q8_R activations, i.e. Q8_0 blocks, for every type;
- GGUF layout: the type's vec_dot_type (Q8_0 for IQ4_NL / MXFP4, Q8_K for IQ4_XS).

"Equal" is per position: a float64 reference and the float32 engine can round one activation
element to different int8 steps where it sits within float32 error of a half step; at 256-wide
rows and three layers that happens at a position or two in some seeds (for every 4-bit type,
Q4_K included) and the softmax spreads it over that position's logits. So the first position
(no history) must agree to 2e-3 of the logit scale and every one to 3e-2 (a flip in K or V
carries to all later positions: seen at avx2 and avx512 but not scalar, from float summation
order alone). The kernels themselves are held to their references
exactly in cpp/tests/test_packed.cpp and test_kernels_isa.cpp; this checks the model path.
token_embd is F32 (and the output head its own matrix of the type): embedding rows on a 4-bit
grid would put many activations exactly on half steps, where the reference's roundf and the
engine's round-half-even differ by design (quant/reference.h).

Files whose rows are not whole blocks of these types are refused naming the tensor.
"""
import numpy as np
import pytest

import edgellm
from gguf import GGMLQuantizationType as QT
from gguf_fixtures import build, tensor_info, kv
from gguf import GGUFValueType as VT
from reference.fixtures import write_tiny_model
from reference.forward import ReferenceModel, quantize_activations

core = pytest.importorskip("edgellm._core")

PROMPT = [3, 17, 42, 5, 9, 60, 11, 2, 33, 71, 8, 19, 50, 4]
# IQ4_XS needs rows of whole 256-element super-blocks: n_embd, n_ff and n_head·head_dim of 256
# (the same for every type, so that the errors compare).
DIMS = dict(n_embd=256, n_ff=256, n_head=8, n_layer=2)
TYPES = ["IQ4_NL", "IQ4_XS", "MXFP4"]


class PackedReference(ReferenceModel):
    """The packed path: every matmul input rounded as Q8_0 blocks (the quants and scale of Q8_R)."""

    def mm(self, x, name):
        return quantize_activations(x, QT.Q8_0) @ self.w(name).T


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("format_models")
    out = {}
    for qtype in TYPES + ["Q4_K"]:
        # llama for every type, qwen3 (Q/K norms) for one more architecture
        for arch in ("llama", "qwen3"):
            out[qtype, arch] = str(write_tiny_model(
                base / f"{arch}-{qtype}.gguf", arch, weight_type=qtype, tied_output=False,
                type_of=lambda n: "F32" if n == "token_embd.weight" else None, **DIMS))
    return out


def engine_logits(path, ids):
    model = core.Model(path, n_threads=2)
    runner = core.ModelRunner(model, n_ctx=128, kv_type="F32")
    return runner.eval(ids, all_logits=True)


def isas():
    """The kernel tables this machine runs, by name."""
    return list(core.available_isas())


@pytest.mark.parametrize("repack", [True, False], ids=["packed", "gguf-layout"])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("qtype", TYPES)
def test_logits_match_reference(models, qtype, arch, repack, monkeypatch):
    path = models[qtype, arch]
    if not repack:
        monkeypatch.setenv("EDGELLM_REPACK", "0")
    ref_model = PackedReference(path) if repack else ReferenceModel(path, simulate_activation_quant=True)
    ref = ref_model.forward(PROMPT)
    exact = ReferenceModel(path).forward(PROMPT)
    scale = np.abs(ref).max()
    rms = lambda a: float(np.sqrt(np.mean(a ** 2)))  # noqa: E731
    q4_k_error = rms(engine_logits(models["Q4_K", arch], PROMPT) - ReferenceModel(models["Q4_K", arch]).forward(PROMPT))
    tried = isas()
    assert "scalar" in tried
    try:
        for isa in tried:
            core.set_isa(isa)
            got = engine_logits(path, PROMPT)
            assert got.shape == ref.shape
            err = np.abs(got - ref).max(axis=1)  # per position
            what = f"{qtype}/{arch}/{isa}: per-position max |engine − reference| / scale {np.round(err / scale, 5)}"
            assert np.all(err < 3e-2 * scale), what
            assert err[0] < 2e-3 * scale, what
            # and the 4-bit weights carry the signal: as close to the exact reference as Q4_K's
            # (the same float weights quantized to Q4_K), or MXFP4's power-of-two scales allow
            print(f"{qtype}/{arch}/{isa}: RMS error vs exact {rms(got - exact):.4f}, Q4_K {q4_k_error:.4f}")
            assert rms(got - exact) < (2.0 if qtype == "MXFP4" else 1.25) * q4_k_error, \
                f"{qtype}/{arch}/{isa}: RMS {rms(got - exact)} from the exact reference, Q4_K {q4_k_error}"
    finally:
        core.set_isa(None)


def test_model_info_lists_the_types(models):  # edgellm.ModelFile (`edgellm info`) names them
    for qtype in TYPES:
        with edgellm.ModelFile(models[qtype, "llama"]) as f:
            assert f.tensors["blk.0.ffn_down.weight"].type == qtype
            assert f.tensors["blk.0.attn_norm.weight"].type == "F32"


ARCH = kv("general.architecture", VT.STRING, "llama")


@pytest.mark.parametrize("qtype,ne0,block", [("IQ4_XS", 128, 256), ("IQ4_NL", 48, 32), ("MXFP4", 40, 32)])
def test_rows_not_whole_blocks_are_refused(tmp_path, qtype, ne0, block):
    p = tmp_path / f"bad-{qtype}.gguf"
    p.write_bytes(build([ARCH], [tensor_info("blk.0.ffn_up.weight", [ne0, 16], int(QT[qtype]), 0)], b"\0" * 8192))
    with pytest.raises(edgellm.ModelFormatError) as e:
        edgellm.ModelFile(p)
    msg = str(e.value)
    assert "blk.0.ffn_up.weight" in msg and f"{qtype} block size {block}" in msg, msg
