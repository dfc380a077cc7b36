"""The web chat page's routes (server/webui.py) without a browser or a model: `/` serves the
page, its assets come with their content types and the page's security headers, and with an
API key the page and its assets are open while every API route still needs the key.

tests/test_webchat_browser.py drives the page itself in Chromium against a real server.
"""
import re

import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")
from starlette.testclient import TestClient  # noqa: E402

from edgellm.server import ServerConfig, create_app  # noqa: E402
from edgellm.server.webui import WEBUI_DIR, asset_files  # noqa: E402

KEY = "page-key"


class NoEngine:
    """Stands in for AsyncLLM: these tests never generate."""

    n_ctx = 64
    n_vocab = 100

    def stats(self):
        return {"running": 0, "waiting": 0}

    def close(self):
        pass


def client(api_key=None, webui=True) -> TestClient:
    app = create_app(ServerConfig(model="fake.gguf", api_key=api_key, webui=webui), loader=lambda c: NoEngine())
    return TestClient(app)


def test_root_serves_the_chat_page_and_the_files_it_links():
    with client() as c:
        r = c.get("/")
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/html; charset=utf-8"
        assert "<title>edgellm chat</title>" in r.text
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        linked = re.findall(r'(?:src|href)="(webui/[^"]+)"', r.text)
        assert {"webui/app.js", "webui/style.css"} <= set(linked)
        for path in linked:
            assert c.get("/" + path).status_code == 200, path


@pytest.mark.parametrize("name,content_type", [
    ("app.js", "text/javascript; charset=utf-8"),
    ("markdown.js", "text/javascript; charset=utf-8"),
    ("style.css", "text/css; charset=utf-8"),
])
def test_assets_have_their_content_types(name, content_type):
    with client() as c:
        r = c.get(f"/webui/{name}")
        assert r.status_code == 200
        assert r.headers["content-type"] == content_type
        assert r.content == (WEBUI_DIR / name).read_bytes()


def test_every_module_an_asset_imports_is_served():
    # the page is ES modules: a missing file would only show as a blank page in a browser
    with client() as c:
        for name in asset_files():
            if name.endswith(".js"):
                for dep in re.findall(r'from "\./([^"]+)"', (WEBUI_DIR / name).read_text()):
                    assert c.get(f"/webui/{dep}").status_code == 200, f"{name} imports {dep}"


def test_unknown_or_escaping_asset_names_are_404():
    with client() as c:
        for path in ("/webui/nope.js", "/webui/..%2Fapp.py", "/webui/index.html"):
            r = c.get(path)
            assert r.status_code == 404, path
            assert r.json()["error"]["type"] == "not_found_error"


def test_with_a_key_the_page_is_open_and_the_api_is_not():
    with client(api_key=KEY) as c:
        assert c.get("/").status_code == 200
        assert c.head("/").status_code == 200
        for name in asset_files():
            assert c.get(f"/webui/{name}").status_code == 200, name
        for method, path in [("GET", "/v1/models"), ("POST", "/v1/chat/completions"),
                             ("GET", "/metrics"), ("GET", "/props"), ("GET", "/slots"),
                             ("GET", "/webui/nope.js"), ("GET", "/webui/")]:
            r = c.request(method, path, json={} if method == "POST" else None)
            assert r.status_code == 401, (method, path, r.status_code)
            assert r.headers["www-authenticate"] == "Bearer"
        r = c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code in (200, 503), r.text  # the key passes (the model may be loading)


def test_no_webui_serves_the_api_only():
    # serve --no-webui: no page, no assets, and nothing of them left open under a key
    with client(webui=False) as c:
        assert c.get("/").status_code == 404
        assert c.get("/webui/app.js").status_code == 404
    with client(api_key=KEY, webui=False) as c:
        assert c.get("/").status_code == 401
        assert c.get("/health").status_code in (200, 503)


def test_serve_cli_has_the_webui_switch():
    from click.testing import CliRunner

    from edgellm.commands.serve import command
    out = CliRunner().invoke(command, ["--help"]).output
    assert "--webui / --no-webui" in out
