"""Issue 38: the server's OpenAPI document, and schemathesis against the real server.

- `/openapi.json` validates (openapi-spec-validator), for one model and for several, and names
  every route the app serves;
- schemathesis generates requests for every operation from that document (the examples and
  fuzzing phases; positive and negative data) and sends them to `edgellm serve smollm2` on
  127.0.0.1 (with an API key, `--slot-save-path` in a temporary folder, `--ctx-size 256` so no
  generation runs long), checking that none is answered 5xx (not_a_server_error), none hangs
  (`--request-timeout`: a request that times out is an error of the run) and every response
  matches its documented schema and content type (response_schema_conformance,
  content_type_conformance); the server is still healthy afterwards and logged no traceback.

The run is schemathesis' own command line, so CI's short run and the long one are the same
command: a few examples per operation here; EDGELLM_SCHEMATHESIS_EXAMPLES=N (and
EDGELLM_SCHEMATHESIS_PHASES, EDGELLM_SCHEMATHESIS_SEED) make the long run whose figures
docs/SERVER.md "OpenAPI" records.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")
pytest.importorskip("fastapi")

from edgellm.server import ServerConfig, create_app  # noqa: E402

CHECKS = "not_a_server_error,response_schema_conformance,content_type_conformance"
EXAMPLES = int(os.environ.get("EDGELLM_SCHEMATHESIS_EXAMPLES", "6"))
PHASES = os.environ.get("EDGELLM_SCHEMATHESIS_PHASES", "examples,fuzzing")
SEED = os.environ.get("EDGELLM_SCHEMATHESIS_SEED", "38")
REQUEST_TIMEOUT = 120  # seconds: far beyond any answer of a 256-token context on two cores


class NoEngine:
    """Stands in for AsyncLLM: the document is built without a model."""

    n_ctx = 64
    n_vocab = 100

    def stats(self):
        return {}

    def close(self):
        pass


def _document(config: ServerConfig) -> dict:
    from starlette.testclient import TestClient

    with TestClient(create_app(config, loader=lambda c: NoEngine(),
                               planner=lambda c: 1)) as client:
        r = client.get("/openapi.json")
        assert r.status_code == 200, r.text
        return r.json()


def _served(app) -> set:
    """(METHOD, path) of every route the app answers, HEAD and the document's own left out."""
    out = set()
    for route in app.routes:
        for method in getattr(route, "methods", None) or ():
            if method != "HEAD" and getattr(route, "include_in_schema", True):
                out.add((method, route.path))
    return out


@pytest.mark.parametrize("several", [False, True])
def test_openapi_document_validates_and_names_every_route(tmp_path, several):
    from openapi_spec_validator import validate

    if several:
        (tmp_path / "a.gguf").write_bytes(b"")
        config = ServerConfig(model=str(tmp_path), models_dir=str(tmp_path))
    else:
        config = ServerConfig(model="x.gguf")
    doc = _document(config)
    validate(doc)  # raises naming what is wrong
    documented = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    app = create_app(config, loader=lambda c: NoEngine(), planner=lambda c: 1)
    missing = {(m, p) for m, p in _served(app) - documented
               if p not in ("/", "/webui/{name}", "/docs", "/openapi.json")}
    assert not missing, f"routes not in /openapi.json: {sorted(missing)}"


# --- schemathesis against SmolLM2 -------------------------------------------------------------

KEY = "schemathesis-key"


def run_schemathesis(url: str, report_dir: Path, headers: dict, examples: int = EXAMPLES,
                     phases: str = PHASES, seed: str = SEED) -> dict:
    """schemathesis' command line against `url` (its /openapi.json); its JSON report."""
    cmd = [sys.executable, "-m", "schemathesis.cli", "run", url + "/openapi.json",
           "--checks", CHECKS, "--request-timeout", str(REQUEST_TIMEOUT),
           "--max-examples", str(examples), "--phases", phases, "--workers", "2",
           "--generation-database", "none", "--no-color", "--report", "json",
           "--report-dir", str(report_dir)]
    if seed:
        cmd += ["--seed", str(seed)]
    for name, value in headers.items():
        cmd += ["--header", f"{name}: {value}"]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=3600, cwd=report_dir.parent)  # its crash cache stays there
    reports = sorted(report_dir.glob("*.json"))
    assert reports, run.stdout[-6000:]
    report = json.loads(reports[-1].read_text())
    out = run.stdout
    # what to show when it fails: errors, and each failure with its answer and its curl
    found = [i for i in (out.find("= ERRORS ="), out.find("= FAILURES =")) if i >= 0]
    start, end = min(found, default=-1), out.find("= WARNINGS =")
    report["output"] = out[start:end if end > start else None] if start >= 0 else out[-6000:]
    return report


@pytest.mark.real_model
@pytest.mark.slow
@pytest.mark.parametrize("several", [False, True])
def test_schemathesis_finds_no_5xx_hang_or_schema_break(smollm2_path, tmp_path, several):
    from test_server import ServerProcess

    args = ["--parallel", "4", "--ctx-size", "256", "--slot-save-path", str(tmp_path / "slots")]
    model = smollm2_path
    if several:  # --models-dir: the router's routes too (/models/load, /models/unload)
        models = tmp_path / "models"
        models.mkdir()
        (models / "tiny.gguf").symlink_to(smollm2_path)  # a second id, "tiny"
        model, args = "smollm2", args + ["--models-dir", str(models)]
    with ServerProcess(model, *args, api_key=KEY) as s:
        report = run_schemathesis(s.url, tmp_path / "report", {"Authorization": f"Bearer {KEY}"},
                                  examples=EXAMPLES // 2 if several else EXAMPLES)
        cases = report["test_cases"]
        ops = report["operations"]
        print(f"schemathesis: {cases['generated']} requests over {ops['tested']} operations in "
              f"{report['running_time']:.0f} s (seed {report['seed']}): "
              f"{len(report['failures'])} failures, {len(report['errors'])} errors")
        assert ops["tested"] == ops["total"] and ops["errored"] == 0, report["output"][:12000]
        assert cases["generated"] >= ops["total"] * 2, cases
        assert not report["failures"] and not report["errors"], report["output"][:12000]
        assert report["exit_code"] == 0, report["output"][:12000]
        assert httpx.get(s.url + "/health", timeout=10).status_code == 200
        s.log.flush()
        s.log.seek(0)
        log = s.log.read()
        assert "Traceback" not in log, log[-8000:]


def test_answers_are_documented_and_names_kept_apart():
    """The generation routes document their 200 answers (JSON, and the events of a stream) with
    the models the answers are built from; two APIs' models of one name (Anthropic's and the
    Responses API's `Message`) are both kept, not one overwritten by the other."""
    doc = _document(ServerConfig(model="m"))
    schemas = doc["components"]["schemas"]

    def answer(path: str, method: str = "post", kind: str = "application/json") -> dict:
        ref = doc["paths"][path][method]["responses"]["200"]["content"][kind]["schema"]["$ref"]
        return schemas[ref.rsplit("/", 1)[1]]

    assert answer("/v1/chat/completions")["properties"]["object"]["const"] == "chat.completion"
    chunk = answer("/v1/chat/completions", kind="text/event-stream")
    assert chunk["properties"]["object"]["const"] == "chat.completion.chunk"
    assert "choices" in answer("/v1/completions")["required"]
    assert answer("/v1/responses")["properties"]["object"]["const"] == "response"
    assert answer("/v1/messages")["properties"]["type"]["const"] == "message"
    assert answer("/v1/responses/{response_id}", "delete")["properties"]["deleted"]
    # every $ref of the document names a schema it has
    refs = {r.rsplit("/", 1)[1] for r in
            re.findall(r'"\$ref": "(#/components/schemas/[^"]+)"', json.dumps(doc))}
    assert refs <= set(schemas)
    messages = [k for k in schemas if k.endswith("Message") and "Message" in k.split("__")[-1]]
    assert len({json.dumps(schemas[k], sort_keys=True) for k in messages}) == len(messages) >= 2
