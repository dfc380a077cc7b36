"""XLM-RoBERTa encoders (issue 41: multilingual-e5 / bge-m3 embedders, bge-reranker-v2-m3 cross-encoders):
the Unigram tokenizer, embeddings and rerank against references recorded by
tests/data/encoders/make_xlmr_fixtures.py (`tokenizers`, sentence-transformers and transformers on
tiny random-weight checkpoints with a SentencePiece model trained there). Each check runs on the file
`edgellm convert` writes and on the one llama.cpp's convert_hf_to_gguf.py wrote (kept beside them)."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

import edgellm  # noqa: E402
from edgellm.convert import ConvertError, convert  # noqa: E402
from edgellm.rerank import rerank_pairs  # noqa: E402

DATA = Path(__file__).parent / "data" / "encoders"
CONVERTERS = ["edgellm", "llama.cpp"]


def cosines(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def gguf_of(tmp_path_factory, name, converter):
    if converter == "llama.cpp":
        return DATA / f"{name}.llamacpp.gguf"
    out = tmp_path_factory.mktemp(name) / f"{name}.gguf"
    convert(str(DATA / name), str(out), "F32")
    return out


@pytest.fixture(scope="module", params=CONVERTERS)
def embedder(request, tmp_path_factory):
    llm = edgellm.LLM(str(gguf_of(tmp_path_factory, "tiny-xlmr", request.param)), n_threads=2)
    llm.converter = request.param
    yield llm
    llm.close()


@pytest.fixture(scope="module", params=CONVERTERS)
def reranker(request, tmp_path_factory):
    llm = edgellm.LLM(str(gguf_of(tmp_path_factory, "tiny-xlmr-reranker", request.param)), n_threads=2)
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def reference():
    z = np.load(DATA / "xlmr_embeddings.npz")
    return [str(t) for t in z["texts"]], z["embeddings"], [int(n) for n in z["n_tokens"]], int(z["max_seq_length"])


def test_unigram_ids_equal_tokenizers(embedder):
    d = json.loads((DATA / "xlmr_tokens.json").read_text(encoding="utf-8"))
    assert len(d["strings"]) == 240
    tok = embedder.engine_client.tok
    assert tok.model == "t5"
    got = [tok.encode(s, True, True) for s in d["strings"]]
    wrong = [(s, want, g) for s, want, g in zip(d["strings"], d["ids"], got) if g != want]
    assert not wrong, f"{len(wrong)} of 240 differ, first: {wrong[0]}"


def test_unigram_rules(embedder):
    tok = embedder.engine_client.tok
    enc = lambda s: tok.encode(s, False, True)  # noqa: E731
    meta = tok.encode("\u2581", False, False)
    assert enc("") == [] and enc(" ") == meta
    assert enc("a  b") == enc("a b") == enc(" a b")  # runs of spaces are one; the prefix space is one
    assert enc("a b ")[-1] == meta[0]  # a trailing space stays (the hub's XLM-R pipeline has no Strip)
    assert enc("\uff21\u0301") == enc("A")  # a short grapheme takes its first charsmap key whole
    assert enc("x \u0301") != enc("x")
    unk = tok.encode("<unk>", False, True)
    assert enc("\ua66e\ua66e\ua66e")[-1:] == unk and enc("\ua66e\ua66e\ua66e").count(unk[0]) == 1  # fused
    assert tok.decode(enc("Der Panda ist ein Hund.")) == "Der Panda ist ein Hund."


def test_embeddings_match_sentence_transformers(embedder, reference):
    texts, ref, n_tokens, max_len = reference
    if embedder.converter == "llama.cpp":  # its files say no max_seq_length: the long text is left out
        texts, ref, n_tokens = texts[:-1], ref[:-1], n_tokens[:-1]
    else:
        assert n_tokens[-1] == max_len  # cut to max_seq_length as sentence-transformers cuts it
    res = embedder.embeddings(texts)
    assert min(cosines(res.data, ref)) >= 0.9999
    assert res.token_counts == n_tokens
    assert embedder.default_pooling == "mean"
    together = np.array(res.data)
    alone = np.array([embedder.embed(t)[0] for t in texts[:6]])
    assert np.allclose(together[:6], alone, atol=1e-5)


def test_rerank_matches_transformers(reranker):
    d = json.loads((DATA / "tiny_xlmr_reranker.json").read_text(encoding="utf-8"))
    assert rerank_pairs(reranker, d["query"], d["documents"]) == d["input_ids"]  # <s> q </s></s> d </s>
    res = reranker.rerank(d["query"], d["documents"])
    want = sorted(range(len(d["scores"])), key=lambda i: -d["scores"][i])
    assert [r.index for r in res] == want
    assert max(abs(r.relevance_score - d["scores"][r.index]) for r in res) < 1e-3
    assert reranker.default_pooling == "rank"


def test_rerank_long_pairs_are_cut(reranker):
    ids = rerank_pairs(reranker, "what is a panda", [" ".join(["panda"] * 200)])[0]
    assert len(ids) == 64 and ids[-1] == ids[ids.index(2) + 1] == 2  # positions 66 - (pad 1 + 1)


def test_convert_refuses_other_unigram_pipelines(tmp_path):
    src = tmp_path / "x"
    shutil.copytree(DATA / "tiny-xlmr", src)
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, tj["pre_tokenizer"]]}
    (src / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    with pytest.raises(ConvertError, match="pre-tokenizer"):
        convert(str(src), str(tmp_path / "x.gguf"), "F32")
    from test_encoders import refuses_config

    refuses_config(tmp_path, "tiny-xlmr", "pad_token_id", pad_token_id=70)


def test_llama_server_suite_shim_stands_in_this_reranker():
    from test_server_llamacpp import _shim

    rc, cmd, err = _shim("--hf-repo", "ggml-org/models", "--hf-file", "jina-reranker-v1-tiny-en/ggml-model-f16.gguf",
                         "--reranking")
    assert rc == 0, err
    assert Path(cmd[1]) == DATA / "tiny-xlmr-reranker.llamacpp.gguf" and Path(cmd[1]).is_file()
    assert "ignoring --reranking" in err
