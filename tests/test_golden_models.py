"""The golden rule (shared/golden/README.md, rules 2 and 3) on the real models, fed the
prompt_ids of each golden file (tokenization is tested on its own). llama.cpp's own distance
from the exact reference is the bar: our teacher-forced error may be at most 1.25 times its,
and our argmax agreement at most 2 points below its.

With an F32 KV cache the whole rule must hold. With the F16 cache (the runtime default, as in
llama.cpp) F16 rounding of keys and values flips near-ties: on the 32-step long-prompt file
one flip is 3 points, so there the agreement figure is reported, and what is asserted is rule
2, the error bound of rule 3, and agreement at every step where the exact reference is
decisive (top-1 minus top-2 log-prob >= 0.5).
"""
import pytest

from conftest import check_golden_rules, load_golden, require_model
from reference.golden_rules import evaluate

core = pytest.importorskip("edgellm._core")

CASES = [
    ("smollm2", "smollm2-135m-q4_1"),
    ("gemma3", "gemma3-270m-q4_k_m"),
    ("gemma3", "gemma3-270m-q4_k_m-long"),  # 1332-token prompt: longer than the 512 window
    ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-q4_k_m"),
]

_models = {}


def _model(name):
    if name not in _models:
        _models[name] = core.Model(str(require_model(name)), n_threads=0)
    return _models[name]


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("kv_type", ["F32", "F16"])
@pytest.mark.parametrize("model_name,golden_name", CASES, ids=[g for _, g in CASES])
def test_golden_rule(model_name, golden_name, kv_type):
    data = load_golden(golden_name)
    runner = core.ModelRunner(_model(model_name), n_ctx=2048, kv_type=kv_type)
    result = evaluate(runner, data, name=f"{golden_name} kv={kv_type}")
    check_golden_rules(result, kv_type)
