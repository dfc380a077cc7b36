"""The sampling options of the commands (`generate`, `run`, `serve`): each one checked by its
field's rule in edgellm.sampling_fields (the rules SamplingParams and the servers apply), so
`--top-p 5` is refused the same way everywhere -- one `Error: ...` line, exit status 2 -- before
anything is loaded.

    @sampling_option("--top-p", "top_p", default=0.95)

`none_at` is the command-line value that means "unset" (e.g. `-n -1`: no limit); every other
value must pass the field's rule.
"""
from typing import Any, Optional

import click


class FieldType(click.ParamType):
    """A number checked by a sampling field's rule (edgellm.sampling_fields.BY_NAME)."""

    def __init__(self, field: str, kind: type, none_at: Optional[Any] = None):
        self.field, self.kind, self.none_at = field, kind, none_at
        self.name = "integer" if kind is int else "float"

    def convert(self, value, param, ctx):
        if value is None:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            try:
                value = self.kind(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not a valid {self.name}", param, ctx)
        if self.none_at is not None and value == self.none_at:
            return None
        from edgellm.sampling_fields import BY_NAME
        from edgellm.validation import InvalidRequestError

        try:
            return BY_NAME[self.field].check(value, self.field)
        except InvalidRequestError as e:
            words = rule_words(str(e), self.field)
            if self.none_at is not None:  # "must be >= 1 (or -1), got 0"
                head, sep, tail = words.rpartition(", got ")
                words = f"{head} (or {self.none_at}){sep}{tail}" if sep else words
            self.fail(words, param, ctx)


def rule_words(message: str, field: str) -> str:
    """A rule's message without the field's name ("'top_p' must be <= 1, got 5" -> "must be
    <= 1, got 5"): the option names itself on the command line."""
    prefix = f"'{field}' "
    return message[len(prefix):] if message.startswith(prefix) else message


def sampling_option(*decls: str, field: str, none_at: Optional[Any] = None, **kw):
    """click.option for the sampling field `field`, typed and checked by its rule."""
    from typing import Optional as Opt

    from edgellm.sampling_fields import BY_NAME

    f = BY_NAME[field]
    kind = int if f.kind == "int" or f.annotation in (int, Opt[int]) else float
    return click.option(*decls, type=FieldType(field, kind, none_at), **kw)


def sampling_params(**values):
    """SamplingParams(**values); a value the rules refuse (a combination no single option
    checks) is a usage error naming it."""
    from edgellm import SamplingParams
    from edgellm.validation import InvalidRequestError

    try:
        return SamplingParams(**values)
    except InvalidRequestError as e:
        raise click.UsageError(str(e)) from None
