"""`edgellm serve` takes its port before anything else (issue 43 item 4): a port that is taken is
said as such in one line, and nothing is loaded -- the engine factory below is never called."""
import socket

from click.testing import CliRunner

from edgellm.cli import main

LOADS = []


def counting_loader(config):  # --engine-factory test_serve_port:counting_loader
    LOADS.append(config.model)
    raise AssertionError("nothing may be loaded when the port is taken")


def test_busy_port_is_said_before_loading():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        r = CliRunner().invoke(main, ["serve", "some-model", "--port", str(port),
                                      "--engine-factory", "test_serve_port:counting_loader"])
    finally:
        taken.close()
    assert r.exit_code == 1, r.output
    assert r.stderr.strip().splitlines() == [
        f"Error: port {port} is in use on 127.0.0.1: stop what listens there, or give another "
        "--port"], r.stderr
    assert "serving" not in r.output and "web chat" not in r.output
    assert LOADS == []


def test_busy_port_is_said_before_resolving_or_converting(monkeypatch, tmp_path):
    """No model is resolved, fetched or converted (`--quantize` of a checkpoint folder) while
    the port is taken: the bind comes first."""
    import edgellm.commands.serve as serve_cmd

    calls = []
    monkeypatch.setattr(serve_cmd, "converted_model", lambda m, q: calls.append(("convert", m)))
    monkeypatch.setattr(serve_cmd, "_resolve_model", lambda m, hint: calls.append(("resolve", m)))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        for extra in (["--quantize", "q4_k_m"], []):
            r = CliRunner().invoke(main, ["serve", str(tmp_path), "--port", str(port), *extra])
            assert r.exit_code == 1 and f"port {port} is in use" in r.stderr, r.output
    finally:
        taken.close()
    assert calls == []
