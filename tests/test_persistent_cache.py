"""The persistent prefix cache and slot files (issue 19 item 4) on the real models.

LLM(cache_dir=...) writes full KV pages as files and a *new process* reads them back: the
restart tests run each side in its own interpreter. A hit must give exactly the output of the
cold run; a damaged file is detected, deleted and never loaded (the run recomputes and still
gives the same output); slot save / restore round trips through a file, and a damaged or foreign
slot file is refused with InvalidRequestError. The server's POST /slots/{id}?action=... is tested
against a real `edgellm serve --slot-save-path`."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgellm import LLM, InvalidRequestError, SamplingParams

pytestmark = pytest.mark.real_model

REPO = Path(__file__).resolve().parents[1]
PROMPT_TEXT = (REPO / "README.md").read_text(encoding="utf-8")

CHILD = r"""
import json, sys, time
import edgellm
model, cache_dir, n_prompt, extra = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
llm = edgellm.LLM(model, n_ctx=4096, n_threads=2, max_seqs=2, speculative="off",
                  cache_dir=cache_dir or None, **extra)
text = open(sys.argv[5], encoding="utf-8").read()
ids = llm.tokenize(text)[:n_prompt]
t0 = time.perf_counter()
out = llm.generate(ids, edgellm.SamplingParams(max_tokens=24, temperature=0, ignore_eos=True))
secs = time.perf_counter() - t0
st = llm.stats()
llm.close()
print(json.dumps({"ids": out.token_ids, "text": out.text, "cached": out.usage.cached_tokens,
                  "secs": secs, "stats": {k: v for k, v in st.items() if isinstance(v, (int, float))}}))
"""


def _child(model, cache_dir, n_prompt, **extra):
    """Runs one generation in a fresh interpreter; returns its JSON line."""
    env = dict(os.environ)  # the same package (installed, or PYTHONPATH + EDGELLM_BUILD_DIR)
    readme = REPO / "README.md"
    r = subprocess.run([sys.executable, "-c", CHILD, str(model), str(cache_dir or ""), str(n_prompt),
                        json.dumps(extra), str(readme)],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _kvp_files(cache_dir):
    return sorted(Path(cache_dir).glob("*/*.kvp"))


@pytest.mark.parametrize("model, n_prompt", [("smollm2", 700), ("gemma3", 1000)])
def test_hit_after_restart_gives_identical_output(request, tmp_path, model, n_prompt):
    """Gemma 3 has sliding-window layers (window 512): a hit must also bring back the window
    pages the next tokens see."""
    path = request.getfixturevalue(f"{model}_path")
    cold = _child(path, tmp_path, n_prompt)
    pages = n_prompt // 32  # page_size 32: every full page of the prompt (and of the reply)
    assert cold["stats"]["cache_disk_pages_written"] >= pages
    assert cold["stats"]["cache_disk_hit_tokens"] == 0 and cold["cached"] == 0
    files = _kvp_files(tmp_path)
    assert len(files) == cold["stats"]["cache_disk_pages_written"]
    warm = _child(path, tmp_path, n_prompt)
    assert warm["ids"] == cold["ids"] and warm["text"] == cold["text"]
    # the whole prompt but its last partial page (at least the last token is recomputed)
    expect = ((n_prompt - 1) // 32) * 32
    assert warm["cached"] == expect, (warm["cached"], expect)
    assert warm["stats"]["cache_disk_hit_tokens"] == expect
    assert warm["stats"]["cache_disk_corrupt"] == 0
    assert warm["stats"]["prompt_tokens_total"] == n_prompt - expect
    # and without the cache: the same output again (the reference the cache must not change)
    plain = _child(path, "", n_prompt)
    assert plain["ids"] == cold["ids"]


def test_corrupt_files_are_detected_and_never_loaded(smollm2_path, tmp_path):
    n_prompt = 400
    cold = _child(smollm2_path, tmp_path, n_prompt)
    files = _kvp_files(tmp_path)
    assert len(files) >= 12
    # One flipped byte in every page's payload, a truncated file, a file of garbage.
    for i, f in enumerate(files):
        data = bytearray(f.read_bytes())
        if i % 3 == 0:
            data[len(data) // 2] ^= 0x40
        elif i % 3 == 1:
            data = data[: len(data) // 3]
        else:
            data = bytearray(os.urandom(len(data)))
        f.write_bytes(bytes(data))
    warm = _child(smollm2_path, tmp_path, n_prompt)
    assert warm["ids"] == cold["ids"]
    assert warm["stats"]["cache_disk_hit_tokens"] == 0 and warm["cached"] == 0
    assert warm["stats"]["cache_disk_corrupt"] >= 1
    # the bad file was removed and its recomputed page written again: the next run reads that
    # page and stops at the next damaged file (each is found, and replaced, when first read)
    again = _child(smollm2_path, tmp_path, n_prompt)
    assert again["ids"] == cold["ids"] and again["cached"] >= 32
    assert again["stats"]["cache_disk_corrupt"] >= 1


def test_directory_is_bounded(smollm2_path, tmp_path):
    one = _child(smollm2_path, tmp_path / "probe", 100)
    file_bytes = one["stats"]["cache_disk_bytes"] // max(1, one["stats"]["cache_disk_files"])
    bound = file_bytes * 10
    r = _child(smollm2_path, tmp_path / "bounded", 700, cache_max_bytes=bound)
    assert r["stats"]["cache_disk_evicted"] > 0
    on_disk = sum(f.stat().st_size for f in _kvp_files(tmp_path / "bounded"))
    assert on_disk <= bound
    assert len(_kvp_files(tmp_path / "bounded")) == r["stats"]["cache_disk_files"]


def test_cache_dir_arguments(smollm2_path, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(InvalidRequestError, match="cache_dir"):
        LLM(smollm2_path, n_ctx=256, cache_dir=f)
    with pytest.raises(InvalidRequestError, match="prefix cache"):
        LLM(smollm2_path, n_ctx=256, cache_dir=tmp_path / "c", prefix_cache=False)
    with pytest.raises(InvalidRequestError, match="cache_dir"):
        LLM(smollm2_path, n_ctx=256, cache_dir=42)
    with pytest.raises(InvalidRequestError, match="cache_max_bytes"):
        LLM(smollm2_path, n_ctx=256, cache_dir=tmp_path / "c", cache_max_bytes=-1)


def test_model_key_is_the_file_content(smollm2_path, tmp_path):
    """A copy of the model file finds the original's pages (content-addressed, not by path)."""
    from edgellm.cache_dir import model_key
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(Path(smollm2_path).read_bytes())
    assert model_key(str(copy), str(tmp_path)) == model_key(str(smollm2_path), str(tmp_path))
    memo = json.loads((tmp_path / "model-keys.json").read_text())
    assert str(copy.resolve()) in memo


# ---- slots --------------------------------------------------------------------------------------

def _greedy(n=12):
    return SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)


def test_slot_save_restore_round_trip(smollm2_path, gemma3_path, tmp_path):
    ids = None
    f = tmp_path / "slot0.bin"
    with LLM(smollm2_path, n_ctx=2048, n_threads=2, max_seqs=1, speculative="off") as a:
        ids = a.tokenize(PROMPT_TEXT)[:500]
        ref = a.generate(ids, _greedy())
        r = a.slot_save(0, f)
        # the slot's computed tokens: the prompt and all but the last reply token, whole pages
        assert r["n_saved"] == ((500 + 12 - 1) // 32) * 32
        assert r["n_written"] == f.stat().st_size
        assert a.slot_erase(0)["n_erased"] == r["n_saved"]
        assert a.stats()["pages_cached"] == 0
        assert a.slot_save(0, tmp_path / "empty.bin")["n_saved"] == 0  # erased: nothing left
        with pytest.raises(InvalidRequestError, match="slot id"):
            a.slot_save(5, tmp_path / "x.bin")
    with LLM(smollm2_path, n_ctx=2048, n_threads=2, max_seqs=1, speculative="off") as b:
        got = b.slot_restore(0, f)
        assert got["n_restored"] == r["n_saved"] and got["n_read"] == r["n_written"]
        out = b.generate(ids, _greedy())
        assert out.token_ids == ref.token_ids
        assert out.usage.cached_tokens == min(r["n_saved"], ((500 - 1) // 32) * 32)
        # a damaged slot file: refused, nothing loaded
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 1
        bad = tmp_path / "bad.bin"
        bad.write_bytes(bytes(data))
        before = b.stats()["pages_allocated"]
        with pytest.raises(InvalidRequestError, match="corrupt"):
            b.slot_restore(0, bad)
        assert b.stats()["pages_allocated"] == before
        with pytest.raises(InvalidRequestError, match="not found"):
            b.slot_restore(0, tmp_path / "missing.bin")
    # another model's KV layout: refused
    with LLM(gemma3_path, n_ctx=1024, n_threads=2, max_seqs=1) as g:
        with pytest.raises(InvalidRequestError, match="another model"):
            g.slot_restore(0, f)


@pytest.mark.slow
def test_server_slot_save_restore(smollm2_path, tmp_path):
    ts = pytest.importorskip("test_server")
    slots = tmp_path / "slots"
    prompt = PROMPT_TEXT[:3000]
    body = {"prompt": prompt, "n_predict": 8, "temperature": 0, "cache_prompt": True}
    s = ts.ServerProcess(smollm2_path, "--ctx-size", "2048", "--parallel", "1",
                         "--slot-save-path", str(slots)).wait_ready()
    try:
        first = s.post("/completion", body, timeout=300).json()
        r = s.post("/slots/0?action=save", {"filename": "chat.bin"})
        assert r.status_code == 200, r.text
        saved = r.json()
        assert saved["id_slot"] == 0 and saved["filename"] == "chat.bin"
        assert saved["n_saved"] >= 32 and saved["n_written"] == (slots / "chat.bin").stat().st_size
        assert "save_ms" in saved["timings"]
        for bad in ("../x.bin", "a/b", "", ".."):
            r = s.post("/slots/0?action=save", {"filename": bad})
            assert r.status_code == 400, (bad, r.text)
        assert s.post("/slots/0?action=frobnicate", {"filename": "x"}).status_code == 400
        assert s.post("/slots/7?action=save", {"filename": "x"}).status_code == 400
        r = s.post("/slots/0?action=restore", {"filename": "missing.bin"})
        assert r.status_code == 400 and "not found" in r.json()["error"]["message"]
    finally:
        s.stop()
    s = ts.ServerProcess(smollm2_path, "--ctx-size", "2048", "--parallel", "1",
                         "--slot-save-path", str(slots), "--cache-dir", str(tmp_path / "kv")).wait_ready()
    try:
        r = s.post("/slots/0?action=restore", {"filename": "chat.bin"})
        assert r.status_code == 200, r.text
        assert r.json()["n_restored"] == saved["n_saved"] and "restore_ms" in r.json()["timings"]
        again = s.post("/completion", body, timeout=300).json()
        assert again["content"] == first["content"]
        assert again["timings"]["prompt_n"] < first["timings"]["prompt_n"] - 32
        r = s.post("/slots/0?action=erase", {})
        assert r.status_code == 200 and r.json() == {"id_slot": 0, "n_erased": saved["n_saved"]}
        r = s.post("/completion", {"prompt": PROMPT_TEXT[3000:4500], "n_predict": 4}, timeout=300)
        assert r.status_code == 200
        import time
        deadline = time.monotonic() + 30  # written on the engine's writer thread, soon after
        while True:
            m = s.metrics()  # --cache-dir: that completion's pages went to disk
            if m["edgellm_cache_disk_pages_written_total"] >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert m["edgellm_cache_disk_pages_written_total"] >= 1
        assert m["edgellm_cache_disk_corrupt_total"] == 0
    finally:
        s.stop()
    s = ts.ServerProcess(smollm2_path, "--ctx-size", "512", "--parallel", "1").wait_ready()
    try:  # without --slot-save-path: 501, as llama-server
        r = s.post("/slots/0?action=save", {"filename": "chat.bin"})
        assert r.status_code == 501, r.text
    finally:
        s.stop()


# ---- hostile and unlucky slot files (issue 39 defects 4, 6, 11) ------------------------------------

def _with_one_byte_changed(src, dst):
    """A copy of a GGUF with one weight byte changed: another model, the same KV layout."""
    data = bytearray(Path(src).read_bytes())
    data[len(data) - 4096] ^= 0x01  # inside the last tensor's data (a valid file still)
    Path(dst).write_bytes(bytes(data))
    return dst


def test_slot_from_another_model_with_the_same_layout_is_refused(smollm2_path, tmp_path):
    """Defect 4: only the KV layout was checked, so a slot file of another model of the same
    architecture restored (n_restored 128) and the answers were silently wrong. The slot file
    carries the model file's content hash now, and a mismatch is refused naming both."""
    f = tmp_path / "slot0.bin"
    with LLM(smollm2_path, n_ctx=1024, n_threads=2, max_seqs=1, speculative="off") as a:
        a.generate(a.tokenize(PROMPT_TEXT)[:200], _greedy(4))
        saved = a.slot_save(0, f)
        assert saved["n_saved"] >= 128
    other = _with_one_byte_changed(smollm2_path, tmp_path / "SmolLM2-edited.gguf")
    with LLM(other, n_ctx=1024, n_threads=2, max_seqs=1, speculative="off") as b:
        before = b.stats()["pages_allocated"]
        with pytest.raises(InvalidRequestError, match="another model .content hash"):
            b.slot_restore(0, f)
        assert b.stats()["pages_allocated"] == before  # nothing of it loaded
    with LLM(smollm2_path, n_ctx=1024, n_threads=2, max_seqs=1, speculative="off") as c:
        assert c.slot_restore(0, f)["n_restored"] == saved["n_saved"]  # its own model: fine


def test_slot_files_are_checked_before_they_are_read(smollm2_path, tmp_path):
    """Defect 6: slot files were read whole with no type or size check: a FIFO named like a
    slot file hung the caller for ever, and a sparse giant took its size in memory before the
    400. Defect 11: a 255-byte name (the limit the docs allow) failed to save."""
    import resource
    import threading

    with LLM(smollm2_path, n_ctx=1024, n_threads=2, max_seqs=1, speculative="off") as llm:
        llm.generate(llm.tokenize(PROMPT_TEXT)[:100], _greedy(4))
        # a FIFO: refused at once (run in a thread, so a regression fails instead of hanging)
        fifo = tmp_path / "fifo.bin"
        os.mkfifo(fifo)
        result = []

        def restore():
            try:
                llm.slot_restore(0, fifo)
            except InvalidRequestError as e:
                result.append(str(e))

        t = threading.Thread(target=restore, daemon=True)
        t.start()
        t.join(30)
        if t.is_alive():  # unblock the reader before failing
            with open(fifo, "wb"):
                pass
            t.join(10)
            pytest.fail("slot_restore of a FIFO blocked")
        assert result and "not a regular file" in result[0]
        # a slot file's header over a sparse 1 GiB: refused from its size, not read
        good = tmp_path / "good.bin"
        llm.slot_save(0, good)
        big = tmp_path / "big.bin"
        big.write_bytes(good.read_bytes())
        os.truncate(big, 1 << 30)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with pytest.raises(InvalidRequestError, match="truncated or corrupt"):
            llm.slot_restore(0, big)
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 200 * 1024  # KiB
        # 255 bytes of name: saved and restored, no temporary file left behind
        longest = tmp_path / ("n" * 255)
        saved = llm.slot_save(0, longest)
        assert saved["n_written"] == longest.stat().st_size
        assert llm.slot_restore(0, longest)["n_restored"] == saved["n_saved"]
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
            ["fifo.bin", "good.bin", "big.bin", "n" * 255])


@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KiB tmpfs (root, or a mount namespace that allows it); skipped where none can be
    mounted."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                       capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.decode(errors='replace')[:200]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_slot_save_on_a_full_disk_is_a_storage_error(smollm2_path, tiny_disk):
    """Defect 11: a full disk answered 400 invalid_request_error naming `prompt`. It is the
    server's storage, not the request: StorageError (an OSError, errno ENOSPC) from the library
    and 507 from the server."""
    import errno

    from edgellm import StorageError

    with LLM(smollm2_path, n_ctx=1024, n_threads=2, max_seqs=1, speculative="off") as llm:
        llm.generate(llm.tokenize(PROMPT_TEXT)[:300], _greedy(4))  # ~9 pages: over 256 KiB
        with pytest.raises(StorageError) as e:
            llm.slot_save(0, tiny_disk / "chat.bin")
        assert e.value.errno == errno.ENOSPC and isinstance(e.value, OSError)
        assert list(tiny_disk.iterdir()) == []  # the temporary file is gone
    ts = pytest.importorskip("test_server")
    s = ts.ServerProcess(smollm2_path, "--ctx-size", "1024", "--parallel", "1",
                         "--slot-save-path", str(tiny_disk)).wait_ready()
    try:
        r = s.post("/completion", {"prompt": PROMPT_TEXT[:1500], "n_predict": 4,
                                   "cache_prompt": True}, timeout=300)
        assert r.status_code == 200
        r = s.post("/slots/0?action=save", {"filename": "chat.bin"})
        assert r.status_code == 507, r.text
        err = r.json()["error"]
        assert err["code"] == "storage_full" and err["type"] == "server_error"
        assert err.get("param") is None and str(tiny_disk) not in err["message"]
    finally:
        s.stop()
