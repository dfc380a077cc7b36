"""The converter's vocabulary (edgellm/convert/tokenizer.py) against the Hugging Face
`tokenizers` library on the same tokenizer.json: the engine, loading the converted keys,
must give identical ids on the shared golden strings and on random unicode. The BPE
vocabularies are the real SmolLM2 (pre-tokenizer Digits + ByteLevel → `smollm`) and
Qwen2.5-Coder (Split(qwen2 regex) + ByteLevel → `qwen2`) ones, rebuilt as tokenizer.json
files with `tokenizers` from the GGUF files' tokens and merges."""
import json
import random

import pytest

from conftest import load_golden, require_model
from test_tokenizer_bpe import FIXED, random_text

tokenizers = pytest.importorskip("tokenizers")
core = pytest.importorskip("edgellm._core")

from edgellm.convert.tokenizer import identify_pre, vocab_metadata  # noqa: E402
from edgellm.convert.gguf_out import add_kv  # noqa: E402

CASES = {"smollm2": ("smollm2-135m-q4_1", "smollm"), "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b-q4_k_m", "qwen2")}
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def hf_tokenizer(src, pre):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(src.tokens)}
    merges = [tuple(m.split(" ", 1)) for m in src.merges]
    tok = Tokenizer(models.BPE(vocab, merges))
    if pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    types = src.token_types
    tok.add_special_tokens([AddedToken(src.tokens[i], special=True, normalized=False)
                            for i in range(len(src.tokens)) if types[i] == 3])
    return tok


_cache = {}


def pair(model, tmp_path_factory):
    import gguf

    if model not in _cache:
        golden_name, pre = CASES[model]
        src = core.Tokenizer.from_gguf(str(require_model(model)))
        d = tmp_path_factory.mktemp(model)
        hf = hf_tokenizer(src, pre)
        hf.save(str(d / "tokenizer.json"))
        kv = vocab_metadata(str(d), len(src.tokens), {})
        assert dict(kv)["tokenizer.ggml.pre"] == pre
        w = gguf.GGUFWriter(str(d / "vocab.gguf"), "llama")
        for k, v in kv:
            add_kv(w, k, v)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        w.close()
        _cache[model] = (core.Tokenizer.from_gguf(str(d / "vocab.gguf")), hf, golden_name)
    return _cache[model]


@pytest.mark.real_model
@pytest.mark.parametrize("model", list(CASES))
def test_ids_equal_hf_tokenizers_on_golden_and_random_strings(model, tmp_path_factory):
    ours, hf, golden_name = pair(model, tmp_path_factory)
    texts = [c["text"] for c in load_golden(golden_name)["tokenize"]] + FIXED
    rng = random.Random(22)
    texts += [random_text(rng, rng.randint(1, 40)) for _ in range(300)]
    bad = [(s, ours.encode(s, add_special=False, parse_special=True), hf.encode(s, add_special_tokens=False).ids)
           for s in texts]
    bad = [b for b in bad if b[1] != b[2]]
    assert not bad, bad[:3]


def test_pre_tokenizer_is_identified_by_its_regex_not_a_name():
    from edgellm.convert import UnsupportedArchitectureError

    split = {"type": "Split", "pattern": {"Regex": QWEN2_RE}, "behavior": "Isolated", "invert": False}
    bl = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}
    assert identify_pre({"type": "Sequence", "pretokenizers": [split, bl]}, "t.json") == "qwen2"
    llama3 = dict(split, pattern={"Regex": QWEN2_RE.replace(r"|\p{N}|", r"|\p{N}{1,3}|")})
    assert identify_pre({"type": "Sequence", "pretokenizers": [llama3, bl]}, "t.json") == "llama3"
    assert identify_pre({"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}, "t.json") == "gpt2"
    o200k = dict(split, pattern={"Regex": "|".join([  # tiktoken's o200k_base pattern (gpt-oss)
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"])})
    assert identify_pre({"type": "Sequence", "pretokenizers": [o200k, bl]}, "t.json") == "gpt-4o"
    other = dict(split, pattern={"Regex": r"\p{L}+|\s+"})
    with pytest.raises(UnsupportedArchitectureError, match=r"t\.json: pre-tokenizer"):
        identify_pre({"type": "Sequence", "pretokenizers": [other, bl]}, "t.json")


def test_spm_vocabulary_tokenizes_like_sentencepiece(tmp_path):
    # tests/data/hf/spm.model (tests/data/hf/make_hf_fixtures.py's train_spm: sentencepiece's BPE
    # trainer, byte fallback, identity normalizer as Gemma's, no dummy prefix, 400 pieces);
    # converted through a gemma3 checkpoint, it must split like the library.
    import hf_checkpoints as hc
    from edgellm.convert import convert

    spm = pytest.importorskip("sentencepiece")
    d = hc.write_checkpoint(tmp_path / "g", "gemma3")
    convert(d, str(tmp_path / "g.gguf"), "F16")
    ours = core.Tokenizer.from_gguf(str(tmp_path / "g.gguf"))
    assert ours.model == "llama" and ours.add_space_prefix is False
    sp = spm.SentencePieceProcessor(model_file=hc.SPM_MODEL)
    texts = [c["text"] for c in load_golden("gemma3-270m-q4_k_m")["tokenize"]] + FIXED
    rng = random.Random(7)
    texts += [random_text(rng, rng.randint(1, 40)) for _ in range(300)]
    bad = [(s, ours.encode(s, add_special=False), sp.encode(s)) for s in texts]
    bad = [b for b in bad if b[1] != b[2]]
    assert not bad, bad[:3]
