"""Malformed GGUF files: every one must raise edgellm.ModelFormatError naming the path and
the field at fault, and none may crash or allocate what the file claims. Run this file once
under AddressSanitizer by scripts/sanitize.sh (the sanitizer leg of .ci/run)."""
import os
import struct

import pytest

import gguf
import edgellm
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from gguf_fixtures import build, f32_tensor, gstr, kv, minimal_valid, require_real_model, tensor_info

ARCH = kv("general.architecture", VT.STRING, "llama")


def expect_format_error(path, match):
    with pytest.raises(edgellm.ModelFormatError) as e:
        edgellm.ModelFile(path)
    msg = str(e.value)
    assert str(path) in msg, msg
    assert any(m.lower() in msg.lower() for m in ([match] if isinstance(match, str) else match)), msg
    assert "\n" not in msg
    return msg


# ---- I/O errors ------------------------------------------------------------------------------

def test_missing_file(tmp_path):
    expect_format_error(tmp_path / "absent.gguf", "no such file")


def test_directory(tmp_path):
    expect_format_error(tmp_path, "directory")


def test_empty_file(tmp_path):
    p = tmp_path / "empty.gguf"
    p.write_bytes(b"")
    expect_format_error(p, "empty")


def test_minimal_valid_file_opens(tmp_path):
    p = tmp_path / "ok.gguf"
    p.write_bytes(minimal_valid())
    with edgellm.ModelFile(p) as f:
        assert f.metadata == {"general.architecture": "llama", "x.count": 3}
        assert f.tensors["w"].shape == (8,)


# ---- corruptions of small generated files ---------------------------------------------------

W_INFO, W_DATA = f32_tensor()
HUGE = 2**60


def q(name, ne, t, off=0, **kw):
    return tensor_info(name, ne, t, off, **kw)


CASES = {
    # header
    "bad_magic": (build([ARCH], [W_INFO], W_DATA, magic=b"GGML"), "magic"),
    "too_small_for_magic": (b"GG", "too small"),
    "version_0": (build([ARCH], [W_INFO], W_DATA, version=0), "version"),
    "version_1": (build([ARCH], [W_INFO], W_DATA, version=1), "version 1"),
    "version_4": (build([ARCH], [W_INFO], W_DATA, version=4), "version 4"),
    "version_byteswapped": (build([ARCH], [W_INFO], W_DATA, version=0x03000000), "byte-swapped"),
    "header_truncated_in_counts": (build([], [])[:12], "n_tensors"),
    "n_kv_negative": (build([ARCH], [W_INFO], W_DATA, n_kv=-1), "n_kv"),
    "n_tensors_negative": (build([ARCH], [W_INFO], W_DATA, n_tensors=-5), "n_tensors"),
    "n_kv_huge": (build([ARCH], [W_INFO], W_DATA, n_kv=HUGE), "n_kv"),
    "n_tensors_huge": (build([ARCH], [W_INFO], W_DATA, n_tensors=2**62), "n_tensors"),
    "n_kv_one_too_many": (build([ARCH], [W_INFO], W_DATA, n_kv=2), ["metadata", "tensor info #0"]),
    # metadata keys and values
    "key_length_huge": (build([kv("general.architecture", VT.STRING, "llama", key_len=HUGE)], []), "key"),
    "key_empty": (build([kv("", VT.UINT32, 1), ARCH], []), "empty key"),
    "duplicate_key": (build([ARCH, kv("x", VT.UINT32, 1), kv("x", VT.INT32, 2)], []), "duplicate key"),
    "value_type_unknown": (build([kv("x.v", 13, payload=b"\0" * 8)], []), "'x.v': unknown value type"),
    "value_type_huge": (build([kv("x.v", 0xFFFFFFFF, payload=b"\0" * 8)], []), "'x.v': unknown value type"),
    "string_length_huge": (build([kv("x.s", VT.STRING, payload=gstr("abc", HUGE))], []), "'x.s'"),
    "string_length_past_end": (build([kv("x.s", VT.STRING, payload=gstr("abc", 100))], [], pad=False), "'x.s'"),
    "array_nested": (build([kv("x.a", VT.ARRAY, [], elem_type=VT.ARRAY, count=1, payload=b"\0" * 16)], []), "nested"),
    "array_elem_type_unknown": (build([kv("x.a", VT.ARRAY, [], elem_type=99, count=1, payload=b"\0" * 8)], []), "element type"),
    "array_string_count_huge": (build([kv("x.toks", VT.ARRAY, ["a", "b"], elem_type=VT.STRING, count=HUGE)], []), "'x.toks'"),
    "array_string_count_one_too_many": (build([kv("x.toks", VT.ARRAY, ["a", "b"], elem_type=VT.STRING, count=3)], [], pad=False), "'x.toks'"),
    "array_string_element_length_huge": (build([kv("x.toks", VT.ARRAY, [], elem_type=VT.STRING, count=2, payload=gstr("a") + gstr("b", HUGE))], []), "string [1]"),
    "array_u64_count_overflows": (build([kv("x.n", VT.ARRAY, [1], elem_type=VT.UINT64, count=2**62)], []), "'x.n'"),
    "array_f32_count_past_end": (build([kv("x.n", VT.ARRAY, [1.0, 2.0], elem_type=VT.FLOAT32, count=1000)], [], pad=False), "'x.n'"),
    "scalar_truncated": (build([kv("x.u", VT.UINT64, payload=b"\1\2\3")], [], pad=False), "'x.u'"),
    # general.alignment
    "alignment_wrong_type_i32": (build([kv("general.alignment", VT.INT32, 64)], [W_INFO], W_DATA), "general.alignment' has type INT32"),
    "alignment_wrong_type_u64": (build([kv("general.alignment", VT.UINT64, 64)], [W_INFO], W_DATA), "has type UINT64, expected UINT32"),
    "alignment_wrong_type_string": (build([kv("general.alignment", VT.STRING, "32")], [W_INFO], W_DATA), "has type STRING"),
    "alignment_zero": (build([kv("general.alignment", VT.UINT32, 0)], [W_INFO], W_DATA), "power of two"),
    "alignment_not_power_of_two": (build([kv("general.alignment", VT.UINT32, 48)], [W_INFO], W_DATA, alignment=48), "48 is not"),
    "alignment_misaligned_offset": (build([kv("general.alignment", VT.UINT32, 64)], [q("w", [8], QT.F32, 32)], b"\0" * 96, alignment=64), "not a multiple of the alignment 64"),
    # tensor infos
    "tensor_name_length_huge": (build([ARCH], [q("w", [8], QT.F32, name_len=HUGE)], W_DATA), "tensor info #0: name"),
    "tensor_name_too_long": (build([ARCH], [q("n" * 64, [8], QT.F32)], W_DATA), "too long"),
    "tensor_name_empty": (build([ARCH], [q("", [8], QT.F32)], W_DATA), "empty name"),
    "tensor_duplicate": (build([ARCH], [q("w", [8], QT.F32, 0), q("w", [8], QT.F32, 32)], b"\0" * 64), "duplicate tensor"),
    "tensor_n_dims_5": (build([ARCH], [q("w", [8, 1, 1, 1, 1], QT.F32)], W_DATA), "n_dims = 5"),
    "tensor_n_dims_huge": (build([ARCH], [q("w", [8], QT.F32, n_dims=0xFFFFFFFF)], W_DATA), "n_dims"),
    "tensor_dim_negative": (build([ARCH], [q("w", [8, -2], QT.F32)], W_DATA), "ne[1] = -2 is negative"),
    "tensor_dims_overflow": (build([ARCH], [q("w", [2**40, 2**40], QT.F32)], W_DATA), "overflows"),
    "tensor_nbytes_overflow": (build([ARCH], [q("w", [2**31, 2**31, 2**2], QT.F32)], W_DATA), "overflows"),
    "tensor_type_unknown": (build([ARCH], [q("w", [8], 99)], W_DATA), "type id 99"),
    "tensor_type_removed": (build([ARCH], [q("w", [32], 4)], W_DATA), "type id 4"),
    "tensor_type_unsupported_iq": (build([ARCH], [q("w", [256], 16)], W_DATA), "IQ2_XXS"),
    "tensor_type_huge": (build([ARCH], [q("w", [8], 0xFFFFFFFF)], W_DATA), "type id 4294967295"),
    "tensor_ne0_not_block_multiple": (build([ARCH], [q("w", [48], QT.Q4_K)], b"\0" * 4096), "block size 256"),
    "tensor_offset_misaligned": (build([ARCH], [q("w", [8], QT.F32, 4)], b"\0" * 64), "offset 4 is not a multiple"),
    "tensor_offset_past_end": (build([ARCH], [q("w", [8], QT.F32, 1 << 20)], W_DATA), "extends past end of file"),
    "tensor_offset_overflows": (build([ARCH], [q("w", [8], QT.F32, 2**64 - 32)], W_DATA), "extends past end of file"),
    "tensor_data_truncated": (build([ARCH], [W_INFO], W_DATA[:-1]), "tensor 'w': data [offset 0, 32 bytes] extends past end"),
    "tensor_info_truncated": (build([ARCH], [W_INFO[:-3]], pad=False), "tensor 'w': data offset"),
    "data_section_missing": (build([ARCH], [W_INFO], pad=False), ["data section", "extends past end"]),
    "n_tensors_one_too_many": (build([ARCH], [W_INFO], W_DATA, n_tensors=2), "tensor"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupted_fixture(tmp_path, case):
    data, match = CASES[case]
    p = tmp_path / f"{case}.gguf"
    p.write_bytes(data)
    expect_format_error(p, match)


def test_many_strings_claim_does_not_allocate(tmp_path):
    # 2^60 strings would be exabytes: the count is checked against the file size first.
    p = tmp_path / "claim.gguf"
    p.write_bytes(build([kv("tokenizer.ggml.tokens", VT.ARRAY, ["a"] * 4, elem_type=VT.STRING, count=2**60)], []))
    expect_format_error(p, "cannot fit")


# ---- the real SmolLM2 file: truncations and header corruptions -------------------------------
# Opening reads only the header and tensor table, so each copy holds the real header bytes and a
# sparse hole of the right length after them (a file of the original size opens fine, which the
# first test checks): disk use stays a few MB per case.

@pytest.fixture(scope="module")
def smollm2():
    path = require_real_model("smollm2")
    reader = gguf.GGUFReader(str(path))
    data_start = min(t.data_offset for t in reader.tensors)
    with open(path, "rb") as f:
        head = f.read(data_start + 4096)
    data_end = max(t.data_offset + t.n_bytes for t in reader.tensors)
    return {"path": path, "reader": reader, "head": head, "size": os.path.getsize(path),
            "data_start": data_start, "data_end": data_end}


def sparse_copy(dst, head: bytes, size: int, patch=None):
    """Write `head` (optionally patched {offset: bytes}) and extend to `size` with a hole."""
    buf = bytearray(head[:size])
    for off, b in (patch or {}).items():
        buf[off:off + len(b)] = b
    with open(dst, "wb") as f:
        f.write(buf)
        f.truncate(size)
    return dst


def _part_offsets(field):
    """Absolute offsets of each part of a GGUFReader field."""
    out, pos = [], field.offset
    for part in field.parts:
        out.append(pos)
        pos += part.nbytes
    return out


@pytest.mark.real_model
def test_sparse_copy_of_real_header_is_valid(tmp_path, smollm2):
    p = sparse_copy(tmp_path / "whole.gguf", smollm2["head"], smollm2["size"])
    with edgellm.ModelFile(p) as f:
        assert len(f.tensors) == len(smollm2["reader"].tensors)


def truncation_offsets(m):
    r = m["reader"]
    offs = {0, 1, 3, 4, 5, 7, 8, 12, 16, 20, 23, 24}
    # Inside the metadata: each part boundary (and one byte into it) of a spread of fields.
    fields = [f for k, f in r.fields.items() if not k.startswith("GGUF.")]
    for field in fields[::3] + [r.fields["tokenizer.ggml.tokens"], r.fields["tokenizer.ggml.merges"]]:
        starts = _part_offsets(field)
        offs.update({starts[0] + 1, starts[min(2, len(starts) - 1)] + 2, starts[len(starts) // 2] + 1})
    # Inside the tensor table.
    for t in r.tensors[:: max(1, len(r.tensors) // 12)]:
        starts = _part_offsets(t.field)
        offs.update({starts[0] + 3, starts[-1] + 1})
    # Padding before the data, the data section, and near the end of the last tensor.
    offs.update({m["data_start"] - 1, m["data_start"], m["data_start"] + 1000, m["data_start"] + 2_000_000})
    offs.update({m["data_end"] - 1, m["data_end"] - 100, m["data_end"] - 5_000_000})
    return sorted(o for o in offs if o < m["data_end"])


@pytest.mark.real_model
def test_truncated_real_model(tmp_path, smollm2):
    offsets = truncation_offsets(smollm2)
    assert len(offsets) >= 50
    for off in offsets:
        p = tmp_path / f"trunc_{off}.gguf"
        sparse_copy(p, smollm2["head"], off)
        expect_format_error(p, ["remain", "past end", "too small", "empty", "cannot fit"])
        p.unlink()


def real_header_cases(m):
    r = m["reader"]
    f = r.fields
    u32 = lambda v: struct.pack("<I", v)  # noqa: E731
    u64 = lambda v: struct.pack("<Q", v)  # noqa: E731
    tok = _part_offsets(f["tokenizer.ggml.tokens"])  # key len, key, type, elem type, count, ...
    arch = _part_offsets(f["general.architecture"])  # key len, key, type, str len, str
    bc = _part_offsets(f["llama.block_count"])
    t0 = _part_offsets(r.tensors[0].field)  # name len, name, n_dims, ne..., type, offset
    t5 = _part_offsets(r.tensors[5].field)
    return {
        "magic": ({0: b"GGUG"}, "magic"),
        "version_1": ({4: u32(1)}, "version 1"),
        "version_7": ({4: u32(7)}, "version 7"),
        "version_swapped": ({4: u32(0x03000000)}, "byte-swapped"),
        "n_tensors_huge": ({8: u64(2**60)}, "n_tensors"),
        "n_kv_huge": ({16: u64(2**60)}, "n_kv"),
        "first_key_length_huge": ({arch[0]: u64(2**61)}, "metadata pair #0: key"),
        "value_type_unknown": ({bc[2]: u32(77)}, "'llama.block_count': unknown value type"),
        "string_value_length_huge": ({arch[3]: u64(2**63)}, "'general.architecture'"),
        "token_count_huge": ({tok[4]: u64(2**60)}, "'tokenizer.ggml.tokens'"),
        "token_elem_type_nested": ({tok[3]: u32(VT.ARRAY)}, "nested"),
        "token_string_length_huge": ({tok[5]: u64(2**62)}, "'tokenizer.ggml.tokens': string [0]"),
        "tensor_name_length_huge": ({t0[0]: u64(2**60)}, "tensor info #0: name"),
        "tensor_n_dims": ({t0[2]: u32(9)}, "n_dims = 9"),
        "tensor_dim_negative": ({t0[3]: struct.pack("<q", -576)}, "is negative"),
        "tensor_dim_not_block_multiple": ({t0[3]: struct.pack("<q", 577)}, "block size 32"),
        "tensor_type_unknown": ({t0[-2]: u32(1000)}, "type id 1000"),
        "tensor_offset_misaligned": ({t5[-1]: u64(r.tensors[5].data_offset - m["data_start"] + 16)}, "not a multiple of the alignment"),
        "tensor_offset_past_end": ({t5[-1]: u64(2**63)}, "extends past end of file"),
    }


@pytest.mark.real_model
def test_corrupted_real_header(tmp_path, smollm2):
    cases = real_header_cases(smollm2)
    for case, (patch, match) in cases.items():
        p = tmp_path / f"{case}.gguf"
        sparse_copy(p, smollm2["head"], smollm2["size"], patch)
        msg = expect_format_error(p, match)
        assert msg, case
        p.unlink()


# ---- bytes that are not UTF-8 (issue 17, item 6) ---------------------------------------------
# GGUF strings are UTF-8 by contract, but a file may break it. Errors quoting such bytes must
# still be ModelFormatError (not UnicodeDecodeError), and every name Python sees is escaped the
# same way (\xNN) so it can be printed, sent as JSON and looked up.

BAD_NAME = b"blk.0.\xff\xfeweight"
ESCAPED = "blk.0.\\xff\\xfeweight"


@pytest.mark.parametrize("case", ["duplicate_tensor", "duplicate_key", "tensor_type_unknown"])
def test_format_errors_quoting_non_utf8_bytes_are_model_format_errors(tmp_path, case):
    if case == "duplicate_tensor":
        data = build([ARCH], [q(BAD_NAME, [8], QT.F32, 0), q(BAD_NAME, [8], QT.F32, 32)], b"\0" * 64)
    elif case == "duplicate_key":
        data = build([ARCH, kv(BAD_NAME, VT.UINT32, 1), kv(BAD_NAME, VT.INT32, 2)], [])
    else:
        data = build([ARCH], [q(BAD_NAME, [8], 99)], W_DATA)
    p = tmp_path / f"{case}.gguf"
    p.write_bytes(data)
    msg = expect_format_error(p, ["duplicate", "type id 99"])
    assert "\\xff\\xfe" in msg, msg


def test_non_utf8_names_are_listed_escaped_and_usable(tmp_path):
    info, data = f32_tensor(BAD_NAME)
    p = tmp_path / "names.gguf"
    p.write_bytes(build([ARCH, kv(b"x.\xe9t\xe9", VT.UINT32, 7), kv("x.name", VT.STRING, b"caf\xe9")],
                        [info], data))
    with edgellm.ModelFile(p) as f:
        assert list(f.tensors) == [ESCAPED]
        assert f.metadata["x.\\xe9t\\xe9"] == 7 and f.metadata["x.name"] == "caf\\xe9"
        assert "x.\\xe9t\\xe9" in f.metadata_types
        assert f.dequantize(ESCAPED).tolist() == list(range(8))
        assert bytes(f.raw(ESCAPED)) == data
        ascii_text = repr(f.tensors) + repr(f.metadata)
        ascii_text.encode("utf-8")  # no lone surrogates: printable and JSON-safe
        with pytest.raises(KeyError):
            f.dequantize("blk.0.weight")


def test_model_load_error_quoting_non_utf8_architecture(tmp_path):
    p = tmp_path / "arch.gguf"
    p.write_bytes(build([kv("general.architecture", VT.STRING, b"ll\xffama")], [W_INFO], W_DATA))
    with pytest.raises(edgellm.ModelFormatError) as e:
        edgellm._core.Model(str(p), 1)
    assert "ll\\xffama" in str(e.value), str(e.value)
