"""`edgellm models`: fetch the real test models into the cache and show where they are."""
import click

from edgellm import models as registry


def _fail(e: Exception) -> None:
    raise click.ClickException(str(e))


@click.group("models")
def command():
    """Fetch and locate the known GGUF models (cache: $EDGELLM_MODELS or ~/.cache/edgellm/models)."""


@command.command("fetch")
@click.argument("names", nargs=-1, metavar="[NAME...|all]")
@click.option("--verify", is_flag=True, help="Re-hash files already cached (fetched again on mismatch).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the resulting paths.")
def fetch_cmd(names, verify, quiet):
    """Download models and print their paths. `all` (the default) is the test models; the rest
    (`qwen2.5-coder-1.5b`, 1.1 GB) are fetched by name: `edgellm models fetch qwen2.5-coder-1.5b`."""
    try:
        wanted = registry._names_arg(list(names))
        for name in wanted:
            click.echo(registry.fetch(name, quiet=quiet, verify=verify))
    except (registry.UnknownModelError, registry.ModelFetchError, OSError) as e:
        _fail(e)


@command.command("path")
@click.argument("name")
def path_cmd(name):
    """Print the cache path of NAME (nothing is downloaded; the file may not exist yet)."""
    try:
        click.echo(registry.model_path(name))
    except registry.UnknownModelError as e:
        _fail(e)


@command.command("list")
def list_cmd():
    """Known models, whether each is cached, its size and path (and which are not in `all`)."""
    for name in registry.KNOWN_MODELS:
        click.echo(registry.describe(name))
