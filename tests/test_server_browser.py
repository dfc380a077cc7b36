"""Issue 39, defects 12 and 13 (the server's parts): what a web page, a hostile model folder or a
WebSocket client must not get out of a server (server/browser_guard.py, server/cors.py,
docs/SERVER.md "Security").

- no cross-origin access unless --cors-origins names it; `Origin: null` never;
- without an API key, a Host header naming a DNS name the server was not started for is 403
  (DNS rebinding), with --allowed-hosts as the way to name more;
- a body sent as text/plain, a form or multipart is 415 naming its type (a page can send those
  without a preflight);
- start-up warns when serving without a key beyond loopback;
- a WebSocket upgrade is refused cleanly; the open /health of a several-models server with a key
  lists no model ids; a model file that is not GGUF (a symlink to /etc/passwd) fails its load
  with a typed error quoting neither the file's bytes nor absolute paths.
"""
import os
import socket

import httpx
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")
pytest.importorskip("uvicorn")

from edgellm.commands.serve import exposure_warnings  # noqa: E402
from edgellm.server import ServerConfig  # noqa: E402
from edgellm.server.browser_guard import HostRule, same_origin  # noqa: E402
from server_helpers import openai_error  # noqa: E402
from test_server_unit import CHAT, RunningServer  # noqa: E402

EVIL = "http://evil.example"


@pytest.fixture
def server():
    s = RunningServer().wait_ready()
    yield s
    s.stop()


def _post(s, path, body=CHAT, **kw):
    kw.setdefault("timeout", 10)
    return httpx.post(s.url + path, json=body, **kw)


# --- CORS and Origin ---------------------------------------------------------------------------

def test_default_allows_no_other_origin(server):
    # a page elsewhere: its preflight gets no Access-Control-Allow-Origin ...
    r = httpx.options(server.url + "/v1/chat/completions",
                      headers={"Origin": EVIL, "Access-Control-Request-Method": "POST",
                               "Access-Control-Request-Headers": "content-type"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    assert "access-control-allow-credentials" not in r.headers
    # ... and a request it sends anyway (a simple GET, or a POST that needs no preflight) is
    # refused before any route runs
    r = httpx.get(server.url + "/v1/models", headers={"Origin": EVIL})
    err = openai_error(r, 403)
    assert err["code"] == "origin_not_allowed" and EVIL in err["message"]
    assert "--cors-origins" in err["message"] and "access-control-allow-origin" not in r.headers
    r = _post(server, "/v1/chat/completions", headers={"Origin": EVIL})
    assert openai_error(r, 403)["code"] == "origin_not_allowed"
    assert server.engine.last_params is None  # nothing reached the engine


def test_null_origin_is_never_allowed_or_echoed():
    s = RunningServer(cors_origins="*").wait_ready()
    try:
        r = httpx.get(s.url + "/v1/models", headers={"Origin": "null"})
        assert openai_error(r, 403)["code"] == "origin_not_allowed"
        assert r.headers.get("access-control-allow-origin") != "null"
        r = httpx.options(s.url + "/v1/models", headers={"Origin": "null"})
        assert r.headers.get("access-control-allow-origin") != "null"
        # "*" is an explicit choice: other origins are served
        r = httpx.get(s.url + "/v1/models", headers={"Origin": EVIL})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == EVIL
    finally:
        s.stop()


def test_named_origins_are_served_others_not():
    s = RunningServer(cors_origins="https://app.example").wait_ready()
    try:
        r = _post(s, "/v1/chat/completions", headers={"Origin": "https://app.example"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
        r = _post(s, "/v1/chat/completions", headers={"Origin": "https://app.example.evil"})
        assert openai_error(r, 403)["code"] == "origin_not_allowed"
    finally:
        s.stop()


def test_the_servers_own_page_is_same_origin(server):
    # the web chat page at / posts with its own origin (browsers send Origin on POST)
    r = _post(server, "/v1/chat/completions", headers={"Origin": server.url})
    assert r.status_code == 200, r.text
    assert same_origin("http://localhost:8080", "localhost:8080")
    assert same_origin("https://chat.example.com", "chat.example.com")  # behind a proxy
    assert not same_origin("http://localhost:9090", "localhost:8080")
    assert not same_origin("http://evil.example:8080", "localhost:8080")
    assert not same_origin("null", "localhost:8080")


# --- Host (DNS rebinding) ------------------------------------------------------------------------

def test_keyless_server_refuses_a_rebound_host_name(server):
    port = server.port
    r = _post(server, "/v1/chat/completions", headers={"Host": f"rebind.attacker.example:{port}"})
    err = openai_error(r, 403)
    assert err["code"] == "host_not_allowed" and "--allowed-hosts" in err["message"]
    # same-origin to the rebound name changes nothing
    r = _post(server, "/v1/chat/completions",
              headers={"Host": f"rebind.attacker.example:{port}",
                       "Origin": f"http://rebind.attacker.example:{port}"})
    assert openai_error(r, 403)["code"] == "host_not_allowed"
    assert httpx.get(server.url + "/", headers={"Host": "rebind.attacker.example"}).status_code == 403
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "box", "box.local",
                 "dev.localhost", socket.gethostname()):
        r = _post(server, "/v1/chat/completions", headers={"Host": host})
        assert r.status_code == 200, (host, r.text)


def test_allowed_hosts_and_a_key_let_other_names_in():
    s = RunningServer(allowed_hosts="llm.example.com,.corp.example").wait_ready()
    try:
        for host in ("llm.example.com", "corp.example", "gpu.corp.example"):
            assert _post(s, "/v1/chat/completions", headers={"Host": host}).status_code == 200
        r = _post(s, "/v1/chat/completions", headers={"Host": "other.example.com"})
        assert openai_error(r, 403)["code"] == "host_not_allowed"
    finally:
        s.stop()
    s = RunningServer(api_key="k").wait_ready()
    try:  # with a key a rebound page has nothing to send: the name is not checked
        r = _post(s, "/v1/chat/completions", headers={"Host": "rebind.attacker.example",
                                                       "Authorization": "Bearer k"})
        assert r.status_code == 200
    finally:
        s.stop()
    assert HostRule((), ["*"]).allows("anything.example")


# --- Content-Type ----------------------------------------------------------------------------------

@pytest.mark.parametrize("content_type", [
    "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x"])
def test_bodies_a_page_sends_without_preflight_are_415(server, content_type):
    body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
    for path in ("/v1/chat/completions", "/completion", "/slots/0?action=erase"):
        r = httpx.post(server.url + path, content=body, headers={"Content-Type": content_type},
                       timeout=10)
        err = openai_error(r, 415)
        assert err["code"] == "unsupported_media_type" and content_type in err["message"]
    r = httpx.post(server.url + "/v1/messages", content=body, timeout=10,
                   headers={"Content-Type": content_type})
    assert r.status_code == 415 and r.json()["type"] == "error"  # Anthropic's envelope
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_json_bodies_are_served(server):
    body = b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}'
    for content_type in ("application/json", "application/json; charset=utf-8",
                         "Application/JSON", None):
        headers = {"Content-Type": content_type} if content_type else {}
        r = httpx.post(server.url + "/v1/chat/completions", content=body, headers=headers,
                       timeout=10)
        assert r.status_code == 200, (content_type, r.text)


# --- start-up warnings -------------------------------------------------------------------------------

def test_start_up_warns_when_open_beyond_loopback():
    assert exposure_warnings(ServerConfig(model="m", host="127.0.0.1")) == []
    assert exposure_warnings(ServerConfig(model="m", host="localhost,::1")) == []
    (line,) = exposure_warnings(ServerConfig(model="m", host="0.0.0.0"))
    assert "without an API key on 0.0.0.0" in line and "--api-key" in line
    assert len(exposure_warnings(ServerConfig(model="m", host="127.0.0.1,192.168.1.5"))) == 1
    assert exposure_warnings(ServerConfig(model="m", host="0.0.0.0", api_key="k")) == []
    (line,) = exposure_warnings(ServerConfig(model="m", cors_origins="*"))
    assert "--cors-origins '*'" in line


# --- WebSocket, /health, load errors ----------------------------------------------------------------

def _websocket_status(url: str) -> int:
    """The HTTP status a WebSocket handshake to `url` gets."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  b"Sec-WebSocket-Version: 13\r\n\r\n")
        head = s.recv(4096).decode("latin-1")
    return int(head.split(" ", 2)[1])


def test_websocket_upgrade_is_refused_cleanly(server):
    assert _websocket_status(server.url) == 403
    assert httpx.get(server.url + "/health").status_code == 200  # and the server is fine


@pytest.fixture
def passwd_dir(tmp_path):
    if not os.path.exists("/etc/passwd"):
        pytest.skip("no /etc/passwd")
    (tmp_path / "passwd.gguf").symlink_to("/etc/passwd")
    (tmp_path / "other.gguf").write_bytes(b"")
    return tmp_path


def test_models_dir_websocket_health_and_a_non_gguf_file(passwd_dir):
    """The real loader and memory planner over --models-dir (no model is ever loaded)."""
    from server_helpers import AppServer, free_port

    from edgellm.server import create_app

    class Server(AppServer):
        def __init__(self, **cfg):
            port = free_port()
            self.app = create_app(ServerConfig(model=str(passwd_dir), port=port,
                                               models_dir=str(passwd_dir), **cfg))
            self.start(self.app, port)
            self.wait_started()

    s = Server(api_key="k")
    try:
        # the open /health says the server is up, not which models it has
        r = httpx.get(s.url + "/health")
        assert r.status_code == 200 and "passwd" not in r.text and "other" not in r.text
        assert _websocket_status(s.url) == 403
        key = {"Authorization": "Bearer k"}
        r = _post(s, "/v1/chat/completions", {**CHAT, "model": "passwd"}, headers=key)
        assert r.status_code >= 400, r.text
        err = r.json()["error"]
        assert err["code"] == "model_load_failed" and "ModelFormatError" in err["message"]
        root = open("/etc/passwd").read().split(":", 1)[0]
        for leak in (f"'{root}'", "/etc/passwd", str(passwd_dir)):
            assert leak not in r.text, leak
        models = httpx.get(s.url + "/v1/models", headers=key, timeout=10).text
        failed = [line for line in models.split(",") if "failed" in line]
        assert failed and not any(f"'{root}'" in f or str(passwd_dir) in f for f in failed)
    finally:
        s.stop()
    s = Server()
    try:  # without a key /health lists them, as before
        assert "passwd" in httpx.get(s.url + "/health").json()["models"]
    finally:
        s.stop()
