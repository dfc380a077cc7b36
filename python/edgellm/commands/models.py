"""`edgellm models`: fetch the real test models into the cache and show where they are.

The command line itself is edgellm.models.main (standard library only, so models/fetch.py runs it
before anything is built); this hands it the arguments."""
import click

from edgellm import models as registry


@click.command("models", add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args):
    """Fetch and locate the known GGUF models: fetch [NAME...|all] [--verify] [-q], path NAME,
    list (cache: $EDGELLM_MODELS or ~/.cache/edgellm/models)."""
    raise SystemExit(registry.main(list(args), prog="edgellm models"))
