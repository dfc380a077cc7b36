"""Warnings reach a command-line user as one plain line, the same in `plan` as in `run`
(issue 43 item 9): not Python's `file.py:82: UserWarning: ...` with the source line."""
import subprocess
import sys

import pytest

WANT = ("Warning: n_ctx 100000 is beyond the model's trained context 8192: output past that "
        "length may degrade")


def _edgellm(*args, tmp_path):
    from test_run_pty import _env

    return subprocess.run([sys.executable, "-m", "edgellm", *map(str, args)], input="",
                          capture_output=True, text=True, env=_env(tmp_path), timeout=300)


@pytest.mark.real_model
def test_run_and_plan_warn_alike(smollm2_path, tmp_path):
    run = _edgellm("run", smollm2_path, "-c", "100000", "-n", "2", "--temp", "0", "hi",
                   tmp_path=tmp_path)
    plan = _edgellm("plan", smollm2_path, "-c", "100000", "-np", "1", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr
    for r in (run, plan):
        assert WANT in r.stderr.splitlines(), r.stderr
        assert "UserWarning" not in r.stderr and ".py:" not in r.stderr, r.stderr
    assert WANT not in run.stdout + plan.stdout


@pytest.mark.real_model
def test_plan_json_carries_the_warning(smollm2_path, tmp_path):
    import json

    r = _edgellm("plan", smollm2_path, "-c", "100000", "--json", tmp_path=tmp_path)
    assert json.loads(r.stdout)["warnings"] == [WANT[len("Warning: "):]]
