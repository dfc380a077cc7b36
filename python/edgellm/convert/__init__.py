"""Hugging Face safetensors checkpoints → GGUF (`edgellm convert`, and direct load of a
checkpoint directory). checkpoint.py reads the directory, config.py maps config.json to
metadata, tokenizer.py the vocabulary, tensors.py names and transforms, writer.py streams."""
from .errors import ConvertError, UnsupportedArchitectureError
from .writer import OUT_TYPES, convert, plan

__all__ = ["ConvertError", "UnsupportedArchitectureError", "OUT_TYPES", "convert", "plan"]
