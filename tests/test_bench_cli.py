"""`edgellm bench`: llama-bench's table and JSON on a tiny model; option errors; the progress
bar only on a terminal. Speeds are printed, never asserted."""
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("edgellm._core")

from edgellm.bench.progress import Progress  # noqa: E402
from edgellm.bench.throughput import BenchResult, ThroughputBench, markdown_table  # noqa: E402
from edgellm.cli import main  # noqa: E402
from tiny_vocab_model import write_tiny_vocab_model  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(write_tiny_vocab_model(tmp_path_factory.mktemp("bench") / "tiny.gguf"))


def bench(*args):
    return CliRunner().invoke(main, ["bench", *map(str, args)])


ROW = re.compile(r"^\| (?P<model>[^|]+) \| (?P<size>[^|]+) \| (?P<params>[^|]+) \| (?P<backend>[^|]+) \| "
                 r"(?P<threads>\d+) \| (?P<test>[^|]+) \| (?P<ts>[0-9.]+) ± (?P<sd>[0-9.]+) \|$")


def test_markdown_table_rows(tiny):
    r = bench(tiny, "-p", 8, "-n", 4, "-r", 1, "-t", 1)
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "| model | size | params | backend | threads | test | t/s |"
    rows = [ROW.match(line) for line in lines[2:]]
    assert all(rows), lines
    assert [m["test"] for m in rows] == ["pp8", "tg4"]
    for m in rows:
        assert m["model"] == "llama 0M F32"  # arch, rounded parameter count, file type
        assert m["threads"] == "1"
        assert m["backend"].startswith("CPU")
        assert float(m["ts"]) > 0 and float(m["sd"]) == 0.0  # one repetition: no spread


def test_json_with_batched_streams(tiny):
    r = bench(tiny, "-p", "8,16", "-n", 4, "-r", 2, "-t", 1, "--batch", "1,3", "-o", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [d["test"] for d in data] == ["pp8", "pp16", "tg4", "tg4 x1", "tg4 x3"]
    for d in data:
        assert len(d["samples_ts"]) == 2 and len(d["samples_ns"]) == 2
        assert d["avg_ts"] == pytest.approx(sum(d["samples_ts"]) / 2)
        tokens = d["n_prompt"] + d["n_gen"] * d["n_seqs"]
        # t/s is tokens over the timed nanoseconds of that repetition
        for ts, ns in zip(d["samples_ts"], d["samples_ns"]):
            assert ts == pytest.approx(tokens * 1e9 / ns)
        assert d["model_n_params"] > 0 and d["model_size"] > 0 and d["n_threads"] == 1
    assert data[-1]["n_seqs"] == 3 and data[-1]["n_gen"] == 4


def test_zero_skips_tests_and_bad_options_fail(tiny):
    r = bench(tiny, "-p", 0, "-n", 4, "-r", 1, "-o", "json")
    assert r.exit_code == 0, r.output
    assert [d["test"] for d in json.loads(r.stdout)] == ["tg4"]
    r = bench(tiny, "--batch", "1,x")
    assert r.exit_code == 2 and "comma-separated integers" in r.output
    r = bench(tiny, "-r", 0)
    assert r.exit_code == 2
    r = bench(str(Path(tiny).with_name("missing.gguf")))
    assert r.exit_code == 1 and "missing.gguf" in r.output


def test_bench_uses_bos_rule_and_context_limits(tiny):
    b = ThroughputBench(tiny, n_threads=1)
    assert (b.add_bos, b.bos_id) == (True, 259)
    ids = b._tokens(5)
    assert ids[0] == 259 and len(ids) == 5 and all(0 <= t < b.n_vocab for t in ids)
    # a prompt longer than max_batch_tokens is fed in chunks
    b2 = ThroughputBench(tiny, n_threads=1, max_batch_tokens=8)
    r = b2.pp(20, reps=1)
    assert r.test == "pp20" and r.samples_ts[0] > 0


def test_progress_bar_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet = io.StringIO()
    with Progress(10, "x", stream=quiet) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""
    tty = Tty()
    with Progress(10, "model", stream=tty) as bar:
        bar.update(5)
        bar.update(5)
    out = tty.getvalue()
    assert "model [" in out and "100.0%" in out and out.endswith("\r")


def test_markdown_mean_and_sample_sd():
    r = BenchResult(test="tg4", n_prompt=0, n_gen=4, n_seqs=1, samples_ts=[10.0, 12.0, 14.0],
                    samples_ns=[1, 1, 1], model="llama 1.7B Q4_0", model_size=3 << 30,
                    model_n_params=1_700_000_000, backend="CPU", n_threads=2)
    line = markdown_table([r]).splitlines()[-1]
    assert line == "| llama 1.7B Q4_0 | 3.00 GiB | 1.70 B | CPU | 2 | tg4 | 12.00 ± 2.00 |"


def test_cli_subprocess_writes_only_the_table_to_stdout(tiny):
    env = dict(os.environ)
    if env.get("EDGELLM_BUILD_DIR"):  # a development build: the package comes from the checkout
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-m", "edgellm", "bench", tiny, "-p", "8", "-n", "2", "-r", "1", "-t", "1"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("| model |") and r.stderr == ""  # not a terminal: no progress bar
