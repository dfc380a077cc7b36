"""`edgellm models`: fetch the real test models into the cache and show where they are.

The command line itself is edgellm.models.main (standard library only, so models/fetch.py runs it
before anything is built); this hands it the arguments."""
import click

from edgellm import models as registry


@click.command("models", add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="COMMAND [ARGS]...")
def command(args):
    """Fetch and locate the known GGUF models (cache: $EDGELLM_MODELS or
    ~/.cache/edgellm/models).

    \b
    Commands:
      fetch [NAME...|all] [--verify] [-q]  download models (default: all, the test models)
      path NAME                            print the cache path of a model (no download)
      list                                 known models and whether they are cached"""
    if not args or args[0] in ("-h", "--help"):  # click's help, as every other command's
        ctx = click.get_current_context()
        click.echo(ctx.get_help())
        ctx.exit(0 if args else 2)
    raise SystemExit(registry.main(list(args), prog="edgellm models"))
