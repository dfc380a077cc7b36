"""The command lines the README and docs show, tried verbatim: each must parse against the CLI
as it is (a documented positional argument or option that the command does not take fails
here), and the known-name forms run on the real models."""
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from edgellm.cli import main

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _code_lines(text: str):
    """Lines inside ``` blocks and 4-space indented blocks."""
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            yield line.strip()


def documented_commands():
    out = []
    for doc in DOCS:
        for line in _code_lines(doc.read_text(encoding="utf-8")):
            line = re.sub(r"^\$\s+", "", line)
            if not re.match(r"edgellm [a-z][a-z-]*( |$)", line):
                continue  # not a command line (e.g. the REPL's banner in a transcript)
            line = line.split(" #", 1)[0].strip()           # trailing comment
            line = re.split(r"\s(?:\||&&|;|>)\s", line)[0]    # first command of a pipeline
            if "[" in line or "…" in line or "..." in line:   # a synopsis, not a command
                continue
            out.append((doc.name, line))
    return out


COMMANDS = documented_commands()


def test_docs_show_commands():
    assert len(COMMANDS) >= 5, COMMANDS


@pytest.mark.parametrize("doc,line", COMMANDS, ids=[f"{d}:{c}" for d, c in COMMANDS])
def test_documented_command_parses(doc, line):
    args = shlex.split(line)[1:]
    # Walk the groups down to the command, then let click parse its arguments exactly as a
    # real invocation would (without running it).
    cmd, rest, parent = main, list(args), None
    while isinstance(cmd, click.Group):
        ctx = cmd.make_context(cmd.name or "edgellm", list(rest), parent=parent,
                               resilient_parsing=True)
        name = rest[0] if rest else None
        sub = cmd.get_command(ctx, name) if name else None
        assert sub is not None, f"{doc}: `{line}`: no command {name!r}"
        cmd, rest, parent = sub, rest[1:], ctx
    try:
        cmd.make_context(cmd.name, list(rest), parent=parent)
    except click.exceptions.Exit:
        pass
    except click.UsageError as e:
        pytest.fail(f"{doc}: `{line}` does not parse: {e.format_message()}")


@pytest.mark.real_model
def test_info_takes_a_known_name(smollm2_path):
    r = CliRunner().invoke(main, ["info", "smollm2"])
    assert r.exit_code == 0, r.output
    assert "architecture" in r.output and "llama" in r.output


def test_info_unknown_name_is_a_clean_error(tmp_path):
    r = CliRunner().invoke(main, ["info", "no-such-model-xyz"])
    assert r.exit_code == 1
    assert "known models" in r.output and "Traceback" not in r.output


@pytest.mark.real_model
def test_generate_takes_the_prompt_as_an_argument(smollm2_path):
    r = CliRunner().invoke(main, ["generate", "smollm2", "Hello", "-n", "4", "--temp", "0"])
    assert r.exit_code == 0, r.output
    same = CliRunner().invoke(main, ["generate", "smollm2", "-p", "Hello", "-n", "4", "--temp", "0"])
    assert same.exit_code == 0, same.output
    assert r.stdout == same.stdout and r.stdout.strip()


@pytest.mark.real_model
def test_run_with_context_shift_answers_past_the_context(smollm2_path):
    # A 64-token context cannot hold a 150-token answer: refused without the option; with
    # --context-shift the answer keeps going (the question kept, older answer tokens dropped).
    args = ["run", "smollm2", "-c", "64", "-n", "150", "--temp", "0", "-t", "2", "Tell me a story."]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and "n_ctx" in r.output, r.output
    r = CliRunner().invoke(main, args + ["--context-shift"])
    assert r.exit_code == 0, r.output
    from edgellm import LLM
    with LLM(smollm2_path, n_threads=2) as llm:
        assert len(llm.tokenize(r.stdout, add_special=False)) > 64


def test_generate_without_a_prompt_is_a_usage_error():
    r = CliRunner().invoke(main, ["generate", "smollm2"])
    assert r.exit_code == 2 and "no prompt" in r.output
    r = CliRunner().invoke(main, ["generate", "smollm2", "a", "-p", "b"])
    assert r.exit_code == 2 and "once" in r.output
