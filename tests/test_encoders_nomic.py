"""nomic-bert encoders (issue 41: nomic-embed-text v1 / v1.5 shapes — rotary positions, SwiGLU, fused
QKV without biases) in llama.cpp's layout: the file llama.cpp's convert_hf_to_gguf.py wrote from a tiny
random-weight transformers NomicBertModel, against that model's mean-pooled hidden states (recorded by
tests/data/encoders/make_nomic_fixtures.py)."""
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

import edgellm  # noqa: E402

DATA = Path(__file__).parent / "data" / "encoders"


@pytest.fixture(scope="module")
def nomic():
    llm = edgellm.LLM(str(DATA / "tiny-nomic.llamacpp.gguf"), n_threads=2)
    yield llm
    llm.close()


def test_nomic_bert_matches_transformers(nomic):
    z = np.load(DATA / "nomic_embeddings.npz")
    texts, ref = [str(t) for t in z["texts"]], z["embeddings"].astype(np.float64)
    assert nomic.engine_client.engine.arch == "nomic-bert"
    res = nomic.embeddings(texts)
    a = np.array(res.data, dtype=np.float64)
    cos = (a * ref).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= 0.9999
    assert res.token_counts == [int(n) for n in z["n_tokens"]]  # the long one: 122 tokens, rotary (no table)
    assert nomic.default_pooling == "mean"


def test_nomic_batched_equals_one_at_a_time(nomic):
    texts = [str(t) for t in np.load(DATA / "nomic_embeddings.npz")["texts"]]
    together = np.array(nomic.embed(texts))
    alone = np.array([nomic.embed(t)[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-5)
