"""The golden rule through the public API, as a user (or a held-out check) would run it:
`LLM.generate` greedy for rule 2 and one `LLM.eval_logits(prompt_ids + exact_ids[:-1])` call for
rule 3, with the LLM's defaults (F16 serving KV cache; eval_logits scores at F32 KV precision)."""
import pytest

from conftest import load_golden, require_model
from reference.golden_rules import evaluate

edgellm = pytest.importorskip("edgellm")

CASES = [
    ("smollm2", "smollm2-135m-q4_1"),
    ("gemma3", "gemma3-270m-q4_k_m"),
    ("gemma3", "gemma3-270m-q4_k_m-long"),
    ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-q4_k_m"),
]


class _LLMRunner:
    """The runner protocol of reference.golden_rules.evaluate over the public LLM API."""

    def __init__(self, llm):
        self.llm = llm
        self.ids = []

    def reset(self):
        self.ids = []

    def eval(self, ids, all_logits=False):
        start = len(self.ids)
        self.ids += list(ids)
        return self.llm.eval_logits(self.ids)[start:] if all_logits else None

    def greedy(self, prompt, n):
        c = self.llm.generate(list(prompt), edgellm.SamplingParams(temperature=0, max_tokens=n))
        return list(c.token_ids)


_llms = {}


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("model_name,golden_name", CASES, ids=[g for _, g in CASES])
def test_golden_rule_through_llm(model_name, golden_name):
    if model_name not in _llms:
        _llms.clear()
        _llms[model_name] = edgellm.LLM(str(require_model(model_name)), n_ctx=2048)
    data = load_golden(golden_name)
    for entry in data.get("tokenize", []):
        ids = _llms[model_name].tokenize(entry["text"], add_special=entry["add_special"],
                                         parse_special=entry["parse_special"])
        assert ids == entry["ids"], entry["text"]
    result = evaluate(_LLMRunner(_llms[model_name]), data, name=f"{golden_name} via LLM")
    print(result.summary())
    assert result.rule2_ok, result.summary()
    assert result.rule3_ok, result.summary()
