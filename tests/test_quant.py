"""Block formats: our scalar reference (edgellm._core.quant_*) against the gguf package.

- dequantize: random valid blocks (finite fp16 scales of many magnitudes and signs, random
  levels) decode exactly as gguf.quants.dequantize decodes them (Q8_1 / Q8_K, which gguf lacks,
  against a numpy decoder here).
- quantize: Q4_0, Q4_1, Q5_0, Q5_1, F16, BF16 byte-for-byte equal to gguf.quants.quantize.
  Q8_0 follows the AVX2 activation rule q = round_half_even(x * (127/amax)) instead of gguf's /
  llama.cpp-C's roundf(x * (1/d)): the scale bytes are always equal and q differs by at most one
  step, only where x·127/amax sits on (or within float rounding of) a half.
- K-quant weight quantizers: valid blocks (gguf decodes them identically) with small error.
- vec_dot: equals the float dot of the dequantized operands.
"""
import zlib

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as GT  # noqa: E402
from gguf.quants import dequantize as gguf_dequantize  # noqa: E402
from gguf.quants import quantize as gguf_quantize  # noqa: E402

core = pytest.importorskip("edgellm._core")

# type -> (block elements, block bytes, {fp16 field name: byte offset})
BLOCKS = {
    "Q4_0": (32, 18, {"d": 0}),
    "Q4_1": (32, 20, {"d": 0, "m": 2}),
    "Q5_0": (32, 22, {"d": 0}),
    "Q5_1": (32, 24, {"d": 0, "m": 2}),
    "Q8_0": (32, 34, {"d": 0}),
    "Q8_1": (32, 36, {"d": 0, "s": 2}),
    "Q2_K": (256, 84, {"d": 80, "dmin": 82}),
    "Q3_K": (256, 110, {"d": 108}),
    "Q4_K": (256, 144, {"d": 0, "dmin": 2}),
    "Q5_K": (256, 176, {"d": 0, "dmin": 2}),
    "Q6_K": (256, 210, {"d": 208}),
    "Q8_K": (256, 292, {}),  # f32 d at offset 0
}
FLOATS = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2)}
WEIGHT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
ALL_TYPES = list(FLOATS) + list(BLOCKS)
GGUF_DECODES = [t for t in ALL_TYPES if t not in ("Q8_1", "Q8_K")]

# Scale magnitudes for random blocks: fp16 subnormals, ordinary, and near the fp16 maximum.
SCALE_MAGNITUDES = [0.0, 3e-7, 1e-4, 1e-2, 0.5, 7.0, 300.0, 6.0e4]


def random_blocks(rng, qtype, nblocks, max_scale=np.inf):
    """Random, valid blocks: random level bytes, finite scales of all magnitudes and both signs."""
    elems, size, fields = BLOCKS[qtype]
    raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    mags = [m for m in SCALE_MAGNITUDES if m <= max_scale]
    for b in range(nblocks):
        for off in fields.values():
            mag = mags[rng.integers(len(mags))]
            val = np.float16(mag * rng.uniform(0.5, 1.0) * rng.choice([-1.0, 1.0]))
            raw[b, off:off + 2] = np.frombuffer(val.tobytes(), dtype=np.uint8)
        if qtype == "Q8_K":
            mag = [0.0, 1e-30, 1e-3, 1.0, 1e5][rng.integers(5)]
            d = np.float32(mag * rng.uniform(0.5, 1.0) * rng.choice([-1.0, 1.0]))
            raw[b, 0:4] = np.frombuffer(d.tobytes(), dtype=np.uint8)
    if qtype in ("Q8_0", "Q8_1", "Q8_K"):
        # qs of an activation quantizer never holds -128
        lo = 4 if qtype == "Q8_K" else (2 if qtype == "Q8_0" else 4)
        hi = lo + elems
        q = raw[:, lo:hi].view(np.int8)
        q[q == -128] = -127
    return raw


def numpy_decode_activation(qtype, raw):
    """Our own decoder for the activation formats gguf lacks."""
    if qtype == "Q8_1":
        d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (raw[:, 4:36].view(np.int8).astype(np.float32) * d).ravel()
    assert qtype == "Q8_K"
    d = raw[:, 0:4].copy().view(np.float32)
    return (raw[:, 4:260].view(np.int8).astype(np.float32) * d).ravel()


def random_floats(rng, kind, n):
    if kind == "normal":
        return rng.standard_normal(n).astype(np.float32)
    if kind == "uniform_pos":
        return rng.uniform(0.1, 2.0, n).astype(np.float32)
    if kind == "negative_max":  # the largest-magnitude value of each block is negative
        x = rng.uniform(-1.0, 1.0, n).astype(np.float32)
        x[::32] = -3.0 - rng.uniform(0, 1, len(x[::32])).astype(np.float32)
        return x
    if kind == "zero_blocks":  # every other 256-block is all zeros
        x = rng.standard_normal(n).astype(np.float32)
        for s in range(0, n, 512):
            x[s:s + 256] = 0.0
        return x
    if kind == "tiny":
        return (rng.standard_normal(n) * 1e-6).astype(np.float32)
    if kind == "huge":
        return (rng.standard_normal(n) * 1e4).astype(np.float32)
    if kind == "heavy_tail":
        return rng.standard_t(2, n).astype(np.float32)
    if kind == "grid":  # many exact rounding ties
        x = (rng.integers(-40, 41, n) * 0.25).astype(np.float32)
        x[::32] = 10.0
        return x
    raise ValueError(kind)

def quantized_dot_reference(rng, qtype, act_type, w, n, trial):
    """Activations of distribution trial % len(DISTRIBUTIONS) quantized to act_type, both sides
    dequantized in float64, and their exact dot: (a, wd, ad, expected)."""
    x = random_floats(rng, DISTRIBUTIONS[trial % len(DISTRIBUTIONS)], n)
    a = core.quant_quantize(act_type, x)
    wd = core.quant_dequantize(qtype, w, n).astype(np.float64)
    ad = core.quant_dequantize(act_type, a, n).astype(np.float64)
    return a, wd, ad, float(np.dot(wd, ad))


DISTRIBUTIONS = ["normal", "uniform_pos", "negative_max", "zero_blocks", "tiny", "huge",
                 "heavy_tail", "grid"]


# ---------------------------------------------------------------------------------------------
# layout facts


@pytest.mark.parametrize("qtype", ALL_TYPES)
def test_dtype_info_matches_gguf(qtype):
    if qtype == "Q8_1":
        # gguf's table still says 40 bytes (an old f32 d/s layout); ggml's block_q8_1 is two
        # fp16 + 32 int8 = 36, and Q8_1 never occurs in files.
        assert core.dtype_info(qtype) == (32, 36)
        return
    assert core.dtype_info(qtype) == tuple(gguf.GGML_QUANT_SIZES[GT[qtype]])
    assert core.dtype_info(qtype.lower()) == core.dtype_info(qtype)


@pytest.mark.parametrize("weight,act", [
    ("F32", "F32"), ("F16", "F16"), ("BF16", "BF16"),
    ("Q4_0", "Q8_0"), ("Q5_0", "Q8_0"), ("Q8_0", "Q8_0"), ("Q4_1", "Q8_1"), ("Q5_1", "Q8_1"),
    ("Q2_K", "Q8_K"), ("Q3_K", "Q8_K"), ("Q4_K", "Q8_K"), ("Q5_K", "Q8_K"), ("Q6_K", "Q8_K"),
])
def test_vec_dot_type(weight, act):
    assert core.quant_vec_dot_type(weight) == act


# ---------------------------------------------------------------------------------------------
# dequantize


@pytest.mark.parametrize("qtype", list(BLOCKS))
def test_dequantize_random_blocks_match_gguf(qtype):
    rng = np.random.default_rng(zlib.crc32(qtype.encode()))  # str hash() is salted per run
    elems, size, _ = BLOCKS[qtype]
    nblocks = 64
    raw = random_blocks(rng, qtype, nblocks)
    mine = core.quant_dequantize(qtype, raw.tobytes(), nblocks * elems)
    if qtype in GGUF_DECODES:
        ref = gguf_dequantize(raw, GT[qtype]).ravel()
    else:
        ref = numpy_decode_activation(qtype, raw)
    assert mine.dtype == np.float32 and mine.shape == (nblocks * elems,)
    mine_b, ref_b = mine.reshape(nblocks, elems), ref.reshape(nblocks, elems)
    scale = np.abs(ref_b).max(axis=1, keepdims=True)  # the block's scale of values
    assert np.all(np.isfinite(mine_b) == np.isfinite(ref_b))
    err = np.abs(mine_b - ref_b)
    assert np.all(err <= 1e-6 * scale), f"{qtype}: max err {err.max()} (scale {scale.max()})"


@pytest.mark.parametrize("qtype", ["F16", "BF16"])
def test_dequantize_float_formats_bit_exact(qtype):
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**16, 4096, dtype=np.uint16)
    mine = core.quant_dequantize(qtype, bits.tobytes(), bits.size)
    ref = gguf_dequantize(bits.view(np.uint8).reshape(1, -1), GT[qtype]).ravel()
    # Bit patterns, so signed zeros and subnormals count too. NaNs only need to stay NaN: like
    # the F16C instruction, fp16.h quiets signalling NaNs where numpy keeps the payload as is.
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(mine), nan)
    assert np.array_equal(mine.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])


def test_dequantize_f32_is_identity():
    x = np.random.default_rng(0).standard_normal(96).astype(np.float32)
    assert np.array_equal(core.quant_dequantize("F32", x.tobytes(), 96), x)


def test_dequantize_accepts_numpy_uint8():
    raw = random_blocks(np.random.default_rng(3), "Q4_K", 2)
    assert np.array_equal(core.quant_dequantize("Q4_K", raw, 512),
                          core.quant_dequantize("Q4_K", raw.tobytes(), 512))


# ---------------------------------------------------------------------------------------------
# quantize


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "F16", "BF16"])
def test_quantize_byte_exact_with_gguf(qtype, dist):
    rng = np.random.default_rng(11)
    x = random_floats(rng, dist, 2048)
    mine = core.quant_quantize(qtype, x)
    ref = gguf_quantize(x.reshape(4, -1), GT[qtype]).view(np.uint8).ravel()
    assert mine.dtype == np.uint8
    assert np.array_equal(mine, ref), f"{qtype}/{dist}: {np.count_nonzero(mine != ref)} bytes differ"


def test_f16_bf16_quantize_round_half_even_and_specials():
    x = np.array([1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 65520.0, -0.0, np.inf, -np.inf, 1e-8, 6e-8],
                 dtype=np.float32)
    with np.errstate(over="ignore"):  # 65520 rounds up to inf, as intended
        ref16 = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(core.quant_quantize("F16", x).view(np.uint16), ref16)
    xb = np.array([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, np.nan, -np.inf, 3.0e38], dtype=np.float32)
    ref = gguf_quantize(xb, GT.BF16).view(np.uint16)
    got = core.quant_quantize("BF16", xb).view(np.uint16)
    assert np.array_equal(got, ref)
    assert got[0] == 0x3F80 and got[1] == 0x3F82  # ties go to the even mantissa
    assert got[2] & 0x0040  # NaN stays NaN, quiet


def numpy_q8_rule(x, qtype):
    """The documented activation rule, written independently in numpy (round-half-even)."""
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        iscale = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(b * iscale).astype(np.int8)
    parts = [d.astype(np.float16).view(np.uint8)]
    if qtype == "Q8_1":
        with np.errstate(over="ignore"):  # s overflows fp16 for huge activations, in C++ too
            s = (d * q.astype(np.int32).sum(axis=1, keepdims=True).astype(np.float32)).astype(np.float16)
        parts.append(s.view(np.uint8))
    parts.append(q.view(np.uint8))
    return np.concatenate(parts, axis=1).ravel()


def numpy_q8k_rule(x):
    b = x.reshape(-1, 256)
    out = []
    for blk in b:
        i = int(np.argmax(np.abs(blk)))
        mx = blk[i]
        if mx == 0:
            out.append(np.zeros(292, np.uint8))
            continue
        iscale = np.float32(-127) / mx
        q = np.minimum(np.rint(iscale * blk), 127).astype(np.int8)
        bsums = q.astype(np.int16).reshape(16, 16).sum(axis=1).astype(np.int16)
        d = np.float32(1) / iscale
        out.append(np.concatenate([np.frombuffer(d.tobytes(), np.uint8), q.view(np.uint8), bsums.view(np.uint8)]))
    return np.concatenate(out)


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("qtype", ["Q8_0", "Q8_1", "Q8_K"])
def test_activation_quantizers_follow_documented_rule(qtype, dist):
    x = random_floats(np.random.default_rng(21), dist, 2048)
    mine = core.quant_quantize(qtype, x)
    ref = numpy_q8k_rule(x) if qtype == "Q8_K" else numpy_q8_rule(x, qtype)
    assert np.array_equal(mine, ref)


def test_q8_k_scale_is_minus_signed_max_over_127():
    x = np.random.default_rng(2).uniform(-1, 1, 256).astype(np.float32)
    x[17] = -4.0
    raw = core.quant_quantize("Q8_K", x)
    d = raw[0:4].view(np.float32)[0]
    assert d == pytest.approx(4.0 / 127, rel=1e-6)  # d = -max/127 with max = -4 -> positive
    assert raw[4 + 17].view(np.int8) == -127
    x[17] = 4.0
    raw = core.quant_quantize("Q8_K", x)
    assert raw[0:4].view(np.float32)[0] == pytest.approx(-4.0 / 127, rel=1e-6)  # negative d
    assert raw[4 + 17].view(np.int8) == -127


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_q8_0_against_gguf_roundf_reference(dist):
    """Scales identical; q within one step of gguf's, and only at (near-)ties."""
    x = random_floats(np.random.default_rng(8), dist, 4096)
    mine = core.quant_quantize("Q8_0", x).reshape(-1, 34)
    ref = gguf_quantize(x.reshape(1, -1), GT.Q8_0).view(np.uint8).reshape(-1, 34)
    assert np.array_equal(mine[:, :2], ref[:, :2])
    qm, qr = mine[:, 2:].view(np.int8).astype(int), ref[:, 2:].view(np.int8).astype(int)
    diff = qm != qr
    assert np.all(np.abs(qm - qr) <= 1)
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(amax > 0, b.astype(np.float64) * 127 / amax, 0)
    frac = np.abs(np.abs(v) - np.floor(np.abs(v)) - 0.5)
    assert np.all(frac[diff] < 1e-5), "q differs from gguf away from a rounding tie"


def test_q8_0_ties_round_to_even():
    x = np.zeros(32, np.float32)
    x[0], x[1], x[2], x[3] = 127.0, 2.5, -2.5, 3.5  # amax 127 -> scale exactly 1
    q = core.quant_quantize("Q8_0", x)[2:].view(np.int8)
    assert list(q[:4]) == [127, 2, -2, 4]
    ref = gguf_quantize(x.reshape(1, -1), GT.Q8_0).view(np.uint8).ravel()[2:].view(np.int8)
    assert list(ref[:4]) == [127, 3, -3, 4]  # gguf (like llama.cpp's C reference) rounds away from 0


# K-quant reconstruction: RMSE / RMS(x) on N(0,1) data must stay below these (our quantizer
# measures about 0.26, 0.14, 0.073, 0.037, 0.017).
K_RMSE_LIMIT = {"Q2_K": 0.30, "Q3_K": 0.17, "Q4_K": 0.085, "Q5_K": 0.043, "Q6_K": 0.021}


@pytest.mark.parametrize("qtype", list(K_RMSE_LIMIT))
def test_k_quantizer_error_small_on_gaussian(qtype):
    x = random_floats(np.random.default_rng(31), "normal", 256 * 32)
    raw = core.quant_quantize(qtype, x)
    assert raw.size == 32 * BLOCKS[qtype][1]
    y = core.quant_dequantize(qtype, raw, x.size)
    rel = np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2))
    assert rel < K_RMSE_LIMIT[qtype], f"{qtype}: relative RMSE {rel:.4f}"
    # bytes are valid: gguf decodes them the same
    assert np.array_equal(gguf_dequantize(raw.reshape(32, -1), GT[qtype]).ravel(), y)


@pytest.mark.parametrize("dist", ["uniform_pos", "negative_max", "zero_blocks", "heavy_tail",
                                  "grid", "huge"])
@pytest.mark.parametrize("qtype", list(K_RMSE_LIMIT))
def test_k_quantizer_other_distributions(qtype, dist):
    x = random_floats(np.random.default_rng(32), dist, 256 * 8)
    raw = core.quant_quantize(qtype, x)
    y = core.quant_dequantize(qtype, raw, x.size)
    assert np.all(np.isfinite(y))
    assert np.array_equal(gguf_dequantize(raw.reshape(8, -1), GT[qtype]).ravel(), y)
    for xb, yb in zip(x.reshape(-1, 256), y.reshape(-1, 256)):
        if not np.any(xb):
            assert not np.any(yb), "an all-zero block must decode to zeros"
            continue
        rel = np.sqrt(np.mean((yb - xb) ** 2)) / np.sqrt(np.mean(xb ** 2))
        # heavy tails and offsets cost more than Gaussian data; still far below "no signal"
        assert rel < 2.5 * K_RMSE_LIMIT[qtype], f"{qtype}/{dist}: block relative RMSE {rel:.4f}"


def test_k_quantizer_beats_legacy_at_similar_bits():
    x = random_floats(np.random.default_rng(33), "normal", 256 * 16)

    def rmse(t):
        return np.sqrt(np.mean((core.quant_dequantize(t, core.quant_quantize(t, x), x.size) - x) ** 2))

    assert rmse("Q4_K") < rmse("Q4_0")
    assert rmse("Q5_K") < rmse("Q5_0")
    assert rmse("Q6_K") < rmse("Q5_1")


# ---------------------------------------------------------------------------------------------
# vec_dot


def weight_row(rng, qtype, n):
    if qtype in FLOATS:
        return core.quant_quantize(qtype, rng.standard_normal(n).astype(np.float32))
    # scales up to 300: sums stay far inside the f32 range (overflow is not what this tests)
    return random_blocks(rng, qtype, n // BLOCKS[qtype][0], max_scale=300.0).ravel()


def q81_min_correction(w_raw, a_raw, qtype):
    """Q4_1/Q5_1 dots use m·s with s = fp16(d·Σq), not m·fp16(d)·Σq: the exact difference."""
    size = BLOCKS[qtype][1]
    wb, ab = w_raw.reshape(-1, size), a_raw.reshape(-1, 36)
    m = wb[:, 2:4].copy().view(np.float16).astype(np.float64).ravel()
    d = ab[:, 0:2].copy().view(np.float16).astype(np.float64).ravel()
    s = ab[:, 2:4].copy().view(np.float16).astype(np.float64).ravel()
    sq = ab[:, 4:36].view(np.int8).astype(np.float64).sum(axis=1)
    return float(np.sum(m * (s - d * sq)))


@pytest.mark.parametrize("nblocks", [1, 7])
@pytest.mark.parametrize("qtype", WEIGHT_TYPES)
def test_vec_dot_equals_dot_of_dequantized(qtype, nblocks):
    rng = np.random.default_rng(41 + nblocks)
    elems = BLOCKS[qtype][0] if qtype in BLOCKS else 32
    n = elems * nblocks
    act_type = core.quant_vec_dot_type(qtype)
    for trial in range(20):
        w = weight_row(rng, qtype, n)
        if qtype in BLOCKS and trial % 4 == 0:  # also weights from our own quantizer
            w = core.quant_quantize(qtype, rng.standard_normal(n).astype(np.float32))
        a, wd, ad, expected = quantized_dot_reference(rng, qtype, act_type, w, n, trial)
        if act_type == "Q8_1":
            expected += q81_min_correction(w, a, qtype)
        got = core.quant_vec_dot(qtype, w, a, n)
        if not np.isfinite(expected):
            # Q8_1's fp16 s = d·Σq overflows for activations ~1e4 (a limit of the format itself)
            assert act_type == "Q8_1" and not np.isfinite(got)
            continue
        magnitude = float(np.sum(np.abs(wd * ad)))
        if not np.isfinite(magnitude):
            continue
        assert abs(got - expected) <= 1e-4 * magnitude + 1e-30, \
            f"{qtype} n={n} trial {trial}: got {got}, expected {expected}, sum|w·x| {magnitude}"


def test_vec_dot_q4_0_hand_example():
    # one block: all nibbles 9 (level +1), d = 0.5; activations all 2 with d = 1 -> 32 · 0.5 · 2
    w = np.zeros(18, np.uint8)
    w[0:2] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)
    w[2:] = 0x99
    a = np.zeros(34, np.uint8)
    a[0:2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)
    a[2:] = 2
    assert core.quant_vec_dot("Q4_0", w, a, 32) == 32.0


# ---------------------------------------------------------------------------------------------
# argument checks


def test_bad_arguments_raise_value_error():
    raw = np.zeros(18, np.uint8)
    with pytest.raises(ValueError, match="block size 32"):
        core.quant_dequantize("Q4_0", raw, 16)
    with pytest.raises(ValueError, match="18 bytes given"):
        core.quant_dequantize("Q4_0", raw, 64)
    with pytest.raises(ValueError, match="unknown tensor type 'Q9_9'"):
        core.quant_dequantize("Q9_9", raw, 32)
    with pytest.raises(ValueError, match="block size 256"):
        core.quant_quantize("Q4_K", np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="act"):
        core.quant_vec_dot("Q4_0", raw, np.zeros(33, np.uint8), 32)
    with pytest.raises(ValueError, match="activation format"):
        core.quant_vec_dot_type("Q8_K")
    with pytest.raises(ValueError):
        core.dtype_info("IQ2_XXS")


# ---------------------------------------------------------------------------------------------
# real files


def _real_model(name):
    from conftest import require_model
    return require_model(name)


@pytest.mark.real_model
@pytest.mark.slow  # gguf.GGUFReader parses the whole vocabulary first
@pytest.mark.parametrize("model", ["gemma3", "qwen2.5-coder-0.5b", "smollm2"])
def test_dequantize_real_tensors_match_gguf(model):
    """The first rows of one tensor of every type in the real files decode exactly as gguf's."""
    reader = gguf.GGUFReader(str(_real_model(model)))
    seen = set()
    for t in reader.tensors:
        qtype = t.tensor_type.name
        if qtype in seen or (qtype not in BLOCKS and qtype not in FLOATS):
            continue
        seen.add(qtype)
        raw = np.asarray(t.data).view(np.uint8).reshape(-1)
        row_elems = int(t.shape[0])  # ggml ne[0], the contiguous dimension
        rows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1
        take = min(rows, 4)
        chunk = raw[: raw.size // rows * take]
        mine = core.quant_dequantize(qtype, chunk.tobytes(), row_elems * take)
        ref = gguf_dequantize(chunk.reshape(take, -1), GT[qtype]).ravel()
        assert np.array_equal(mine, ref), f"{model}: {t.name} ({qtype})"
    assert seen - {"F32"}, f"{model}: no quantized tensor checked"
