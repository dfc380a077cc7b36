"""The Responses store is bounded in bytes, not only in count (issue 39 defect 5): input items
the chat template never renders (reasoning text, say) are stored verbatim, so a count bound alone
let 1,024 responses of a few MB each hold gigabytes. A continued conversation counts against the
request size limit as if sent whole."""
import httpx
import pytest

pytest.importorskip("edgellm", reason="edgellm._core is not built (scripts/dev-build.sh)")
pytest.importorskip("openai")

from edgellm.server import responses_api  # noqa: E402
from edgellm.server.responses_api import ResponseStore, StoredResponse  # noqa: E402
from test_server_responses import RunningServer, ScriptedLLM  # noqa: E402

MB = 1 << 20


def _big_input(n_bytes: int, tag: str) -> list:
    """A user turn after an assistant turn whose reasoning (unrendered by most templates) is
    n_bytes long."""
    return [{"type": "reasoning", "summary": [],
             "content": [{"type": "reasoning_text", "text": tag * n_bytes}]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "go on"}]


def test_store_evicts_by_bytes():
    store = ResponseStore(capacity=1000, max_bytes=3 * MB)
    for i in range(10):
        store.put(f"r{i}", StoredResponse({"id": f"r{i}"}, [{"role": "user", "content": "x" * MB}]))
        assert store.bytes <= 3 * MB
    assert len(store) == 2  # each holds a little over 1 MB
    assert store.get("r0") is None and store.get("r9") is not None
    assert not store.put("huge", StoredResponse({}, [{"content": "x" * 4 * MB}]))  # over alone
    assert store.get("huge") is None and store.bytes <= 3 * MB
    assert store.delete("r9") and store.bytes == store.get("r8").size


def test_large_unrendered_items_are_evicted_over_http(monkeypatch):
    monkeypatch.setattr(responses_api, "STORE_MAX_BYTES", 4 * MB)
    server = RunningServer(ScriptedLLM())
    try:
        ids = []
        for i in range(8):
            r = httpx.post(server.url + "/v1/responses",
                           json={"input": _big_input(MB, "abcdefgh"[i])}, timeout=30)
            assert r.status_code == 200, r.text
            ids.append(r.json()["id"])
        assert httpx.get(f"{server.url}/v1/responses/{ids[0]}").status_code == 404
        assert httpx.get(f"{server.url}/v1/responses/{ids[-1]}").status_code == 200
        r = httpx.post(server.url + "/v1/responses",
                       json={"input": "more", "previous_response_id": ids[0]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "previous_response_not_found"
    finally:
        server.stop()


def test_a_continued_conversation_counts_against_the_request_limit():
    server = RunningServer(ScriptedLLM(), max_body_size=3 * MB // 2)
    try:
        prev = None
        for _ in range(2):  # each sent under 1.5 MB; stored with its history: 1.2, then 1.8 MB
            body = {"input": _big_input(600 << 10, "x")}
            if prev:
                body["previous_response_id"] = prev
            r = httpx.post(server.url + "/v1/responses", json=body, timeout=30)
            assert r.status_code == 200, r.text
            prev = r.json()["id"]
        r = httpx.post(server.url + "/v1/responses",
                       json={"input": "and now?", "previous_response_id": prev})
        assert r.status_code == 413, r.text
        assert r.json()["error"]["param"] == "previous_response_id"
    finally:
        server.stop()
