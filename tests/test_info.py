"""`edgellm info`: the facts of both real models, --json, and a clean failure on bad files.
Expected numbers were read from the files with gguf.GGUFReader."""
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from edgellm.cli import main
from gguf_fixtures import minimal_valid, require_real_model, write_valid_fixture

SMOLLM2 = dict(architecture="llama", n_layers=30, n_heads=9, n_kv_heads=3, n_embd=576, n_ff=1536, head_dim=64,
               context_length=8192, rope_freq_base=100000.0, n_params=134515008, file_size=98362432)
GEMMA3 = dict(architecture="gemma3", n_layers=18, n_heads=4, n_kv_heads=1, n_embd=640, n_ff=2048, head_dim=256,
              context_length=32768, rope_freq_base=1000000.0, n_params=268098176, file_size=253113024)


def run_info(*args):
    return CliRunner().invoke(main, ["info", *map(str, args)])


@pytest.mark.real_model
def test_info_smollm2_text():
    path = require_real_model("smollm2")
    r = run_info(path)
    assert r.exit_code == 0, r.output
    out = r.output
    for line in ("architecture    llama", "parameters      134.52M", "layers          30",
                 "heads           9 (kv heads 3, head dim 64)", "embedding dim   576", "FFN dim         1536",
                 "context length  8192", "rope base       100000.0",
                 "tokenizer       gpt2 BPE, pre-tokenizer smollm, vocab 49152", "chat template   yes",
                 "add bos / eos   False / False"):
        assert line in out, (line, out)
    assert "Q4_1 x210" in out and "Q8_0 x1" in out and "F32 x61" in out
    assert "bos 1 '<|im_start|>'" in out and "eos 2 '<|im_end|>'" in out


@pytest.mark.real_model
def test_info_gemma3_text():
    path = require_real_model("gemma3")
    r = run_info(path)
    assert r.exit_code == 0, r.output
    for line in ("architecture    gemma3", "layers          18", "parameters      268.10M",
                 "tokenizer       SPM llama, pre-tokenizer default, vocab 262144", "chat template   no",
                 "add bos / eos   True / False", "bos 2 '<bos>'", "eos 1 '<eos>'"):
        assert line in r.output, (line, r.output)


@pytest.mark.real_model
@pytest.mark.parametrize("name,expect,tok", [
    ("smollm2", SMOLLM2, dict(model="gpt2", pre="smollm", n_vocab=49152, bos_id=1, eos_id=2, pad_id=2, unk_id=0,
                              eot_id=None, bos_text="<|im_start|>", add_bos=False, add_eos=False)),
    ("gemma3", GEMMA3, dict(model="llama", pre="default", n_vocab=262144, bos_id=2, eos_id=1, pad_id=0, unk_id=3,
                            bos_text="<bos>", eos_text="<eos>", add_bos=True, add_eos=False)),
])
def test_info_json(name, expect, tok):
    path = require_real_model(name)
    r = run_info(path, "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    for k, v in expect.items():
        assert info[k] == v, k
    for k, v in tok.items():
        assert info["tokenizer"][k] == v, k
    assert info["chat_template"] is (name == "smollm2")
    types = info["tensor_types"]
    assert sum(t["count"] for t in types.values()) == info["n_tensors"]
    if name == "smollm2":
        assert types["Q4_1"]["count"] == 210 and types["Q8_0"]["count"] == 1 and types["F32"]["count"] == 61
        assert types["Q8_0"]["bytes"] == 30081024  # token_embd: 49152 rows of 576/32 blocks of 34 bytes
    else:
        assert set(types) == {"Q8_0", "Q5_0", "Q4_K", "Q6_K", "F32"}


def test_info_on_fixture_counts_params(tmp_path):
    p = write_valid_fixture(tmp_path / "t.gguf")
    info = json.loads(run_info(p, "--json").output)
    assert info["architecture"] == "llama"
    assert info["n_params"] == 15 + 14 + 256 + 64 + 11 + 192
    assert info["tensor_types"]["Q8_0"]["count"] == 2
    assert info["tokenizer"]["model"] is None and info["chat_template"] is False


@pytest.mark.parametrize("content,match", [
    (b"", "empty"),
    (b"NOPE" + bytes(40), "magic"),
    (minimal_valid()[:70], "remain"),
], ids=["empty", "bad_magic", "truncated"])
def test_info_bad_file_exits_1_with_one_line(tmp_path, content, match):
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-m", "edgellm", "info", str(p)], capture_output=True, text=True, env=env)
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("Error: ") and str(p) in lines[0] and match in lines[0]


def test_info_missing_file_exits_1(tmp_path):
    r = run_info(tmp_path / "absent.gguf")
    assert r.exit_code == 1
    assert "absent.gguf" in r.output and "Traceback" not in r.output
