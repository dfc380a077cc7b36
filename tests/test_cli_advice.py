"""What the commands tell a user when a plan does not fit (issue 43 item 3): advice built for the
command that prints it, in its own words -- `run` has -c but no --kv-memory and runs one
sequence; `plan` names its own options; the REPL speaks /set -- and never a context beyond the
one the model was trained for."""
import re

import pytest
from click.testing import CliRunner

from edgellm.cli import main

pytestmark = pytest.mark.real_model


@pytest.fixture
def small_machine(monkeypatch):
    monkeypatch.setenv("EDGELLM_MEMORY_LIMIT", "200M")  # smollm2 at -c 4096 needs ~314 MiB


def _fit_line(text):
    return text.split("what would fit", 1)[1]


def test_run_advice_names_runs_options(smollm2_path, small_machine):
    r = CliRunner().invoke(main, ["run", str(smollm2_path), "-c", "4096", "hi"], input="")
    assert r.exit_code == 1, r.output
    fix = _fit_line(r.stderr)
    assert re.search(r"-c \d+", fix), fix
    assert "--kv-memory" not in fix and "kv_memory" not in fix and "sequences" not in fix, fix
    assert "n_ctx=" not in fix, fix                     # LLM(...)'s words, not run's


def test_generate_advice_names_its_options(smollm2_path, small_machine):
    r = CliRunner().invoke(main, ["generate", str(smollm2_path), "-c", "4096", "hi"])
    assert r.exit_code == 1
    assert re.search(r"what would fit: -c \d+", r.stderr) and "--kv-memory" not in r.stderr


def test_plan_that_does_not_fit_says_what_would(smollm2_path, small_machine):
    r = CliRunner().invoke(main, ["plan", str(smollm2_path), "-c", "4096", "-np", "1"])
    assert r.exit_code == 1
    row = [ln for ln in r.stdout.splitlines() if ln.startswith("what would fit")]
    assert row and re.search(r"-c \d+", row[0]) and "--kv-memory " in row[0], r.stdout
    best = int(re.search(r"-c (\d+)", row[0]).group(1))
    ok = CliRunner().invoke(main, ["plan", str(smollm2_path), "-c", str(best), "-np", "1"])
    assert ok.exit_code == 0 and re.search(r"^fits\s+yes$", ok.stdout, re.M)


def test_advice_never_beyond_the_trained_context(smollm2_path, monkeypatch):
    from edgellm.memory_plan import plan

    trained = plan(smollm2_path).n_ctx_train
    # room for more than the trained context, not for a million tokens
    monkeypatch.setenv("EDGELLM_MEMORY_LIMIT", str(plan(smollm2_path, n_ctx=trained * 4,
                                                        max_seqs=1).total))
    r = CliRunner().invoke(main, ["plan", str(smollm2_path), "-c", "1000000", "-np", "1"])
    assert r.exit_code == 1
    row = [ln for ln in r.stdout.splitlines() if ln.startswith("what would fit")][0]
    assert f"-c {trained} (the model's trained context)" in row, row


def test_repl_advice_speaks_set(smollm2_path, tmp_path, monkeypatch):
    from test_run_pty import Terminal

    monkeypatch.setenv("EDGELLM_MEMORY_LIMIT", "200M")
    t = Terminal(smollm2_path, tmp_path, "-c", "256")
    try:
        t.prompt()
        out = t.command("/set parameter num_ctx 1000000", r"what would fit: [^\n]*\n")
        fix = out.split("what would fit: ", 1)[1]
        m = re.search(r"/set parameter num_ctx (\d+)", fix)
        assert m and int(m.group(1)) <= 8192, fix
        assert "--" not in fix and "n_ctx=" not in fix and "kv_memory" not in fix, fix
        assert t.ctrl_d() == 0
    finally:
        t.close()
