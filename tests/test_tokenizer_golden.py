"""Tokenizers against llama.cpp's ids on the real models (shared/golden/*.json `tokenize`)."""
import pytest

from conftest import require_model, load_golden

pytestmark = pytest.mark.real_model

MODELS = [
    ("smollm2", "smollm2-135m-q4_1"),
    ("gemma3", "gemma3-270m-q4_k_m"),
    ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-q4_k_m"),
]

_cache = {}


def tokenizer(model):
    from edgellm import _core
    if model not in _cache:
        _cache[model] = _core.Tokenizer.from_gguf(str(require_model(model)))
    return _cache[model]


@pytest.mark.parametrize("model,golden_name", MODELS)
def test_every_golden_tokenize_entry_matches(model, golden_name):
    tok = tokenizer(model)
    entries = load_golden(golden_name)["tokenize"]
    assert entries
    mismatches = []
    for e in entries:
        ids = tok.encode(e["text"], add_special=e["add_special"], parse_special=e["parse_special"])
        if ids != e["ids"]:
            mismatches.append((e["text"], e["add_special"], e["parse_special"], ids, e["ids"]))
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("model,golden_name", MODELS)
def test_eog_set_matches_llama_cpp(model, golden_name):
    tok = tokenizer(model)
    assert sorted(tok.eog_ids) == sorted(load_golden(golden_name)["eog_ids"])
    for i in tok.eog_ids:
        assert tok.is_eog(i)
    assert not tok.is_eog(tok.encode("hello", add_special=False)[0])


def test_vocab_metadata():
    smol, gemma, qwen = (tokenizer(m) for m, _ in MODELS)
    assert (smol.model, smol.pre, smol.n_vocab) == ("gpt2", "smollm", 49152)
    assert (gemma.model, gemma.n_vocab, gemma.add_bos, gemma.bos_id, gemma.eos_id) == ("llama", 262144, True, 2, 1)
    assert gemma.add_space_prefix is False  # the Gemma3 converter writes false; verified in the file
    assert (qwen.model, qwen.pre, qwen.n_vocab, qwen.add_bos) == ("gpt2", "qwen2", 151936, False)
    assert qwen.token_text(151644) == "<|im_start|>"
    assert "<|im_start|>" in smol.chat_template
    assert "tools" in qwen.chat_template
    assert gemma.arch == "gemma3"
    assert qwen.special_ids["fim_pre"] == 151659 and qwen.special_ids["eos"] == 151645
    assert gemma.special_ids["eot"] == 106 and smol.special_ids["eot"] in (0, 2)


def test_special_tokens_only_with_parse_special():
    qwen = tokenizer("qwen2.5-coder-0.5b")
    text = "<|im_start|>user\nhi<|im_end|>"
    assert qwen.encode(text, add_special=False, parse_special=True) == [151644, 872, 198, 6023, 151645]
    plain = qwen.encode(text, add_special=False, parse_special=False)
    assert 151644 not in plain and 151645 not in plain
    assert qwen.decode(plain) == text


def test_gemma_bos_and_user_defined_tokens():
    gemma = tokenizer("gemma3")
    ids = gemma.encode("Hi", add_special=True)
    assert ids[0] == 2 and gemma.decode(ids[1:]) == "Hi"
    assert gemma.encode("", add_special=True) == [2]
    # '\t' is a USER_DEFINED token in Gemma's vocab: matched even without parse_special.
    tab = gemma.encode("\t", add_special=False, parse_special=False)
    assert len(tab) == 1 and gemma.token_types[tab[0]] == 4


@pytest.mark.parametrize("model", [m for m, _ in MODELS])
def test_out_of_range_ids_raise_invalid_request(model):
    import edgellm
    tok = tokenizer(model)
    for bad in (-1, tok.n_vocab, tok.n_vocab + 100):
        with pytest.raises(edgellm.InvalidRequestError, match=str(bad)):
            tok.decode([1, bad])
        with pytest.raises(edgellm.InvalidRequestError, match=str(bad)):
            tok.token_to_piece(bad)
        with pytest.raises(edgellm.InvalidRequestError):
            tok.token_text(bad)


def test_missing_file_is_model_format_error(tmp_path):
    import edgellm
    from edgellm import _core
    with pytest.raises(edgellm.ModelFormatError):
        _core.Tokenizer.from_gguf(str(tmp_path / "nope.gguf"))
