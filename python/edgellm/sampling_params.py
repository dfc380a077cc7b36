"""`SamplingParams`: how one request samples.

Its fields, defaults and rules are edgellm.sampling_fields' table (the one declaration of each
sampling field): this dataclass applies the rules when it is built and again in `to_core`, and
the server's request parsers apply the same ones to JSON fields.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, make_dataclass
from typing import Any, Dict, List, Mapping, Optional

from . import _core
from . import sampling_fields
from ._core import InvalidRequestError
from .sampling_fields import validate_sampling
from .validation import token_id

__all__ = ["SamplingParams"]


# The fields and defaults: edgellm.sampling_fields' table.
_Fields = make_dataclass("_SamplingFields", sampling_fields.dataclass_fields(),
                         namespace={"__module__": __name__})


@dataclass
class SamplingParams(_Fields):
    """How to sample. Defaults are llama.cpp's (common_params_sampling):

    max_tokens 128 (None: until end-of-generation or the context is full), min_tokens 0
    (end-of-generation and stop_token_ids are masked until that many tokens exist),
    temperature 0.8 (0: greedy), top_k 40 (<= 0 off), top_p 0.95, min_p 0.05, typical_p 1.0
    (off), repetition_penalty 1.0 (off) over the last repeat_last_n = 64 tokens of prompt +
    output (-1: all, 0: off), presence/frequency penalties 0, seed None (random).

    The chain runs in llama.cpp's order: logit_bias -> penalties (repetition: divide a positive
    logit, multiply a negative one; then frequency * count and presence) -> the candidate steps
    (top_k, typical_p, top_p, min_p, ...: sampling_fields.LLAMACPP_CHAIN) -> temperature ->
    draw. The candidate steps see untempered logits.

    logprobs=k returns, per generated token, its log-prob and the k most likely tokens under
    the model's distribution after logit_bias and penalties, before truncation and temperature
    (llama.cpp's n_probs, OpenAI's logprobs). prompt_logprobs=k does the same for every prompt
    token after the first (raw model distribution). With n > 1, completion i uses seed + i.
    json_schema / grammar / regex / response_format need a registered constraint factory
    (edgellm's grammar module); otherwise the request is rejected with InvalidRequestError.
    grammar_triggers: free text until one of these strings appears in the output, then the
    grammar (tool calls under tool_choice auto). grammar_budget_close: when the tokens left
    would not otherwise suffice, the grammar steers to the nearest complete document.
    return_progress (streams; llama-server's): chunks with empty text whose `progress` is
    {total, cache, processed, time_ms} while the prompt is prefilled. n_keep / n_discard:
    context shift (LLM(..., context_shift=True)): tokens kept at the start (-1: the prompt) and
    dropped per shift (0: half). Every field, its range and its wire names:
    edgellm.sampling_fields (docs/SERVER.md's parameter table).
    """

    def stop_list(self) -> List[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def _schema_text(self) -> str:
        schema = self.json_schema
        rf = self.response_format
        if rf is not None:
            if not isinstance(rf, Mapping) or "type" not in rf:
                raise InvalidRequestError("response_format must be a dict with a 'type'")
            kind = rf["type"]
            if kind == "json_object":
                # llama-server's form: {"type": "json_object", "schema": {...}} is enforced too
                if schema is None:
                    schema = rf.get("schema", {"type": "object"})
            elif kind == "json_schema":
                inner = rf.get("json_schema")
                if not isinstance(inner, Mapping) or "schema" not in inner:
                    raise InvalidRequestError(
                        "response_format {'type': 'json_schema'} needs json_schema.schema")
                schema = inner["schema"]
            elif kind != "text":
                raise InvalidRequestError(f"response_format type {kind!r} is not supported "
                                          "(text, json_object, json_schema)")
        if schema is None:
            return ""
        if isinstance(schema, str):
            return schema
        try:
            return json.dumps(schema)
        except (RecursionError, ValueError, TypeError) as e:  # too deep, circular, not JSON
            raise InvalidRequestError(f"json_schema cannot be serialised to JSON: {e}") from None

    def __post_init__(self):
        self._checked()

    def _checked(self) -> Dict[str, Any]:
        """The fields after edgellm.validation's rules (the server applies the same ones):
        InvalidRequestError naming the field for a wrong type or range; ints stay ints (a
        fractional max_tokens is an error, never truncated), numbers become floats."""
        v = validate_sampling({f: getattr(self, f) for f in self.__dataclass_fields__})
        for f in sampling_fields.FIELDS:
            if f.kind in ("int", "float"):
                setattr(self, f.name, v[f.name])
        return v

    def to_core(self, n_vocab: Optional[int] = None) -> "_core.SamplingParams":
        """The C++ parameters; with n_vocab, logit_bias / stop_token_ids ids are checked
        against the vocabulary here (the engine checks them again at submit)."""
        v = self._checked()
        if n_vocab is not None:
            for t in list(v["logit_bias"] or ()) + list(v["stop_token_ids"] or ()):
                token_id(t, "logit_bias" if t in (v["logit_bias"] or ()) else "stop_token_ids",
                         n_vocab)
        p = _core.SamplingParams()
        sampling_fields.to_core(v, p)
        if v["logit_bias"]:
            p.logit_bias = list(v["logit_bias"].items())
        if v["seed"] is not None:
            p.has_seed = True
            p.seed = v["seed"] & 0xFFFFFFFFFFFFFFFF
        p.stop = v["stop"] or []
        p.stop_token_ids = v["stop_token_ids"] or []
        p.json_schema = self._schema_text()
        p.grammar = self.grammar or ""
        p.regex = self.regex or ""
        if self.grammar_triggers:
            if not (p.grammar or p.json_schema or p.regex):
                raise InvalidRequestError("grammar_triggers needs a grammar, json_schema or regex")
            p.grammar_triggers = list(v["grammar_triggers"])
        p.grammar_budget_close = v["grammar_budget_close"]
        return p
