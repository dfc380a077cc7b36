"""What the README and the --help texts claim, checked against what is (issue 43 item 7)."""
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgellm.cli import main

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def test_test_models_count_and_size():
    from edgellm.models import KNOWN_MODELS, all_names

    specs = [KNOWN_MODELS[n] for n in all_names()]
    gb = sum(s.size for s in specs) / 1e9
    m = re.search(r"fetches the (\w+) real test models, ~([\d.]+) GB", README)
    assert m, "the README's test command says how many models and how big"
    assert m.group(1) == WORDS[len(specs)] and abs(float(m.group(2)) - gb) < 0.01, (m.groups(), gb)


def test_tool_call_example_uses_a_model_that_calls_tools():
    block = README[README.index("tools = [{"):README.index("print(r.tool_calls)")]
    call = re.search(r'(\w+)\.chat\(\[\{"role": "user", "content": "Weather in Paris\?"\}\]', block)
    model = re.search(rf'{call.group(1)} = edgellm\.LLM\("([^"]+)"\)', README).group(1)
    assert model.startswith("qwen2.5-coder"), model  # SmolLM2-135M answers None


@pytest.mark.real_model
def test_tool_call_example_prints_a_call(qwen_path):
    import edgellm

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    with edgellm.LLM("qwen2.5-coder-0.5b", n_threads=2) as coder:
        r = coder.chat([{"role": "user", "content": "Weather in Paris?"}],
                       edgellm.SamplingParams(temperature=0), tools=tools)
    assert r.tool_calls and r.tool_calls[0].name == "get_weather"


def test_readme_says_how_to_get_what_skipping_tests_need():
    assert "EDGELLM_SHARED" in README and "not part of this repository" in README
    assert "EDGELLM_LLAMA_CPP_LIB=" in README and "libggml-base.so" in README


def test_serve_help_tells_the_true_context_default():
    from edgellm.memory_plan import _DEFAULT_MAX_CONTEXT

    for cmd in ("serve", "ray-serve"):
        out = " ".join(CliRunner().invoke(main, [cmd, "--help"]).output.split())
        assert f"[default: the model's trained context, at most {_DEFAULT_MAX_CONTEXT}]" in out, cmd


def test_run_help_lists_every_builtin_template():
    from edgellm.chat_template import builtin_names

    out = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    listed = re.search(r"a built-in name \(([^)]*)\)", out).group(1)
    assert [n.strip() for n in listed.split(",")] == builtin_names()
