"""`edgellm service install`: the systemd unit it writes, checked by `systemd-analyze verify`
(skipped when systemd-analyze is missing; EDGELLM_REQUIRE_SYSTEMD=1 makes that a failure), the
unit in docs/raspberry-pi.md is exactly what the command prints, and bad input is refused."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import _missing
from edgellm.cli import main
from edgellm.service import ServiceUnit, systemd_quote

DOC = Path(__file__).resolve().parent.parent / "docs" / "raspberry-pi.md"
# the documented service: the command line docs/raspberry-pi.md gives for it
DOC_COMMAND = ["service", "install", "--print", "--run-as", "pi",
               "--exec", "/home/pi/edgellm/bin/edgellm", "--memory-max", "1200M",
               "qwen2.5-coder-0.5b", "--host", "0.0.0.0", "--port", "8080", "--threads", "3",
               "--ctx-size", "4096", "--kv-memory", "256M", "--parallel", "4",
               "--api-key-file", "/home/pi/.config/edgellm/api-key"]
_CLEAN_ENV = {"EDGELLM_MODELS": None, "EDGELLM_BUILD_DIR": None, "EDGELLM_MEMORY_LIMIT": None,
              "PYTHONPATH": None}


def _install(args, env=None):
    return CliRunner().invoke(main, args, env=env if env is not None else _CLEAN_ENV)


def _verify(unit: Path) -> str:
    """systemd-analyze verify's complaints about `unit` (empty: none)."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        _missing("systemd-analyze is not installed (apt-get install systemd)", "EDGELLM_REQUIRE_SYSTEMD")
    r = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    mentions = [line for line in (r.stdout + r.stderr).splitlines() if unit.name in line]
    return "\n".join(mentions) if mentions or r.returncode == 0 else f"rc {r.returncode}: {r.stderr}"


def test_documented_unit_is_what_install_prints():
    r = _install(DOC_COMMAND)
    assert r.exit_code == 0, r.output
    doc = DOC.read_text(encoding="utf-8")
    m = re.search(r"```ini\n(\[Unit\]\n.*?)```", doc, re.S)
    assert m, "docs/raspberry-pi.md lost its unit block"
    assert m.group(1) == r.output
    shell = " ".join(doc.replace("\\\n", " ").split())  # the sh block, continuations joined
    assert "edgellm service install " + " ".join(DOC_COMMAND[3:]) in shell


@pytest.mark.parametrize("user_unit", [False, True])
def test_written_unit_passes_systemd_analyze_verify(tmp_path, user_unit):
    key = tmp_path / "api key"  # a space: ExecStart must quote it
    key.write_text("secret\n")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    args = ["service", "install", *(["--user"] if user_unit else ["--run-as", "root"]),
            "--unit-dir", str(tmp_path / "units"), "--name", "edgellm-test", str(model),
            "--port", "8091", "--threads", "2", "--shutdown-grace", "20",
            "--api-key-file", str(key), "--alias", "100%-local"]
    r = _install(args)
    assert r.exit_code == 0, r.output
    unit = tmp_path / "units" / "edgellm-test.service"
    text = unit.read_text()
    assert ("User=root" in text) != user_unit
    assert ("WantedBy=default.target" if user_unit else "WantedBy=multi-user.target") in text
    assert "TimeoutStopSec=45" in text          # --shutdown-grace 20 + 25
    assert f'"{key}"' in text and "100%%-local" in text
    assert "systemctl --user" in r.output if user_unit else "sudo systemctl" in r.output
    assert _verify(unit) == ""
    # the check can fail: a broken copy of the same unit is reported
    broken = tmp_path / "units" / "edgellm-broken.service"
    broken.write_text(text.replace("Type=exec", "Type=sometimes"))
    assert "sometimes" in _verify(broken)


def test_exec_start_words_are_quoted_for_systemd():
    assert systemd_quote("--port") == "--port"
    assert systemd_quote("a b") == '"a b"'
    assert systemd_quote('say "hi"\\') == '"say \\"hi\\"\\\\"'
    assert systemd_quote("50%") == "50%%" and systemd_quote("$HOME") == '"$$HOME"'


def test_relative_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    unit = ServiceUnit(model="m.gguf", serve_args=["--api-key-file", "key", "--cache-dir=kv"],
                       executable=["/usr/bin/edgellm"])
    argv = unit.exec_start()
    assert argv[:3] == ["/usr/bin/edgellm", "serve", str(tmp_path / "m.gguf")]
    assert argv[3:] == ["--api-key-file", str(tmp_path / "key"), f"--cache-dir={tmp_path / 'kv'}"]
    # a known model name stays a name
    assert ServiceUnit(model="smollm2", executable=["x"]).exec_start() == ["x", "serve", "smollm2"]


def test_bad_input_is_refused(tmp_path):
    r = _install(["service", "install", "--print", "smollm2", "--api-key", "k"])
    assert r.exit_code == 2 and "--api-key-file" in r.output
    r = _install(["service", "install", "--print", "smollm2", "--no-such-option"])
    assert r.exit_code == 2 and "edgellm serve would refuse" in r.output and "--no-such-option" in r.output
    r = _install(["service", "install", "--print", "smollm2", "--ctx-size", "0"])
    assert r.exit_code == 2 and "ctx-size" in r.output
    r = _install(["service", "install", "--print", "--name", "a/b", "smollm2"])
    assert r.exit_code == 2 and "--name" in r.output
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = _install(["service", "install", "--unit-dir", str(blocker / "sub"), "smollm2"])
    assert r.exit_code == 1 and "cannot write" in r.output


def test_default_executable_is_this_installation():
    r = _install(["service", "install", "--print", "--user", "smollm2"])
    assert r.exit_code == 0, r.output
    line = next(line for line in r.output.splitlines() if line.startswith("ExecStart="))
    exe = line[len("ExecStart="):].split()[0]
    assert exe == sys.executable or os.path.basename(exe) == "edgellm"
    assert "User=" not in r.output
