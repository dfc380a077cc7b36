"""`edgellm bench MODEL`: prompt-processing and generation throughput the way llama-bench
measures it (see edgellm/bench/throughput.py for the method).

    edgellm bench smollm2 -p 512 -n 128 -t 2 -r 5 --batch 1,4,8,16 -o md

With --spec ngram|draft|auto (or --draft MODEL) two more rows per -n value generate through the
engine, speculation off and on, with drafted / accepted counts (edgellm/bench/spec_decode.py).
"""
import json
import sys

import click

from ._speculative import spec_kwargs, spec_options


def _int_list(ctx, param, value):
    if value is None or value == "":
        return []
    try:
        out = [int(v) for v in str(value).split(",") if v.strip() != ""]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}")
    if any(v < 0 for v in out):
        raise click.BadParameter(f"values must be >= 0, got {value!r}")
    return out


@click.command("bench")
@click.argument("model")
@click.option("-p", "--n-prompt", "n_prompt", default="512", show_default=True, callback=_int_list,
              help="Prompt lengths (comma-separated) for the pp tests; 0 skips them.")
@click.option("-n", "--n-gen", "n_gen", default="128", show_default=True, callback=_int_list,
              help="Generated tokens (comma-separated) for the tg tests; 0 skips them.")
@click.option("-t", "--threads", default=0, type=int, help="Threads (default: physical cores).")
@click.option("-r", "--repetitions", "reps", default=5, show_default=True, type=click.IntRange(1, None))
@click.option("-b", "--batch-size", "max_batch_tokens", default=512, show_default=True,
              type=click.IntRange(1, None), help="Tokens per forward pass while processing the prompt.")
@click.option("--batch", "batches", default="", callback=_int_list,
              help="Concurrent streams for aggregate decode t/s, e.g. 1,4,8,16.")
@click.option("-o", "--output", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@click.option("--seed", default=1234, show_default=True, type=int, help="Seed of the random token ids.")
@click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", default=0, show_default=True, type=click.IntRange(-1, None),
              help="Last layers to run on a CUDA GPU (-1 = all); without one, a warning and the CPU.")
@spec_options(default=None)
def command(model, n_prompt, n_gen, threads, reps, max_batch_tokens, batches, fmt, seed, n_gpu_layers,
            spec, draft, draft_max):
    """Measure prompt processing (pp) and generation (tg) tokens/s of MODEL."""
    from edgellm import EdgeLLMError
    from edgellm.bench.progress import Progress
    from edgellm.bench.throughput import ThroughputBench, markdown_table
    from edgellm.models import ModelFetchError, UnknownModelError, resolve

    try:
        path = resolve(model)
        bench = ThroughputBench(str(path), n_threads=threads, max_batch_tokens=max_batch_tokens, seed=seed,
                                n_gpu_layers=n_gpu_layers)
    except (EdgeLLMError, UnknownModelError, ModelFetchError, FileNotFoundError, OSError) as e:
        raise click.ClickException(str(e))
    spec_mode = spec if spec is not None else ("auto" if draft else "off")
    spec_args = spec_kwargs(spec_mode, draft, draft_max)
    spec_gen = [g for g in n_gen if g > 0] if spec_mode != "off" else []
    total = ThroughputBench.work(n_prompt, n_gen, reps, batches) + 2 * reps * sum(spec_gen)
    try:
        with Progress(total, label=bench.info.label) as bar:
            results = bench.run(n_prompt, n_gen, reps, batches, progress=bar)
            if spec_gen:
                results += _speculative(bench, spec_args, spec_gen, reps, bar, threads,
                                        max_batch_tokens, n_gpu_layers)
    except (EdgeLLMError, UnknownModelError, ModelFetchError, FileNotFoundError, OSError) as e:
        raise click.ClickException(str(e))
    if fmt == "json":
        json.dump([r.as_dict() for r in results], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        click.echo(markdown_table(results))


def _speculative(bench, spec_args, n_gen, reps, bar, threads, max_batch_tokens, n_gpu_layers):
    from edgellm.bench.spec_decode import SpeculativeBench
    from edgellm.bench.throughput import BenchResult

    base = BenchResult(test="", n_prompt=0, n_gen=0, n_seqs=1, samples_ts=[], samples_ns=[],
                       model=bench.info.label, model_size=bench.info.size_bytes,
                       model_n_params=bench.info.n_params, backend=bench.backend,
                       n_threads=bench.n_threads, n_batch=bench.max_batch_tokens)
    sb = SpeculativeBench(bench.path, spec_args["speculative"], spec_args["draft_model"],
                          n_threads=threads, max_batch_tokens=max_batch_tokens,
                          num_speculative_tokens=spec_args["num_speculative_tokens"],
                          n_gpu_layers=n_gpu_layers)
    try:
        out = []
        for g in n_gen:
            out += sb.run(g, reps, base, bar.update)
        return out
    finally:
        sb.close()
