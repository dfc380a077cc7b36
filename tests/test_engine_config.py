"""_core.EngineConfig: LLM(...)'s engine arguments as one bound object (issue 38 item 1), filled
from validation.check_engine_args by name (edgellm._engine_client.engine_config)."""
import pytest

from edgellm import InvalidRequestError, _core
from edgellm._engine_client import engine_config
from edgellm.validation import check_engine_args

LLM_DEFAULTS = dict(n_ctx=None, n_threads=None, kv_memory=None, kv_type="f16", max_seqs=16,
                    max_batch_tokens=512, page_size=32, n_gpu_layers=0, prefix_cache=True,
                    draft_model=None, speculative="auto", num_speculative_tokens=None,
                    spec_adaptive=True, context_shift=False, cache_dir=None,
                    cache_max_bytes=None)


def test_every_checked_argument_is_a_config_attribute():
    a = check_engine_args(**{**LLM_DEFAULTS, "n_ctx": 512, "kv_type": "q8_0", "max_seqs": 3,
                             "speculative": "ngram", "num_speculative_tokens": 7,
                             "spec_adaptive": False, "context_shift": True})
    c = engine_config({**a, "draft_model": "", "cache_dir": "", "cache_key": ""})
    assert (c.n_ctx, c.kv_type, c.max_seqs, c.speculative, c.num_speculative_tokens) == \
        (512, "q8_0", 3, "ngram", 7)
    assert c.spec_adaptive is False and c.context_shift is True and c.prefix_cache is True


def test_defaults_are_llms():
    c = _core.EngineConfig()
    a = check_engine_args(**LLM_DEFAULTS)
    for name in ("n_ctx", "n_threads", "kv_memory", "max_seqs", "max_batch_tokens", "page_size",
                 "n_gpu_layers", "prefix_cache", "speculative", "num_speculative_tokens",
                 "spec_adaptive", "context_shift", "cache_max_bytes"):
        assert getattr(c, name) == a[name], name
    assert c.kv_type == "f16" and c.draft_model == "" and c.cache_dir == ""


def test_bad_values_and_names_are_refused():
    c = _core.EngineConfig()
    with pytest.raises(InvalidRequestError, match="kv_type"):
        c.kv_type = "q3"
    with pytest.raises(InvalidRequestError, match="speculative"):
        c.speculative = "sometimes"
    with pytest.raises(InvalidRequestError, match="num_speculative_tokens"):
        c.num_speculative_tokens = 65
    with pytest.raises(TypeError, match="n_ctxx"):
        engine_config({"n_ctxx": 5})
    # the engine takes the options by name too, checked before anything is read
    with pytest.raises(InvalidRequestError, match="n_ctxx"):
        _core.Engine("/nonexistent.gguf", n_ctxx=5)
    with pytest.raises(InvalidRequestError, match="draft_model"):
        _core.Engine("/nonexistent.gguf", c, speculative="draft")
