"""`SamplingParams`: how one request samples, checked by edgellm.validation's rules.

Those rules (`validation.SAMPLING_RULES` / `validate_sampling`) are the one definition of what a
sampling field may be: this dataclass applies them when it is built and again in `to_core`, and
the server's request parsers (edgellm.server.protocol) apply the same ones to JSON fields.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Union

from . import _core
from ._core import InvalidRequestError
from .validation import token_id, validate_sampling

__all__ = ["SamplingParams"]


@dataclass
class SamplingParams:
    """How to sample. Defaults are llama.cpp's (common_params_sampling):

    max_tokens 128 (None: until end-of-generation or the context is full), min_tokens 0
    (end-of-generation and stop_token_ids are masked until that many tokens exist),
    temperature 0.8 (0: greedy), top_k 40 (<= 0 off), top_p 0.95, min_p 0.05, typical_p 1.0
    (off), repetition_penalty 1.0 (off) over the last repeat_last_n = 64 tokens of prompt +
    output (-1: all, 0: off), presence/frequency penalties 0, seed None (random).

    The chain runs in llama.cpp's order: logit_bias -> penalties (repetition: divide a positive
    logit, multiply a negative one; then frequency * count and presence) -> top_k -> typical_p
    -> top_p -> min_p -> temperature -> draw. Truncation sees untempered logits.

    logprobs=k returns, per generated token, its log-prob and the k most likely tokens under
    the model's distribution after logit_bias and penalties, before truncation and temperature
    (llama.cpp's n_probs, OpenAI's logprobs). prompt_logprobs=k does the same for every prompt
    token after the first (raw model distribution). With n > 1, completion i uses seed + i.
    json_schema / grammar / regex / response_format need a registered constraint factory
    (edgellm's grammar module); otherwise the request is rejected with InvalidRequestError.
    """
    max_tokens: Optional[int] = 128
    min_tokens: int = 0
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repetition_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Optional[Dict[int, float]] = None
    seed: Optional[int] = None
    stop: Union[None, str, List[str]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    n: int = 1
    json_schema: Union[None, dict, str] = None
    grammar: Optional[str] = None
    regex: Optional[str] = None
    response_format: Optional[dict] = None
    # Lazy constraint: free text until one of these strings appears in the output, then the
    # grammar (which starts by matching the trigger). Used for tool calls under tool_choice auto.
    grammar_triggers: Optional[List[str]] = None
    # Budget-aware closing: when the tokens left (max_tokens, or the context) would not otherwise
    # suffice, the grammar steers to the nearest complete document, so the output still parses.
    grammar_budget_close: bool = False
    # Streams only (llama-server's return_progress): while the prompt is prefilled, chunks with
    # empty text whose `progress` is {total, cache, processed, time_ms} -- one at admission
    # (processed == cache, the prefix-cache hit; time 0), then one per prefill chunk.
    return_progress: bool = False
    # Context shift (LLM(..., context_shift=True); llama-server's n_keep): when the context is
    # full, the first n_keep tokens (after a BOS the model adds) and the newer half of the rest
    # are kept and generation goes on; -1 keeps the whole prompt. No effect without the opt-in.
    # n_discard: how many tokens after the kept ones each shift drops (0: half of them).
    n_keep: int = 0
    n_discard: int = 0

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
        for f in ("max_tokens", "temperature", "top_p", "min_p", "typical_p",
                  "repetition_penalty", "presence_penalty", "frequency_penalty"):
            setattr(self, f, v[f])
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
        p.max_tokens = -1 if v["max_tokens"] is None else v["max_tokens"]
        p.min_tokens = v["min_tokens"]
        p.temperature = v["temperature"]
        p.top_k = v["top_k"]
        p.top_p = v["top_p"]
        p.min_p = v["min_p"]
        p.typical_p = v["typical_p"]
        p.repetition_penalty = v["repetition_penalty"]
        p.repeat_last_n = v["repeat_last_n"]
        p.presence_penalty = v["presence_penalty"]
        p.frequency_penalty = v["frequency_penalty"]
        if v["logit_bias"]:
            p.logit_bias = list(v["logit_bias"].items())
        if v["seed"] is not None:
            p.has_seed = True
            p.seed = v["seed"] & 0xFFFFFFFFFFFFFFFF
        p.stop = v["stop"] or []
        p.stop_token_ids = v["stop_token_ids"] or []
        p.ignore_eos = v["ignore_eos"]
        p.logprobs = -1 if v["logprobs"] is None else v["logprobs"]
        p.prompt_logprobs = -1 if v["prompt_logprobs"] is None else v["prompt_logprobs"]
        p.n = v["n"]
        p.return_progress = v["return_progress"]
        p.n_keep = v["n_keep"]
        p.n_discard = v["n_discard"]
        p.json_schema = self._schema_text()
        p.grammar = self.grammar or ""
        p.regex = self.regex or ""
        if self.grammar_triggers:
            if not (p.grammar or p.json_schema or p.regex):
                raise InvalidRequestError("grammar_triggers needs a grammar, json_schema or regex")
            p.grammar_triggers = list(v["grammar_triggers"])
        p.grammar_budget_close = v["grammar_budget_close"]
        return p
