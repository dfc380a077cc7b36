"""shared/fixtures: tiny random-weight F32 models that make_fixture.py writes byte for byte,
with llama.cpp's outputs and an exact reference in the golden format. The forward pass must
reproduce the exact reference almost exactly (F32 weights: no activation quantization), and
meet the golden rule with an F16 KV cache too."""
import hashlib
import subprocess
import sys

import pytest

from conftest import load_fixture_spec, shared_dir
from reference.golden_rules import evaluate

core = pytest.importorskip("edgellm._core")


@pytest.fixture(scope="module")
def fixture_model(tmp_path_factory):
    made = {}

    def make(arch):
        if arch not in made:
            script = shared_dir() / "fixtures" / "make_fixture.py"
            if not script.is_file():
                pytest.skip(f"fixture script missing: {script}")
            out = tmp_path_factory.mktemp("fixtures") / f"fix-{arch}.gguf"
            subprocess.run([sys.executable, str(script), arch, str(out)], check=True)
            made[arch] = out
        return made[arch]

    return make


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("kv_type", ["F32", "F16"])
def test_fixture_golden_rule(fixture_model, arch, kv_type):
    spec = load_fixture_spec(f"fix-{arch}")
    path = fixture_model(arch)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == spec["sha256"], "make_fixture.py output changed"
    runner = core.ModelRunner(core.Model(str(path), n_threads=2), n_ctx=512, kv_type=kv_type)
    result = evaluate(runner, spec, name=f"fix-{arch} kv={kv_type}")
    print(result.summary())
    assert result.rule2_ok, result.summary()
    assert result.rule3_ok, result.summary()
    # No activation quantization with F32 weights: only the KV cache may cost accuracy.
    assert result.mean_err < (1e-3 if kv_type == "F32" else 0.5 * spec["exact_summary"]["peer_tf_mean_err"])
    assert result.agree == 1.0
