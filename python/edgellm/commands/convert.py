"""`edgellm convert HF_DIR OUT.gguf [--type T]`: a Hugging Face safetensors checkpoint to GGUF
with edgellm's own converter (edgellm/convert/)."""
import click

from edgellm.convert.writer import OUT_TYPES


@click.command("convert")
@click.argument("hf_dir", type=click.Path(file_okay=False))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--type", "out_type", default="F16", show_default=True,
              type=click.Choice(OUT_TYPES, case_sensitive=False), help="Tensor type of the matrices.")
@click.option("--dry-run", is_flag=True, help="Print the plan (tensors, shapes, types, bytes); write nothing.")
@click.option("-t", "--threads", default=0, type=int, help="Quantizer threads (default: all CPUs).")
def command(hf_dir, out, out_type, dry_run, threads):
    """Write OUT: HF_DIR's config.json, tokenizer.json and safetensors weights as GGUF."""
    import os
    import time

    from edgellm import EdgeLLMError
    from edgellm.convert import convert, plan
    from edgellm.convert.writer import stderr_progress

    t0 = time.perf_counter()
    try:
        if dry_run:
            click.echo(plan(hf_dir, out_type).describe())
            return
        cp = convert(hf_dir, out, out_type, n_threads=threads, progress=stderr_progress)
    except (EdgeLLMError, OSError) as e:
        raise click.ClickException(str(e))
    click.echo(f"wrote {out} ({os.path.getsize(out) / 2**20:.1f} MiB, {cp.arch}, {len(cp.tensors)} tensors, "
               f"{cp.file_type}) in {time.perf_counter() - t0:.1f} s")
