"""Qwen2.5-Coder through the chat path: its own Jinja template, `<|im_end|>` ends each answer."""
import pytest

from conftest import require_model

edgellm = pytest.importorskip("edgellm")


@pytest.mark.real_model
def test_two_turn_chat_stops_at_im_end():
    llm = edgellm.LLM(str(require_model("qwen2.5-coder-0.5b")), n_ctx=1024)
    im_end = llm.tokenize("<|im_end|>", add_special=False, parse_special=True)
    assert len(im_end) == 1
    params = edgellm.SamplingParams(temperature=0, max_tokens=200)
    msgs = [{"role": "user", "content": "Write a Python function that adds two numbers. Only code."}]
    first = llm.chat(msgs, params)
    assert first.finish_reason == "stop" and first.token_ids[-1] == im_end[0]
    assert "def " in first.text and "+" in first.text and "<|im_end|>" not in first.text
    msgs += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Now make it multiply instead."}]
    second = llm.chat(msgs, params)
    assert second.finish_reason == "stop" and second.token_ids[-1] == im_end[0]
    assert "*" in second.text  # the second answer builds on the first
    prompt = llm.apply_chat_template(msgs)
    assert prompt.count("<|im_start|>assistant") == 2 and prompt.endswith("<|im_start|>assistant\n")
    llm.close()
