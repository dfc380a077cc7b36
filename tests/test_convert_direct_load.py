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


def _cli_env(tmp_path):
    env = dict(os.environ, EDGELLM_HISTORY=str(tmp_path / "history"))
    if env.get("EDGELLM_BUILD_DIR"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(REPO, "python"), env.get("PYTHONPATH")]))
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
    return env


def test_run_cli_quantize(tmp_path, converted):
    d = hc.write_checkpoint(tmp_path / "mixtral", "mixtral")
    env = _cli_env(tmp_path)
    r = subprocess.run([sys.executable, "-m", "edgellm", "run", d, "--quantize", "Q8_0", "--temp", "0", "-n", "4",
                        "-t", "1", "hi"], input="", capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert _ggufs(converted) == [n for n in _ggufs(converted) if n.endswith("-q8_0.gguf")] and len(_ggufs(converted)) == 1
    assert "100%" in r.stderr  # the conversion's progress
    r = subprocess.run([sys.executable, "-m", "edgellm", "run", d, "--quantize", "q3", "hi"], input="",
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "'q3' is not one of" in r.stderr and "q4_k_m" in r.stderr
    r = subprocess.run([sys.executable, "-m", "edgellm", "run", str(tmp_path / "none.gguf"), "--quantize", "f16", "hi"],
                       input="", capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "--quantize needs a Hugging Face checkpoint directory" in r.stderr


def test_serve_quantize_converts_before_it_listens(tmp_path, converted):
    # a checkpoint whose conversion fails ends `serve --quantize` with the converter's message
    d = hc.write_checkpoint(tmp_path / "q", "qwen2moe")
    os.unlink(os.path.join(d, "model.safetensors"))
    r = subprocess.run([sys.executable, "-m", "edgellm", "serve", d, "--quantize", "q4_0", "--port", "0"],
                       capture_output=True, text=True, env=_cli_env(tmp_path), timeout=120)
    assert r.returncode == 1 and "no model.safetensors or model.safetensors.index.json" in r.stderr
    assert "Traceback" not in r.stderr


def test_serve_quantize_serves_the_conversion(tmp_path, converted):
    import json
    import urllib.request

    from server_helpers import free_port, wait_healthy

    d = hc.write_checkpoint(tmp_path / "qwen3moe", "qwen3moe")
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "edgellm", "serve", d, "--quantize", "q8_0", "--port", str(port),
                          "-t", "1", "-np", "1", "-c", "64"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=_cli_env(tmp_path), text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(p, base)
        with urllib.request.urlopen(base + "/v1/models", timeout=10) as r:
            assert [m["id"] for m in json.load(r)["data"]] == ["qwen3moe"]
        req = urllib.request.Request(base + "/v1/completions", data=json.dumps(
            {"prompt": "hello", "max_tokens": 3, "temperature": 0}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.load(r)["usage"]["completion_tokens"] >= 1
        assert _ggufs(converted) == [n for n in _ggufs(converted) if n.endswith("-q8_0.gguf")] != []
    finally:
        p.terminate()
        p.communicate(timeout=30)


def test_async_llm_quantize(tmp_path, converted):
    import asyncio

    d = hc.write_checkpoint(tmp_path / "olmoe", "olmoe")
    ref = np.load(os.path.join(DATA, "olmoe.npz"))
    llm = edgellm.AsyncLLM(d, n_ctx=64, n_threads=1, kv_type="f32", quantize="f32")
    try:
        assert llm.model_path.endswith("-f32.gguf")
        params = edgellm.SamplingParams(max_tokens=hc.N_GREEDY, temperature=0, ignore_eos=True)
        out = asyncio.run(llm.generate(hc.PROMPT, params))
        assert list(out.token_ids) == ref["greedy"].tolist()
    finally:
        llm.close()
