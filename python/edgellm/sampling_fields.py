"""The sampling fields, one declaration each: what `SamplingParams` holds and every place that
speaks of it.

A field's type, default and range live in the engine's table (EDGELLM_SAMPLING_FIELDS in
cpp/src/engine/sampling_params.h, read here through `_core.sampling_fields()`), which the C++
`SamplingParams::validate` checks at submit; fields the engine does not range-check (stop
strings, logit_bias, constraints, the seed) declare their rule here. Each declaration below adds
what the outside world calls the field: its wire names in the OpenAI, llama.cpp, Ollama
(`options`) and Anthropic APIs, the REPL's name (`/set parameter NAME`) and a line of help.
From this one table come:

- the library's rules (`SAMPLING_RULES`, `validate_sampling`) and `SamplingParams`' dataclass
  fields and defaults, and its conversion to `_core.SamplingParams` (`to_core`, a loop);
- each API's field map (`wire_names(api)`, `rules(api, ...)`), llama-server's
  generation_settings (`llamacpp_settings`) and the llama.cpp samplers edgellm lacks
  (`LLAMACPP_UNSUPPORTED`);
- the REPL's `/set parameter` specs and `/show parameters` display (edgellm.repl.params);
- the parameter table of docs/SERVER.md (`markdown_table`, written there by
  scripts/sampling_table.py; a test checks the doc against it).

Adding a sampling parameter: a line in EDGELLM_SAMPLING_FIELDS, its step in the sampler
(cpp/src/engine/sampler.cpp) and its declaration here.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from . import _core
from . import validation as V
from .validation import fail

__all__ = ["Field", "FIELDS", "BY_NAME", "SAMPLING_RULES", "validate_sampling", "wire_names",
           "rules", "to_core", "llamacpp_settings", "LLAMACPP_CHAIN", "LLAMACPP_UNSUPPORTED",
           "dataclass_fields", "markdown_table", "APIS"]

APIS = ("openai", "llamacpp", "ollama", "anthropic")
Check = Callable[[Any, str], Any]
_ENGINE: Dict[str, dict] = {row["name"]: row for row in _core.sampling_fields()}


@dataclass(frozen=True)
class Field:
    name: str                           # SamplingParams' (and _core.SamplingParams') name
    annotation: Any                     # the dataclass field's type
    default: Any
    check: Check                        # the rule: check(value, name) -> value to use
    help: str
    openai: Tuple[str, ...] = ()        # wire names, per API (empty: not on that API)
    llamacpp: Tuple[str, ...] = ()
    ollama: Tuple[str, ...] = ()        # Ollama's `options`
    anthropic: Tuple[str, ...] = ()
    repl: Optional[str] = None          # `/set parameter NAME` (Ollama's spelling)
    engine: Optional[dict] = None       # the engine's row (type, range, flags); None: Python's own
    range_text: str = ""                # the range, in words, for the docs
    schema: Any = None                  # a Python field's JSON schema (engine fields: derived)

    @property
    def reads_history(self) -> bool:
        return bool(self.engine and self.engine["reads_history"])

    @property
    def kind(self) -> str:
        return self.engine["type"] if self.engine else "other"

    @property
    def bounds(self) -> Tuple[Any, Any, bool]:
        e = self.engine or {}
        return e.get("lo", -math.inf), e.get("hi", math.inf), e.get("lo_open", False)

    def names(self, api: str) -> Tuple[str, ...]:
        return getattr(self, api)

    @property
    def json_schema(self) -> dict:
        """The field's JSON schema on the wire (the servers' /openapi.json): the engine's type and
        range, or the Python field's own schema."""
        if self.engine is None:
            return dict(self.schema)
        kind = self.engine["type"]
        if kind == "bool":
            return {"type": "boolean"}
        out = {"type": "integer" if kind == "int" else "number"}
        lo, hi, lo_open = self.bounds
        if self.engine["unset_below_0"]:
            return out  # negative values mean "unset" on some wires (-1: no limit)
        if math.isfinite(lo) and lo > -(2**31):
            out["exclusiveMinimum" if lo_open else "minimum"] = lo
        if math.isfinite(hi) and hi < 2**31 - 1:
            out["maximum"] = hi
        return out


def _range_words(row: dict) -> str:
    if row["type"] == "bool":
        return "boolean"
    lo, hi, num = row["lo"], row["hi"], V._num
    lo = None if lo in (-math.inf, -(2**31)) else lo
    hi = None if hi in (math.inf, 2**31 - 1) else hi
    if lo is None and hi is None:
        text = "any integer" if row["type"] == "int" else "any finite number"
    elif hi is None:
        text = f"{'>' if row['lo_open'] else '>='} {num(lo)}"
    elif lo is None:
        text = f"<= {num(hi)}"
    else:
        text = f"{'(' if row['lo_open'] else '['}{num(lo)}, {num(hi)}]"
    return text + (", or none" if row["unset_below_0"] else "")


def _engine_rule(row: dict) -> Check:
    lo, hi = row["lo"], row["hi"]
    if row["type"] == "bool":
        return V.boolean
    if row["type"] == "int":
        check = V.integer(lo, hi)
    else:
        check = V.number(None if lo == -math.inf else lo, None if hi == math.inf else hi,
                         lo_open=row["lo_open"])
    return V.optional(check) if row["unset_below_0"] else check


def _names(v: Union[None, str, Tuple[str, ...]]) -> Tuple[str, ...]:
    return () if v is None else (v,) if isinstance(v, str) else tuple(v)


def engine(name: str, help: str, *, openai=None, llamacpp=None, ollama=None, anthropic=None,
           repl: Optional[str] = None) -> Field:
    """A field of the engine's table: type, default, range and flags come from C++."""
    row = _ENGINE[name]
    kind = {"int": int, "float": float, "bool": bool}[row["type"]]
    default = None if row["unset_below_0"] and row["default"] < 0 else row["default"]
    if kind is float:
        default = float(f"{default:.7g}")  # the C++ float, as the decimal it was written as
    return Field(name, Optional[kind] if row["unset_below_0"] else kind, default,
                 _engine_rule(row), help, _names(openai), _names(llamacpp), _names(ollama),
                 _names(anthropic), repl, row, _range_words(row))


def python(name: str, annotation: Any, default: Any, check: Check, help: str, range_text: str,
           schema: dict, *, openai=None, llamacpp=None, ollama=None, anthropic=None,
           repl: Optional[str] = None) -> Field:
    """A field the Python side checks and converts (a string, a list, a mapping, the seed);
    `schema` is its JSON schema on the wire."""
    return Field(name, annotation, default, check, help, _names(openai), _names(llamacpp),
                 _names(ollama), _names(anthropic), repl, None, range_text, schema)


def _seed(v: Any, name: str) -> int:
    # any 64-bit value, signed or not (it is used modulo 2^64)
    return V.integer(-(2**63), 2**64 - 1)(v, name)


def _token_id_list(v: Any, name: str) -> Optional[List[int]]:
    if isinstance(v, (str, bytes, Mapping)) or not isinstance(v, (list, tuple)):
        raise V.bad_type(name, v, "an array of token ids")
    if len(v) > V.MAX_STOP_TOKEN_IDS:
        raise fail(f"'{name}' has {len(v)} ids, at most {V.MAX_STOP_TOKEN_IDS} are allowed", name)
    return V.token_ids(v, None, name) or None


def _string_list(v: Any, name: str) -> Optional[List[str]]:
    if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) and s for s in v):
        raise V.bad_type(name, v, "an array of non-empty strings")
    return list(v) or None


def _lora(v: Any, name: str) -> Any:
    from .lora import check_lora_spec  # edgellm.lora: the adapters by name, and this rule

    check_lora_spec(v, name)
    return v


_opt = V.optional
_str_list = Union[None, str, List[str]]

# ---- the table (SamplingParams' field order: positional arguments keep their meaning) ---------
_STR = {"type": "string"}
_STRINGS = {"anyOf": [_STR, {"type": "array", "items": _STR}]}

FIELDS: Tuple[Field, ...] = (
    engine("max_tokens", "most tokens to generate; none: until end of generation or a full "
           "context", openai="max_tokens", llamacpp=("n_predict", "max_tokens"),
           ollama="num_predict", anthropic="max_tokens", repl="num_predict"),
    engine("min_tokens", "end-of-generation and stop tokens are masked until this many tokens",
           openai="min_tokens"),
    engine("temperature", "randomness of sampling; 0 = always the most likely token",
           openai="temperature", llamacpp="temperature", ollama="temperature",
           anthropic="temperature", repl="temperature"),
    engine("top_k", "sample among the k most likely tokens; <= 0 off", openai="top_k",
           llamacpp="top_k", ollama="top_k", anthropic="top_k", repl="top_k"),
    engine("top_p", "nucleus sampling mass; 1 off", openai="top_p", llamacpp="top_p",
           ollama="top_p", anthropic="top_p", repl="top_p"),
    engine("min_p", "drop tokens below min_p x the top probability; 0 off", openai="min_p",
           llamacpp="min_p", ollama="min_p", repl="min_p"),
    engine("typical_p", "locally typical sampling; 1 off", openai="typical_p",
           llamacpp="typical_p", ollama="typical_p", repl="typical_p"),
    engine("repetition_penalty", "penalty for repeating recent tokens; 1 off",
           openai=("repeat_penalty", "repetition_penalty"), llamacpp="repeat_penalty",
           ollama="repeat_penalty", repl="repeat_penalty"),
    engine("repeat_last_n", "how many recent tokens (prompt included) the penalties look at; "
           "-1 all, 0 off", openai="repeat_last_n", llamacpp="repeat_last_n",
           ollama="repeat_last_n", repl="repeat_last_n"),
    engine("presence_penalty", "penalty for any seen token", openai="presence_penalty",
           llamacpp="presence_penalty", ollama="presence_penalty", repl="presence_penalty"),
    engine("frequency_penalty", "penalty growing with a token's count",
           openai="frequency_penalty", llamacpp="frequency_penalty",
           ollama="frequency_penalty", repl="frequency_penalty"),
    python("logit_bias", Optional[Dict[int, float]], None, _opt(V.logit_bias),
           "added to the token's logit; -inf bans it", "token id -> finite number or -inf",
           {"type": "object"},
           openai="logit_bias", llamacpp="logit_bias"),
    python("seed", Optional[int], None, _opt(_seed), "random seed; none = random each request",
           "64-bit integer, or none", {"type": "integer"}, openai="seed", llamacpp="seed", ollama="seed",
           repl="seed"),
    python("stop", _str_list, None, _opt(V.stop_strings), "stop strings (not in the output)",
           f"at most {V.MAX_STOP} non-empty strings", _STRINGS, openai="stop", llamacpp="stop",
           ollama="stop", anthropic="stop_sequences", repl="stop"),
    python("stop_token_ids", Optional[List[int]], None, _opt(_token_id_list),
           "token ids that end generation", "token ids",
           {"type": "array", "items": {"type": "integer"}}),
    engine("ignore_eos", "end-of-generation tokens are masked", openai="ignore_eos",
           llamacpp="ignore_eos"),
    engine("logprobs", "per generated token: its log-prob and the top n", llamacpp="n_probs"),
    engine("prompt_logprobs", "per prompt token after the first: its log-prob and the top n"),
    engine("n", "completions of one prompt", openai="n"),
    python("json_schema", Union[None, dict, str], None, _opt(V.json_schema),
           "constrain the output to this JSON schema", "object or string",
           {"type": ["object", "string"]},
           openai="json_schema", llamacpp="json_schema"),
    python("grammar", Optional[str], None, _opt(V.string), "constrain the output to this GBNF "
           "grammar", "string", _STR, openai="grammar", llamacpp="grammar"),
    python("regex", Optional[str], None, _opt(V.string), "constrain the output to this regex",
           "string", _STR),
    python("response_format", Optional[dict], None, _opt(V.response_format),
           "OpenAI's response_format (json_object, json_schema)", "object", {"type": "object"},
           openai="response_format"),
    python("grammar_triggers", Optional[List[str]], None, _opt(_string_list),
           "lazy constraint: free text until one of these strings", "non-empty strings",
           {"type": "array", "items": _STR}),
    python("grammar_budget_close", bool, False, V.boolean, "the grammar steers to the nearest "
           "complete document when the tokens left would not otherwise suffice", "boolean",
           {"type": "boolean"},
           openai="grammar_budget_close"),
    engine("return_progress", "streams: prompt-progress chunks while the prompt is prefilled"),
    engine("n_keep", "context shift: tokens kept at the start; -1 = the whole prompt",
           openai="n_keep", llamacpp="n_keep", ollama="num_keep"),
    engine("n_discard", "context shift: tokens dropped per shift; 0 = half", openai="n_discard",
           llamacpp="n_discard"),
    engine("xtc_probability", "XTC: the chance, per token, that every token at least "
           "xtc_threshold likely but the least likely of them is removed; 0 off",
           openai="xtc_probability", llamacpp="xtc_probability", repl="xtc_probability"),
    engine("xtc_threshold", "XTC: the probability that makes a token a top choice; > 0.5 off",
           openai="xtc_threshold", llamacpp="xtc_threshold", repl="xtc_threshold"),
    python("lora", Any, None, _opt(_lora), "LoRA adapters this request runs with (edgellm.lora); "
           "none: the base alone", "a name, or a list of names / [name, scale] / {name or id, scale}",
           {"anyOf": [_STR, {"type": "array"}, {"type": "object"}]}, llamacpp="lora"),
)

BY_NAME: Dict[str, Field] = {f.name: f for f in FIELDS}
_missing = set(_ENGINE) - set(BY_NAME)
assert not _missing, f"engine sampling fields without a declaration here: {sorted(_missing)}"

# llama.cpp's default sampler chain as llama-server reports it (`samplers`): the steps edgellm runs.
LLAMACPP_CHAIN = ("penalties", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")

# llama.cpp samplers edgellm lacks, with their off values / defaults (llama-server reports them
# in generation_settings; its clients send them). The switch of each is accepted at its off value
# only; the settings of a switched-off sampler are accepted and unused.
LLAMACPP_UNSUPPORTED: Dict[str, Tuple[Any, bool]] = {  # name -> (default, is the switch)
    "dynatemp_range": (0.0, True), "dynatemp_exponent": (1.0, False),
    "top_n_sigma": (-1.0, True),
    "dry_multiplier": (0.0, True), "dry_base": (1.75, False), "dry_allowed_length": (2, False),
    "dry_penalty_last_n": (-1, False), "dry_sequence_breakers": (["\n", ":", "\"", "*"], False),
    "mirostat": (0, True), "mirostat_tau": (5.0, False), "mirostat_eta": (0.1, False),
    "adaptive_target": (-1.0, False), "adaptive_decay": (0.9, False),
}
_clash = set(LLAMACPP_UNSUPPORTED) & {n for f in FIELDS for n in f.llamacpp}
assert not _clash, f"declared both supported and unsupported: {sorted(_clash)}"

SAMPLING_RULES: Dict[str, Check] = {f.name: f.check for f in FIELDS}


def validate_sampling(values: Mapping[str, Any]) -> Dict[str, Any]:
    """Check every field that has a rule; returns field -> normalized value (ints as int,
    numbers as float, ...). Fields without a rule pass through unchecked."""
    out = dict(values)
    for key, check in SAMPLING_RULES.items():
        if key in out:
            out[key] = check(out[key], key)
    mt, mn = out.get("max_tokens"), out.get("min_tokens", 0)
    if mt is not None and mn is not None and mn > mt:
        raise fail(f"'min_tokens' ({mn}) exceeds 'max_tokens' ({mt})", "min_tokens")
    return out


def wire_names(api: str) -> Dict[str, str]:
    """API `api`'s request field name -> SamplingParams field."""
    return {w: f.name for f in FIELDS for w in f.names(api)}


def rules(api: str, wrap: Callable[[Check], Check] = lambda c: c) -> Dict[str, Check]:
    """API `api`'s request field name -> its check (each rule passed through `wrap`)."""
    return {w: wrap(f.check) for f in FIELDS for w in f.names(api)}


def dataclass_fields() -> List[tuple]:
    """(name, annotation, dataclasses.field) for make_dataclass: SamplingParams' fields."""
    return [(f.name, f.annotation, dataclasses.field(default=f.default)) for f in FIELDS]


def to_core(values: Mapping[str, Any], core: "_core.SamplingParams") -> None:
    """Copies the engine's fields (checked `values`) onto `core`; None is the engine's -1."""
    for name in _ENGINE:
        v = values[name]
        setattr(core, name, -1 if v is None else v)


def llamacpp_settings(params: Any) -> Dict[str, Any]:
    """llama-server's generation_settings entries for `params` (None: the defaults): the
    unsupported samplers at their defaults, then every field with a llama.cpp name."""
    out = {k: (list(d) if isinstance(d, list) else d) for k, (d, _) in
           LLAMACPP_UNSUPPORTED.items()}
    for f in FIELDS:
        v = getattr(params, f.name, f.default) if params is not None else f.default
        for w in f.llamacpp:
            out[w] = v
    return out


def markdown_table() -> str:
    """docs/SERVER.md's table of sampling parameters (tests/test_sampling_fields.py checks it)."""
    def names(f: Field, api: str) -> str:
        return ", ".join(f"`{n}`" for n in f.names(api)) or "-"

    def default(f: Field) -> str:
        d = f.default
        return "none" if d is None else str(d).lower() if isinstance(d, bool) else f"{d:g}" \
            if isinstance(d, float) else str(d)

    rows = ["| SamplingParams | default | range | OpenAI | llama.cpp | Ollama `options` | "
            "Anthropic | REPL `/set parameter` | what |",
            "|---|---|---|---|---|---|---|---|---|"]
    for f in FIELDS:
        rows.append(f"| `{f.name}` | {default(f)} | {f.range_text} | {names(f, 'openai')} | "
                    f"{names(f, 'llamacpp')} | {names(f, 'ollama')} | {names(f, 'anthropic')} | "
                    f"{'`' + f.repl + '`' if f.repl else '-'} | {f.help}"
                    f"{' (reads the token history)' if f.reads_history else ''} |")
    return "\n".join(rows) + "\n"

