"""Typed errors of the Hugging Face → GGUF converter: a checkpoint the engine cannot run is a
ModelFormatError (the same type a bad GGUF raises), naming the file and the tensor or key."""
from .._core import ModelFormatError


class ConvertError(ModelFormatError):
    """A checkpoint directory that cannot be converted: missing or inconsistent files."""


class UnsupportedArchitectureError(ConvertError):
    """config.json names an architecture (or a feature of one) the engine does not run."""
