"""Vocabulary loading and tokenizer behaviour on small hand-built vocabularies (no real model
needed): GGUF key handling and errors, SPM score merging, special-token partition, BOS/EOS,
streaming; plus the llama3/gpt2/default pre-tokenizers on Qwen's real byte-level vocabulary
against the pure-Python reference."""
import random
import threading

import numpy as np
import pytest

import tokenizer_reference as ref


def core():
    from edgellm import _core
    return _core


# ---- GGUF loading -----------------------------------------------------------------------------

def write_vocab_gguf(path, *, model="llama", tokens=None, scores=None, types=None, merges=None,
                     extra=None, skip=()):
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    if "model" not in skip:
        w.add_tokenizer_model(model)
    if tokens is not None and "tokens" not in skip:
        w.add_token_list(tokens)
    if scores is not None:
        w.add_token_scores(scores)
    if types is not None:
        w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(merges)
    for k, (fn, v) in (extra or {}).items():
        getattr(w, fn)(v)
    w.add_tensor("w", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


SPM_TOKENS = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "c", "ab", "\u2581a", "\u2581ab", "bc", "abc",
              "<0x41>", "<0xE2>", "<0x82>", "<0xAC>", "<ctl>", "<ud>"]
SPM_SCORES = [float(x) for x in (0, 0, 0, -1, -2, -2, -2, -1.5, -1.2, -0.5, -0.1, -3, 0, 0, 0, 0, 0, 0)]
SPM_TYPES = [2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 6, 6, 6, 3, 4]


def spm_file(tmp_path, **extra):
    return write_vocab_gguf(tmp_path / "spm.gguf", tokens=SPM_TOKENS, scores=SPM_SCORES, types=SPM_TYPES,
                            extra=extra)


def test_spm_from_gguf_defaults_and_merging(tmp_path):
    tok = core().Tokenizer.from_gguf(spm_file(tmp_path))
    assert (tok.model, tok.n_vocab, tok.bos_id, tok.eos_id, tok.add_bos, tok.add_space_prefix) == \
        ("llama", len(SPM_TOKENS), 1, 2, True, True)
    assert tok.chat_template is None
    # " abc" -> "▁abc": score order merges b+c (-0.1) first, then ▁+a (-1.2); "▁a"+"bc" has no token.
    assert [tok.token_text(i) for i in tok.encode("abc", add_special=False)] == ["\u2581a", "bc"]
    assert tok.encode("abc") == [1, 8, 10]
    # "ab" alone: ▁+a then ▁a+b -> "▁ab" (score -0.5).
    assert tok.encode("ab", add_special=False) == [9]
    # Byte fallback: 'A' has <0x41>; '€' = e2 82 ac has all three byte tokens; 'Z' has none -> <unk>.
    assert tok.encode("A€", add_special=False) == [3, 12, 13, 14, 15]
    assert tok.decode(tok.encode("ab A€", add_special=False)) == "ab A€"
    assert tok.encode("Z", add_special=False) == [3, 0]


def test_spm_special_partition_and_space_prefix(tmp_path):
    tok = core().Tokenizer.from_gguf(spm_file(tmp_path))
    # CONTROL text stays text unless parse_special; USER_DEFINED is always matched.
    assert 16 not in tok.encode("a<ctl>a", add_special=False, parse_special=False)
    assert tok.encode("a<ctl>a", add_special=False, parse_special=True) == [8, 16, 8]  # ▁ after a special
    assert tok.encode("a<ud>a", add_special=False, parse_special=False) == [8, 17, 8]
    assert tok.decode([8, 16, 8]) == "a<ctl> a"
    assert tok.decode([8, 16, 8], skip_special=True) == "a a"


def test_gguf_flags_override_defaults(tmp_path):
    path = spm_file(tmp_path, a=("add_add_bos_token", False), b=("add_add_eos_token", True),
                    c=("add_add_space_prefix", False), d=("add_eos_token_id", 16),
                    e=("add_chat_template", "{{ messages }}"))
    tok = core().Tokenizer.from_gguf(path)
    assert (tok.add_bos, tok.add_space_prefix, tok.eos_id, tok.chat_template) == (False, False, 16, "{{ messages }}")
    assert tok.encode("ab") == [7, 16]  # no BOS, no space prefix: "ab" then EOS
    assert 16 in tok.eog_ids


def test_missing_keys_name_the_key(tmp_path):
    ModelFormatError = core().ModelFormatError
    with pytest.raises(ModelFormatError, match="tokenizer.ggml.model"):
        core().Tokenizer.from_gguf(write_vocab_gguf(tmp_path / "a.gguf", tokens=["a"], skip=("model",)))
    with pytest.raises(ModelFormatError, match="tokenizer.ggml.tokens"):
        core().Tokenizer.from_gguf(write_vocab_gguf(tmp_path / "b.gguf", tokens=["a"], skip=("tokens",)))
    with pytest.raises(ModelFormatError, match="tokenizer.ggml.merges"):
        core().Tokenizer.from_gguf(write_vocab_gguf(tmp_path / "c.gguf", model="gpt2", tokens=["a", "b"]))
    with pytest.raises(ModelFormatError, match="'rwkv' is not supported"):  # bert is (WordPiece)
        core().Tokenizer.from_gguf(write_vocab_gguf(tmp_path / "d.gguf", model="rwkv", tokens=["a"]))
    with pytest.raises(ModelFormatError, match="token_type"):
        core().Tokenizer.from_gguf(write_vocab_gguf(tmp_path / "e.gguf", tokens=["a", "b"], types=[1]))
    with pytest.raises(ModelFormatError, match=r"merges\[0\]"):
        core().Tokenizer.from_gguf(write_vocab_gguf(tmp_path / "f.gguf", model="gpt2", tokens=["a"], merges=["ab"]))


def test_bpe_from_gguf_eog_and_byte_fallback(tmp_path):
    toks = [ref.BYTE_TO_UNICODE[b] for b in range(256)] + ["ab", "abc", "<|im_end|>", "</s>", "Ġa"]
    merges = ["a b", "ab c", "Ġ a"]
    path = write_vocab_gguf(tmp_path / "bpe.gguf", model="gpt2", tokens=toks, merges=merges,
                            extra={"p": ("add_tokenizer_pre", "gpt-2")})
    tok = core().Tokenizer.from_gguf(path)
    assert tok.pre == "gpt-2" and tok.add_bos is False and tok.bos_id == 11
    # "</s>" (NORMAL in the file) and "<|im_end|>" join the EOG set by text, like llama.cpp.
    assert sorted(tok.eog_ids) == sorted([11, 258, 259])
    # "a b" (rank 0) beats "Ġ a" (rank 2), so " abd" ends as Ġ + ab + d.
    assert tok.encode("abc abd", add_special=False) == [257, 32, 256, 100]
    assert tok.encode(" a", add_special=False) == [260]
    assert tok.decode([257, 32, 256, 100]) == "abc abd"
    # "</s>" became CONTROL: plain text unless parse_special.
    assert tok.encode("</s>", add_special=False, parse_special=True) == [259]
    assert 259 not in tok.encode("</s>", add_special=False, parse_special=False)


def test_unknown_pre_falls_back_to_default(tmp_path, capfd):
    toks = [ref.BYTE_TO_UNICODE[b] for b in range(256)]
    path = write_vocab_gguf(tmp_path / "x.gguf", model="gpt2", tokens=toks, merges=["a b"],
                            extra={"p": ("add_tokenizer_pre", "brand-new")})
    tok = core().Tokenizer.from_gguf(path)
    assert "brand-new" in capfd.readouterr().err
    text = "Hi!!! 12345 ok"
    want = ref.ReferenceBpe(toks, ["a b"], "default").encode(text)
    assert tok.encode(text, add_special=False) == want


# ---- from_vocab (test-only construction) -------------------------------------------------------

def test_from_vocab_and_stream_decoder_bpe_bytes():
    toks = [ref.BYTE_TO_UNICODE[b] for b in range(256)]
    tok = core().Tokenizer.from_vocab({"model": "gpt2", "tokens": toks, "merges": [], "pre": "gpt2"})
    text = "aé€🦙"
    ids = tok.encode(text, add_special=False)
    assert len(ids) == len(text.encode())  # no merges: one token per byte
    dec = core().StreamDecoder(tok)
    outs = [dec.push(i) for i in ids]
    assert outs == ["a", "", "é", "", "", "€", "", "", "", "🦙"]
    assert dec.flush() == ""
    # Invalid byte sequences come out as U+FFFD, never as partial characters.
    dec = core().StreamDecoder(tok)
    assert dec.push(0xE2) == "" and dec.push(ord("a")) == "\ufffda"
    with pytest.raises(core().InvalidRequestError, match="300"):
        dec.push(300)
    assert tok.decode([0xE2, 0x82]) == "\ufffd"


def test_phi3_special_tokens_strip_following_whitespace():
    toks = ["<unk>", "<s>", "</s>", "\u2581", "a", "\u2581a", "<|end|>", "<|user|>"]
    vocab = {"model": "llama", "tokens": toks, "scores": [0.0, 0, 0, -1, -1, -0.5, 0, 0],
             "token_type": [2, 3, 3, 1, 1, 1, 3, 3], "add_bos": False}
    plain = core().Tokenizer.from_vocab(vocab)
    phi3 = core().Tokenizer.from_vocab(dict(vocab, name="Phi-3 mini"))
    assert plain.encode("<|user|> a", parse_special=True) == [7, 3, 5]
    # RSTRIP eats the space after <|user|>; the space prefix after a special then gives "▁a".
    assert phi3.encode("<|user|> a", parse_special=True) == [7, 5]


def test_bad_text_is_a_clear_error():
    tok = core().Tokenizer.from_vocab({"model": "gpt2", "tokens": [ref.BYTE_TO_UNICODE[b] for b in range(256)],
                                       "merges": [], "pre": "gpt2"})
    with pytest.raises(core().InvalidRequestError, match="surrogate"):
        tok.encode("a\ud800b")
    with pytest.raises(TypeError):
        tok.encode(None)
    assert tok.encode("", add_special=True, parse_special=True) == []
    assert tok.decode([]) == ""


def test_concurrent_encode_is_consistent():
    toks = [ref.BYTE_TO_UNICODE[b] for b in range(256)] + ["ab", "abc"]
    tok = core().Tokenizer.from_vocab({"model": "gpt2", "tokens": toks, "merges": ["a b", "ab c"], "pre": "gpt2"})
    text = "abc ab a " * 2000
    want = tok.encode(text, add_special=False)
    results = []

    def work():
        results.append(tok.encode(text, add_special=False))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [want] * 4


# ---- pre-tokenizers no real model uses, on Qwen's vocabulary -----------------------------------

@pytest.mark.real_model
@pytest.mark.parametrize("pre", ["llama3", "gpt2", "default"])
def test_other_pretokenizers_match_reference(pre):
    from conftest import require_model
    from test_tokenizer_bpe import FIXED, random_text
    qwen = core().Tokenizer.from_gguf(str(require_model("qwen2.5-coder-0.5b")))
    tokens, merges = qwen.tokens, qwen.merges
    tok = core().Tokenizer.from_vocab({"model": "gpt2", "tokens": tokens, "merges": merges, "pre": pre,
                                       "token_type": qwen.token_types})
    reference = ref.ReferenceBpe(tokens, merges, pre, ignore_merges=(pre == "llama3"))
    rng = random.Random(5)
    bad = []
    for s in FIXED + [random_text(rng, rng.randint(1, 40)) for _ in range(150)]:
        got, want = tok.encode(s, add_special=False), reference.encode(s)
        if got != want:
            bad.append((s, got, want))
    assert not bad, bad[:3]
