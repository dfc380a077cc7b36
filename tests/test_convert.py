"""`edgellm convert` (edgellm/convert/): tiny Hugging Face checkpoints (tests/hf_checkpoints.py,
rebuilt from a seed without torch) converted to GGUF and run by the engine, against the logits
and greedy tokens transformers gave on the same checkpoints (tests/data/hf/<arch>.npz, recorded
by tests/data/hf/make_hf_fixtures.py); plus the plan, the tokenizer keys and the typed errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import hf_checkpoints as hc

core = pytest.importorskip("edgellm._core")
from edgellm.convert import ConvertError, UnsupportedArchitectureError, convert, plan  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "hf")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    base = tmp_path_factory.mktemp("hf")
    cache = {}

    def make(arch):
        if arch not in cache:
            cache[arch] = hc.write_checkpoint(base / arch, arch, shards=2 if arch == "llama" else 1)
        return cache[arch]

    return make


def engine_logits(path, ids):
    model = core.Model(str(path), n_threads=2)
    runner = core.ModelRunner(model, n_ctx=64, kv_type="F32")
    return np.asarray(runner.eval(ids, all_logits=True))


def engine_greedy(path, ids, n):
    model = core.Model(str(path), n_threads=2)
    runner = core.ModelRunner(model, n_ctx=64, kv_type="F32")
    out = []
    logits = np.asarray(runner.eval(ids, all_logits=False)).reshape(-1)
    for _ in range(n):
        t = int(np.argmax(logits))
        out.append(t)
        logits = np.asarray(runner.eval([t], all_logits=False)).reshape(-1)
    return out


@pytest.mark.parametrize("arch", hc.ARCHS)
def test_f32_conversion_matches_transformers(ckpt, arch, tmp_path):
    ref = np.load(os.path.join(DATA, f"{arch}.npz"))
    out = tmp_path / "m.gguf"
    convert(ckpt(arch), str(out), "F32")
    got = engine_logits(out, hc.PROMPT)
    assert got.shape == ref["logits"].shape
    np.testing.assert_allclose(got, ref["logits"], rtol=0, atol=1e-3)
    assert engine_greedy(out, hc.PROMPT, hc.N_GREEDY) == ref["greedy"].tolist()


@pytest.mark.parametrize("arch", hc.ARCHS)
def test_f16_conversion_keeps_greedy_tokens(ckpt, arch, tmp_path):
    # F16 weights dot against F16 activations (docs/formats.md §2.4): close, not 1e-3.
    ref = np.load(os.path.join(DATA, f"{arch}.npz"))
    out = tmp_path / "m.gguf"
    convert(ckpt(arch), str(out), "F16")
    got = engine_logits(out, hc.PROMPT)
    np.testing.assert_allclose(got, ref["logits"], rtol=0, atol=2e-2)
    assert engine_greedy(out, hc.PROMPT, hc.N_GREEDY) == ref["greedy"].tolist()
