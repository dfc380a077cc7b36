"""`edgellm quantize IN.gguf OUT.gguf TYPE`: re-quantize a model with edgellm's own quantizers
(type mix as llama-quantize chooses it; see edgellm/bench/quantize.py)."""
import click

TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K_M", "Q4_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS",
         "F16", "BF16")


@click.command("quantize")
@click.argument("src")
@click.argument("dst", type=click.Path(dir_okay=False))
@click.argument("type_name", metavar="TYPE", type=click.Choice(TYPES, case_sensitive=False))
@click.option("-t", "--threads", default=0, type=int, help="Threads (default: all CPUs).")
@click.option("-q", "--quiet", is_flag=True, help="Do not list the tensors.")
def command(src, dst, type_name, threads, quiet):
    """Write DST: SRC's metadata and tensors, matrices re-quantized to TYPE.

    SRC is a .gguf path or a known model name (fetched on first use). TYPE is one of Q4_0,
    Q4_1, Q5_0, Q5_1, Q8_0, Q4_K_M, Q4_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS (the non-linear 4-bit
    formats: 4.5 and 4.25 bits a weight), F16, BF16; the per-tensor mix is llama-quantize's."""
    import os
    import time

    from edgellm import EdgeLLMError
    from edgellm.bench.quantize import QuantizeError, quantize_file
    from edgellm.models import ModelFetchError, UnknownModelError, resolve

    try:
        src = str(resolve(src))
    except (UnknownModelError, ModelFetchError, FileNotFoundError, OSError) as e:
        raise click.BadParameter(str(e), param_hint="SRC") from None

    t0 = time.perf_counter()
    log = None if quiet else (lambda line: click.echo(line, err=True))
    try:
        written = quantize_file(src, dst, type_name.upper(), n_threads=threads, log=log)
    except (QuantizeError, EdgeLLMError, ValueError, OSError) as e:
        if os.path.exists(dst):
            os.unlink(dst)
        raise click.ClickException(str(e))
    counts = {}
    for t in written.values():
        counts[t] = counts.get(t, 0) + 1
    mix = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    click.echo(f"wrote {dst} ({os.path.getsize(dst) / 2**20:.1f} MiB, {len(written)} tensors: {mix}) "
               f"in {time.perf_counter() - t0:.1f} s")
