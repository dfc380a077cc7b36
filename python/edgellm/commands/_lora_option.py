"""`--lora [NAME=]PATH[:SCALE]` (repeatable), shared by `run` and `serve`: GGUF LoRA adapters
loaded with the model (edgellm.lora). `run` answers with all of them on; `serve` lets each
request pick (server/lora_api.py). The values are kept in the click context, read by `cli_loras`."""
from typing import Callable, List, Tuple

import click

_KEY = "edgellm.lora"


def _store(ctx, param, value):
    from edgellm.lora import parse_cli

    try:
        ctx.meta[_KEY] = parse_cli(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--lora") from None
    return value


def lora_option() -> Callable:
    return click.option("--lora", "lora", multiple=True, expose_value=False, callback=_store,
                        metavar="[NAME=]PATH[:SCALE]",
                        help="A GGUF LoRA adapter to load (repeatable; NAME defaults to the file's stem, "
                             "SCALE to 1; `edgellm convert --base` makes one from a PEFT folder).")


def cli_loras() -> List[Tuple[str, str, float]]:
    """(name, path, scale) of each --lora, in order."""
    return list(click.get_current_context().meta.get(_KEY, []))
