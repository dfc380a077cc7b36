"""Decoder rerankers that score a yes/no answer token (issue 41 item 3: Qwen3-Reranker), in llama.cpp's
layout (pooling_type rank, cls.output = the LM head's "yes" / "no" rows, the "rerank" chat template):
`LLM.rerank` and `/v1/rerank` with no extra flag, against transformers' softmax of the two logits at the
last position on a tiny random-weight Qwen3ForCausalLM (tests/data/encoders/make_qwen3_reranker_fixtures.py)."""
import json
from pathlib import Path

import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

import edgellm  # noqa: E402
from edgellm.rerank import rerank_pairs  # noqa: E402

DATA = Path(__file__).parent / "data" / "encoders"
GGUF = DATA / "tiny-qwen3-reranker.llamacpp.gguf"


@pytest.fixture(scope="module")
def ref():
    return json.loads((DATA / "tiny_qwen3_reranker.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def reranker():
    llm = edgellm.LLM(str(GGUF), n_threads=2)
    yield llm
    llm.close()


def test_qwen3_reranker_matches_transformers(reranker, ref):
    assert reranker.default_pooling == "rank" and reranker.engine_client.engine.rank_outputs == 2
    assert rerank_pairs(reranker, ref["query"], ref["documents"]) == ref["input_ids"]  # the template, filled
    res = reranker.rerank(ref["query"], ref["documents"])
    want = sorted(range(len(ref["scores"])), key=lambda i: -ref["scores"][i])
    assert [r.index for r in res] == want
    assert max(abs(r.relevance_score - ref["scores"][r.index]) for r in res) < 1e-3
    top = reranker.rerank(ref["query"], ref["documents"], top_n=2, return_documents=True)
    assert [(r.index, r.document) for r in top] == [(i, ref["documents"][i]) for i in want[:2]]


def test_server_rerank_with_no_flag(ref):
    import httpx
    from test_server import ServerProcess

    s = ServerProcess(GGUF).wait_ready()
    try:
        want = sorted(range(len(ref["scores"])), key=lambda i: -ref["scores"][i])
        for path in ("/v1/rerank", "/rerank"):
            r = httpx.post(s.url + path, headers=s.headers, json={"query": ref["query"], "documents": ref["documents"],
                                                                 "top_n": 4})
            assert r.status_code == 200, r.text
            body = r.json()
            assert [x["index"] for x in body["results"]] == want[:4]
            assert all(abs(x["relevance_score"] - ref["scores"][x["index"]]) < 1e-3 for x in body["results"])
            assert body["usage"]["prompt_tokens"] == sum(map(len, ref["input_ids"]))
    finally:
        s.proc.terminate()
        s.proc.wait(timeout=30)


def test_convert_writes_llama_cpps_reranker_layout(tmp_path, ref):
    """`edgellm convert` of the Qwen3-Reranker checkpoint (a Qwen3ForCausalLM told apart by its
    name, as llama.cpp's converter tells it): the same keys and tensors as llama.cpp's file, and
    the same scores."""
    from edgellm import ModelFile
    from edgellm.convert.writer import convert

    out = tmp_path / "qr.gguf"
    convert(str(DATA / "tiny-qwen3-reranker"), str(out), "F32")
    with ModelFile(out) as ours, ModelFile(GGUF) as theirs:
        assert "output.weight" not in ours.tensors and set(ours.tensors) == set(theirs.tensors)
        assert (ours.dequantize("cls.output.weight") == theirs.dequantize("cls.output.weight")).all()
        for key in ("qwen3.pooling_type", "qwen3.classifier.output_labels", "tokenizer.chat_template.rerank",
                    "tokenizer.chat_templates"):
            assert ours.metadata[key] == theirs.metadata[key], key
    with edgellm.LLM(str(out), n_threads=2) as llm:
        assert llm.default_pooling == "rank"
        res = llm.rerank(ref["query"], ref["documents"])
    want = sorted(range(len(ref["scores"])), key=lambda i: -ref["scores"][i])
    assert [r.index for r in res] == want
    assert max(abs(r.relevance_score - ref["scores"][r.index]) for r in res) < 1e-3


def test_a_plain_qwen3_checkpoint_still_converts_as_a_language_model(tmp_path):
    import shutil

    from edgellm import ModelFile
    from edgellm.convert.writer import convert, is_qwen3_reranker

    plain = tmp_path / "tiny-qwen3"
    shutil.copytree(DATA / "tiny-qwen3-reranker", plain)
    cfg = json.loads((plain / "config.json").read_text())
    assert not is_qwen3_reranker(str(plain), cfg)
    assert is_qwen3_reranker(str(DATA / "tiny-qwen3-reranker"), cfg)
    (plain / "README.md").write_text("# Qwen3-Reranker-0.6B\n")
    assert is_qwen3_reranker(str(plain), cfg)
    (plain / "README.md").unlink()
    out = tmp_path / "plain.gguf"
    convert(str(plain), str(out), "F32")
    with ModelFile(out) as f:
        assert "output.weight" in f.tensors and "cls.output.weight" not in f.tensors
        assert "qwen3.pooling_type" not in f.metadata
