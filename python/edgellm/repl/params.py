"""The REPL's sampling parameters under Ollama's names (`/set parameter NAME VALUE`).

Ollama users type `temperature`, `num_predict`, `repeat_penalty`, `num_ctx`...; the engine
speaks SamplingParams. The specs come from edgellm.sampling_fields (each field's REPL name, range
and help), plus `num_ctx`, an engine setting. Only values the user set are kept (so `/show parameters` can tell them from the defaults, and `/save` writes
only what was chosen); everything else falls back to SamplingParams' llama.cpp defaults.
"""
from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from .. import sampling_fields
from ..sampling_params import SamplingParams

__all__ = ["ParameterError", "ParamSpec", "PARAMETERS", "Parameters", "effective"]


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


def _spec(f: sampling_fields.Field) -> ParamSpec:
    """The `/set parameter` spec of a sampling field: parsed by its type, checked by its range
    (numbers) -- a negative whole number is "unset" (None) where the field may be unset."""
    lo, hi, lo_open = f.bounds
    if f.name == "stop":
        parse: Callable[[str], Any] = str
    elif f.kind == "float":
        parse = _float(f.repl, lo, hi, lo_open)
    else:  # int fields, and the seed
        unset = f.default is None or bool(f.engine and f.engine["unset_below_0"])
        parse = _int(f.repl, None if lo in (-math.inf, -(2**31)) or unset and lo < 0 else lo,
                     allow_unset=unset)
    return ParamSpec(f.repl, f.name, parse, f.help)


PARAMETERS: Dict[str, ParamSpec] = {s.name: s for s in (
    *(_spec(f) for f in sampling_fields.FIELDS if f.repl),
    ParamSpec("num_ctx", None, _int("num_ctx", lo=16), "context window in tokens (reloads the model)"),
)}


def effective(p: SamplingParams) -> Dict[str, Any]:
    """`/show parameters`: what each REPL parameter is for `p` (None shown as Ollama's -1 or
    'random'), stop excluded."""
    out: Dict[str, Any] = {}
    for spec in PARAMETERS.values():
        if spec.field is None or spec.name == "stop":
            continue
        v = getattr(p, spec.field)
        out[spec.name] = v if v is not None else "random" if spec.field == "seed" else -1
    return out


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

    def unset(self, name: str, args: List[str]) -> str:
        """`/unset parameter NAME [STRING...]`: NAME back to its default; for stop, with
        strings, only those are removed. Returns what now holds, in words."""
        if name not in PARAMETERS:
            raise ParameterError(f"unknown parameter {name!r}; known: {', '.join(PARAMETERS)}")
        if name == "stop" and args:
            have = self.values.get("stop", [])
            missing = [s for s in args if s not in have]
            if missing:
                raise ParameterError(f"stop {', '.join(map(repr, missing))} is not set; set: "
                                     f"{', '.join(map(repr, have)) or 'none'}")
            self.values["stop"] = [s for s in have if s not in args]
            if not self.values["stop"]:
                del self.values["stop"]
            left = self.values.get("stop")
            return f"stop strings now: {', '.join(map(repr, left))}" if left else "no stop strings"
        self.values.pop(name, None)
        return "the default"

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
