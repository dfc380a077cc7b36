"""One KV byte budget for both layer groups (issue 19, item 1) on the real models: 16 concurrent
streams x (128 prompt + 128 generated tokens) run through edgellm.LLM without a single
preemption. Gemma 3 has sliding-window layers, whose pool used to be sized for one long sequence
(66 window pages at n_ctx 8192 against the 128 that 16 such streams hold), so it preempted and
recomputed; SmolLM2 and Qwen2.5-Coder (full attention only) are the same check without windows.
The engine's own accounting is checked too: bytes in use never above the budget, every page back
at the end."""
import pytest

from edgellm import LLM, SamplingParams

from test_llm import pages_back_to_zero

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

N_STREAMS, N_PROMPT, N_GEN = 16, 128, 128

_TEXTS = [
    "The history of the printing press begins in",
    "def quicksort(items):\n    \"\"\"Sort a list.\"\"\"\n",
    "Dear committee members, thank you for",
    "A recipe for bread: flour, water, salt and",
    "In the beginning of the twentieth century, physics",
    "SELECT name, count(*) FROM orders WHERE",
    "The weather forecast for the coming week says",
    "Chapter one. The lighthouse keeper woke up",
    "Here is a list of the planets of the solar system:",
    "How to configure a home network router:",
    "The rules of chess are simple to learn:",
    "import json\nimport sys\n\ndef main():\n",
    "An essay on the economics of renewable energy:",
    "Once there was a dragon who lived under",
    "The museum opened its new wing, which",
    "Notes from the meeting on Tuesday:",
]


def prompts_of(llm, n_tokens):
    """16 distinct prompts of exactly n_tokens ids (no prefix shared past the first token)."""
    out = []
    for i, text in enumerate(_TEXTS):
        ids = llm.tokenize((text + " ") * 64)
        assert len(ids) >= n_tokens
        out.append(ids[:n_tokens])
    return out


@pytest.mark.parametrize("name, n_ctx", [("gemma3", 8192), ("gemma3", None), ("smollm2", 8192),
                                         ("qwen", 8192)])
def test_sixteen_streams_are_never_preempted(request, name, n_ctx):
    path = str(request.getfixturevalue(f"{name}_path"))
    # The default budget (two full contexts' worth of tokens, with the window pages they need
    # split among max_seqs sequences): n_ctx 8192 as in the issue's measurement, and Gemma 3's
    # default context (4096), whose budget used to hold one long sequence's window pages only
    # and preempted 4 times here. Speculative off: drafts would reserve pages past what the
    # streams themselves hold, and how much they draft depends on measured step times.
    with LLM(path, n_threads=2, n_ctx=n_ctx, max_seqs=N_STREAMS, speculative="off") as llm:
        st0 = llm.stats()
        assert st0["kv_bytes_total"] > 0 and st0["kv_bytes_used"] == 0
        outs = llm.generate(prompts_of(llm, N_PROMPT),
                            SamplingParams(temperature=0.0, max_tokens=N_GEN, ignore_eos=True))
        assert [len(o.token_ids) for o in outs] == [N_GEN] * N_STREAMS
        st = llm.stats()
        assert st["preemptions"] == 0, st
        assert st["kv_bytes_used"] <= st["kv_bytes_total"]
        assert st["kv_bytes_resident"] <= st["kv_bytes_total"]
        assert pages_back_to_zero(llm)
