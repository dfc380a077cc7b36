"""The `edgellm` command line. Each subcommand lives in edgellm/commands/<name>.py and is
imported only when used, so `edgellm --help` stays fast."""
import importlib

import click

# name -> (module under edgellm.commands that defines `command` (a click.Command), the summary
# `edgellm --help` lists: a whole phrase, short enough never to be cut)
_COMMANDS = {
    "info": ("info", "Show what a GGUF model file holds."),
    "plan": ("plan", "Plan a model's memory before loading it."),
    "models": ("models", "Fetch, locate and list the known models."),
    "generate": ("generate", "Complete a prompt (raw text, no chat)."),
    "run": ("run", "Chat with a model in the terminal."),
    "serve": ("serve", "Serve models over OpenAI-compatible HTTP."),
    "service": ("service", "Run `edgellm serve` as a systemd service."),
    "bench": ("bench", "Measure prompt and generation speed."),
    "perplexity": ("perplexity", "Measure perplexity on a text file."),
    "quantize": ("quantize", "Quantize a GGUF file to another type."),
    "ray-serve": ("ray_serve", "Serve a model on a Ray cluster."),
    "convert": ("convert", "Convert a Hugging Face checkpoint to GGUF."),
    # Ollama's model verbs (edgellm/hub.py): "module:attribute" where one module holds several
    "pull": ("hub:pull", "Fetch a model (a known name or hf.co/USER/REPO[:QUANT])."),
    "list": ("hub:list_models", "List the models on this machine."),
    "ps": ("hub:ps", "List the models a running server has loaded."),
    "show": ("hub:show", "Show a model's details, template and license."),
    "rm": ("hub:rm", "Remove a model name (and files no other name uses)."),
    "cp": ("hub:cp", "Give a model another name."),
}


class OneLineUsageError(click.ClickException):
    """A usage error shown as every other error is: one plain `Error: ...` line on stderr (exit
    status 2), without click's usage synopsis and hint before it (`--help` shows those)."""
    exit_code = 2


class _LazyGroup(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise OneLineUsageError(e.format_message()) from None

    def list_commands(self, ctx):
        return sorted(_COMMANDS)

    def get_command(self, ctx, name):
        entry = _COMMANDS.get(name)
        if entry is None:
            return None
        target, summary = entry if isinstance(entry, tuple) else (entry, None)
        module, _, attribute = target.partition(":")
        try:
            mod = importlib.import_module(f"edgellm.commands.{module}")
        except ModuleNotFoundError as e:
            if e.name == f"edgellm.commands.{module}":
                return None  # not built yet
            raise
        cmd = getattr(mod, attribute or "command")
        cmd.short_help = cmd.short_help or summary
        return cmd


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="edgellm")
def main():
    """edgellm: run quantized GGUF language models on the CPU."""
    import warnings

    warnings.showwarning = _plain_warning


def _plain_warning(message, category, filename, lineno, file=None, line=None):
    """A Python warning, as a command-line user reads it: one `Warning: ...` line on stderr
    (not the source file, line and code of the library that warned)."""
    click.echo(f"Warning: {message}", err=True)


if __name__ == "__main__":
    main()
