"""The REPL's sampling parameters under Ollama's names (`/set parameter NAME VALUE`).

Ollama users type `temperature`, `num_predict`, `repeat_penalty`, `num_ctx`...; the engine
speaks SamplingParams. This table is the one place the two vocabularies meet. Only values the
user set are kept (so `/show parameters` can tell them from the defaults, and `/save` writes
only what was chosen); everything else falls back to SamplingParams' llama.cpp defaults.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from ..sampling_params import SamplingParams

__all__ = ["ParameterError", "ParamSpec", "PARAMETERS", "Parameters"]


class ParameterError(ValueError):
    """A parameter name or value the REPL cannot accept; the message says which and why."""


def _float(name: str, lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise ParameterError(f"{name} takes a number, got {text!r}") from None
        if math.isnan(v) or v < lo or v > hi or (lo_open and v == lo):
            lo_sign, lo_bracket = (">", "(") if lo_open else (">=", "[")
            bound = f"{lo_sign} {lo:g}" if hi == math.inf else f"in {lo_bracket}{lo:g}, {hi:g}]"
            raise ParameterError(f"{name} must be {bound}, got {text}")
        return v
    return parse


def _int(name: str, lo: Optional[int] = None, allow_unset: bool = False):
    def parse(text: str) -> Optional[int]:
        try:
            v = int(text)
        except ValueError:
            raise ParameterError(f"{name} takes a whole number, got {text!r}") from None
        if allow_unset and v < 0:
            return None  # Ollama's -1: "no limit" / "random"
        if lo is not None and v < lo:
            raise ParameterError(f"{name} must be >= {lo}, got {v}")
        return v
    return parse


@dataclass(frozen=True)
class ParamSpec:
    name: str                       # Ollama's name
    field: Optional[str]            # SamplingParams field; None: an engine setting (num_ctx)
    parse: Callable[[str], Any]
    help: str


PARAMETERS: Dict[str, ParamSpec] = {s.name: s for s in (
    ParamSpec("temperature", "temperature", _float("temperature", 0.0),
              "randomness of sampling; 0 = always the most likely token"),
    ParamSpec("top_k", "top_k", _int("top_k"), "sample among the k most likely tokens; <= 0 off"),
    ParamSpec("top_p", "top_p", _float("top_p", 0.0, 1.0), "nucleus sampling mass; 1 off"),
    ParamSpec("min_p", "min_p", _float("min_p", 0.0, 1.0),
              "drop tokens below min_p x the top probability; 0 off"),
    ParamSpec("typical_p", "typical_p", _float("typical_p", 0.0, 1.0, lo_open=True),
              "locally typical sampling; 1 off"),
    ParamSpec("seed", "seed", _int("seed", allow_unset=True), "random seed; -1 = random each answer"),
    ParamSpec("num_predict", "max_tokens", _int("num_predict", lo=1, allow_unset=True),
              "most tokens per answer; -1 = until the model stops or the context is full"),
    ParamSpec("num_ctx", None, _int("num_ctx", lo=16), "context window in tokens (reloads the model)"),
    ParamSpec("repeat_penalty", "repetition_penalty", _float("repeat_penalty", 0.0, lo_open=True),
              "penalty for repeating recent tokens; 1 off"),
    ParamSpec("repeat_last_n", "repeat_last_n", _int("repeat_last_n", lo=-1),
              "how many recent tokens repeat_penalty looks at; -1 all, 0 off"),
    ParamSpec("presence_penalty", "presence_penalty", _float("presence_penalty"), "penalty for any seen token"),
    ParamSpec("frequency_penalty", "frequency_penalty", _float("frequency_penalty"),
              "penalty growing with a token's count"),
    ParamSpec("stop", "stop", str, "a stop string (repeat to add more)"),
)}


class Parameters:
    """The values the user chose, by Ollama name. `stop` accumulates a list."""

    def __init__(self, values: Optional[Mapping[str, Any]] = None):
        self.values: Dict[str, Any] = {}
        for name, value in (values or {}).items():
            self._store(name, value)

    # ---- setting ----
    def _store(self, name: str, value: Any) -> None:
        if name not in PARAMETERS:
            raise ParameterError(f"unknown parameter {name!r}; known: {', '.join(PARAMETERS)}")
        if name == "stop":
            stops = value if isinstance(value, list) else [value]
            if not all(isinstance(s, str) and s for s in stops):
                raise ParameterError("stop takes non-empty strings")
            self.values.setdefault("stop", [])
            self.values["stop"].extend(s for s in stops if s not in self.values["stop"])
        elif value is None:
            self.values[name] = None
        else:
            # Values from JSON are re-validated through the same parser as typed ones.
            self.values[name] = PARAMETERS[name].parse(str(value))

    def set(self, name: str, args: List[str]) -> Any:
        """`/set parameter NAME ARGS...`: parse, validate, store; returns the stored value."""
        spec = PARAMETERS.get(name)
        if spec is None:
            raise ParameterError(f"unknown parameter {name!r}; known: {', '.join(PARAMETERS)}")
        if not args:
            raise ParameterError(f"/set parameter {name} needs a value")
        if name == "stop":
            self._store("stop", args)
            return self.values["stop"]
        if len(args) != 1:
            raise ParameterError(f"{name} takes one value, got {len(args)}: {' '.join(args)}")
        self.values[name] = spec.parse(args[0])
        return self.values[name]

    @staticmethod
    def split_args(text: str) -> List[str]:
        """Arguments as a shell splits them, so `/set parameter stop "User:"` keeps the colon
        and quotes; unbalanced quotes fall back to plain whitespace splitting."""
        try:
            return shlex.split(text)
        except ValueError:
            return text.split()

    # ---- reading ----
    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def sampling(self, base: Optional[SamplingParams] = None) -> SamplingParams:
        """SamplingParams: `base` (the command-line choices) overridden by what was set here."""
        p = SamplingParams(**vars(base)) if base is not None else SamplingParams()
        for name, value in self.values.items():
            field = PARAMETERS[name].field
            if field is None:
                continue
            if name == "stop":
                p.stop = list(p.stop_list()) + [s for s in value if s not in p.stop_list()]
            else:
                setattr(p, field, value)
        return p

    def to_json(self) -> Dict[str, Any]:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.values.items()}

    @classmethod
    def from_json(cls, data: Any, where: str) -> "Parameters":
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ParameterError(f"{where}: 'parameters' must be an object, got {type(data).__name__}")
        try:
            return cls(data)
        except ParameterError as e:
            raise ParameterError(f"{where}: {e}") from None
