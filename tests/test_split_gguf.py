"""Split GGUF models (llama.cpp's gguf-split layout: NAME-0000i-of-0000N.gguf with split.no /
split.count / split.tensors.count) load from their first shard, as llama.cpp takes them
(cpp/src/gguf/gguf_file.cpp, GgufFile::open_shards).

The shards are written by the gguf package's own writer (GGUFWriter's split_max_tensors /
split_max_size, what convert_hf_to_gguf.py --split-max-* uses) from the real SmolLM2 file; the
split model must decode exactly the tokens the unsplit file does. When llama.cpp's
llama-gguf-split binary is on this machine, a split it made is checked too (skipped otherwise).
"""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

from edgellm import LLM, ModelFile, ModelFormatError, ModelShardError, SamplingParams  # noqa: E402
from edgellm.cli import main  # noqa: E402
from edgellm.memory_plan import plan  # noqa: E402
from gguf_fixtures import write_split  # noqa: E402

PROMPTS = ["The capital of France is", "def fibonacci(n):"]
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
GGUF_SPLIT = Path(os.environ.get("LLAMA_GGUF_SPLIT", "/work/peers/llama.cpp/build/bin/llama-gguf-split"))


@pytest.fixture(scope="module")
def shards(smollm2_path, tmp_path_factory):
    """SmolLM2 in 3 shards of at most 100 tensors (the last holds the rest)."""
    out = tmp_path_factory.mktemp("split") / "smol.gguf"
    paths = write_split(smollm2_path, out, max_tensors=100)
    assert len(paths) == 3 and all(p.is_file() for p in paths)
    return paths


@pytest.fixture(scope="module")
def reference(smollm2_path):
    with LLM(str(smollm2_path), n_threads=2) as llm:
        return [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]


def greedy_tokens(path):
    with LLM(str(path), n_threads=2) as llm:
        return [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]


def test_a_split_model_decodes_the_unsplit_tokens(shards, reference):
    assert greedy_tokens(shards[0]) == reference


def test_split_by_size_as_convert_writes_it(smollm2_path, tmp_path, reference):
    paths = write_split(smollm2_path, tmp_path / "bysize.gguf", max_bytes=40 << 20)
    assert len(paths) >= 2
    assert greedy_tokens(paths[0]) == reference


def test_the_file_the_plan_and_info_count_every_shard(smollm2_path, shards):
    with ModelFile(smollm2_path) as whole, ModelFile(shards[0]) as split:
        assert split.shard_paths == [str(p) for p in shards]
        assert whole.shard_paths == [str(smollm2_path)]
        assert split.total_size == sum(p.stat().st_size for p in shards)
        assert split.file_size == shards[0].stat().st_size  # the first shard's own size
        assert set(split.tensors) == set(whole.tensors)
        for name, t in whole.tensors.items():
            assert (split.raw(name) == whole.raw(name)).all(), name
    p_split, p_whole = plan(str(shards[0]), n_ctx=512), plan(str(smollm2_path), n_ctx=512)
    assert p_split.file_bytes == sum(p.stat().st_size for p in shards)
    # the same weights, whichever way they are stored; only the headers differ
    assert abs(p_split.weights - p_whole.weights) < 64 << 10
    r = CliRunner().invoke(main, ["info", str(shards[0]), "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["shards"] == 3 and info["file_size"] == sum(p.stat().st_size for p in shards)
    text = CliRunner().invoke(main, ["info", str(shards[0])])
    assert text.exit_code == 0 and ", 3 shards)" in text.output


def _copy(shards, folder: Path):
    folder.mkdir()
    return [Path(shutil.copy(p, folder / p.name)) for p in shards]


def test_a_missing_shard_is_named(shards, tmp_path):
    copies = _copy(shards, tmp_path / "m")
    copies[1].unlink()
    with pytest.raises(ModelShardError, match=r"shard 2 of 3 .*smol-00002-of-00003\.gguf.* is missing") as e:
        ModelFile(copies[0]).tensors
    assert e.value.shard == str(copies[1])
    assert isinstance(e.value, ModelFormatError)
    with pytest.raises(ModelShardError, match="is missing"):
        LLM(str(copies[0]), n_threads=1)


def test_a_shard_of_another_split_is_refused(shards, tmp_path):
    copies = _copy(shards, tmp_path / "x")
    shutil.copy(copies[1], copies[2])  # shard 2 where shard 3 belongs
    with pytest.raises(ModelShardError, match=r"shard 3 of 3 .* does not belong: .* are 1 / 3, expected 2 / 3") as e:
        ModelFile(copies[0]).tensors
    assert e.value.shard == str(copies[2])


def test_a_truncated_shard_is_named(shards, tmp_path):
    copies = _copy(shards, tmp_path / "t")
    data = copies[2].read_bytes()
    copies[2].write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelShardError, match=r"shard 3 of 3 .* is not a valid GGUF file: .*extends past end") as e:
        ModelFile(copies[0]).tensors
    assert e.value.shard == str(copies[2])


def test_a_tensor_count_that_disagrees_is_refused(shards, tmp_path):
    import struct

    copies = _copy(shards, tmp_path / "c")
    data = bytearray(copies[0].read_bytes())
    key = b"split.tensors.count"
    at = data.find(key) + len(key)
    assert struct.unpack_from("<I", data, at)[0] == 5  # INT32
    assert struct.unpack_from("<i", data, at + 4)[0] == 272
    struct.pack_into("<i", data, at + 4, 271)
    copies[0].write_bytes(bytes(data))
    with pytest.raises(ModelShardError, match=r"split.tensors.count = 271 but its 3 shards hold 272 tensors"):
        ModelFile(copies[0]).tensors


def test_a_later_shard_names_the_first(shards):
    with pytest.raises(ModelShardError, match=r"is shard 2 of 3 of a split model; load the first shard "
                                              r"\(.*smol-00001-of-00003\.gguf\)"):
        ModelFile(shards[1]).tensors


def test_a_first_shard_renamed_cannot_find_the_others(shards, tmp_path):
    copies = _copy(shards, tmp_path / "r")
    renamed = copies[0].rename(copies[0].with_name("smol.gguf"))
    with pytest.raises(ModelShardError, match="is not named PREFIX-00001-of-00003.gguf"):
        ModelFile(renamed).tensors


@pytest.mark.skipif(not GGUF_SPLIT.is_file(), reason=f"llama.cpp's llama-gguf-split is not at {GGUF_SPLIT}")
def test_a_split_made_by_llama_gguf_split_loads(smollm2_path, tmp_path, reference):
    out = tmp_path / "peer"
    proc = subprocess.run([str(GGUF_SPLIT), "--split", "--split-max-tensors", "64", str(smollm2_path), str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    first = sorted(tmp_path.glob("peer-00001-of-*.gguf"))
    assert len(first) == 1
    with ModelFile(first[0]) as f:
        assert len(f.shard_paths) >= 3
    assert greedy_tokens(first[0]) == reference


def test_serve_a_split_model(shards, reference):
    """`edgellm serve` on the first shard: the same greedy tokens over HTTP, and Ollama's
    /api/tags counting every shard's bytes."""
    import httpx
    from test_server import ServerProcess

    s = ServerProcess(shards[0]).wait_ready()
    try:
        r = httpx.post(s.url + "/v1/completions", headers=s.headers, timeout=120,
                       json={"prompt": PROMPTS[0], "max_tokens": 12, "temperature": 0})
        assert r.status_code == 200, r.text
        with LLM(str(shards[0]), n_threads=1) as llm:
            assert r.json()["choices"][0]["text"] == llm.detokenize(reference[0])
        tags = httpx.get(s.url + "/api/tags", headers=s.headers, timeout=30).json()
        assert [m["size"] for m in tags["models"]] == [sum(p.stat().st_size for p in shards)]
    finally:
        s.proc.terminate()
        s.proc.wait(timeout=30)
