"""The `edgellm` command line. Each subcommand lives in edgellm/commands/<name>.py and is
imported only when used, so `edgellm --help` stays fast."""
import importlib

import click

# name -> module under edgellm.commands that defines `command` (a click.Command), or
# "module:attribute" where one module holds several commands
_COMMANDS = {
    "info": "info",
    "plan": "plan",
    "models": "models",
    "generate": "generate",
    "run": "run",
    "serve": "serve",
    "service": "service",
    "bench": "bench",
    "perplexity": "perplexity",
    "quantize": "quantize",
    "ray-serve": "ray_serve",
    "convert": "convert",
    # Ollama's model verbs (edgellm/hub.py)
    "pull": "hub:pull",
    "list": "hub:list_models",
    "ps": "hub:ps",
    "show": "hub:show",
    "rm": "hub:rm",
    "cp": "hub:cp",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(_COMMANDS)

    def get_command(self, ctx, name):
        target = _COMMANDS.get(name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        try:
            mod = importlib.import_module(f"edgellm.commands.{module}")
        except ModuleNotFoundError as e:
            if e.name == f"edgellm.commands.{module}":
                return None  # not built yet
            raise
        return getattr(mod, attribute or "command")


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edgellm")
def main():
    """edgellm: run quantized GGUF language models on the CPU."""


if __name__ == "__main__":
    main()
