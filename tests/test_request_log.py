"""The server's log (issue 43 item 8): one format for every line -- edgellm's, uvicorn's, the
start-up lines -- and one line per request (method, path, status, tokens, milliseconds), as text
or JSON (--log-format), filtered by --log-level. A real `edgellm serve` with the stand-in engine."""
import json
import re
import signal

import httpx

from test_server_unit import CHAT, _first_health, _serve


def _serve_and_ask(*args):
    proc, url = _serve("--log-level", "info", *args)
    try:
        _first_health(proc, url)
        for _ in range(200):  # the stand-in loads at once; /health says when
            if httpx.get(url + "/health").status_code == 200:
                break
        r = httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert r.status_code == 200, r.text
        bad = httpx.post(url + "/v1/chat/completions", json={"messages": []}, timeout=30)
        assert bad.status_code == 400
    finally:
        out = _stop(proc)
    return r.json()["usage"], [ln for ln in out.splitlines() if ln.strip()]


def _stop(proc) -> str:
    """SIGTERM, and the server's whole output."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_json_lines_one_per_request():
    usage, lines = _serve_and_ask("--log-format", "json")
    docs = [json.loads(ln) for ln in lines]  # every line, uvicorn's included, is one JSON object
    assert {"edgellm.serve", "uvicorn.error", "edgellm.request"} <= {d["logger"] for d in docs}
    chats = [d for d in docs if d.get("path") == "/v1/chat/completions"]
    assert [d["status"] for d in chats] == [200, 400]
    ok = chats[0]
    assert ok["method"] == "POST" and ok["level"] == "INFO" and ok["time_ms"] >= 0
    assert ok["prompt_tokens"] == usage["prompt_tokens"]
    assert ok["generated_tokens"] == usage["completion_tokens"] > 0
    assert chats[1]["generated_tokens"] == 0


def test_text_lines_share_one_format():
    _, lines = _serve_and_ask()
    fmt = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                     r"[\w.]+: ")
    assert all(fmt.match(ln) for ln in lines), [ln for ln in lines if not fmt.match(ln)]
    req = [ln for ln in lines if "edgellm.request: POST /v1/chat/completions 200" in ln]
    assert len(req) == 1 and re.search(r"prompt=\d+ generated=[1-9]\d* time_ms=[\d.]+$", req[0])


def test_log_level_filters_request_lines():
    proc, url = _serve("--log-format", "json")  # _serve's --log-level warning
    try:
        _first_health(proc, url)
        httpx.get(url + "/health")
    finally:
        out = _stop(proc)
    assert all(json.loads(ln)["level"] in ("WARNING", "ERROR", "CRITICAL")
               for ln in out.splitlines() if ln.strip())
