"""Issue 17, chat side: hostile chat templates end with a typed error within their time and size
limits, rendering and tokenizing run off the server's event loop, message content cannot forge
turns through special-token text, and a GGUF without a chat template chats through the built-in
fallback."""
import resource
import time

import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

import edgellm  # noqa: E402
from edgellm.chat_template import ChatTemplateError, render_chat  # noqa: E402
from tiny_vocab_model import write_tiny_vocab_model  # noqa: E402

HI = [{"role": "user", "content": "hi"}]


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- 5: a GGUF without tokenizer.chat_template ----------------------------------------------

@pytest.fixture(scope="module")
def plain_gguf(tmp_path_factory):
    """A tiny llama whose file has no chat template and no ChatML / Llama 3 / Gemma markers."""
    return write_tiny_vocab_model(tmp_path_factory.mktemp("plain") / "plain.gguf")


@pytest.fixture(scope="module")
def plain_llm(plain_gguf):
    llm = edgellm.LLM(str(plain_gguf), n_threads=1)
    yield llm
    llm.close()


def test_chat_without_template_uses_builtin_chatml(plain_llm):
    assert plain_llm.tokenizer.chat_template is None
    prompt = plain_llm.apply_chat_template(HI)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    out = plain_llm.chat(HI, edgellm.SamplingParams(temperature=0, max_tokens=4))
    assert out.usage.completion_tokens >= 1
    assert out.usage.prompt_tokens == len(plain_llm.tokenize(prompt))


# ---- 1 and 6: bounded template rendering, typed errors ----------------------------------------

HOSTILE = {
    "nested range loops": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "nested loops with output": "{% for i in range(99999) %}{% for j in range(99999) %}x{% endfor %}{% endfor %}",
    "string product": "{{ 'x' * 10**9 }}",
    "list product": "{{ ([1] * 10**9) | length }}",
    "big power": "{{ 10 ** 100000000 }}",
    "doubling concat": "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
    "doubling plus": "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
    "str method width": "{{ 'x'.ljust(10**9) }}",
    "filter width": "{{ 'x' | center(1000000000) }}",
    "percent width": "{{ '%1000000000d' % 1 }}",
    "format width": "{{ '{:>1000000000}'.format(1) }}",
    "recursive macro": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "recursive loop": "{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}",
    "gigabytes of output": "{% for i in range(99999) %}{% for j in range(99999) %}{{ 'y' * 9999 }}{% endfor %}{% endfor %}",
    "replace blow-up": "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s.replace('a', ns.s) %}{% endfor %}{{ ns.s }}",
    "join blow-up": "{% set ns = namespace(l=['xxxxxxxxxx']) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | join }}",
    "literal text in a macro": "{% macro m() %}{% for i in range(5000) %}{% for j in range(2000) %}"
                               + "0123456789" * 100 + "{% endfor %}{% endfor %}{% endmacro %}{{ m() | length }}",
    "literal text in a block set": "{% set x %}{% for i in range(5000) %}{% for j in range(2000) %}"
                                   + "0123456789" * 100 + "{% endfor %}{% endfor %}{% endset %}{{ x | length }}",
    "list of big strings": "{% set ns = namespace(l=[], s='x' * 4000000) %}{% for i in range(100000) %}"
                           "{% set ns.l = ns.l + [ns.s ~ i] %}{% endfor %}{{ ns.l | length }}",
    "deep nesting": "{{ " + "(" * 20000 + "1" + ")" * 20000 + " }}",
    "overflow": "{{ (1e308 * 10) | int }}",
    "zero division": "{{ 1 // 0 }}",
    "type error": "{{ messages + 1 }}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_template_ends_typed_within_limits(name):
    rss0 = _rss_mb()
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError) as ei:
        render_chat(HI, HOSTILE[name], time_limit=1.0)
    took = time.monotonic() - t0
    assert isinstance(ei.value, edgellm.InvalidRequestError) and isinstance(ei.value, ValueError)
    assert took < 3.0, f"{name}: {took:.1f} s"
    assert _rss_mb() - rss0 < 200, f"{name}: RSS grew {_rss_mb() - rss0:.0f} MB"
    assert "chat template" in str(ei.value)


def test_limits_are_named_in_the_message():
    with pytest.raises(ChatTemplateError, match=r"time limit \(0\.5 s\)"):
        render_chat(HI, HOSTILE["nested range loops"], time_limit=0.5)
    with pytest.raises(ChatTemplateError, match="output size limit"):
        render_chat(HI, "{% for i in range(5000) %}{{ 'z' * 1000 }}{% endfor %}", max_output=1_000_000)
    with pytest.raises(ChatTemplateError, match="recursion"):
        render_chat(HI, HOSTILE["recursive macro"])


def test_ordinary_templates_unaffected_by_limits():
    # big but legitimate: a long conversation renders in full
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 50}
            for i in range(400)]
    out = render_chat(msgs, "chatml")
    assert out.count("<|im_start|>") == 401
    assert render_chat(HI, "{{ 'ab' * 3 }}{{ 2 ** 10 }}{{ [1, 2] * 2 }}{{ '%5d' % 3 }}") == \
        "ababab1024[1, 2, 1, 2]    3"
