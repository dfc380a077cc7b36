"""Hostile and careless checkpoints for `edgellm convert` (issue 39 #7, #8, #13): sizes validated
against the files before anything is allocated from them, FIFOs refused, every malformed
config.json / safetensors header / tokenizer.json / index a ConvertError naming the file and
the field, shard names kept inside the checkpoint folder, and the fuzz harness
(fuzz/fuzz_convert.py) clean on its regressions and a short seeded run."""
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import tracemalloc

import numpy as np
import pytest

import hf_checkpoints as hc

pytest.importorskip("edgellm._core")
from edgellm.convert import ConvertError, convert, plan  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Valid checkpoints to copy: qwen3 (one shard, tokenizer.json) and llama (two shards + index)."""
    root = tmp_path_factory.mktemp("hf")
    return {arch: hc.write_checkpoint(root / arch, arch, shards=2 if arch == "llama" else 1)
            for arch in ("qwen3", "llama")}


def _copy(base, arch, tmp_path):
    return shutil.copytree(base[arch], tmp_path / arch)


def _edit_json(path, **changes):
    with open(path) as f:
        data = json.load(f)
    data.update(changes)
    with open(path, "w") as f:
        json.dump(data, f)


def _write_shard(path, header, data=b""):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def _peak(fn):
    """fn's exception (or None) and the most memory it held at once (tracemalloc: Python
    objects and numpy buffers)."""
    tracemalloc.start()
    try:
        fn()
        err = None
    except Exception as e:  # noqa: BLE001 -- returned to the caller to check its type
        err = e
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return err, peak


# ---- #7: sizes checked against the file before allocating ----------------------------------------


@pytest.mark.parametrize("n", [200_000_000, 64 << 30])
def test_header_length_is_capped_before_reading(base, tmp_path, n):
    # a sparse file holding as many bytes as the header length claims: it used to be read whole
    # (1 GiB -> 1.3 GB RSS, 64 GiB -> MemoryError); the safetensors library caps headers at 100 MB
    d = _copy(base, "qwen3", tmp_path)
    shard = d / "model.safetensors"
    with open(shard, "wb") as f:
        f.write(struct.pack("<Q", n))
        f.truncate(8 + n)
    err, peak = _peak(lambda: plan(str(d)))
    assert isinstance(err, ConvertError), err
    assert "model.safetensors: safetensors header length" in str(err) and "100000000-byte limit" in str(err)
    assert peak < 16 << 20, peak


def test_vocab_size_is_checked_against_the_embedding_before_the_vocabulary_is_padded(base, tmp_path):
    # vocab_size 20 M used to pad the vocabulary to 20 M tokens (2.65 GB, 48 s) before the
    # embedding's shape said the checkpoint has 272 rows; 2 M shows the same at 1/10 the cost
    d = _copy(base, "qwen3", tmp_path)
    _edit_json(d / "config.json", vocab_size=2_000_000)
    err, peak = _peak(lambda: plan(str(d)))
    assert isinstance(err, ConvertError), err
    assert "model.embed_tokens.weight has shape [272, 64], config.json implies [2000000, 64]" in str(err)
    assert peak < 32 << 20, peak
    _edit_json(d / "config.json", vocab_size=10**12)  # used to be a MemoryError
    with pytest.raises(ConvertError, match=r"config\.json: config\.json vocab_size = 1000000000000 must be an "
                                           r"integer from 1 to 2147483647"):
        plan(str(d))


def _unblock_fifo_readers(path, done: threading.Event):
    """Watchdog: should a reader block in open() on the FIFO (the old behaviour), open its
    writing end after 20 s so that the test fails instead of hanging."""
    if not done.wait(20):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"])
def test_a_fifo_in_a_files_place_is_refused_not_waited_on(base, tmp_path, name):
    d = _copy(base, "qwen3", tmp_path)
    fifo = d / name
    os.unlink(fifo)
    os.mkfifo(fifo)
    done = threading.Event()
    watchdog = threading.Thread(target=_unblock_fifo_readers, args=(str(fifo), done), daemon=True)
    watchdog.start()
    try:
        with pytest.raises(ConvertError, match=f"{name}: the (file|shard) is not a regular file"):
            plan(str(d))
    finally:
        done.set()
        watchdog.join()


def test_a_fifo_shard_listed_by_the_index_is_refused(base, tmp_path):
    d = _copy(base, "llama", tmp_path)
    fifo = d / "model-00002-of-00002.safetensors"
    os.unlink(fifo)
    os.mkfifo(fifo)
    done = threading.Event()
    threading.Thread(target=_unblock_fifo_readers, args=(str(fifo), done), daemon=True).start()
    try:
        with pytest.raises(ConvertError, match="model-00002-of-00002.safetensors: the shard is not a regular file"):
            plan(str(d))
    finally:
        done.set()


# ---- #8: every malformed input a ConvertError naming the file and the field -------------------------

CONFIG_CASES = [
    ({"num_attention_heads": 0}, "num_attention_heads = 0 must be an integer from 1"),  # ZeroDivisionError
    ({"hidden_size": 64.7}, "hidden_size = 64.7 must be an integer"),  # truncated to 64
    ({"hidden_size": 10**30}, "hidden_size = 1000000000000000000000000000000 must be an integer"),
    ({"max_position_embeddings": 1e30}, r"max_position_embeddings = 1e\+30 must be an integer"),  # passed --dry-run
    ({"max_position_embeddings": 2**32}, "max_position_embeddings = 4294967296 must be an integer from 1 to"),
    ({"vocab_size": "272"}, "vocab_size = '272' must be an integer"),
    ({"num_hidden_layers": True}, "num_hidden_layers = True must be an integer"),
    ({"intermediate_size": [96]}, r"intermediate_size = \[96\] must be an integer"),
    ({"rms_norm_eps": float("nan")}, "rms_norm_eps = nan must be a number greater than 0"),
    ({"rope_theta": -1.0}, "rope_theta = -1.0 must be a number greater than 0"),
    ({"rope_theta": 10**400}, "rope_theta = 1000.* must be a number"),  # OverflowError in float()
    ({"rope_scaling": []}, r"rope_scaling = \[\] must be an object"),
    ({"rope_scaling": {"rope_type": "linear", "factor": "2"}}, "rope_scaling.factor = '2' must be a number"),
    ({"rope_parameters": {"full_attention": [1]}}, r"rope_parameters.full_attention = \[1\] must be an object"),
    ({"architectures": [["Qwen3ForCausalLM"]]}, "architectures = .* must be a list of strings"),  # unhashable
    ({"tie_word_embeddings": "no"}, "tie_word_embeddings = 'no' must be true or false"),
    ({"num_key_value_heads": 3}, "num_attention_heads = 4 is not a multiple of num_key_value_heads = 3"),
    ({"head_dim": None, "hidden_size": 66}, "hidden_size = 66 is not a multiple of num_attention_heads = 4"),
    ({"head_dim": 3}, "3 rotary dimensions .* RoPE needs an even number"),
    ({"layer_types": "x"}, "layer_types = 'x' must be a list of strings"),
]


@pytest.mark.parametrize("changes,message", CONFIG_CASES, ids=[str(c)[:40] for c, _ in CONFIG_CASES])
def test_config_json_fields_are_checked_by_type_and_range(base, tmp_path, changes, message):
    d = _copy(base, "qwen3", tmp_path)
    _edit_json(d / "config.json", **changes)
    with pytest.raises(ConvertError, match=f"config\\.json: (config\\.json )?.*{message}"):
        plan(str(d))


def test_deeply_nested_json_is_a_convert_error(base, tmp_path):
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        d = _copy(base, "qwen3", tmp_path / name)
        (d / name).write_text("[" * 100_000 + "]" * 100_000)  # RecursionError
        with pytest.raises(ConvertError, match=f"{name}: the file is nested too deeply"):
            plan(str(d))


def test_dry_run_refuses_a_context_length_no_gguf_holds(base, tmp_path):
    d = _copy(base, "qwen3", tmp_path)
    _edit_json(d / "config.json", max_position_embeddings=1e30)
    env = dict(os.environ)  # the edgellm this test imports: installed, or PYTHONPATH + EDGELLM_BUILD_DIR
    r = subprocess.run([sys.executable, "-m", "edgellm", "convert", str(d), str(tmp_path / "o.gguf"), "--dry-run"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "max_position_embeddings = 1e+30 must be an integer" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def _tensors(arch="qwen3"):
    return {k: v.astype(np.float32) for k, v in hc.weights(arch).items()}


def _header(w):
    header, blobs, off = {}, [], 0
    for k in sorted(w):
        raw = w[k].tobytes()
        header[k] = {"dtype": "F32", "shape": list(w[k].shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    return header, b"".join(blobs)


EMB = "model.embed_tokens.weight"
HEADER_CASES = [
    # (change to the valid header, what the error says)
    (lambda h: [], "the safetensors header is a list, not an object"),  # AttributeError
    (lambda h: {**h, EMB: [1, 2]}, f"tensor '{EMB}': entry is a list, not an object"),
    (lambda h: {**h, EMB: {k: v for k, v in h[EMB].items() if k != "shape"}},
     f"tensor '{EMB}': shape None is not a list of non-negative integers"),  # KeyError
    (lambda h: {**h, EMB: {**h[EMB], "data_offsets": ["a", "b"]}}, "data_offsets \\['a', 'b'\\] is not a list"),
    (lambda h: {**h, EMB: {**h[EMB], "data_offsets": [0]}}, "data_offsets \\[0\\] is not a list of two"),
    (lambda h: {**h, EMB: {**h[EMB], "shape": [10**30, 64]}}, r"shape \[10{30}, 64\] is too large"),  # OverflowError
    (lambda h: {**h, EMB: {**h[EMB], "shape": [2, 64]}}, r"\(F32 \[2, 64\]\) has 69632 bytes at \[0, 69632\), expected 512"),
    (lambda h: {**h, EMB: {**h[EMB], "shape": [272.0, 64]}}, r"shape \[272.0, 64\] is not a list of non-negative"),
    (lambda h: {**h, EMB: {**h[EMB], "dtype": ["F32"]}}, r"has dtype \['F32'\]; only"),  # unhashable
    (lambda h: {**h, "__metadata__": {"format": 1}}, "__metadata__ must be an object of strings"),
]


@pytest.mark.parametrize("change,message", HEADER_CASES, ids=[m[:30] for _, m in HEADER_CASES])
def test_malformed_safetensors_headers(base, tmp_path, change, message):
    d = _copy(base, "qwen3", tmp_path)
    header, data = _header(_tensors())
    _write_shard(d / "model.safetensors", json.dumps(change(header)).encode(), data)
    with pytest.raises(ConvertError, match=f"model\\.safetensors: .*{message}"):
        plan(str(d))


def test_data_offsets_stay_inside_the_data_region_and_do_not_overlap(base, tmp_path):
    d = _copy(base, "qwen3", tmp_path)
    w = _tensors()
    header, data = _header(w)
    n = len(json.dumps(header).encode())
    norm = "model.norm.weight"  # 64 floats: 256 bytes
    begin = header[norm]["data_offsets"][0]
    # negative offsets: the tensor read from the header's own bytes
    bad = {**header, norm: {**header[norm], "data_offsets": [-256, 0]}}
    _write_shard(d / "model.safetensors", json.dumps(bad).encode().ljust(n), data)
    with pytest.raises(ConvertError, match=r"tensor 'model\.norm\.weight': data_offsets \[-256, 0\] is not a list "
                                           r"of two non-negative integers"):
        plan(str(d))
    # two tensors on the same bytes
    other = next(k for k in sorted(header) if k != norm and header[k]["shape"] == [64])
    bad = {**header, norm: {**header[norm], "data_offsets": header[other]["data_offsets"]}}
    _write_shard(d / "model.safetensors", json.dumps(bad).encode(), data)
    with pytest.raises(ConvertError, match=r"overlaps the tensor before it|leaves a gap before it"):
        plan(str(d))
    # past the end of the data
    bad = {**header, norm: {**header[norm], "data_offsets": [len(data), len(data) + 256]}}
    _write_shard(d / "model.safetensors", json.dumps(bad).encode(), data)
    with pytest.raises(ConvertError, match=r"data_offsets \[\d+, \d+\) lie outside the data region"):
        plan(str(d))
    assert begin >= 0


def test_a_tensor_in_two_shards_is_refused(base, tmp_path):
    d = _copy(base, "qwen3", tmp_path)
    w = _tensors()
    header, data = _header({EMB: w[EMB]})
    _write_shard(d / "extra.safetensors", header, data)
    with pytest.raises(ConvertError, match=f"tensor '{EMB}' is also in"):
        plan(str(d))


TOKENIZER_CASES = [
    (lambda t: t["model"]["vocab"].update({"zz": -1}), r"model\.vocab token 'zz' has id -1, not an integer in "
                                                        r"\[0, 272\)"),  # overwrote the last token
    (lambda t: t["model"]["vocab"].update({"zz": 272}), r"model\.vocab token 'zz' has id 272"),
    (lambda t: t["model"]["vocab"].update({"zz": "3"}), r"model\.vocab token 'zz' has id '3'"),
    (lambda t: t.update(model=[]), r"\"model\" is \[\], not an object"),  # AttributeError
    (lambda t: t["added_tokens"][0].pop("id"), r"added_tokens\[0\] \('<\|endoftext\|>'\) has id None"),  # KeyError
    (lambda t: t["added_tokens"].append("x"), r"added_tokens\[2\] is not an object"),
    (lambda t: t["model"].update(merges=[[1, 2]]), r"model\.merges\[0\] = \[1, 2\] is neither"),  # TypeError
    (lambda t: t["model"].update(vocab=[]), r"model\.vocab is not an object"),
    (lambda t: t.update(pre_tokenizer=[]), r"pre_tokenizer step \[\] is not an object"),
    (lambda t: t.update(pre_tokenizer={"type": "Sequence", "pretokenizers": 5}), r"pretokenizers is not a list"),
    (lambda t: t["model"]["vocab"].update({"\ud800": 271}), "a token text holds a lone surrogate"),
]


@pytest.mark.parametrize("change,message", TOKENIZER_CASES, ids=[m[:30] for _, m in TOKENIZER_CASES])
def test_malformed_tokenizer_json(base, tmp_path, change, message):
    d = _copy(base, "qwen3", tmp_path)
    with open(d / "tokenizer.json") as f:
        tj = json.load(f)
    change(tj)
    with open(d / "tokenizer.json", "w") as f:
        json.dump(tj, f)
    with pytest.raises(ConvertError, match=f"tokenizer\\.json: .*{message}"):
        convert(str(d), str(tmp_path / "o.gguf"))  # the write too: a lone surrogate failed there
    assert not (tmp_path / "o.gguf").exists()


def test_malformed_tokenizer_config(base, tmp_path):
    d = _copy(base, "qwen3", tmp_path)
    _edit_json(d / "tokenizer_config.json", chat_template=[1, {"name": "default", "template": "x"}])
    assert dict(plan(str(d)).metadata)["tokenizer.chat_template"] == "x"  # AttributeError on 1
    _edit_json(d / "tokenizer_config.json", bos_token={"content": ["<|endoftext|>"]})  # unhashable
    assert "tokenizer.ggml.bos_token_id" in dict(plan(str(d)).metadata)  # from config.json's bos_token_id
    _edit_json(d / "tokenizer_config.json", chat_template="\ud800")
    with pytest.raises(ConvertError, match="tokenizer_config.json: chat_template holds a lone surrogate"):
        convert(str(d), str(tmp_path / "o.gguf"))


def test_malformed_index(base, tmp_path):
    d = _copy(base, "llama", tmp_path)
    index = d / "model.safetensors.index.json"
    with open(index) as f:
        wm = json.load(f)["weight_map"]
    for bad, message in ((5, "file name 5 .* is not a file name"), ("", "file name '' .* is not a file name")):
        _edit_json(index, weight_map={**wm, EMB: bad})  # TypeError in os.path.join
        with pytest.raises(ConvertError, match=message):
            plan(str(d))
    index.write_text("[1, 2]")
    with pytest.raises(ConvertError, match="model.safetensors.index.json: expected a JSON object, got a list"):
        plan(str(d))


# ---- #13: shard names stay inside the checkpoint folder; errors quote no file bytes ----------------


def _secret(tmp_path):
    p = tmp_path / "secret.bin"
    p.write_bytes(b"SECRET:x:0:0:SECRET:/SECRET:/bin/bash\n")
    return p


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_index_shard_names_cannot_leave_the_folder(base, tmp_path, kind):
    secret = _secret(tmp_path)
    d = _copy(base, "llama", tmp_path)
    index = d / "model.safetensors.index.json"
    with open(index) as f:
        wm = json.load(f)["weight_map"]
    name = {"dotdot": "../secret.bin", "absolute": str(secret), "symlink": "link.safetensors"}[kind]
    if kind == "symlink":
        os.symlink(secret, d / name)
    _edit_json(index, weight_map={**wm, EMB: name})
    with pytest.raises(ConvertError) as e:
        plan(str(d))
    msg = str(e.value)
    assert ("leaves the checkpoint folder" in msg) if kind != "symlink" else ("resolves outside the checkpoint" in msg)
    head = secret.read_bytes()[:8]
    assert str(struct.unpack("<Q", head)[0]) not in msg and "SECRET" not in msg, msg


def test_a_symlinked_shard_outside_the_folder_is_refused(base, tmp_path):
    secret = _secret(tmp_path)
    d = _copy(base, "qwen3", tmp_path)
    os.symlink(secret, d / "zz.safetensors")
    with pytest.raises(ConvertError, match="zz.safetensors: resolves outside the checkpoint folder"):
        plan(str(d))
    os.unlink(d / "zz.safetensors")
    os.symlink(secret, d / "config.json.tmp")
    os.replace(d / "config.json.tmp", d / "config.json")
    with pytest.raises(ConvertError, match="config.json: resolves outside the checkpoint folder"):
        plan(str(d))


def test_a_hub_cache_snapshot_with_symlinks_into_blobs_converts(base, tmp_path):
    # huggingface_hub's layout: snapshots/<rev>/<file> -> ../../blobs/<hash>
    repo = tmp_path / "models--x--y"
    snap = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    for i, name in enumerate(sorted(os.listdir(base["llama"]))):
        shutil.copy(os.path.join(base["llama"], name), repo / "blobs" / f"blob{i}")
        os.symlink(f"../../blobs/blob{i}", snap / name)
    cp = plan(str(snap))
    assert len(cp.tensors) == len(plan(base["llama"]).tensors)


def test_regular_checkpoint_still_converts_and_runs(base, tmp_path):
    # the checks refuse nothing a valid checkpoint has (the full suite: tests/test_convert.py)
    out = tmp_path / "o.gguf"
    convert(base["llama"], str(out), "F16")
    assert out.stat().st_size > 0


# ---- the fuzz harness ------------------------------------------------------------------------------


def _harness(*args):
    env = dict(os.environ)  # the edgellm this test imports: installed, or PYTHONPATH + EDGELLM_BUILD_DIR
    return subprocess.run([sys.executable, os.path.join(ROOT, "fuzz", "fuzz_convert.py"), *args],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)


def test_fuzz_harness_replays_its_regressions_clean():
    r = _harness(os.path.join(ROOT, "fuzz", "regressions", "convert"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "clean" in r.stdout


def test_fuzz_harness_short_seeded_run_is_clean(tmp_path):
    r = _harness("--engine", "mutate", "--runs", "1500", "--seed", "7", "--artifacts", str(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1500 executions" in r.stdout


def test_fuzz_harness_reports_an_allocation_past_the_bound(tmp_path, monkeypatch):
    # the memory check is real: with the vocabulary padded to vocab_size before the tensor shapes
    # are checked (the bug of #7, put back here), a config.json of vocab_size 2 M is reported
    sys.path.insert(0, os.path.join(ROOT, "fuzz"))
    try:
        import fuzz_convert
    finally:
        sys.path.pop(0)
    from edgellm.convert import writer

    def padding_first(ckpt, spec, hp):
        tokens = [f"[PAD{i}]" for i in range(hp.n_vocab)]
        del tokens
        return plan_tensors(ckpt, spec, hp)

    plan_tensors = writer.plan_tensors
    h = fuzz_convert.Harness(str(tmp_path), "tracemalloc")
    try:
        cfg = json.dumps({**fuzz_convert.base_config(), "vocab_size": 2_000_000}).encode()
        h.run(bytes([1]) + cfg)  # clean as the code is
        monkeypatch.setattr(writer, "plan_tensors", padding_first)
        with pytest.raises(fuzz_convert.MemoryBoundExceeded):
            h.run(bytes([1]) + cfg)
    finally:
        tracemalloc.stop()


def test_a_tensor_listed_twice_in_one_header_is_refused(base, tmp_path):
    # json keeps the last of two entries: the other tensor's bytes would go unchecked
    d = _copy(base, "qwen3", tmp_path)
    header, data = _header(_tensors())
    text = json.dumps(header)
    dup = json.dumps({EMB: header[EMB]})[1:-1]
    _write_shard(d / "model.safetensors", ("{" + dup + ", " + text[1:]).encode(), data)
    with pytest.raises(ConvertError, match=f"model.safetensors: the safetensors header is not valid JSON \\(key "
                                           f"'{EMB}' appears twice in one object\\)"):
        plan(str(d))
