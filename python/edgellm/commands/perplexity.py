"""`edgellm perplexity MODEL -f TEXT`: perplexity of a text file with llama.cpp's method
(edgellm/bench/perplexity.py). Prints the running estimate `[1]12.3456,[2]...` as chunks
finish, then `PPL = x ± err`.
"""
import json
import sys

import click


@click.command("perplexity")
@click.argument("model")
@click.option("-f", "--file", "text_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="UTF-8 text to score.")
@click.option("-c", "--ctx-size", "n_ctx", default=512, show_default=True, type=click.IntRange(4, None),
              help="Tokens per chunk (each chunk is a fresh context).")
@click.option("-b", "--batch-size", "n_batch", default=512, show_default=True, type=click.IntRange(1, None),
              help="Tokens per forward pass.")
@click.option("-t", "--threads", default=0, type=int, help="Threads (default: physical cores).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead.")
def command(model, text_file, n_ctx, n_batch, threads, as_json):
    """Measure the perplexity of MODEL on a text file."""
    from edgellm import EdgeLLMError
    from edgellm.bench.perplexity import perplexity
    from edgellm.bench.progress import Progress
    from edgellm.models import ModelFetchError, UnknownModelError, resolve

    with open(text_file, "r", encoding="utf-8") as f:
        text = f.read()
    try:
        path = resolve(model)
    except (UnknownModelError, ModelFetchError, FileNotFoundError, OSError) as e:
        raise click.ClickException(str(e))

    bar = None
    printed = []

    def on_chunk(i, ppl):
        if bar is not None:
            bar.update(1, label=f"chunk {i + 1}/{bar.total}")
        if not as_json:
            printed.append(f"[{i + 1}]{ppl:.4f}")
            sys.stdout.write(("," if i else "") + printed[-1])
            sys.stdout.flush()

    def on_start(n_chunks):
        nonlocal bar
        # The running estimate goes to stdout; draw the bar only when it would not garble it.
        bar = Progress(n_chunks, label="perplexity", enabled=sys.stderr.isatty() and not sys.stdout.isatty())

    try:
        result = perplexity(str(path), text, n_ctx=n_ctx, n_batch=n_batch, n_threads=threads, on_chunk=on_chunk,
                            on_start=on_start)
    except (EdgeLLMError, ValueError, OSError) as e:
        raise click.ClickException(str(e))
    finally:
        if bar is not None:
            bar.close()
    if as_json:
        json.dump(vars(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    sys.stdout.write("\n")
    click.echo(f"{result.n_chunks} chunks of {result.n_ctx} tokens ({result.n_tokens} tokens in the text), "
               f"{result.n_scored} scored")
    click.echo(f"PPL = {result.ppl:.4f} ± {result.ppl_err:.5f}")
