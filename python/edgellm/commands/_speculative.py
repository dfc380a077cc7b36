"""The speculative-decoding options `run`, `generate`, `serve` and `bench` share:

    --spec auto|ngram|draft|off   --draft MODEL   --draft-max N

`--spec auto` (the default, as edgellm.LLM's) drafts from the request's own history (n-gram /
prompt lookup) and, with --draft, from the draft model too; `--draft` alone therefore turns the
draft model on. A wrong combination (--spec draft without --draft) is a usage error here, before
any model is loaded.
"""
from typing import Callable, Optional

import click

SPEC_CHOICES = ("auto", "ngram", "draft", "off")


def spec_options(default: Optional[str] = "auto") -> Callable:
    """Decorator adding --spec, --draft and --draft-max (parameters spec, draft, draft_max)."""
    shown = default if default is not None else "off unless --draft or --spec is given"

    def deco(f):
        f = click.option("--draft-max", "draft_max", default=None, type=click.IntRange(1, 64),
                         help="Most tokens drafted per step (num_speculative_tokens) "
                              "[default: the engine's].")(f)
        f = click.option("--draft", "draft", default=None, metavar="MODEL",
                         help="Draft model for speculative decoding: a GGUF path or a known "
                              "model name with the same vocabulary (e.g. qwen2.5-coder-0.5b "
                              "for qwen2.5-coder-1.5b).")(f)
        f = click.option("--spec", "spec", default=default, type=click.Choice(SPEC_CHOICES),
                         help="Speculative decoding: ngram (drafts copied from the prompt and "
                              "output so far), draft (the --draft model), auto (n-gram, plus "
                              f"--draft when given), off.  [default: {shown}]")(f)
        return f
    return deco


def spec_kwargs(spec: Optional[str], draft: Optional[str], draft_max: Optional[int]) -> dict:
    """LLM(...) keyword arguments for the options (UsageError for --spec draft without a draft)."""
    if spec == "draft" and not draft:
        raise click.UsageError("--spec draft needs --draft MODEL (a draft model with the same "
                               "vocabulary); or use --spec ngram / auto")
    return {"speculative": spec or "auto", "draft_model": draft or None,
            "num_speculative_tokens": draft_max}


def spec_summary(timings: Optional[dict]) -> Optional[str]:
    """`drafted: N, accepted: M (P%)` when something was drafted for a completion, else None."""
    t = timings or {}
    n = int(t.get("draft_n", 0) or 0)
    if n <= 0:
        return None
    a = int(t.get("draft_n_accepted", 0) or 0)
    return f"drafted: {n}, accepted: {a} ({100.0 * a / n:.1f}%)"
