"""Speculative decoding's counts are shown when asked for (issue 43 item 5), as llama.cpp and
Ollama show them: `generate --verbose`, the REPL's --verbose block and /show info, the web page's
settings switch -- not after every answer."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from edgellm.cli import main

WEBUI = Path(__file__).resolve().parent.parent / "python" / "edgellm" / "server" / "webui"
# copied text: the n-gram proposer drafts from the prompt and is accepted
COPY = "Say it again: one two three four five six seven eight nine ten. " * 3


@pytest.mark.real_model
def test_generate_shows_draft_counts_only_with_verbose(smollm2_path):
    base = ["generate", str(smollm2_path), "-p", COPY, "--temp", "0", "-n", "24", "-t", "1",
            "--spec", "ngram"]
    quiet = CliRunner().invoke(main, base)
    loud = CliRunner().invoke(main, [*base, "--verbose"])
    assert quiet.exit_code == 0 and loud.exit_code == 0, (quiet.output, loud.output)
    assert quiet.stdout == loud.stdout
    assert "drafted:" in loud.stderr      # it did draft ...
    assert "drafted" not in quiet.stderr  # ... and said nothing about it unasked
    assert "generated: 24 tokens" in quiet.stderr


def test_repl_timing_line_has_no_draft_counts_the_verbose_block_has():
    from edgellm.repl.render import timing_line, verbose_block

    t = {"prompt_n": 3, "predicted_n": 9, "draft_n": 39, "draft_n_accepted": 1}
    assert "draft" not in timing_line(t)
    assert "draft count:          39 token(s)" in verbose_block(t, 1.0, 0.1)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_web_page_timing_line_follows_the_settings_switch():
    m = {"timings": {"prompt_n": 3, "predicted_n": 9, "draft_n": 39, "draft_n_accepted": 1}}
    script = (f"import {{ timingLine }} from {json.dumps(str(WEBUI / 'timing.js'))};\n"
              f"const m = {json.dumps(m)};\n"
              "console.log(JSON.stringify([timingLine(m), timingLine(m, [], true)]));\n")
    out = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    off, on = json.loads(out.stdout)
    assert off == "prompt 3 tokens · answer 9 tokens"
    assert on == "prompt 3 tokens · answer 9 tokens · speculative 1/39 accepted (3%)"
