"""nomic-bert encoders (issue 41: nomic-embed-text v1 / v1.5 shapes — rotary positions, SwiGLU, fused
QKV without biases) in llama.cpp's layout: the file llama.cpp's convert_hf_to_gguf.py wrote from a tiny
random-weight transformers NomicBertModel (saved in the hub's nomic layout) and the one `edgellm convert`
writes from the same folder, against that model's mean-pooled hidden states (recorded by
tests/data/encoders/make_nomic_fixtures.py)."""
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")

import edgellm  # noqa: E402
from edgellm.convert import convert  # noqa: E402

DATA = Path(__file__).parent / "data" / "encoders"


def cosines(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module", params=["llama.cpp", "edgellm"])
def nomic(request, tmp_path_factory):
    path = DATA / "tiny-nomic.llamacpp.gguf"
    if request.param == "edgellm":
        path = tmp_path_factory.mktemp("nomic") / "tiny-nomic.gguf"
        convert(str(DATA / "tiny-nomic"), str(path), "F32")
    llm = edgellm.LLM(str(path), n_threads=2)
    yield llm
    llm.close()


def test_nomic_bert_matches_transformers(nomic):
    z = np.load(DATA / "nomic_embeddings.npz")
    texts, ref = [str(t) for t in z["texts"]], z["embeddings"].astype(np.float64)
    assert nomic.engine_client.engine.arch == "nomic-bert"
    res = nomic.embeddings(texts)
    assert cosines(res.data, ref).min() >= 0.9999
    assert res.token_counts == [int(n) for n in z["n_tokens"]]  # the long one: 122 tokens, rotary (no table)
    assert nomic.default_pooling == "mean"


def test_nomic_batched_equals_one_at_a_time(nomic):
    texts = [str(t) for t in np.load(DATA / "nomic_embeddings.npz")["texts"]]
    together = np.array(nomic.embed(texts))
    alone = np.array([nomic.embed(t)[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-5)


@pytest.mark.parametrize("out_type, floor", [("F16", 0.9999), ("Q8_0", 0.998)])
def test_nomic_f16_q8_0(tmp_path, out_type, floor):
    # (the tiny model's random weights, initializer_range 0.3 over 32 dims, are harder on Q8_0 than a
    # trained model's: 0.9984 at worst here)
    z = np.load(DATA / "nomic_embeddings.npz")
    out = tmp_path / f"{out_type}.gguf"
    convert(str(DATA / "tiny-nomic"), str(out), out_type)
    llm = edgellm.LLM(str(out), n_threads=2)
    try:
        assert cosines(llm.embed([str(t) for t in z["texts"]]), z["embeddings"]).min() >= floor
    finally:
        llm.close()


def test_nomic_convert_refusals(tmp_path):
    from test_encoders import refuses_config

    refuses_config(tmp_path, "tiny-nomic", "rotary_emb_interleaved", rotary_emb_interleaved=True)
    refuses_config(tmp_path, "tiny-nomic", "qkv_proj_bias", qkv_proj_bias=True)
