"""The non-linear 4-bit formats IQ4_NL, IQ4_XS and MXFP4: our scalar reference
(edgellm._core.quant_*) against the gguf package (docs/formats.md §2.5).

- dequantize: random valid blocks (every nibble, fp16 scales of many magnitudes and signs, every
  E8M0 exponent byte) decode exactly as gguf.quants.dequantize decodes them.
- quantize: MXFP4 byte-for-byte equal to gguf.quants.quantize; IQ4_NL / IQ4_XS (gguf has no
  quantizer for them) write blocks gguf decodes identically, with less error than Q4_0 at the
  same or fewer bits, and no more than llama.cpp's own quantizer (ggml_quantize_chunk from a
  llama.cpp build, when one is at hand) plus a few percent.
- vec_dot: equals the float dot of the dequantized operands.
"""
import ctypes
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES  # noqa: E402
from gguf import GGMLQuantizationType as GT  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402
from gguf.quants import quantize as gguf_quantize  # noqa: E402

core = pytest.importorskip("edgellm._core")

from test_quant import DISTRIBUTIONS, SCALE_MAGNITUDES, quantized_dot_reference, random_floats  # noqa: E402

TYPES = ["IQ4_NL", "IQ4_XS", "MXFP4"]
# type -> (block elements, block bytes, ggml id)
LAYOUT = {"IQ4_NL": (32, 18, 20), "IQ4_XS": (256, 136, 23), "MXFP4": (32, 17, 39)}


def random_blocks(rng, qtype, nblocks, max_scale=np.inf):
    """Random valid blocks: random nibbles / sub-block scales, finite scales of both signs."""
    elems, size, _ = LAYOUT[qtype]
    raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    if qtype == "MXFP4":
        if np.isfinite(max_scale):  # exponents whose 2^(e-128)·12 stays below max_scale
            raw[:, 0] = rng.integers(100, 128 + int(np.log2(max_scale / 12)), nblocks)
        return raw
    mags = [m for m in SCALE_MAGNITUDES if m <= max_scale]
    for b in range(nblocks):
        val = np.float16(mags[rng.integers(len(mags))] * rng.uniform(0.5, 1.0) * rng.choice([-1.0, 1.0]))
        raw[b, 0:2] = np.frombuffer(val.tobytes(), dtype=np.uint8)
    return raw


def rmse(qtype, x):
    y = core.quant_dequantize(qtype, core.quant_quantize(qtype, x), x.size)
    return float(np.sqrt(np.mean((y - x) ** 2)))


def llama_cpp_quantize():
    """ggml_quantize_chunk from a llama.cpp build (EDGELLM_LLAMA_CPP_LIB or the usual place), or None."""
    path = os.environ.get("EDGELLM_LLAMA_CPP_LIB", "/opt/peer/llama.cpp/build/bin/libggml-base.so")
    if not os.path.exists(path):
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    f = lib.ggml_quantize_chunk
    f.restype = ctypes.c_size_t
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                  ctypes.c_int64, ctypes.c_void_p]

    def quantize(qtype, x, n_per_row):
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros(x.size * 2, np.uint8)
        n = f(LAYOUT[qtype][2], x.ctypes.data, out.ctypes.data, 0, x.size // n_per_row, n_per_row, None)
        return out[:n]

    return quantize


# ---------------------------------------------------------------------------------------------
# layout


@pytest.mark.parametrize("qtype", TYPES)
def test_dtype_info_matches_gguf(qtype):
    elems, size, ggml_id = LAYOUT[qtype]
    assert tuple(core.dtype_info(qtype)) == GGML_QUANT_SIZES[GT[qtype]] == (elems, size)
    assert int(GT[qtype]) == ggml_id


@pytest.mark.parametrize("weight,act", [("IQ4_NL", "Q8_0"), ("IQ4_XS", "Q8_K"), ("MXFP4", "Q8_0")])
def test_vec_dot_type(weight, act):
    assert core.quant_vec_dot_type(weight) == act


# ---------------------------------------------------------------------------------------------
# dequantize


@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_random_blocks_match_gguf(qtype):
    rng = np.random.default_rng(7)
    raw = random_blocks(rng, qtype, 300)
    if qtype == "MXFP4":
        raw[:256, 0] = np.arange(256)  # every exponent, E8M0's subnormal halves (e = 0, 1) included
    n = raw.shape[0] * LAYOUT[qtype][0]
    with np.errstate(over="ignore"):
        expected = gguf_dequantize(raw, GT[qtype]).ravel()
    got = core.quant_dequantize(qtype, raw, n)
    assert np.array_equal(got, expected)


def test_iq4_nl_hand_example():
    # d = 0.5; element 0 nibble 0 (-127), element 16 nibble 15 (113), the rest nibble 8 (+1)
    raw = np.zeros(18, np.uint8)
    raw[0:2] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)
    raw[2:] = 0x88
    raw[2] = 0xF0
    y = core.quant_dequantize("IQ4_NL", raw, 32)
    assert y[0] == -63.5 and y[16] == 56.5 and np.all(y[1:16] == 0.5) and np.all(y[17:] == 0.5)


def test_mxfp4_hand_example():
    # e = 128 -> scale 1 (the doubled e2m1 table as is); nibbles 7 (12) and 15 (-12)
    raw = np.zeros(17, np.uint8)
    raw[0] = 128
    raw[1:] = 0xF7
    y = core.quant_dequantize("MXFP4", raw, 32)
    assert np.all(y[:16] == 12.0) and np.all(y[16:] == -12.0)


# ---------------------------------------------------------------------------------------------
# quantize


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_mxfp4_quantize_byte_exact_with_gguf(dist):
    x = random_floats(np.random.default_rng(11), dist, 32 * 64)
    got = core.quant_quantize("MXFP4", x)
    expected = gguf_quantize(x.reshape(1, -1), GT.MXFP4).ravel()
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("qtype", ["IQ4_NL", "IQ4_XS"])
def test_iq4_quantizer_beats_q4_0_on_gaussian(qtype):
    x = random_floats(np.random.default_rng(31), "normal", 256 * 64)
    raw = core.quant_quantize(qtype, x)
    assert raw.size == x.size // LAYOUT[qtype][0] * LAYOUT[qtype][1]
    y = core.quant_dequantize(qtype, raw, x.size)
    # bytes are valid: gguf decodes them the same
    assert np.array_equal(gguf_dequantize(raw.reshape(-1, LAYOUT[qtype][1]), GT[qtype]).ravel(), y)
    # IQ4_XS has 4.25 bits a weight against Q4_0's 4.5 and still does better
    assert rmse(qtype, x) < 0.95 * rmse("Q4_0", x)
    assert rmse("MXFP4", x) > rmse(qtype, x)  # the coarser power-of-two scale of MXFP4 costs


@pytest.mark.parametrize("qtype", ["IQ4_NL", "IQ4_XS", "MXFP4"])
@pytest.mark.parametrize("dist", ["normal", "heavy_tail", "uniform_pos", "negative_max"])
def test_quantizer_close_to_llama_cpp(qtype, dist):
    quantize = llama_cpp_quantize()
    if quantize is None:
        pytest.skip("no llama.cpp libggml-base.so (set EDGELLM_LLAMA_CPP_LIB)")
    x = random_floats(np.random.default_rng(37), dist, 256 * 64)
    theirs = quantize(qtype, x, 256)
    y_theirs = gguf_dequantize(theirs.reshape(-1, LAYOUT[qtype][1]), GT[qtype]).ravel()
    ours = rmse(qtype, x)
    ref = float(np.sqrt(np.mean((y_theirs - x) ** 2)))
    assert ours <= 1.05 * ref, f"{qtype}/{dist}: RMSE {ours:.5f} vs llama.cpp {ref:.5f}"


@pytest.mark.parametrize("qtype", ["IQ4_NL", "IQ4_XS"])
@pytest.mark.parametrize("dist", ["uniform_pos", "negative_max", "zero_blocks", "heavy_tail", "grid",
                                  "huge"])
def test_iq4_quantizer_other_distributions(qtype, dist):
    # (not "tiny": scales of ~1e-8 are below fp16's range, a limit of the format as for Q4_0)
    x = random_floats(np.random.default_rng(32), dist, 256 * 8)
    raw = core.quant_quantize(qtype, x)
    y = core.quant_dequantize(qtype, raw, x.size)
    assert np.all(np.isfinite(y))
    assert np.array_equal(gguf_dequantize(raw.reshape(-1, LAYOUT[qtype][1]), GT[qtype]).ravel(), y)
    for xb, yb in zip(x.reshape(-1, 256), y.reshape(-1, 256)):
        if not np.any(xb):
            assert not np.any(yb), "an all-zero block must decode to zeros"
            continue
        rel = np.sqrt(np.mean((yb - xb) ** 2)) / np.sqrt(np.mean(xb ** 2))
        assert rel < 0.25, f"{qtype}/{dist}: block relative RMSE {rel:.4f}"


# ---------------------------------------------------------------------------------------------
# vec_dot


@pytest.mark.parametrize("nblocks", [1, 7])
@pytest.mark.parametrize("qtype", TYPES)
def test_vec_dot_equals_dot_of_dequantized(qtype, nblocks):
    rng = np.random.default_rng(41 + nblocks)
    n = LAYOUT[qtype][0] * nblocks
    act_type = core.quant_vec_dot_type(qtype)
    for trial in range(20):
        w = random_blocks(rng, qtype, nblocks, max_scale=300.0).ravel()
        if trial % 4 == 0:  # also weights from our own quantizer
            w = core.quant_quantize(qtype, rng.standard_normal(n).astype(np.float32))
        a, wd, ad, expected = quantized_dot_reference(rng, qtype, act_type, w, n, trial)
        got = core.quant_vec_dot(qtype, w, a, n)
        magnitude = float(np.sum(np.abs(wd * ad)))
        assert abs(got - expected) <= 1e-4 * magnitude + 1e-30, \
            f"{qtype} n={n} trial {trial}: got {got}, expected {expected}, sum|w·x| {magnitude}"


@pytest.mark.parametrize("qtype", TYPES)
def test_bad_row_length_is_a_value_error(qtype):
    elems = LAYOUT[qtype][0]
    with pytest.raises(ValueError, match=f"block size {elems}"):
        core.quant_quantize(qtype, np.zeros(elems + 16, np.float32))
