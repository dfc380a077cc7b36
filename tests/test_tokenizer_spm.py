"""SPM (Gemma3) against the `sentencepiece` library running the GGUF's own vocabulary (BPE
model, byte fallback, identity normalization, add_dummy_prefix as in the file), plus round trips
and the streaming decoder on byte-fallback tokens."""
import random

import pytest

from conftest import require_model
import tokenizer_reference as ref
from test_tokenizer_bpe import FIXED, random_text

pytestmark = pytest.mark.real_model

_cache = {}


def setup():
    from edgellm import _core
    if "gemma" not in _cache:
        import sentencepiece as spm
        path = str(require_model("gemma3"))
        tok = _core.Tokenizer.from_gguf(path)
        scores = tok.scores
        proto = ref.sentencepiece_model_proto(
            tok.tokens, scores, tok.token_types, add_dummy_prefix=tok.add_space_prefix,
            unk_id=3, bos_id=2, eos_id=1, pad_id=0)
        sp = spm.SentencePieceProcessor(model_proto=proto)
        _cache["gemma"] = (tok, sp)
    return _cache["gemma"]


def varied_strings():
    rng = random.Random(7)
    out = list(FIXED)
    out += ["   many   spaces   ", "\n\n\n", "1234567890" * 3, "α-β_γ.δ", "x" * 200, "ab" * 50,
            "for (int i = 0; i < n; ++i) { sum += a[i]; }", "<b>bold</b> &amp; <i>it</i>",
            "Ελληνικά, русский, العربية, हिन्दी, 한국어, ไทย", "\U0001F9D1\u200D\U0001F4BB \U0001FAE0"]
    out += [random_text(rng, rng.randint(1, 50)) for _ in range(300)]
    # "</s>" is USER_DEFINED in the file but forced to CONTROL by llama.cpp's EOG fix-up, so
    # llama.cpp and sentencepiece legitimately disagree about it.
    return [s for s in out if "</s>" not in s]


def test_matches_sentencepiece():
    tok, sp = setup()
    bad = []
    for s in varied_strings():
        got = tok.encode(s, add_special=False, parse_special=False)
        want = sp.encode(s)
        if got != want:
            bad.append((s, got, want))
    assert not bad, bad[:3]


def test_space_prefix_matches_sentencepiece_dummy_prefix():
    """The same vocabulary with add_space_prefix (Llama-2 style) against add_dummy_prefix."""
    import sentencepiece as spm
    from edgellm import _core
    tok, _ = setup()
    # Gemma's USER_DEFINED whitespace tokens would split the text into fragments, and llama.cpp
    # prefixes a space after each (sentencepiece does not): make them NORMAL on both sides.
    types = [1 if t == 4 else t for t in tok.token_types]
    vocab = {"model": "llama", "tokens": tok.tokens, "scores": tok.scores, "token_type": types,
             "bos": 2, "eos": 1, "unk": 3, "add_space_prefix": True}
    prefixed = _core.Tokenizer.from_vocab(vocab)
    sp = spm.SentencePieceProcessor(model_proto=ref.sentencepiece_model_proto(
        tok.tokens, tok.scores, types, add_dummy_prefix=True, unk_id=3, bos_id=2, eos_id=1, pad_id=0))
    bad = []
    for s in varied_strings()[:150]:
        got = prefixed.encode(s, add_special=False)
        if got != sp.encode(s):
            bad.append((s, got, sp.encode(s)))
        # Decoding removes the prefix space again.
        assert prefixed.decode(got) == s, repr(s)
    assert not bad, bad[:3]
    assert prefixed.encode("Hi", add_special=False)[0] == tok.encode(" Hi", add_special=False)[0]


def test_round_trip():
    tok, _ = setup()
    for s in varied_strings():
        assert tok.decode(tok.encode(s, add_special=False)) == s, repr(s)


def test_byte_fallback_and_pieces():
    tok, _ = setup()
    # A private-use codepoint has no piece: it must fall back to <0xXX> byte tokens.
    s = "\U000F0001"
    ids = tok.encode(s, add_special=False)
    assert [tok.token_text(i) for i in ids] == ["<0xF3>", "<0xB0>", "<0x80>", "<0x81>"]
    assert b"".join(tok.token_to_piece(i) for i in ids) == s.encode()
    # '▁' stands for a space in pieces.
    hello = tok.encode(" Hello", add_special=False)
    assert tok.token_text(hello[0]).startswith("\u2581") and tok.token_to_piece(hello[0]) == b" Hello"


def test_stream_decoder_never_emits_partial_utf8():
    from edgellm import _core
    tok, _ = setup()
    text = "A \U000F0001 b \U000F0002\U000F0003 c \U00100000 end"
    ids = tok.encode(text, add_special=False)
    assert len(ids) > len(text.split())  # byte fallback tokens are present
    dec = _core.StreamDecoder(tok)
    pieces = [dec.push(i) for i in ids]
    pieces.append(dec.flush())
    assert "".join(pieces) == text
    for p in pieces:
        assert "\ufffd" not in p
        p.encode("utf-8")  # whole characters only (a str with lone surrogates would fail)
    # The first byte of a 4-byte character yields nothing until the character is complete.
    first = tok.encode("\U000F0001", add_special=False)
    dec = _core.StreamDecoder(tok)
    assert [dec.push(i) for i in first] == ["", "", "", "\U000F0001"]


def test_stream_decoder_flush_reports_unfinished_character():
    from edgellm import _core
    tok, _ = setup()
    ids = tok.encode("\U000F0001", add_special=False)
    dec = _core.StreamDecoder(tok)
    assert dec.push(ids[0]) == "" and dec.push(ids[1]) == ""
    assert dec.flush() == "\ufffd"
    assert dec.flush() == ""
