"""`--quantize TYPE`, shared by `run` and `serve`: MODEL is a Hugging Face checkpoint directory,
converted once to TYPE in the conversion cache (edgellm/convert/cached.py, as
LLM(dir, quantize=TYPE)) with a progress bar on stderr, and the GGUF file is what loads.
Without it a checkpoint directory is converted to F16."""
from typing import Callable, Optional

import click


def _check_type(ctx, param, value):
    if value is None:
        return None
    from edgellm.convert import OUT_TYPES

    t = value.upper()
    if t not in OUT_TYPES:
        raise click.BadParameter(f"{value!r} is not one of {', '.join(x.lower() for x in OUT_TYPES)}")
    return t


def quantize_option() -> Callable:
    return click.option("--quantize", "quantize", default=None, metavar="TYPE", callback=_check_type,
                        help="MODEL is a Hugging Face checkpoint directory: convert it to TYPE "
                             "(f16, q8_0, q4_k_m, ...; cached by content) and load that [default: f16].")


def converted_model(model: str, quantize: Optional[str], hint: str = "MODEL") -> str:
    """MODEL itself without --quantize, else the path of its conversion to that type (made now,
    with progress on stderr, when not cached)."""
    if quantize is None:
        return model
    from edgellm.convert.cached import converted_path, is_checkpoint_dir
    from edgellm.convert.writer import stderr_progress

    if not is_checkpoint_dir(model):
        raise click.BadParameter(f"--quantize needs a Hugging Face checkpoint directory (with config.json), "
                                 f"not {model!r}", param_hint=hint)
    try:
        return str(converted_path(model, quantize, progress=stderr_progress))
    except Exception as e:  # ConvertError (a ModelFormatError), OSError
        raise click.ClickException(f"{model}: {e}") from None
