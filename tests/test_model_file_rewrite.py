"""A served model's file rewritten in place (issue 39 defect 1).

`truncate` on a loaded model, or `cp` of the same bytes over it (cp truncates first), while a
stream ran used to kill the whole server with SIGBUS: weights are read through a file mapping.
Now a fault inside a model's mapping reads zeros (gguf/file_guard.h), the model's requests fail
with ModelFileChangedError (503 `model_file_changed`, in-band for a stream), and the server's
model pool loads the file again for the next request. These tests rewrite the file, repeatedly
and at random moments, while streams run: the process must survive every round, each stream must
end either complete or with that typed error, and the next request must be answered.
"""
import json
import os
import random
import shutil
import subprocess
import threading
import time

import httpx
import pytest

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

from test_server_models import _serve, _stop, _wait_up  # noqa: E402

pytestmark = [pytest.mark.real_model]

ROUNDS = 6          # rewrites per test (bounded: each a stream of at most MAX_TOKENS)
MAX_TOKENS = 160
TIME_LIMIT = 240.0  # seconds for all rounds; the test stops early rather than run on


def test_library_refuses_a_model_whose_file_changed(smollm2_path, tmp_path):
    """The library alone: after the file is truncated under a loaded model, its requests raise
    ModelFileChangedError (the process lives); model_file_state says what happened; a rename
    over the file leaves the loaded model intact ("replaced")."""
    path = tmp_path / "m.gguf"
    shutil.copyfile(smollm2_path, path)
    params = edgellm.SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    with edgellm.LLM(str(path), n_ctx=256, n_threads=2, max_seqs=1, speculative="off") as llm:
        ref = llm.generate("Hello", params).text
        assert llm.model_file_state() == "intact"
        tmp = tmp_path / "m.gguf.new"
        shutil.copyfile(smollm2_path, tmp)
        os.replace(tmp, path)  # the safe way: the loaded model keeps reading its own file
        assert llm.model_file_state() == "replaced"
        assert llm.generate("Hello", params).text == ref
    with edgellm.LLM(str(path), n_ctx=256, n_threads=2, max_seqs=1, speculative="off") as llm:
        os.truncate(path, 0)
        assert llm.model_file_state() == "changed"
        with pytest.raises(edgellm.ModelFileChangedError, match="changed on disk"):
            llm.generate("Hello", params)
        with pytest.raises(edgellm.ModelFileChangedError):  # and every later request
            llm.generate("Hello again", params)


def _rewrite(path: str, data: bytes, how: str, source: str = "") -> None:
    """What users do to a file in a models folder: truncate it (then put it back), `cp` the same
    bytes over it (from `source`), or cut it in half (then put it back)."""
    if how == "cp-same" and source:
        subprocess.run(["cp", source, path], check=True)
        return
    if how == "truncate":
        os.truncate(path, 0)
        time.sleep(0.05)
    elif how == "half":
        os.truncate(path, len(data) // 2)
        time.sleep(0.05)
    with open(path, "wb") as f:  # as cp does: O_TRUNC, then the bytes
        f.write(data)


def _stream(url: str, model: str, outcome: dict, started: threading.Event) -> None:
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": MAX_TOKENS,
            "temperature": 0, "ignore_eos": True, "stream": True}
    try:
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
            if r.status_code != 200:
                r.read()
                outcome["status"] = r.status_code
                outcome["error"] = r.json().get("error")
                return
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                started.set()
                if line == "data: [DONE]":
                    outcome["done"] = True
                    return
                event = json.loads(line[6:])
                if "error" in event:
                    outcome["error"] = event["error"]
                    return
                outcome["chunks"] = outcome.get("chunks", 0) + 1
    except httpx.TransportError as e:  # the server died under the stream
        outcome["transport"] = repr(e)
    finally:
        started.set()


def test_models_dir_file_rewritten_while_streaming(smollm2_path, tmp_path):
    """Repeated, time-bounded: rewrite the served file in place while a stream runs on it."""
    folder = tmp_path / "models"
    folder.mkdir()
    path = folder / "m.gguf"
    shutil.copyfile(smollm2_path, path)
    data = path.read_bytes()
    log = open(tmp_path / "serve.log", "w")  # it logs every reload: more than a pipe holds
    proc, url = _serve("--models-dir", str(folder), "--ctx-size", "512", "--threads", "2",
                       "--parallel", "2", "--spec", "off", log=log)
    rng = random.Random(39)
    t0 = time.monotonic()
    outcomes = []
    try:
        _wait_up(proc, url)
        hows = ["truncate", "cp-same", "half"] * ROUNDS
        for i in range(ROUNDS):
            if time.monotonic() - t0 > TIME_LIMIT:
                break
            outcome, started = {}, threading.Event()
            t = threading.Thread(target=_stream, args=(url, "m", outcome, started))
            t.start()
            assert started.wait(120)
            time.sleep(rng.random() * 0.3)  # somewhere in the stream
            _rewrite(str(path), data, hows[i], source=str(smollm2_path))
            t.join(120)
            assert not t.is_alive()
            outcomes.append((hows[i], outcome))
            assert proc.poll() is None, f"the server died (round {i}, {hows[i]}): {outcome}"
            assert "transport" not in outcome, outcome
            # complete, or ended by the typed error (a 503 before it started, in-band after)
            err = outcome.get("error")
            assert outcome.get("done") or (err and err["code"] == "model_file_changed"), outcome
            # the next request: the pool loads the file again (it is whole again)
            r = httpx.post(url + "/v1/completions", json={
                "model": "m", "prompt": "Hello", "max_tokens": 2, "temperature": 0}, timeout=120)
            assert r.status_code == 200, (hows[i], r.text)
        assert len(outcomes) >= 3, "too few rounds ran in the time limit"
        assert httpx.get(url + "/health", timeout=5).status_code == 200
        metrics = httpx.get(url + "/metrics", timeout=5).text
        reloads = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                      if line.startswith("edgellm_model_unloads_total")
                      and 'reason="file_changed"' in line)
        assert reloads >= 1, metrics[-2000:]
    finally:
        _stop(proc)
        log.close()
    print("rewrite rounds:", [(h, "done" if o.get("done") else o.get("error", {}).get("code"))
                              for h, o in outcomes])


def test_single_model_server_refuses_a_model_whose_file_changed(smollm2_path, tmp_path):
    """One MODEL, no --models-dir: nothing reloads it, so after an in-place rewrite its requests
    are 503 model_file_changed (the process lives and /health answers)."""
    path = tmp_path / "m.gguf"
    shutil.copyfile(smollm2_path, path)
    log = open(tmp_path / "serve.log", "w")
    proc, url = _serve(str(path), "--ctx-size", "256", "--threads", "2", "--spec", "off", log=log)
    body = {"prompt": "Hello", "max_tokens": 2, "temperature": 0}
    try:
        _wait_up(proc, url)
        assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200
        _rewrite(str(path), path.read_bytes(), "truncate")  # truncated, then the same bytes back
        r = httpx.post(url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "model_file_changed"
        assert proc.poll() is None
        assert httpx.get(url + "/health", timeout=5).status_code == 200
    finally:
        _stop(proc)
        log.close()
