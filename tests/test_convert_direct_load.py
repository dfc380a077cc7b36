"""Direct load of a Hugging Face checkpoint directory (edgellm/convert/cached.py): LLM("./dir")
and `edgellm run ./dir` convert once into $EDGELLM_CONVERTED, keyed by the files' content,
and reuse that file; the result runs like transformers (tests/data/hf/<arch>.npz)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import hf_checkpoints as hc

pytest.importorskip("edgellm._core")
import edgellm  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data", "hf")


@pytest.fixture
def converted(tmp_path, monkeypatch):
    cache = tmp_path / "converted"
    monkeypatch.setenv("EDGELLM_CONVERTED", str(cache))
    return cache


def _ggufs(cache):
    return sorted(p.name for p in cache.glob("*.gguf"))


def test_llm_on_a_checkpoint_dir_converts_once_and_reuses(tmp_path, converted):
    d = hc.write_checkpoint(tmp_path / "qwen3", "qwen3")
    ref = np.load(os.path.join(DATA, "qwen3.npz"))
    llm = edgellm.LLM(d, n_ctx=64, n_threads=1, kv_type="f32")
    try:
        got = np.asarray(llm.eval_logits(hc.PROMPT))
        first = llm.model_path
    finally:
        llm.close()
    np.testing.assert_allclose(got, ref["logits"], rtol=0, atol=2e-2)  # F16 by default
    assert len(_ggufs(converted)) == 1 and first.endswith("-f16.gguf")
    mtime = os.stat(first).st_mtime_ns
    llm = edgellm.LLM(d, n_ctx=64, n_threads=1, quantize="q8_0")
    llm.close()
    assert len(_ggufs(converted)) == 2 and llm.model_path.endswith("-q8_0.gguf")
    llm = edgellm.LLM(d, n_ctx=64, n_threads=1)
    llm.close()
    assert llm.model_path == first and os.stat(first).st_mtime_ns == mtime  # reused
    # changed weights: a new key, a new file
    w = hc.weights("qwen3")
    w["model.norm.weight"] = w["model.norm.weight"] * 2
    from safetensors.numpy import save_file
    save_file(w, os.path.join(d, "model.safetensors"))
    llm = edgellm.LLM(d, n_ctx=64, n_threads=1)
    llm.close()
    assert llm.model_path != first and len(_ggufs(converted)) == 3


def test_quantize_needs_a_checkpoint_dir(tmp_path, converted):
    with pytest.raises(edgellm.InvalidRequestError, match="checkpoint directory"):
        edgellm.LLM(str(tmp_path / "x.gguf"), quantize="q8_0")


def test_run_cli_on_a_checkpoint_dir(tmp_path, converted):
    d = hc.write_checkpoint(tmp_path / "llama", "llama", shards=2)
    env = dict(os.environ, EDGELLM_HISTORY=str(tmp_path / "history"))
    if env.get("EDGELLM_BUILD_DIR"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(REPO, "python"), env.get("PYTHONPATH")]))
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
    r = subprocess.run([sys.executable, "-m", "edgellm", "run", d, "--temp", "0", "-n", "4", "-t", "1", "hi"],
                       input="", capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert len(_ggufs(converted)) == 1
