"""edgellm.ModelFile against the gguf package's reader: metadata, tensor table and
dequantized values, on tiny generated fixtures and on the real models."""
import gc

import numpy as np
import pytest

import gguf
import edgellm
from gguf_fixtures import ARRAYS, SCALARS, fixture_tensors, require_real_model, write_valid_fixture


def reference_metadata(reader: gguf.GGUFReader):
    """key -> (value, type name) as gguf.GGUFReader reports them (its GGUF.* pseudo keys dropped)."""
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        t = field.types[0].name
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            t += f"[{field.types[-1].name}]"
        value = field.contents()
        if isinstance(value, np.generic):
            value = value.item()
        out[key] = (value, t)
    return out


def assert_matches_reader(f: edgellm.ModelFile, path):
    reader = gguf.GGUFReader(str(path))
    ref = reference_metadata(reader)
    assert list(f.metadata) == list(ref)  # same keys, same order
    types = f.metadata_types
    for key, (value, t) in ref.items():
        assert types[key] == t, key
        got = f.metadata[key]
        assert got == value, key
        assert type(got) is type(value) or isinstance(value, list), (key, type(got), type(value))
    assert list(f.tensors) == [t.name for t in reader.tensors]
    for t in reader.tensors:
        info = f.tensors[t.name]
        assert info.name == t.name
        assert info.type == t.tensor_type.name
        assert info.shape == tuple(int(d) for d in reversed(t.shape.tolist()))
        assert info.nbytes == t.n_bytes
        assert info.n_elements == t.n_elements
        assert f.data_offset + info.offset == t.data_offset
    return reader


def assert_dequantize_matches(f: edgellm.ModelFile, reader: gguf.GGUFReader, rows_per_chunk: int = 4096):
    """Every tensor equals gguf.quants.dequantize: float types exactly, block types within 1e-6
    of the tensor's largest magnitude (both sides compute d*q in float32)."""
    for t in reader.tensors:
        ours = f.dequantize(t.name)
        assert ours.dtype == np.float32 and ours.shape == f.tensors[t.name].shape, t.name
        raw = t.data
        flat_ours = ours.reshape(-1, ours.shape[-1]) if ours.ndim > 1 else ours.reshape(1, -1)
        flat_raw = raw.reshape(-1, raw.shape[-1]) if raw.ndim > 1 else raw.reshape(1, -1)
        exact = t.tensor_type.name in ("F32", "F16", "BF16")
        scale = float(np.abs(flat_ours).max()) if flat_ours.size else 0.0
        for r0 in range(0, flat_raw.shape[0], rows_per_chunk):
            ref = gguf.quants.dequantize(flat_raw[r0:r0 + rows_per_chunk], t.tensor_type).reshape(-1, flat_ours.shape[1])
            mine = flat_ours[r0:r0 + rows_per_chunk]
            if exact:
                np.testing.assert_array_equal(mine, ref, err_msg=t.name)
            else:
                diff = float(np.abs(mine - ref).max())
                assert diff <= 1e-6 * scale, f"{t.name} ({t.tensor_type.name}): max diff {diff}, max |x| {scale}"
        big = ours.nbytes > (64 << 20)
        del ours, flat_ours
        if big:  # a full collection after every tensor cost ~0.5 s each: minutes per model
            gc.collect()


# ---- generated fixtures ---------------------------------------------------------------------

@pytest.mark.parametrize("version", [2, 3])
def test_every_value_type_matches_gguf_reader(tmp_path, version):
    p = write_valid_fixture(tmp_path / f"v{version}.gguf", version=version)
    with edgellm.ModelFile(p) as f:
        assert f.version == version
        assert f.alignment == 32
        assert_matches_reader(f, p)
        md = f.metadata
        for key, val, vt in SCALARS:
            if vt == gguf.GGUFValueType.FLOAT32:
                assert md[key] == float(np.float32(val))
            else:
                assert md[key] == val and type(md[key]) is type(val), key
        for key, val, vt in ARRAYS:
            expect = [float(np.float32(v)) for v in val] if vt == gguf.GGUFValueType.FLOAT32 else val
            assert md[key] == expect, key
        assert f.metadata_types["a.str"] == "ARRAY[STRING]"
        assert f.metadata_types["t.u64"] == "UINT64"


@pytest.mark.parametrize("alignment", [1, 64, 4096])
def test_custom_alignment(tmp_path, alignment):
    p = write_valid_fixture(tmp_path / "aligned.gguf", alignment=alignment)
    with edgellm.ModelFile(p) as f:
        assert f.alignment == alignment
        assert f.metadata["general.alignment"] == alignment
        assert f.data_offset % alignment == 0
        reader = assert_matches_reader(f, p)
        for info in f.tensors.values():
            assert info.offset % alignment == 0
        assert_dequantize_matches(f, reader)


def test_fixture_dequantize_and_raw(tmp_path):
    p = write_valid_fixture(tmp_path / "t.gguf")
    f = edgellm.ModelFile(p)
    reader = gguf.GGUFReader(str(p))
    assert_dequantize_matches(f, reader)
    # Float tensors round-trip the values written.
    values, _ = fixture_tensors()["f32.weight"]
    np.testing.assert_array_equal(f.dequantize("f32.weight"), values)
    np.testing.assert_array_equal(f.dequantize("f16.weight"), fixture_tensors()["f16.weight"][0].astype(np.float16).astype(np.float32))
    # raw is the exact bytes, zero-copy and read-only, and outlives close().
    by_name = {t.name: t for t in reader.tensors}
    raw = f.raw("q8_0.weight")
    assert raw.dtype == np.uint8 and raw.shape == (f.tensors["q8_0.weight"].nbytes,)
    assert bytes(raw) == by_name["q8_0.weight"].data.tobytes()
    assert not raw.flags.writeable
    with pytest.raises(ValueError):
        raw[0] = 1
    f.close()
    assert f.closed
    assert bytes(raw[:4]) == by_name["q8_0.weight"].data.tobytes()[:4]
    for access in (lambda: f.metadata, lambda: f.tensors, lambda: f.version, lambda: f.raw("q8_0.weight"),
                   lambda: f.dequantize("f32.weight")):
        with pytest.raises(ValueError, match="closed"):
            access()


def test_unknown_tensor_name_is_key_error(tmp_path):
    p = write_valid_fixture(tmp_path / "t.gguf")
    with edgellm.ModelFile(p) as f:
        with pytest.raises(KeyError, match="nope"):
            f.dequantize("nope")
        with pytest.raises(KeyError, match="nope"):
            f.raw("nope")


def test_context_manager_closes(tmp_path):
    p = write_valid_fixture(tmp_path / "t.gguf")
    with edgellm.ModelFile(p) as f:
        assert f.path == str(p)
        assert "vec.bias" in f.tensors
    with pytest.raises(ValueError):
        f.metadata


def test_no_tensors_file(tmp_path):
    p = write_valid_fixture(tmp_path / "empty.gguf", tensors={})
    with edgellm.ModelFile(p) as f:
        assert f.tensors == {}
        assert_matches_reader(f, p)


def test_accepts_pathlike(tmp_path):
    p = write_valid_fixture(tmp_path / "t.gguf")
    assert edgellm.ModelFile(p).path == str(p)
    assert "ModelFile" in repr(edgellm.ModelFile(str(p)))


# ---- real models ----------------------------------------------------------------------------

REAL = ["smollm2", "gemma3", "qwen2.5-coder-0.5b"]


@pytest.mark.real_model
@pytest.mark.parametrize("name", REAL)
def test_real_model_metadata_matches_gguf_reader(name):
    path = require_real_model(name)
    with edgellm.ModelFile(path) as f:
        assert f.version == 3
        assert_matches_reader(f, path)


@pytest.mark.real_model
def test_large_token_list():
    # 262k strings, built into one list in C++ (about 30 ms here; tests assert no timings).
    path = require_real_model("gemma3")
    with edgellm.ModelFile(path) as f:
        tokens = f.metadata["tokenizer.ggml.tokens"]
        assert len(tokens) == 262144 == len(f.metadata["tokenizer.ggml.scores"])
        assert tokens[2] == "<bos>"
        assert f.metadata_types["tokenizer.ggml.tokens"] == "ARRAY[STRING]"


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_real_model_dequantize_every_tensor(name):
    path = require_real_model(name)
    with edgellm.ModelFile(path) as f:
        assert_dequantize_matches(f, gguf.GGUFReader(str(path)))
