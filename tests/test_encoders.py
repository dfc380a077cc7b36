"""Encoder models (issue 41 parts 2-3): the WordPiece tokenizer, BERT embeddings and
cross-encoder rerank, against references recorded by tests/data/encoders/make_encoder_fixtures.py
(`tokenizers`, sentence-transformers and transformers on the same checkpoints)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

from conftest import require_model  # noqa: E402

import edgellm  # noqa: E402
from edgellm import ContextLengthError, InvalidRequestError  # noqa: E402
from edgellm.convert import convert  # noqa: E402

DATA = Path(__file__).parent / "data" / "encoders"
REAL = pytest.mark.real_model


def cosines(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def minilm():
    path = require_model("all-minilm-l6-v2")
    llm = edgellm.LLM(str(path), n_threads=2)
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def minilm_source():
    from edgellm import models
    spec = models.KNOWN_MODELS["all-minilm-l6-v2"]
    require_model("all-minilm-l6-v2")
    return models.cache_dir() / spec.source_dir


@pytest.fixture(scope="module")
def reference():
    z = np.load(DATA / "minilm_embeddings.npz")
    return [str(t) for t in z["texts"]], z["embeddings"], [int(n) for n in z["n_tokens"]], int(z["max_seq_length"])


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    out = tmp_path_factory.mktemp("rr") / "tiny-reranker.gguf"
    convert(str(DATA / "tiny-reranker"), str(out), "F32")
    llm = edgellm.LLM(str(out), n_threads=2)
    yield llm
    llm.close()


# ---- WordPiece ------------------------------------------------------------------------------

@REAL
def test_wordpiece_ids_equal_tokenizers_on_200_strings(minilm):
    d = json.loads((DATA / "minilm_tokens.json").read_text(encoding="utf-8"))
    assert len(d["strings"]) == 200
    wrong = [(s, want, minilm.tokenize(s)) for s, want in zip(d["strings"], d["ids"]) if minilm.tokenize(s) != want]
    assert not wrong, f"{len(wrong)} of 200 differ, first: {wrong[0]}"


@REAL
def test_wordpiece_rules(minilm):
    tok = minilm.tokenize
    cls, sep, unk = tok("")[0], tok("")[-1], minilm.tokenizer.encode("[UNK]", False, True)[0]
    assert tok("") == [cls, sep]
    assert tok("x" * 101) == [cls, unk, sep]  # a word over 100 characters is [UNK] whole
    assert len(tok("x" * 100)) > 3  # 100 characters are split into pieces
    assert tok("Café") == tok("cafe")  # lowercase + accents stripped
    assert tok("a,b") == [cls] + tok("a")[1:-1] + tok(",")[1:-1] + tok("b")[1:-1] + [sep]
    assert minilm.detokenize(tok("hello world")[1:-1]) == "hello world"
    # special-token texts in an embedding input are those tokens, as `tokenizers` reads them
    # (ids recorded with tokenizers 0.23.3 on this vocabulary)
    for text, ids in [("a [SEP] b", [101, 1037, 102, 1038, 102]), ("[CLS]x[MASK]y", [101, 101, 1060, 103, 1061, 102]),
                      ("a[UNK]b [sep]", [101, 1037, 100, 1038, 1031, 19802, 1033, 102])]:
        assert minilm.tokenize(text, parse_special=True) == ids
        assert minilm.embeddings(text).token_counts == [len(ids)]


# ---- embeddings -----------------------------------------------------------------------------

@REAL
def test_minilm_f32_matches_sentence_transformers(minilm, reference):
    texts, ref, n_tokens, max_len = reference
    res = minilm.embeddings(texts)
    assert min(cosines(res.data, ref)) >= 0.9999
    # the long input is cut to max_seq_length as sentence-transformers cuts it
    assert n_tokens[-1] == max_len
    assert res.token_counts == n_tokens
    assert np.allclose(np.linalg.norm(np.array(res.data), axis=1), 1.0, atol=1e-5)
    assert minilm.default_pooling == "mean"


@REAL
def test_batched_equals_one_at_a_time(minilm, reference):
    texts = reference[0]
    together = np.array(minilm.embed(texts))
    alone = np.array([minilm.embed(t)[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


@REAL
def test_pooling_choices_and_refusals(minilm):
    cls = np.array(minilm.embed("a cat", pooling="cls")[0])
    mean = np.array(minilm.embed("a cat", pooling="mean")[0])
    rows = np.array(minilm.embeddings("a cat", pooling="none", normalize=False).data[0])
    assert rows.shape[0] == len(minilm.tokenize("a cat"))
    assert np.allclose(cls, rows[0] / np.linalg.norm(rows[0]), atol=1e-5)
    m = rows.mean(0)
    assert np.allclose(mean, m / np.linalg.norm(m), atol=1e-5)
    with pytest.raises(InvalidRequestError, match="rank"):
        minilm.embed("x", pooling="rank")
    with pytest.raises(InvalidRequestError, match="embedding model"):
        minilm.generate("hello")
    with pytest.raises(InvalidRequestError, match="not a reranker"):
        minilm.rerank("q", ["d"])


@REAL
def test_truncation_follows_the_smallest_limit(reference):
    texts = reference[0]
    llm = edgellm.LLM(str(require_model("all-minilm-l6-v2")), n_threads=2, max_batch_tokens=32)
    try:
        res = llm.embeddings(texts[-1])
        assert res.token_counts == [32]  # max_batch_tokens < max_seq_length: one batch holds an input
        ids = llm.tokenize(texts[-1])
        cut = ids[:31] + [ids[-1]]  # [CLS] ... 30 tokens ... [SEP]
        assert np.allclose(res.data[0], llm.embed(cut)[0], atol=1e-6)
    finally:
        llm.close()


@REAL
@pytest.mark.slow
@pytest.mark.parametrize("out_type", ["F16", "Q8_0"])
def test_minilm_f16_and_q8_0(minilm_source, reference, tmp_path, out_type):
    path = tmp_path / f"minilm.{out_type}.gguf"
    convert(str(minilm_source), str(path), out_type)
    llm = edgellm.LLM(str(path), n_threads=2)
    try:
        texts, ref = reference[0], reference[1]
        assert min(cosines(llm.embed(texts), ref)) >= 0.999
    finally:
        llm.close()


LLAMA_CPP = Path("/work/peers/llama.cpp/convert_hf_to_gguf.py")
VENV_REF = Path("/work/venv-ref/bin/python")
WITH_LLAMA_CPP = pytest.mark.skipif(not (LLAMA_CPP.is_file() and VENV_REF.is_file()),
                                    reason="llama.cpp's converter and a torch venv are not on this machine")


def llama_cpp_convert(src, out, *args):
    """llama.cpp's convert_hf_to_gguf.py, F32, in the torch venv."""
    subprocess.run([str(VENV_REF), str(LLAMA_CPP), str(src), "--outtype", "f32", *args, "--outfile", str(out)],
                   check=True, capture_output=True, cwd=out.parent)


def assert_llama_cpp_file_embeds(path, reference):
    """A file of llama.cpp's converter embeds the reference texts as sentence-transformers does (its
    files state no max_seq_length, so the one text past 512 tokens is left out)."""
    with edgellm.LLM(path, n_threads=2) as llm:
        assert min(cosines(llm.embed(reference[0][:-1]), reference[1][:-1])) >= 0.9999


@REAL
@pytest.mark.slow
@WITH_LLAMA_CPP
def test_llama_cpp_converted_file_loads(minilm_source, reference, tmp_path):
    out = tmp_path / "minilm-llamacpp.gguf"
    llama_cpp_convert(minilm_source, out)
    assert_llama_cpp_file_embeds(str(out), reference)


@REAL
@pytest.mark.slow
@WITH_LLAMA_CPP
def test_llama_cpp_split_file_loads_from_its_first_shard(minilm_source, reference, tmp_path):
    """convert_hf_to_gguf.py --split-max-tensors: three shards, loaded from the first."""
    out = tmp_path / "minilm.gguf"
    llama_cpp_convert(minilm_source, out, "--split-max-tensors", "40")
    first = tmp_path / "minilm-00001-of-00003.gguf"
    assert_llama_cpp_file_embeds(str(first), reference)


def refuses_config(tmp_path, folder, match, **changes):
    """`convert` refuses the fixture checkpoint `folder` with `changes` made to its config.json,
    with a ConvertError naming `match`."""
    src = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
    shutil.copytree(DATA / folder, src)
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(changes)
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(edgellm.convert.ConvertError, match=match):
        convert(str(src), str(tmp_path / "x.gguf"), "F32")


def test_convert_refuses_what_it_cannot_run(tmp_path):
    refuses_config(tmp_path, "tiny-reranker", "position_embedding_type", position_embedding_type="relative_key")


# ---- rerank ---------------------------------------------------------------------------------

def test_tiny_reranker_matches_transformers(reranker):
    from edgellm.rerank import rerank_pairs

    d = json.loads((DATA / "tiny_reranker.json").read_text())
    assert rerank_pairs(reranker, d["query"], d["documents"]) == d["input_ids"]
    res = reranker.rerank(d["query"], d["documents"])
    want = sorted(range(len(d["scores"])), key=lambda i: -d["scores"][i])
    assert [r.index for r in res] == want
    for r in res:
        assert abs(r.relevance_score - d["scores"][r.index]) < 1e-3
    top = reranker.rerank(d["query"], d["documents"], top_n=2, return_documents=True)
    assert [(r.index, r.document) for r in top] == [(i, d["documents"][i]) for i in want[:2]]
    assert len(reranker.rerank(d["query"], d["documents"], top_n=99)) == len(d["documents"])
    assert reranker.default_pooling == "rank"


def test_rerank_refusals(reranker):
    for q, docs in [("q", []), ("q", "doc"), (1, ["d"]), ("q", ["d", 2])]:
        with pytest.raises(InvalidRequestError):
            reranker.rerank(q, docs)
    with pytest.raises(InvalidRequestError, match="top_n"):
        reranker.rerank("q", ["d"], top_n=0)


def test_rerank_long_pairs_are_cut_longest_first(reranker):
    from edgellm.rerank import rerank_pairs

    long = " ".join(["panda"] * 200)
    ids = rerank_pairs(reranker, "what is a panda", [long])[0]
    assert len(ids) == 64  # the tiny model's positions
    res = reranker.rerank("what is a panda", [long, "hi"])
    assert len(res) == 2


def test_async_rerank(reranker):
    import asyncio

    from edgellm.async_llm import AsyncLLM

    d = json.loads((DATA / "tiny_reranker.json").read_text())
    allm = AsyncLLM.__new__(AsyncLLM)  # over the loaded model
    allm.llm = reranker
    res = asyncio.run(allm.rerank(d["query"], d["documents"], top_n=1))
    assert res[0].index == max(range(len(d["scores"])), key=lambda i: d["scores"][i])


# ---- the server -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rerank_server(tmp_path_factory):
    from test_server import ServerProcess

    out = tmp_path_factory.mktemp("srv") / "tiny-reranker.gguf"
    convert(str(DATA / "tiny-reranker"), str(out), "F32")
    s = ServerProcess(out).wait_ready()
    yield s
    s.proc.terminate()
    s.proc.wait(timeout=30)


def test_server_rerank_shapes(rerank_server):
    import httpx

    s = rerank_server
    d = json.loads((DATA / "tiny_reranker.json").read_text())
    want = sorted(range(len(d["scores"])), key=lambda i: -d["scores"][i])
    docs = list(d["documents"])
    docs[1] = {"text": docs[1], "id": "b"}
    for path in ("/v1/rerank", "/rerank"):
        r = httpx.post(s.url + path, headers=s.headers, json={"query": d["query"], "documents": docs, "top_n": 3,
                                                             "return_documents": True})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "list" and body["usage"]["prompt_tokens"] == sum(map(len, d["input_ids"]))
        assert [x["index"] for x in body["results"]] == want[:3]
        for x in body["results"]:
            assert abs(x["relevance_score"] - d["scores"][x["index"]]) < 1e-3
            assert x["document"] == (docs[x["index"]] if isinstance(docs[x["index"]], dict)
                                     else {"text": docs[x["index"]]})
    r = httpx.post(s.url + "/rerank", headers=s.headers, json={"query": d["query"], "texts": d["documents"],
                                                              "return_text": True})
    assert [x["index"] for x in r.json()] == want and r.json()[0]["text"] == d["documents"][want[0]]
    for bad in ([], None, 123, [1, 2, 3]):
        r = httpx.post(s.url + "/rerank", headers=s.headers, json={"query": "q", "documents": bad})
        assert r.status_code == 400 and "error" in r.json()
    r = httpx.post(s.url + "/v1/chat/completions", headers=s.headers,
                   json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400


@REAL
@pytest.mark.slow
def test_server_embeddings_with_no_flag(minilm, reference):
    from test_server import ServerProcess

    s = ServerProcess(require_model("all-minilm-l6-v2")).wait_ready()
    try:
        client = s.client()
        texts, ref = reference[0], reference[1]
        res = client.embeddings.create(model="all-minilm", input=texts, encoding_format="float")
        assert min(cosines([x.embedding for x in res.data], ref)) >= 0.9999
        assert res.usage.prompt_tokens == sum(reference[2])
        import httpx
        r = httpx.post(s.url + "/v1/rerank", headers=s.headers, json={"query": "q", "documents": ["d"]})
        assert r.status_code == 400 and "not a reranker" in r.json()["error"]["message"]
    finally:
        s.proc.terminate()
        s.proc.wait(timeout=30)
