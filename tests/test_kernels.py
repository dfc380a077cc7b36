"""Kernel tables through the Python binding (edgellm._testing.kernel_*).

The kernel-vs-reference contract — every SIMD table entry against the scalar table, for every
weight type, activation quantizer and float op — is cpp/tests/test_kernels_isa.cpp (it also runs
under qemu for the NEON tables, scripts/test-aarch64.sh). Here: what the binding adds.

- kernel_matmul / kernel_quantize / kernel_op return each table's results in the documented
  shapes (one small case per table, against the scalar table);
- EDGELLM_ISA selects the table in a fresh process; an unknown or unavailable name is a clear
  error, not a crash;
- bad arguments and row lengths that are not a block multiple raise typed errors.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

core = pytest.importorskip("edgellm._core")
testing = pytest.importorskip("edgellm._testing")


@pytest.mark.parametrize("isa", core.available_isas())
def test_binding_returns_the_table_results(isa):
    rng = np.random.default_rng(20)
    K, rows, r0, r1 = 64, 5, 1, 4
    w = core.quant_quantize("Q4_0", rng.standard_normal(rows * K).astype(np.float32)).tobytes()
    x = rng.standard_normal((3, K)).astype(np.float32)
    y = testing.kernel_matmul(isa, "Q4_0", w, K, rows, x, r0, r1)
    y_ref = testing.kernel_matmul("scalar", "Q4_0", w, K, rows, x, r0, r1)
    assert y.shape == (3, rows)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    assert np.abs(y[:, r0:r1]).max() > 0 and not y[:, :r0].any() and not y[:, r1:].any()
    assert testing.kernel_quantize(isa, "Q8_0", x[0]) == testing.kernel_quantize("scalar", "Q8_0", x[0])
    np.testing.assert_allclose(testing.kernel_op(isa, "softmax", x[0]), testing.kernel_op("scalar", "softmax", x[0]),
                               rtol=1e-5)
    assert testing.kernel_op(isa, "dot", x[0], x[1]) == pytest.approx(testing.kernel_op("scalar", "dot", x[0], x[1]),
                                                                   rel=1e-5, abs=1e-5)


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
