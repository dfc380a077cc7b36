"""`edgellm generate MODEL PROMPT` (or `-p PROMPT`): stream one completion to stdout (the prompt is not
echoed), then one line of timings on stderr:

    prompt: N tokens, X t/s | generated: M tokens, Y t/s

(followed, with --verbose, by ` | drafted: D, accepted: A (P%)` when speculative decoding drafted
anything).
"""
import sys

import click

from ._sampling import sampling_option, sampling_params
from ._speculative import spec_kwargs, spec_options, spec_summary


@click.command("generate")
@click.argument("model")
@click.argument("prompt_arg", metavar="[PROMPT]", required=False)
@click.option("-p", "--prompt", default=None, help="Prompt text (tokenized with BOS as the model asks); "
              "or give it as the second argument.")
@sampling_option("-n", "--n-predict", "n_predict", field="max_tokens", none_at=-1, default=128,
                 show_default=True,
                 help="Tokens to generate; -1: until end-of-generation or the context is full.")
@sampling_option("--temp", "temperature", field="temperature", default=0.8, show_default=True,
                 help="Temperature; 0 = greedy.")
@sampling_option("--seed", field="seed", default=None, help="RNG seed (default: random).")
@click.option("-t", "--threads", default=None, type=click.IntRange(1), help="Threads (default: physical cores).")
@sampling_option("--top-k", field="top_k", default=40, show_default=True)
@sampling_option("--top-p", field="top_p", default=0.95, show_default=True)
@sampling_option("--min-p", field="min_p", default=0.05, show_default=True)
@sampling_option("--repeat-penalty", field="repetition_penalty", default=1.0, show_default=True)
@sampling_option("--repeat-last-n", field="repeat_last_n", default=64, show_default=True)
@click.option("-c", "--ctx-size", "ctx_size", default=None, type=click.IntRange(16), help="Context size (default: min(trained, 4096)).")
@click.option("--ignore-eos", is_flag=True, help="Keep generating past end-of-generation tokens.")
@click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", default=0, show_default=True, type=click.IntRange(-1, None),
              help="Last layers to run on a CUDA GPU (-1 = all); without one, a warning and the CPU.")
@click.option("--mmproj", "mmproj", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The model's projector GGUF (llama.cpp's --mmproj file); default: the one "
                   "mmproj*.gguf beside the model, if any.")
@click.option("--image", "images", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="An image (JPEG, PNG, WebP, GIF) the prompt is about: the prompt becomes one chat "
                   "turn, the images before the text. Repeatable.")
@click.option("--verbose", is_flag=True,
              help="Add speculative decoding's counts (drafted, accepted) to the timing line.")
@spec_options()
def command(model, prompt_arg, prompt, n_predict, temperature, seed, threads, top_k, top_p, min_p, repeat_penalty,
            repeat_last_n, ctx_size, ignore_eos, n_gpu_layers, spec, draft, draft_max, mmproj=None, images=(),
            verbose=False):
    """Generate text from MODEL (a GGUF path or a known model name) for PROMPT."""
    if prompt is not None and prompt_arg is not None:
        raise click.UsageError("give the prompt once: as PROMPT or with -p, not both")
    prompt = prompt if prompt is not None else prompt_arg
    if prompt is None:
        raise click.UsageError("no prompt: give PROMPT or -p PROMPT")
    spec_args = spec_kwargs(spec, draft, draft_max)
    from edgellm import EdgeLLMError, LLM
    from edgellm.models import ModelFetchError, UnknownModelError

    params = sampling_params(
        max_tokens=n_predict, temperature=temperature, seed=seed,
        top_k=top_k, top_p=top_p, min_p=min_p, repetition_penalty=repeat_penalty,
        repeat_last_n=repeat_last_n, ignore_eos=ignore_eos)
    try:
        llm = LLM(model, n_ctx=ctx_size, n_threads=threads, max_seqs=1, n_gpu_layers=n_gpu_layers, mmproj=mmproj,
                  **spec_args)
    except (EdgeLLMError, UnknownModelError, ModelFetchError, FileNotFoundError, OSError) as e:
        from edgellm.memory_plan import message_for
        raise click.ClickException(message_for(e, "run"))  # -c, as run's
    last = None
    try:
        with llm:
            if images:  # one chat turn: the images, then the prompt
                from edgellm.vision import file_part
                turn = [{"role": "user", "content": [file_part(p) for p in images] + [{"type": "text", "text": prompt}]}]
                chunks = llm.chat_stream_chunks(turn, params)
            else:
                chunks = llm.stream_chunks(prompt, params)
            for chunk in chunks:
                if chunk.text:
                    sys.stdout.write(chunk.text)
                    sys.stdout.flush()
                if chunk.finish_reason is not None:
                    last = chunk
    except EdgeLLMError as e:
        raise click.ClickException(str(e))
    except KeyboardInterrupt:
        sys.stdout.write("\n")
        sys.exit(130)
    sys.stdout.write("\n")
    sys.stdout.flush()
    if last is not None:
        t = last.timings or {}
        spec_line = spec_summary(t) if verbose else None
        click.echo(
            f"prompt: {t.get('prompt_n', 0)} tokens, {t.get('prompt_per_second', 0.0):.2f} t/s | "
            f"generated: {t.get('predicted_n', 0)} tokens, {t.get('predicted_per_second', 0.0):.2f} t/s"
            + (f" | {spec_line}" if spec_line else ""),
            err=True)
