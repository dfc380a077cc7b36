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
