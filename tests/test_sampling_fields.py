"""edgellm.sampling_fields: the one table of sampling fields, and everything derived from it
(issue 38 item 1): the library's rules, SamplingParams, the conversion to the engine, each API's
field map, the REPL's specs, generation_settings and docs/SERVER.md's table."""
import dataclasses
import math
import os

import pytest

from edgellm import InvalidRequestError, SamplingParams, _core, sampling_fields
from edgellm.repl.params import PARAMETERS, ParameterError, Parameters
from edgellm.server import llamacpp_api, protocol

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = {row["name"]: row for row in _core.sampling_fields()}


def test_docs_table_is_the_rendered_table():
    with open(os.path.join(ROOT, "docs", "SERVER.md"), encoding="utf-8") as f:
        text = f.read()
    begin, end = "<!-- sampling-fields:begin -->\n", "<!-- sampling-fields:end -->"
    got = text[text.index(begin) + len(begin):text.index(end)]
    assert got == sampling_fields.markdown_table(), \
        "docs/SERVER.md is stale: run scripts/sampling_table.py"


def test_dataclass_fields_and_defaults_are_the_table():
    fields = dataclasses.fields(SamplingParams)
    assert [f.name for f in fields] == [f.name for f in sampling_fields.FIELDS]
    p = SamplingParams()
    for f in sampling_fields.FIELDS:
        assert getattr(p, f.name) == f.default, f.name
    # the engine's defaults are the C++ struct's (None where the engine's -1 means unset)
    core = _core.SamplingParams()
    for name, row in ENGINE.items():
        py = getattr(p, name)
        want = getattr(core, name)
        assert (-1 if py is None else py) == pytest.approx(want), name


def test_to_core_copies_every_engine_field():
    # a value inside each field's range, away from its default
    kw = {}
    for name, row in ENGINE.items():
        if row["type"] == "bool":
            kw[name] = not row["default"]
        elif name == "max_tokens":
            kw[name] = 77
        elif row["type"] == "int":
            kw[name] = max(row["lo"], 0) + 3 if row["hi"] >= 3 else row["hi"]
        else:
            lo = 0.0 if row["lo"] == -math.inf else row["lo"]
            hi = 1.0 if row["hi"] == math.inf else row["hi"]
            kw[name] = (lo + hi) / 2 if (lo + hi) / 2 != row["default"] else (lo + hi) / 3
    core = SamplingParams(**kw).to_core()
    for name, v in kw.items():
        assert getattr(core, name) == pytest.approx(v), name
    assert SamplingParams(max_tokens=None, logprobs=None).to_core().max_tokens == -1


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_python_and_engine_refuse_the_same_out_of_range_values(name):
    row = ENGINE[name]
    if row["type"] == "bool":
        return
    bad = []
    if row["lo"] != -math.inf and row["lo"] > -(2**31):
        bad.append(row["lo"] if row["lo_open"] else row["lo"] - (1 if row["type"] == "int" else 0.5))
    if row["hi"] != math.inf and row["hi"] < 2**31 - 1:
        bad.append(row["hi"] + (1 if row["type"] == "int" else 0.5))
    if row["type"] == "float":
        bad.append(math.nan)
    bad = [b for b in bad if not (row["unset_below_0"] and b < 0)]
    for v in bad:
        with pytest.raises(InvalidRequestError) as e:
            SamplingParams(**{name: v})
        assert e.value.param == name
        core = _core.SamplingParams()
        setattr(core, name, v)
        with pytest.raises(InvalidRequestError, match=name):
            core.validate(100)


def test_reads_history_is_the_engine_flag():
    flagged = {f.name for f in sampling_fields.FIELDS if f.reads_history}
    assert flagged == {"repetition_penalty", "presence_penalty", "frequency_penalty"}


def test_wire_maps_are_derived():
    # OpenAI: every declared name maps to its field (max_tokens / response_format keep the
    # wire's own forms)
    for wire, field in sampling_fields.wire_names("openai").items():
        assert protocol.SAMPLING[wire][0] == field
        assert protocol.SAMPLING[wire][1] == sampling_fields.BY_NAME[field].json_schema
    assert set(protocol.SAMPLING) == set(sampling_fields.wire_names("openai"))
    # llama.cpp: every declared name is a /completion field
    for wire in sampling_fields.wire_names("llamacpp"):
        assert wire in llamacpp_api.NATIVE_FIELDS
    # the unsupported samplers are never declared supported
    assert not set(sampling_fields.LLAMACPP_UNSUPPORTED) & set(sampling_fields.wire_names("llamacpp"))
    assert llamacpp_api.SAMPLERS == list(sampling_fields.LLAMACPP_CHAIN)


def test_generation_settings_report_the_table_defaults_and_values():
    s = llamacpp_api.generation_settings(None, {})
    for f in sampling_fields.FIELDS:
        if f.kind in ("int", "float") and f.default is not None:
            for w in f.llamacpp:
                if w not in ("n_predict", "max_tokens"):
                    assert s[w] == f.default, w
    p = SamplingParams(temperature=0.3, repetition_penalty=1.2, n_keep=5)
    s = llamacpp_api.generation_settings(p, {})
    assert (s["temperature"], s["repeat_penalty"], s["n_keep"]) == (0.3, 1.2, 5)


def test_repl_specs_come_from_the_table():
    names = {f.repl for f in sampling_fields.FIELDS if f.repl}
    assert names | {"num_ctx"} == set(PARAMETERS)
    for f in sampling_fields.FIELDS:
        if f.repl and f.kind == "float":
            lo, hi, lo_open = f.bounds
            if hi != math.inf:
                with pytest.raises(ParameterError, match=f.repl):
                    Parameters().set(f.repl, [str(hi + 1)])
    p = Parameters()
    p.set("repeat_penalty", ["1.3"])
    assert p.sampling().repetition_penalty == 1.3


@pytest.mark.parametrize("bias", [math.nan, math.inf])
def test_logit_bias_nan_and_plus_inf_refused_minus_inf_bans(bias):
    with pytest.raises(InvalidRequestError) as e:
        SamplingParams(logit_bias={3: bias})
    assert e.value.param.startswith("logit_bias")
    # the llama.cpp route's shapes follow the same rule
    with pytest.raises(Exception) as e:
        llamacpp_api._logit_bias([[3, bias]], "logit_bias")
    assert getattr(e.value, "status", 400) == 400 and "logit_bias" in str(e.value)
    assert SamplingParams(logit_bias={3: -math.inf}).logit_bias == {3: -math.inf}
    assert llamacpp_api._logit_bias([[3, -math.inf]], "logit_bias") == [(3, -math.inf)]
