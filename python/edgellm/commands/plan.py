"""`edgellm plan MODEL [-c N] [--parallel P] [--kv-type T] [--json]`: the memory the model will
take, part by part, against what the machine can give; nothing is loaded (edgellm.memory_plan)."""
from __future__ import annotations

import json
import sys

import click


def _size(ctx, param, value):
    if value is None:
        return None
    from edgellm.memory_plan import parse_bytes
    try:
        return parse_bytes(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@click.command("plan")
@click.argument("model", metavar="MODEL")
@click.option("--ctx-size", "-c", "ctx_size", default=None, type=click.IntRange(1),
              help="Context length per sequence [default: min(trained, 4096)].")
@click.option("--parallel", "-np", default=16, show_default=True, type=click.IntRange(1, 256),
              help="Sequences decoded together (max_seqs).")
@click.option("--kv-type", default="f16", show_default=True,
              type=click.Choice(["f16", "q8_0", "f32"], case_sensitive=False))
@click.option("--kv-memory", default=None, callback=_size,
              help="KV budget for all sequences, e.g. 512M [default: two full contexts].")
@click.option("--threads", "-t", default=None, type=click.IntRange(1),
              help="Compute threads [default: the physical cores].")
@click.option("--max-batch-tokens", default=512, show_default=True, type=click.IntRange(1))
@click.option("--draft", "draft", default=None, metavar="MODEL",
              help="A draft model for speculative decoding, planned too.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def command(model, ctx_size, parallel, kv_type, kv_memory, threads, max_batch_tokens, draft,
            as_json) -> None:
    """Plan the memory of MODEL before loading it: weights after repacking, KV bytes per token
    and the KV budget, scratch, the peak during load and the total, against MemAvailable and the
    cgroup limit (EDGELLM_MEMORY_LIMIT overrides). Exits 1 with a message when it does not fit.

    MODEL is a .gguf path or a known model name (fetched on first use)."""
    import edgellm
    from edgellm.memory_plan import plan
    from edgellm.models import ModelFetchError, UnknownModelError

    try:
        p = plan(model, ctx_size, threads, kv_memory=kv_memory, kv_type=kv_type.lower(),
                 max_seqs=parallel, max_batch_tokens=max_batch_tokens, draft_model=draft)
    except (UnknownModelError, ModelFetchError, FileNotFoundError, OSError, edgellm.EdgeLLMError) as e:
        click.echo(f"Error: {e}", err=True)
        sys.exit(1)
    for text in p.warnings:  # as LLM(...) warns it when `run` / `serve` load the model
        click.echo(f"Warning: {text}", err=True)
    click.echo(json.dumps(p.to_dict(), indent=2) if as_json else p.table())
    if not p.fits:
        sys.exit(1)
