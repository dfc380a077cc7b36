"""`edgellm run MODEL [PROMPT]`: chat with a model in the terminal, as `ollama run` does.

With PROMPT, or with stdin not a terminal (`echo question | edgellm run MODEL`), the answer
alone is printed and the command exits; otherwise an interactive session starts (see
edgellm/repl). Banner, colours and timing lines appear only when stdout is a terminal.
"""
import sys

import click

from edgellm.chat_template import builtin_names

from ._lora_option import cli_loras, lora_option
from ._quantize_option import converted_model, quantize_option
from ._sampling import sampling_option, sampling_params
from ._speculative import spec_kwargs, spec_options


def _stdin_text() -> str:
    data = sys.stdin.buffer.read()
    # The newline `echo` adds is not part of the question.
    return data.decode("utf-8", errors="replace").strip()


@click.command("run")
@click.argument("model")
@click.argument("prompt", nargs=-1)
@click.option("--system", default=None, help="System message for the conversation.")
@sampling_option("--temp", "temperature", field="temperature", default=None,
                 help="Temperature; 0 = greedy.  [default: 0.8]")
@click.option("-c", "--ctx-size", "ctx_size", default=None, type=click.IntRange(16),
              help="Context size in tokens (default: min(trained, 4096)).")
@click.option("-t", "--threads", default=None, type=click.IntRange(1), help="Threads (default: physical cores).")
@click.option("--chat-template", default=None, metavar="NAME|FILE",
              help=f"Chat template: a built-in name ({', '.join(builtin_names())}) or a .jinja "
                   "file.")
@click.option("--verbose", is_flag=True, help="Print Ollama's timing block after each answer.")
@sampling_option("--seed", field="seed", default=None, help="RNG seed (default: random).")
@sampling_option("-n", "--num-predict", "num_predict", field="max_tokens", none_at=-1, default=-1,
                 show_default=True, help="Most tokens per answer; -1: until the model stops or the context is full.")
@click.option("-ngl", "--n-gpu-layers", "n_gpu_layers", default=0, show_default=True, type=click.IntRange(-1, None),
              help="Last layers to run on a CUDA GPU (-1 = all); without one, a warning and the CPU.")
@click.option("--context-shift/--no-context-shift", "context_shift", default=False, show_default=True,
              help="An answer that fills the context keeps going: the conversation so far is kept "
                   "and the older half of the answer is dropped from the context (llama.cpp's "
                   "--context-shift).")
@click.option("--cache-dir", "cache_dir", default=None, type=click.Path(file_okay=False),
              help="Persistent prefix cache: KV pages of the conversation are kept as files in this "
                   "folder, so a conversation loaded again (/load) or a piped prompt seen before "
                   "is not prefilled again after a restart.")
@click.option("--mmproj", "mmproj", default=None, type=click.Path(exists=True, dir_okay=False),
              help="The model's projector GGUF (llama.cpp's --mmproj file): the model then takes "
                   "images; default: the one mmproj*.gguf beside the model, if any.")
@quantize_option()
@lora_option()
@spec_options()
def command(model, prompt, system, temperature, ctx_size, threads, chat_template, verbose, seed,
            num_predict, n_gpu_layers, spec, draft, draft_max, context_shift=False, cache_dir=None,
            quantize=None, mmproj=None):
    """Chat with MODEL (a GGUF path, a known model name or a Hugging Face checkpoint directory)
    in the terminal, or answer PROMPT."""
    spec_args = spec_kwargs(spec, draft, draft_max)
    from edgellm import EdgeLLMError, LLM
    from edgellm.models import ModelFetchError, UnknownModelError
    from edgellm.repl import Renderer, ReplApp, answer_once
    from edgellm.repl.input import PlainReader, PromptToolkitReader, history_path
    from edgellm.repl.model_facts import model_name, quantization

    # --context-shift: the prompt (system message, earlier turns, the question) is kept whole
    base = sampling_params(max_tokens=num_predict, seed=seed, n_keep=-1 if context_shift else 0,
                           **({} if temperature is None else {"temperature": temperature}))

    question = " ".join(prompt) if prompt else None
    if not sys.stdin.isatty():
        piped = _stdin_text()
        question = f"{question}\n\n{piped}" if question and piped.strip() else (question or piped)
        if not (question or "").strip():
            raise click.UsageError("stdin was empty and no PROMPT was given")

    model = converted_model(model, quantize)
    loras = cli_loras()
    if loras:  # every --lora on, at its scale
        base.lora = [(name, scale) for name, _, scale in loras]

    def load(n_ctx):
        return LLM(model, n_ctx=n_ctx, n_threads=threads, chat_template=chat_template, max_seqs=1,
                   n_gpu_layers=n_gpu_layers, context_shift=context_shift, cache_dir=cache_dir, mmproj=mmproj,
                   lora={name: (path, scale) for name, path, scale in loras} or None, **spec_args)

    try:
        llm = load(ctx_size)
        # A bad --chat-template only shows when something is rendered: find out now.
        llm.apply_chat_template([{"role": "user", "content": "hi"}])
    except (EdgeLLMError, UnknownModelError, ModelFetchError, OSError) as e:
        from edgellm.memory_plan import message_for
        raise click.ClickException(message_for(e, "run"))
    except KeyboardInterrupt:
        sys.exit(130)

    stand_in = llm.chat_renderer.stand_in
    if stand_in:
        import os
        click.echo(f"Note: {os.path.basename(llm.model_path)} has no chat template (a base "
                   f"model?): the built-in '{stand_in}' template stands in, and a base model "
                   "may not answer as a chat model does; --chat-template picks another.",
                   err=True)
    with llm:
        if question is not None:
            render = Renderer(decorate=False)
            sys.exit(answer_once(llm, question, render, base_params=base, system=system,
                                 verbose=verbose))

        render = Renderer()
        interactive_out = sys.stdout.isatty()
        try:
            reader = PromptToolkitReader(history_path()) if interactive_out else PlainReader(history_path())
        except ImportError:
            reader = PlainReader(history_path())
        rows = [("quant", quantization(llm)), ("context", str(llm.n_ctx)),
                ("threads", str(llm.n_threads)), ("ISA", llm.isa)]
        draft_path = getattr(llm, "draft_model_path", None)
        if draft_path:
            rows.append(("draft", draft_path.replace("\\", "/").rsplit("/", 1)[-1]))
        rows.append(("loaded in", f"{llm.load_time:.2f} s"))
        render.banner(rows,
                      title=f"edgellm · {model_name(llm)}")
        app = ReplApp(llm, reader, render, base_params=base, system=system, verbose=verbose,
                      load_llm=load)
        code = app.run()
        # A reload (/set parameter num_ctx) replaced the model: close the current one too.
        if app.llm is not llm:
            app.llm.close()
    sys.exit(code)
