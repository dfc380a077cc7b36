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
