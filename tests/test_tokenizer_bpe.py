"""Byte-level BPE (SmolLM2: pre `smollm`; Qwen2.5-Coder: pre `qwen2`) against an independent
pure-Python reference (Python `re` with spelled-out Unicode classes + the textbook merge loop),
plus round trips. The golden ids from llama.cpp are checked in test_tokenizer_golden.py."""
import random

import pytest

from conftest import require_model
import tokenizer_reference as ref

pytestmark = pytest.mark.real_model

BLOCKS = [
    (0x20, 0x7E), (0x20, 0x7E), (0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF),
    (0x590, 0x6FF), (0x900, 0x97F), (0x2000, 0x206F), (0x2070, 0x209F), (0x20A0, 0x20CF),
    (0x2460, 0x24FF), (0x3000, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0xFF00, 0xFFEF),
    (0x1F300, 0x1F64F), (0x1D400, 0x1D4FF), (0x10330, 0x1034F),
]
SPECIALS = ["'s", "'T", "'re", "'LL", "\r\n", "\n\n", "  ", "\t", " \n ", "123", "٣٤", "Ⅻ", "...", "$+<=>^~|"]


def random_text(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.12:
            out.append(rng.choice(SPECIALS))
        elif r < 0.25:
            out.append(" " * rng.randint(1, 3))
        else:
            lo, hi = rng.choice(BLOCKS)
            cp = rng.randint(lo, hi)
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0x41
            out.append(chr(cp))
    return "".join(out)


FIXED = [
    "Hello world", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\r\n", "I'm you'RE they'll WE'VE",
    "x = 12345678; y = 3.14e-10", "ﬁne ǅemo ½ ² ³ ٣", "😀👍🏽 family: 👨‍👩‍👧", "中文，标点。“引号”",
    "def f(x):\n\treturn x ** 2  # comment\n", "\u00a0nbsp\u2003em\u3000ideo", "a\u0301e\u0300 combining",
    "\x00\x01\x1c\x1f controls", "", " ", "\n", "!!!???", "a'b'c'", "'", "''s", "Ⅳ Ⅴ ⅲ", "\u2028\u2029\u0085",
]

_cache = {}


def setup(model):
    from edgellm import _core
    if model not in _cache:
        tok = _core.Tokenizer.from_gguf(str(require_model(model)))
        # Vocabulary data as our GGUF reader loaded it (the golden-id tests vouch for it; the
        # `gguf` package's reader takes ~15 s on these files).
        reference = ref.ReferenceBpe(tok.tokens, tok.merges, {"smollm": "smollm", "qwen2": "qwen2"}[tok.pre])
        _cache[model] = (tok, reference)
    return _cache[model]


@pytest.mark.parametrize("model", ["smollm2", "qwen2.5-coder-0.5b"])
def test_pretokenizer_and_merges_match_reference_on_fixed_strings(model):
    tok, reference = setup(model)
    for s in FIXED:
        assert tok.encode(s, add_special=False) == reference.encode(s), repr(s)


@pytest.mark.parametrize("model", ["smollm2", "qwen2.5-coder-0.5b"])
def test_matches_reference_on_random_unicode(model):
    tok, reference = setup(model)
    rng = random.Random(1234)
    bad = []
    for _ in range(300):
        s = random_text(rng, rng.randint(1, 40))
        got = tok.encode(s, add_special=False)
        want = reference.encode(s)
        if got != want:
            bad.append((s, got, want))
    assert not bad, bad[:3]


@pytest.mark.parametrize("model", ["smollm2", "qwen2.5-coder-0.5b"])
def test_round_trip(model):
    tok, _ = setup(model)
    rng = random.Random(99)
    for s in FIXED + [random_text(rng, rng.randint(1, 60)) for _ in range(300)]:
        assert tok.decode(tok.encode(s, add_special=False)) == s, repr(s)


def test_long_text_is_tokenized_whole():
    tok, _ = setup("qwen2.5-coder-0.5b")
    text = ("The quick brown fox jumps over the lazy dog; 12345 ünïcödé 漢字 🙂.\n" * 800)
    ids = tok.encode(text, add_special=False)
    assert len(ids) > 10000
    assert tok.decode(ids) == text


def test_byte_level_pieces():
    tok, _ = setup("smollm2")
    ids = tok.encode("é🦙", add_special=False)
    assert b"".join(tok.token_to_piece(i) for i in ids) == "é🦙".encode()
    assert tok.token_to_piece(tok.encode(" a", add_special=False)[0]) == b" a"
    # Special token pieces are their text (rendered) or nothing (skip_special).
    assert tok.token_to_piece(2) == b"<|im_end|>"
    assert tok.token_to_piece(2, special=False) == b""
    assert tok.decode([19556, 2], skip_special=True) == "Hello"


# ---- gpt-4o / o200k pre-tokenizer (gpt-oss, Llama 4) --------------------------------------------
# No o200k vocabulary is reachable here, so Qwen2.5's byte-level vocabulary and merges are run
# through the gpt-4o split: the merges make word boundaries visible in the ids, and the
# reference is llama.cpp's regex for this pre-tokenizer run by Python's `re`.
GPT4O_FIXED = FIXED + [
    "HelloWorld XMLHttpRequest iPhone's", "CamelCaseNames and snake_case", "I'M SHOUTING'S",
    "ÀÉÎõü Ωmega ΣΣσ ǅemo Ǆ", "path/to/file.txt\n/usr", "!!!\n\n/", "1234567 12 3",
    "don'T we'Ll 'S", "a1b2 ÅB ÖÄ", "東京Tokyo", "tab\t\tX", "x  \n  y",
]


@pytest.fixture(scope="module")
def gpt4o():
    from edgellm import _core
    tok, _ = setup("qwen2.5-coder-0.5b")
    ours = _core.Tokenizer.from_vocab({"model": "gpt2", "tokens": list(tok.tokens),
                                       "merges": list(tok.merges), "pre": "gpt-4o"})
    return ours, ref.ReferenceBpe(tok.tokens, tok.merges, "gpt4o")


def test_gpt4o_pretokenizer_matches_reference(gpt4o):
    ours, reference = gpt4o
    assert ours.pre == "gpt-4o"
    for s in GPT4O_FIXED:
        assert ours.encode(s, add_special=False) == reference.encode(s), repr(s)
    rng = random.Random(4242)
    bad = []
    for _ in range(300):
        s = random_text(rng, rng.randint(1, 40))
        got, want = ours.encode(s, add_special=False), reference.encode(s)
        if got != want:
            bad.append((s, got, want))
    assert not bad, bad[:3]


def test_gpt4o_splits_case_changes_where_qwen2_does_not(gpt4o):
    ours, reference = gpt4o
    words = ref.pretokenize("HelloWorld iPhone's", "gpt4o")
    assert words == ["Hello", "World", " i", "Phone's"]
    assert ref.pretokenize("HelloWorld", "qwen2") == ["HelloWorld"]
    tok, _ = setup("qwen2.5-coder-0.5b")
    for s in ("iPhone", "JavaScript", "YouTube"):  # one Qwen token each; two words for gpt-4o
        assert len(tok.encode(s, add_special=False)) == 1
        assert ours.encode(s, add_special=False) == reference.encode(s)
        assert len(ours.encode(s, add_special=False)) == 2
