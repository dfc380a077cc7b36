"""Every command checks its options by the same rules (edgellm.sampling_fields, click's types)
and answers a bad one with one plain `Error: ...` line on stderr, exit status 2, before loading
anything (issue 43 item 2)."""
import pytest
from click.testing import CliRunner

from edgellm.cli import main

BAD = [
    ("generate", ["-n", "0"], "'--n-predict'", "must be >= 1 (or -1), got 0"),
    ("generate", ["-n", "-5"], "'--n-predict'", "got -5"),
    ("generate", ["--top-p", "5"], "'--top-p'", "must be <= 1, got 5"),
    ("generate", ["--temp", "-1"], "'--temp'", "must be >= 0, got -1"),
    ("generate", ["--min-p", "2"], "'--min-p'", "must be <= 1, got 2"),
    ("generate", ["--repeat-penalty", "0"], "'--repeat-penalty'", "must be > 0"),
    ("generate", ["--repeat-last-n", "-2"], "'--repeat-last-n'", "must be >= -1"),
    ("generate", ["--top-k", "abc"], "'--top-k'", "not a valid integer"),
    ("generate", ["-t", "0"], "'--threads'", "x>=1"),
    ("run", ["-n", "-5"], "'--num-predict'", "got -5"),
    ("run", ["--temp", "-1"], "'--temp'", "must be >= 0, got -1"),
    ("serve", ["-n", "-5"], "'--n-predict'", "got -5"),
    ("serve", ["--temp", "-1"], "'--temp'", "must be >= 0, got -1"),
    ("bench", ["-r", "0"], "'--repetitions'", "x>=1"),
    ("plan", ["-c", "0"], "'--ctx-size'", "x>=1"),
]


@pytest.mark.parametrize("command,args,option,words", BAD,
                         ids=[f"{c} {' '.join(a)}" for c, a, _, _ in BAD])
def test_bad_option_is_one_error_line(command, args, option, words):
    # "no-such-model": the options are refused before any model is looked up or loaded
    r = CliRunner().invoke(main, [command, "no-such-model", *args, "hi"])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: Invalid value for ") and option in lines[0], lines[0]
    assert words in lines[0], lines[0]
    assert "Traceback" not in r.output and r.stdout == ""


def test_usage_error_is_one_line():
    r = CliRunner().invoke(main, ["generate", "no-such-model"])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == ["Error: no prompt: give PROMPT or -p PROMPT"]


def test_minus_one_still_means_no_limit():
    from edgellm.commands._sampling import FieldType

    t = FieldType("max_tokens", int, none_at=-1)
    assert t.convert("-1", None, None) is None and t.convert("7", None, None) == 7


def test_errors_say_error_capitalised(tmp_path):
    # info / plan / models said "error:" where the rest say "Error:" (issue 43 item 10)
    for args in (["info", str(tmp_path / "absent.gguf")], ["plan", str(tmp_path / "absent.gguf")],
                 ["models", "path", "no-such-model"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code != 0
        assert r.stderr.startswith("Error: ") and "error:" not in r.stderr, (args, r.stderr)


def test_help_summaries_are_whole_phrases():
    r = CliRunner().invoke(main, ["--help"], terminal_width=80)
    rows = r.output.split("Commands:\n", 1)[1].strip().splitlines()
    assert len(rows) >= 10
    for row in rows:
        assert not row.rstrip().endswith("...") and row.rstrip().endswith("."), row


def test_models_without_arguments_shows_clicks_help():
    r = CliRunner().invoke(main, ["models"])
    assert r.exit_code == 2
    assert r.output.startswith("Usage: ") and "fetch [NAME...|all]" in r.output
    assert "the following arguments are required" not in r.output
    h = CliRunner().invoke(main, ["models", "--help"])
    assert h.exit_code == 0 and h.output.startswith("Usage: ")
