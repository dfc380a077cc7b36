"""Kernel tables: every SIMD table this machine runs against the scalar (generic) table.

- matmul: for every weight type, random valid blocks, odd row counts, row sub-ranges [r0, r1) and
  ncols in {1, 2, 3, 4, 5, 8, 17}: |y_simd − y_scalar| ≤ 1e-5 · Σ|w·x| (+ a few float ulps), and
  rows outside [r0, r1) untouched.
- activation quantizers (Q8_0, Q8_1, Q8_K, F16, BF16): byte-for-byte equal to the scalar ones,
  including rounding ties, all-zero blocks, the sign choice of Q8_K and float special values.
- float ops (rmsnorm, softmax, dot, axpy, add, silu_mul, gelu_mul): equal within float tolerance.
- EDGELLM_ISA selects the table; an unknown or unavailable name is a clear error, not a crash.
"""
import os
import subprocess
import sys

import numpy as np
import zlib
import pytest

core = pytest.importorskip("edgellm._core")
testing = pytest.importorskip("edgellm._testing")

SIMD_ISAS = [i for i in core.available_isas() if i != "scalar"]

# type -> (block elements, block bytes, {fp16 field name: byte offset})
BLOCKS = {
    "Q4_0": (32, 18, {"d": 0}),
    "Q4_1": (32, 20, {"d": 0, "m": 2}),
    "Q5_0": (32, 22, {"d": 0}),
    "Q5_1": (32, 24, {"d": 0, "m": 2}),
    "Q8_0": (32, 34, {"d": 0}),
    "Q2_K": (256, 84, {"d": 80, "dmin": 82}),
    "Q3_K": (256, 110, {"d": 108}),
    "Q4_K": (256, 144, {"d": 0, "dmin": 2}),
    "Q5_K": (256, 176, {"d": 0, "dmin": 2}),
    "Q6_K": (256, 210, {"d": 208}),
}
FLOAT_WEIGHTS = ["F32", "F16", "BF16"]
WEIGHT_TYPES = FLOAT_WEIGHTS + list(BLOCKS)
ACT_TYPES = ["Q8_0", "Q8_1", "Q8_K", "F16", "BF16"]


def random_weights(wtype, rows, K, rng):
    """rows × K elements of `wtype`: random levels, finite fp16 scales of both signs."""
    if wtype == "F32":
        return rng.standard_normal((rows, K)).astype(np.float32).tobytes()
    if wtype == "F16":
        return rng.standard_normal((rows, K)).astype(np.float16).tobytes()
    if wtype == "BF16":
        f = rng.standard_normal((rows, K)).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    qk, nbytes, halves = BLOCKS[wtype]
    nblocks = rows * K // qk
    raw = rng.integers(0, 256, size=(nblocks, nbytes), dtype=np.uint8)
    for off in halves.values():
        scale = (rng.uniform(0.002, 0.05, nblocks) * rng.choice([-1.0, 1.0], nblocks)).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(nblocks, 2)
    return raw.tobytes()


def dequantized_abs_bound(wtype, w, K, rows, x):
    """Σ_k |w_rk · x_ck| for every (c, r), from the dequantized operands: the tolerance scale."""
    act = core.quant_vec_dot_type(wtype)
    wf = np.abs(core.quant_dequantize(wtype, np.frombuffer(w, np.uint8), rows * K).reshape(rows, K))
    xf = np.stack([np.abs(core.quant_dequantize(act, np.frombuffer(testing.kernel_quantize("scalar", act, row),
                                                                    np.uint8), K)) for row in x])
    return xf.astype(np.float64) @ wf.T.astype(np.float64)


@pytest.fixture
def rng(request):
    # crc32, not hash(): str hashes are salted per process, which made the draw differ per run
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def check_matmul(isa, wtype, K, rows, ncols, r0, r1, rng, quantize_isa="scalar"):
    w = random_weights(wtype, rows, K, rng)
    x = (rng.standard_normal((ncols, K)) * rng.uniform(0.1, 10, (ncols, 1))).astype(np.float32)
    y = testing.kernel_matmul(isa, wtype, w, K, rows, x, r0, r1, quantize_isa=quantize_isa)
    y_ref = testing.kernel_matmul("scalar", wtype, w, K, rows, x, r0, r1)
    assert y.shape == (ncols, rows)
    bound = dequantized_abs_bound(wtype, w, K, rows, x)
    tol = 1e-5 * bound + 1e-30
    err = np.abs(y.astype(np.float64) - y_ref)
    bad = err[:, r0:r1] > tol[:, r0:r1]
    assert not bad.any(), f"{isa} {wtype} ncols={ncols}: max err/tol {np.max(err / tol):.3g} at {np.argwhere(bad)[:4]}"
    # rows outside [r0, r1) are not written
    assert not y[:, :r0].any() and not y[:, r1:].any()
    # and the result is not trivially zero
    assert np.abs(y_ref[:, r0:r1]).max() > 0


@pytest.mark.parametrize("isa", SIMD_ISAS)
@pytest.mark.parametrize("wtype", WEIGHT_TYPES)
@pytest.mark.parametrize("ncols", [1, 2, 3, 4, 5, 8, 17])
def test_matmul_matches_scalar(isa, wtype, ncols, rng):
    K = 512 if wtype in FLOAT_WEIGHTS or wtype not in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0") else 96 * 5
    rows = 23
    check_matmul(isa, wtype, K, rows, ncols, 0, rows, rng)
    check_matmul(isa, wtype, K, rows, ncols, 3, 22, rng)  # odd sub-range, remainder tiles


@pytest.mark.parametrize("isa", SIMD_ISAS)
@pytest.mark.parametrize("wtype", FLOAT_WEIGHTS)
def test_float_matmul_any_K(isa, wtype, rng):
    # Float weights have no block size: K not a multiple of the vector width takes the tail path.
    for K in (1, 7, 13, 37):
        check_matmul(isa, wtype, K, 9, 5, 1, 8, rng)


@pytest.mark.parametrize("isa", SIMD_ISAS)
@pytest.mark.parametrize("wtype", ["Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K", "F16"])
def test_matmul_with_own_quantizer(isa, wtype, rng):
    # The production path: activations quantized by the same table (bit-exact with scalar).
    check_matmul(isa, wtype, 1024, 19, 6, 0, 19, rng, quantize_isa=isa)


@pytest.mark.parametrize("isa", SIMD_ISAS)
def test_matmul_extreme_levels(isa, rng):
    # All-maximal levels and activations (|q8| = 127, Q8_0 weight −128) must not saturate int16 sums.
    K, rows = 256, 4
    x = np.full((3, K), 5.0, np.float32)
    x[1] = -5.0
    x[2, ::2] = -5.0
    for wtype in ["Q8_0", "Q6_K", "Q5_K", "Q5_1", "Q4_K"]:
        qk, nbytes, halves = BLOCKS[wtype]
        for fill in (0x00, 0x80, 0xFF):
            raw = np.full((rows * K // qk, nbytes), fill, np.uint8)
            for off in halves.values():
                raw[:, off:off + 2] = np.array([0.01], np.float16).view(np.uint8)
            if wtype == "Q6_K":
                raw[:, 192:208] = np.uint8(0x80 if fill else 0x7F)  # int8 scales ±128/127
            w = raw.tobytes()
            y = testing.kernel_matmul(isa, wtype, w, K, rows, x, quantize_isa="scalar")
            y_ref = testing.kernel_matmul("scalar", wtype, w, K, rows, x)
            np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6, err_msg=f"{wtype} fill {fill:#x}")


def activation_cases(act, rng):
    qk = 256 if act == "Q8_K" else 32
    n = 4 * 256
    cases = [rng.standard_normal(n).astype(np.float32) * s for s in (1e-3, 1.0, 300.0)]
    # exact rounding ties: amax 127 → x·127/amax = x, so halves are ties
    tie = (np.arange(n) % 64 - 32 + 0.5).astype(np.float32)
    tie[::qk] = 127.0
    cases.append(tie)
    z = rng.standard_normal(n).astype(np.float32)
    z[:qk] = 0.0  # an all-zero block
    cases.append(z)
    # Q8_K: the scale's sign comes from the first element of largest |x|
    s = rng.uniform(-1, 1, n).astype(np.float32)
    s[5], s[9] = -2.0, 2.0
    s[256 + 5], s[256 + 9] = 2.0, -2.0
    s[512 + 3] = -7.0
    cases.append(s)
    if act in ("F16", "BF16"):
        sp = rng.standard_normal(n).astype(np.float32)
        sp[:8] = [np.inf, -np.inf, np.nan, 1e-40, -1e-42, 70000.0, 65519.0, 6e-8]
        sp[8:16] = np.array([0x3F808000, 0x3F818000, 0x3F80_7FFF, 0x3F80_8001, 0x7F7FFFFF, 0xFF800001, 0, 0x80000000],
                            np.uint32).view(np.float32)  # bf16 ties and edges
        cases.append(sp)
        cases.append(rng.standard_normal(37).astype(np.float32))  # any length, tail path
    return cases


@pytest.mark.parametrize("isa", SIMD_ISAS)
@pytest.mark.parametrize("act", ACT_TYPES)
def test_quantizer_bit_exact(isa, act, rng):
    for i, x in enumerate(activation_cases(act, rng)):
        got = testing.kernel_quantize(isa, act, x)
        ref = testing.kernel_quantize("scalar", act, x)
        assert got == ref, f"{isa} {act} case {i}: first difference at byte " \
                           f"{next(k for k in range(len(ref)) if got[k] != ref[k])}"


def _ops_inputs(n, rng):
    a = (rng.standard_normal(n) * 4).astype(np.float32)
    a[: min(n, 4)] = [-30.0, 25.0, -95.0, 0.0][: min(n, 4)]
    return a, rng.standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("isa", SIMD_ISAS)
@pytest.mark.parametrize("n", [1, 7, 8, 33, 1000, 4099])
def test_float_ops_match_scalar(isa, n, rng):
    a, b = _ops_inputs(n, rng)
    for name, kw, rtol in [("rmsnorm", dict(b=b, scalar=1e-6), 1e-6), ("rmsnorm", dict(scalar=1e-5), 1e-6),
                           ("softmax", {}, 1e-5), ("axpy", dict(b=b, scalar=0.37), 1e-6),
                           ("add", dict(b=b), 0), ("silu_mul", dict(b=b), 1e-5), ("gelu_mul", dict(b=b), 1e-5)]:
        got = testing.kernel_op(isa, name, a, **kw)
        ref = testing.kernel_op("scalar", name, a, **kw)
        scale = np.abs(ref).max() + 1e-30
        atol = rtol * 1e-2 * scale
        if name in ("silu_mul", "gelu_mul"):
            # their tails are a difference near 1 (1 + tanh, or 1 + e^-x in a quotient): float32
            # cancellation leaves an absolute error of a few ulps of |gate·up| per element
            atol = atol + 4 * np.finfo(np.float32).eps * np.abs(a.astype(np.float64) * b)
        err = np.abs(got.astype(np.float64) - ref)
        bound = rtol * np.abs(ref.astype(np.float64)) + atol
        assert (err <= bound).all(), (f"{isa} {name} n={n}: {int((err > bound).sum())} elements off, worst "
                                      f"{float((err - bound).max()):.3g} over the bound")
    got = testing.kernel_op(isa, "dot", a, b)
    ref = testing.kernel_op("scalar", "dot", a, b)
    assert abs(got - ref) <= 1e-5 * float(np.abs(a.astype(np.float64) * b).sum())


@pytest.mark.parametrize("isa", SIMD_ISAS)
def test_softmax_extremes(isa):
    x = np.array([-np.inf, 0.0, -1000.0, 88.0, 88.0, -87.0] + [1.0] * 11, np.float32)
    got = testing.kernel_op(isa, "softmax", x)
    ref = testing.kernel_op("scalar", "softmax", x)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-30)
    assert abs(got.sum() - 1.0) < 1e-5


@pytest.mark.parametrize("isa", SIMD_ISAS)
def test_gelu_silu_tails(isa):
    # Large |x|: gelu → x or 0, silu → x or 0, no NaN from exp overflow.
    g = np.array([-200.0, -20.0, -9.0, -3.0, -0.5, 0.0, 0.5, 3.0, 9.0, 20.0, 200.0], np.float32)
    u = np.ones_like(g)
    for name in ("gelu_mul", "silu_mul"):
        got = testing.kernel_op(isa, name, g, u)
        ref = testing.kernel_op("scalar", name, g, u)
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6, err_msg=name)


def _isa_in_subprocess(value):
    env = dict(os.environ, EDGELLM_ISA=value)
    return subprocess.run([sys.executable, "-c", "import edgellm._core as c; print(c.isa())"],
                          env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("isa", core.available_isas())
def test_env_selects_table(isa):
    r = _isa_in_subprocess(isa)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == isa


def test_env_bogus_is_a_clear_error():
    r = _isa_in_subprocess("bogus")
    assert r.returncode == 1, (r.returncode, r.stderr)  # a Python exception, not a signal
    assert "EDGELLM_ISA=bogus" in r.stderr and "unknown" in r.stderr


def test_default_is_best_available():
    r = subprocess.run([sys.executable, "-c", "import edgellm._core as c; print(c.isa())"],
                       env={k: v for k, v in os.environ.items() if k != "EDGELLM_ISA"},
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == core.available_isas()[-1]


def test_bad_arguments_raise_typed_errors():
    x = np.zeros((1, 32), np.float32)
    w = bytes(18)
    with pytest.raises(core.InvalidRequestError, match="isa 'sse9'"):
        testing.kernel_matmul("sse9", "Q4_0", w, 32, 1, x)
    with pytest.raises(core.InvalidRequestError, match="wtype 'Q9_9'"):
        testing.kernel_matmul("scalar", "Q9_9", w, 32, 1, x)
    with pytest.raises(core.InvalidRequestError, match="w: 17 bytes"):
        testing.kernel_matmul("scalar", "Q4_0", bytes(17), 32, 1, x)
    with pytest.raises(core.InvalidRequestError, match="r0 <= r1"):
        testing.kernel_matmul("scalar", "Q4_0", w, 32, 1, x, 0, 2)
    with pytest.raises(core.InvalidRequestError, match="unknown op"):
        testing.kernel_op("scalar", "tanh", np.zeros(4, np.float32))


@pytest.mark.parametrize("isa", core.available_isas())
def test_row_length_not_a_block_multiple_is_rejected(isa):
    # Every table (the SIMD kernels themselves, not only the binding) refuses a K that is not a
    # multiple of the block size instead of silently dropping the tail.
    for wtype, K in [("Q4_0", 48), ("Q4_K", 576), ("Q6_K", 100), ("Q8_0", 33)]:
        msg = "multiple" if isa == "scalar" else f"matmul: row length K = {K} is not a multiple of the {wtype} block"
        with pytest.raises(core.InvalidRequestError, match=msg):
            testing.kernel_matmul(isa, wtype, b"", K, 1, np.zeros((1, K), np.float32))
    for act, n in [("Q8_0", 48), ("Q8_1", 31), ("Q8_K", 576)]:
        msg = "multiple" if isa == "scalar" else f"quantize: row length K = {n} is not a multiple of the {act} block"
        with pytest.raises(core.InvalidRequestError, match=msg):
            testing.kernel_quantize(isa, act, np.zeros(n, np.float32))
