"""Chat templates: the models' own Jinja templates (SmolLM2, Qwen2.5-Coder with tools), the
built-in Gemma form, template choice and error reporting."""
import json

import pytest

from conftest import require_model

_cache = {}


def tokenizer(model):
    from edgellm import _core
    if model not in _cache:
        _cache[model] = _core.Tokenizer.from_gguf(str(require_model(model)))
    return _cache[model]


# ---- without models ---------------------------------------------------------------------------

def test_builtin_chatml_and_generation_prompt():
    from edgellm.chat_template import render_chat
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert render_chat(msgs, "chatml") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert render_chat(msgs, "chatml", add_generation_prompt=False).endswith("Hi<|im_end|>\n")
    assert render_chat(msgs, None) == render_chat(msgs, "chatml")


def test_builtin_gemma_merges_system_into_first_user_turn():
    from edgellm.chat_template import render_chat
    msgs = [
        {"role": "system", "content": " You are terse. "},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": "Bye"},
    ]
    assert render_chat(msgs, "gemma") == (
        "<start_of_turn>user\nYou are terse.\n\nHello<end_of_turn>\n"
        "<start_of_turn>model\nHi!<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n"
        "<start_of_turn>model\n")


def test_builtin_llama3_llama2_zephyr():
    from edgellm.chat_template import render_chat
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"},
            {"role": "user", "content": "V"}]
    assert render_chat(msgs, "llama3") == (
        "<|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nV<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert render_chat(msgs, "llama2") == "[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST]A</s>[INST] V [/INST]"
    assert render_chat(msgs[1:2], "zephyr") == "<|user|>\nU<|endoftext|>\n<|assistant|>\n"


def test_content_parts_are_flattened():
    from edgellm.chat_template import render_chat, ChatTemplateError
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert "<|im_start|>user\nab<|im_end|>" in render_chat(msgs, "chatml")
    with pytest.raises(ChatTemplateError, match="image_url"):
        render_chat([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], "chatml")


def test_choose_template():
    from edgellm.chat_template import choose_template
    assert choose_template("{{ x }}", ["<|im_start|>"]) == "{{ x }}"
    assert choose_template(None, ["<bos>", "<start_of_turn>", "<end_of_turn>"]) == "gemma"
    assert choose_template(None, ["a", "<|im_start|>", "b"]) == "chatml"
    assert choose_template(None, {"<|start_header_id|>"}) == "llama3"
    assert choose_template(None, []) == "chatml"
    assert choose_template("{{ x }}", [], override="gemma") == "gemma"
    assert choose_template("{{ x }}", [], override="Llama-3") == "llama3"


def test_override_with_jinja_file(tmp_path):
    from edgellm.chat_template import choose_template, render_chat, ChatTemplateError
    p = tmp_path / "mine.jinja"
    p.write_text("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")
    tmpl = choose_template("{{ other }}", [], override=str(p))
    assert render_chat([{"role": "user", "content": "x"}], tmpl) == "[user]x"
    with pytest.raises(ChatTemplateError, match="unknown chat template"):
        choose_template(None, [], override="no-such-template")


def test_hf_environment_features():
    from edgellm.chat_template import render_chat
    tmpl = ("{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
            "{{ m.content | tojson }}\n{% endfor %}{{ strftime_now('%Y') | length }}")
    out = render_chat([{"role": "user", "content": "é \"q\""}, {"role": "user", "content": "never"}], tmpl)
    # tojson keeps non-ASCII; loopcontrols `break` works; trim_blocks removes the newline after tags.
    assert out == '"é \\"q\\""\n4'


def test_template_errors_surface_clearly():
    import edgellm
    from edgellm.chat_template import render_chat, ChatTemplateError
    tmpl = "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with user') }}{% endif %}ok"
    with pytest.raises(ChatTemplateError, match="Conversation must start with user") as ei:
        render_chat([{"role": "system", "content": "x"}], tmpl)
    assert isinstance(ei.value, edgellm.InvalidRequestError)
    with pytest.raises(ChatTemplateError, match="not valid Jinja"):
        render_chat([{"role": "user", "content": "x"}], "{% for %}")
    with pytest.raises(ChatTemplateError, match="no 'role'"):
        render_chat([{"content": "x"}], "chatml")
    # The sandbox refuses attribute access to Python internals.
    with pytest.raises(ChatTemplateError):
        render_chat([{"role": "user", "content": "x"}], "{{ messages.__class__.__mro__ }}")


# ---- the real models' templates ---------------------------------------------------------------

@pytest.mark.real_model
def test_smollm2_own_template():
    from edgellm.chat_template import choose_template, render_chat
    tok = tokenizer("smollm2")
    tmpl = choose_template(tok.chat_template, tok.tokens)
    assert tmpl == tok.chat_template
    plain = render_chat([{"role": "user", "content": "Hi"}], tmpl)
    assert plain == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    sys_ = render_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], tmpl)
    assert sys_ == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    multi = render_chat([{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"},
                         {"role": "user", "content": "and 2+2?"}], tmpl)
    assert multi.count("<|im_start|>") == 5 and multi.index("2<|im_end|>") < multi.index("and 2+2?")
    ids = tok.encode(plain, add_special=True, parse_special=True)
    assert ids[0] == 1 and ids.count(1) == 3 and ids.count(2) == 2


@pytest.mark.real_model
def test_gemma_uses_builtin_form():
    from edgellm.chat_template import choose_template, render_chat
    tok = tokenizer("gemma3")
    assert tok.chat_template is None
    tmpl = choose_template(tok.chat_template, tok.tokens)
    assert tmpl == "gemma"
    prompt = render_chat([{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"}], tmpl)
    assert prompt == "<start_of_turn>user\nSys\n\nHi<end_of_turn>\n<start_of_turn>model\n"
    ids = tok.encode(prompt, add_special=True, parse_special=True)
    assert ids[:3] == [2, 105, 2364] and 106 in ids


@pytest.mark.real_model
def test_qwen_template_plain_system_and_tools():
    from edgellm.chat_template import choose_template, render_chat
    tok = tokenizer("qwen2.5-coder-0.5b")
    tmpl = choose_template(tok.chat_template, tok.tokens)
    plain = render_chat([{"role": "user", "content": "Write hello world"}], tmpl)
    assert plain == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                     "<|im_start|>user\nWrite hello world<|im_end|>\n<|im_start|>assistant\n")
    with_sys = render_chat([{"role": "system", "content": "You code."}, {"role": "user", "content": "x"}], tmpl)
    assert with_sys.startswith("<|im_start|>system\nYou code.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n")
    assert "Alibaba" not in with_sys
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Météo for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    out = render_chat([{"role": "user", "content": "Weather in Paris?"}], tmpl, tools=tools)
    assert "# Tools" in out and "<tools>" in out
    assert json.dumps(tools[0], ensure_ascii=False) in out  # tool JSON, non-ASCII kept
    # A tool-call turn and its response render through the template's tool branches.
    conv = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "18C"}]
    out = render_chat(conv, tmpl, tools=tools)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>' in out
    assert "<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>" in out


def test_undefined_variables_add_as_nothing():
    """As llama.cpp's template engine: an undefined variable renders empty and `+` with it keeps
    the other operand (templates such as firefunction-v2 concatenate variables clients never
    send); tests of undefined stay false."""
    from edgellm.chat_template import render_chat
    out = render_chat([{"role": "user", "content": "hi"}],
                      '{{ "a" + functions + "b" }}|{{ missing }}|{% if missing %}x{% else %}y{% endif %}')
    assert out == "ab||y"


def test_builtin_command_r():
    from edgellm.chat_template import render_chat
    out = render_chat([{"role": "system", "content": "You are a test."},
                       {"role": "user", "content": " Hi there "}], "command-r")
    assert out == ("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>"
                   "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|>"
                   "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")


# The templates Phi-3.5-mini-instruct and Gemma 2 instruct GGUFs carry as tokenizer.chat_template.
PHI35_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}")
GEMMA2_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}")


def test_phi3_and_gemma2_own_templates_render():
    from edgellm.chat_template import ChatTemplateError, render_chat
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    assert render_chat(msgs, PHI35_TEMPLATE, bos_token="<s>", eos_token="<|endoftext|>") == (
        "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n"
        "<|user|>\nBye<|end|>\n<|assistant|>\n")
    assert render_chat(msgs[1:], GEMMA2_TEMPLATE, bos_token="<bos>", eos_token="<eos>") == (
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        render_chat(msgs, GEMMA2_TEMPLATE, bos_token="<bos>", eos_token="<eos>")


def test_builtin_phi3_and_its_choice_by_vocabulary():
    from edgellm.chat_template import choose_template, render_chat
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert render_chat(msgs, "phi3") == "<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n"
    assert render_chat(msgs, "phi3") == render_chat(msgs, PHI35_TEMPLATE, bos_token="<s>", eos_token="</s>")
    # A Phi-3 vocabulary (no template in the file) gets phi3, not zephyr; zephyr's stays zephyr.
    assert choose_template(None, ["<s>", "<|assistant|>", "<|end|>", "<|user|>"]) == "phi3"
    assert choose_template(None, ["<|assistant|>", "<|user|>"]) == "zephyr"
    assert choose_template(None, [], override="Phi-3") == "phi3"
