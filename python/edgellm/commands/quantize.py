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
@click.option("--allow-requantize", is_flag=True,
              help="Quantize a file whose matrices are quantized already (llama-quantize's flag): "
                   "the quality lost to the first quantization is lost again.")
def command(src, dst, type_name, threads, quiet, allow_requantize=False):
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

    quantized = [] if allow_requantize else quantized_types(src)
    if quantized:
        raise click.UsageError(
            f"{os.path.basename(src)} is quantized already ({', '.join(quantized)}): quantizing it "
            "again loses quality twice; start from an F16 / BF16 / F32 file, or give "
            "--allow-requantize")
    t0 = time.perf_counter()
    log = None if quiet else (lambda line: click.echo(line, err=True))
    try:
        written = quantize_file(src, dst, type_name.upper(), n_threads=threads, log=log)
    except (QuantizeError, EdgeLLMError, ValueError, OSError) as e:
        # a partial DST goes; never the input (DST naming SRC is refused before anything is written)
        if os.path.exists(dst) and not os.path.samefile(dst, src):
            os.unlink(dst)
        raise click.ClickException(str(e))
    counts = {}
    for t in written.values():
        counts[t] = counts.get(t, 0) + 1
    mix = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    click.echo(f"wrote {dst} ({os.path.getsize(dst) / 2**20:.1f} MiB, {len(written)} tensors: {mix}) "
               f"in {time.perf_counter() - t0:.1f} s")


UNQUANTIZED = ("F32", "F16", "BF16", "F64")


def quantized_types(path: str) -> list:
    """The quantized types of `path`'s matrices (tensors of two or more dimensions), sorted;
    empty for an F32 / F16 / BF16 model."""
    from edgellm.model_file import ModelFile

    with ModelFile(path) as mf:
        return sorted({t.type for t in mf.tensors.values()
                       if len(t.shape) >= 2 and t.type.upper() not in UNQUANTIZED})
