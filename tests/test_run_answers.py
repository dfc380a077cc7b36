"""How `edgellm run` tells a person that an answer did not end by itself (issue 43 items 6 and
10): a built-in template standing in for one the model file lacks is said at load, base models
are marked in `models list`, a degenerate loop (one line again and again) is stopped with a
clear reason, and an answer cut by a full context says so -- one-shot (on stderr) and in the
REPL (in a pty)."""
import subprocess
import sys

import pytest
from click.testing import CliRunner

from edgellm.cli import main
from edgellm.repl.finish import REPEATS, LoopGuard, finish_notice


def test_loop_guard_counts_identical_lines():
    g = LoopGuard()
    for _ in range(REPEATS - 1):
        assert not g.feed("What is the capital of France? x\n")
    assert not g.feed("What is the capital")  # an unfinished line is not counted yet ...
    assert g.feed(" of France? x\n")       # ... a finished one is: the REPEATS-th
    varied = LoopGuard()
    assert not any(varied.feed(f"line {i}\n\n") for i in range(50))


def test_finish_notice_words():
    assert "repeated the same line" in finish_notice("repetition", {}, None, 4096)
    assert "context of 64 tokens is full" in finish_notice("length", {"predicted_n": 40}, None, 64)
    assert finish_notice("length", {"predicted_n": 32}, 32, 4096) is None  # num_predict: as asked
    assert finish_notice("stop", {}, None, 4096) is None


def test_models_list_marks_base_models():
    r = CliRunner().invoke(main, ["models", "list"])
    assert r.exit_code == 0
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines()}
    assert "[base model: no chat template]" in lines["gemma3"]
    assert "base model" not in lines["smollm2"] and "base model" not in lines["qwen2.5-coder-0.5b"]


def _run(*args, tmp_path):
    from test_run_pty import _env

    return subprocess.run([sys.executable, "-m", "edgellm", "run", *map(str, args)], input="",
                          capture_output=True, text=True, env=_env(tmp_path), timeout=600)


@pytest.mark.real_model
def test_base_model_is_named_and_its_loop_stopped(gemma3_path, tmp_path):
    r = _run(gemma3_path, "--temp", "0", "What is the capital of France?", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "has no chat template (a base model?): the built-in 'gemma' template stands in" in r.stderr
    assert f"(stopped: the answer repeated the same line {REPEATS} times" in r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert REPEATS <= len(lines) <= REPEATS + 1, r.stdout  # not 400 lines until the context fills
    assert "stopped" not in r.stdout and "Note" not in r.stdout  # stdout: the answer alone


@pytest.mark.real_model
def test_chat_model_gets_no_template_note(smollm2_path, tmp_path):
    r = _run(smollm2_path, "--temp", "0", "-n", "4", "Hi", tmp_path=tmp_path)
    assert r.returncode == 0 and "chat template" not in r.stderr, r.stderr


def _repl_says(model, tmp_path, args, message, expect):
    """Start the REPL on `model`, send `message`, wait for `expect`, leave with Ctrl+D."""
    from test_run_pty import Terminal

    t = Terminal(model, tmp_path, *args)
    try:
        t.prompt()
        t.child.send(message + "\r")
        t.wait_for(expect)
        t.prompt()
        assert t.ctrl_d() == 0
    finally:
        t.close()


@pytest.mark.real_model
@pytest.mark.slow
def test_repl_says_when_the_context_cut_the_answer(smollm2_path, tmp_path):
    _repl_says(smollm2_path, tmp_path, ["-c", "64", "-n", "-1"],
               "Write a very long story about a dragon.",
               r"the answer was cut: the context of 64 tokens is full")


@pytest.mark.real_model
@pytest.mark.slow
def test_repl_stops_a_loop(gemma3_path, tmp_path):
    _repl_says(gemma3_path, tmp_path, ["-n", "-1"], "What is the capital of France?",
               rf"stopped: the answer repeated the same line {REPEATS} times")


def test_banner_names_the_file_not_its_internal_name():
    from types import SimpleNamespace

    from edgellm.repl.model_facts import model_name

    llm = SimpleNamespace(model_path="/c/SmolLM2-135M-Instruct.Q4_1.gguf",
                          metadata={"general.name": "Smollm2 135M 8k Lc100K Mix1 Ep2"})
    assert model_name(llm) == "SmolLM2-135M-Instruct.Q4_1"


@pytest.mark.real_model
@pytest.mark.slow
def test_repl_banner_is_readable(smollm2_path, tmp_path):
    from test_run_pty import Terminal

    t = Terminal(smollm2_path, tmp_path)
    try:
        banner = t.prompt()
        assert "edgellm · SmolLM2-135M-Instruct.Q4_1" in banner and "Lc100K" not in banner
        assert t.ctrl_d() == 0
    finally:
        t.close()


def test_unset_removes_a_stop_string():
    from edgellm.repl.params import ParameterError, Parameters

    p = Parameters()
    p.set("stop", ["User:", "###"])
    p.set("temperature", ["0.1"])
    assert p.unset("stop", ["User:"]) == "stop strings now: '###'"
    assert p.sampling().stop_list() == ["###"]
    with pytest.raises(ParameterError, match="is not set"):
        p.unset("stop", ["nope"])
    assert p.unset("stop", []) == "the default" and p.sampling().stop_list() == []
    p.unset("temperature", [])
    assert "temperature" not in p.values


@pytest.mark.real_model
@pytest.mark.slow
def test_repl_unset_and_typing_during_an_answer(smollm2_path, tmp_path):
    from test_run_pty import ANSI, Terminal

    t = Terminal(smollm2_path, tmp_path, "-n", "200")
    try:
        t.prompt()
        t.command('/set parameter stop "User:" "###"', r"Set parameter 'stop' to 'User:, ###'")
        t.command('/unset parameter stop "User:"', r"Unset parameter 'stop': stop strings now: '###'")
        shown = t.command("/show parameters", r"stop[^\n]*\n")
        assert "###" in shown and "User:" not in shown
        t.child.send("Write a long story about a dragon who lives in a castle.\r")
        t.wait_for(r"castle\.\n(\S+\s+){8}")  # the answer is streaming
        t.child.send("zqxj typed meanwhile")   # no Enter
        t.wait_for(r"answer: \d+ tok")
        t.prompt()
        screen = ANSI.sub("", t.transcript)
        assert "zqxj" not in screen             # not echoed into the answer, not left for later
        assert "Paris" in t.ask("What is the capital of France?")
        assert t.ctrl_d() == 0
    finally:
        t.close()
