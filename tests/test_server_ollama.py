"""Issue 41 part 1: Ollama's native API on `edgellm serve` (server/ollama_api.py,
ollama_library.py, ollama_models.py).

The real clients, unchanged -- the `ollama` package and LangChain's ChatOllama /
OllamaEmbeddings -- against `edgellm serve` on the real SmolLM2 and Qwen2.5-Coder-0.5B (a
many-model server over a folder, with an API key): list, show, ps, version, chat, generate,
streaming, tool calls, structured `format`, embed, pull with progress, create, copy, delete, the
load / unload forms, fill-in-the-middle and the errors. Every answer goes through a recording
HTTP transport that validates it against Ollama's own docs/openapi.yaml (tests/data/ollama)
before the client sees it, stream lines included. The parsers (options, Modelfile) are checked
without a model.
"""
import json
import math
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("edgellm._core", reason="edgellm._core is not built (scripts/dev-build.sh)")
ollama = pytest.importorskip("ollama")
yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

from edgellm.server import ollama_api, ollama_library, ollama_models as W  # noqa: E402
from edgellm.server.errors import APIError  # noqa: E402

SPEC = yaml.safe_load((Path(__file__).parent / "data" / "ollama" / "openapi.yaml").read_text())
KEY = "test-key"


def validate(schema: str, obj) -> None:
    """`obj` against openapi.yaml's components/schemas/<schema> (its $refs resolved there)."""
    jsonschema.validate(obj, {"$ref": f"#/components/schemas/{schema}",
                              "components": SPEC["components"]})


# which schema each route's answers have: (one object, each stream line)
SCHEMAS = {"/api/generate": ("GenerateResponse", "GenerateStreamEvent"),
           "/api/chat": ("ChatResponse", "ChatStreamEvent"),
           "/api/embed": ("EmbedResponse", None), "/api/tags": ("ListResponse", None),
           "/api/ps": ("PsResponse", None), "/api/show": ("ShowResponse", None),
           "/api/pull": ("StatusEvent", "StatusEvent"),
           "/api/create": ("StatusEvent", "StatusEvent"),
           "/api/version": ("VersionResponse", None)}


class Checked(httpx.HTTPTransport):
    """An HTTP transport that reads each answer whole and validates it against openapi.yaml:
    `seen` lists (path, status, the objects) of every answer."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def handle_request(self, request):
        r = super().handle_request(request)
        data = r.read()
        path = request.url.path
        objs = []
        if r.status_code >= 400:
            objs = [json.loads(data)]
            validate("ErrorResponse", objs[0])
            assert set(objs[0]) == {"error"}, objs
        elif "ndjson" in r.headers.get("content-type", ""):
            objs = [json.loads(line) for line in data.splitlines() if line.strip()]
            whole, line = SCHEMAS[path]
            for o in objs:
                if "error" in o:  # an in-band error is the last line
                    validate("ErrorResponse", o)
                    assert o is objs[-1]
                else:
                    validate(whole if o.get("done") else line, o)
        elif path in SCHEMAS and data:
            objs = [json.loads(data)]
            validate(SCHEMAS[path][0], objs[0])
        elif path == "/api/embeddings":
            objs = [json.loads(data)]
            assert all(isinstance(x, float) for x in objs[0]["embedding"])
        self.seen.append((path, r.status_code, objs))
        return httpx.Response(r.status_code, headers=r.headers, content=data,
                              request=request)


# --- without a model -------------------------------------------------------------------------------

def test_options_use_the_sampling_table_names():
    from edgellm import sampling_fields

    names = sampling_fields.wire_names("ollama")
    assert {"num_predict", "temperature", "top_k", "top_p", "min_p", "typical_p",
            "repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty", "seed",
            "stop", "num_keep"} <= set(names)
    o = W.parse_options({"num_predict": 7, "temperature": 0, "repeat_penalty": 1.1,
                         "stop": ["\n"], "seed": 3, "num_ctx": 512, "num_thread": 2,
                         "mirostat": 0, "num_gpu": 0})
    assert W.sampling(o) == {"max_tokens": 7, "temperature": 0.0, "repetition_penalty": 1.1,
                             "stop": ["\n"], "seed": 3}
    assert W.sampling(W.parse_options({"num_predict": -1, "seed": -1})) == \
        {"max_tokens": None, "seed": None}
    for bad, where in [({"temprature": 1}, "temprature"), ({"top_k": "a"}, "top_k"),
                       ({"mirostat": 2}, "mirostat"), ({"num_ctx": 0}, "num_ctx")]:
        err = pytest.raises(APIError, W.parse_options, bad).value
        assert err.status == 400 and where in err.message, err.message


def test_modelfile_subset():
    mf = ollama_library.parse_modelfile('FROM smollm2\n# a comment\nPARAMETER temperature 0.2\n'
                                    'PARAMETER stop "<|im_end|>"\nPARAMETER stop "User:"\n'
                                    'SYSTEM """You are\na pirate."""\nTEMPLATE "{{ x }}"\n')
    assert mf == {"from": "smollm2", "system": "You are\na pirate.", "template": "{{ x }}",
                  "parameters": {"temperature": 0.2, "stop": ["<|im_end|>", "User:"]}}
    text = ollama_library.parameters_text(mf["parameters"])
    assert text.splitlines() == ["temperature                    0.2",
                                 'stop                           "<|im_end|>"',
                                 'stop                           "User:"']
    with pytest.raises(APIError, match="ADAPTER is not supported"):
        ollama_library.parse_modelfile("FROM x\nADAPTER ./lora.gguf\n")
    with pytest.raises(APIError, match="never closed"):
        ollama_library.parse_modelfile('SYSTEM """open')


def test_images_become_data_uri_parts():
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
    part = ollama_api.image_part(png, "messages[0].images[0]")
    assert part == {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}}
    err = pytest.raises(APIError, ollama_api.image_part, "not base64!", "images[0]").value
    assert err.status == 400 and "images[0]" in err.message
    body = W.OllamaChatBody.model_validate({"model": "m", "messages": [
        {"role": "user", "content": "what is it?", "images": [png]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "look", "arguments": {"at": "it"}}}]},
        {"role": "tool", "content": "a cat", "tool_name": "look"}]})
    msgs = ollama_api.chat_messages(body, "be brief")
    assert msgs[0] == {"role": "system", "content": "be brief"}
    assert [p["type"] for p in msgs[1]["content"]] == ["image_url", "text"]  # images first, as Ollama
    call = msgs[2]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"at": "it"}
    assert msgs[3] == {"role": "tool", "content": "a cat", "name": "look",
                       "tool_call_id": call["id"]}


# --- edgellm serve with the real models --------------------------------------------------------------

@pytest.fixture(scope="module")
def served(smollm2_path, qwen_path, tmp_path_factory):
    """`edgellm serve smollm2 --models-dir DIR` (DIR: Qwen2.5-Coder-0.5B), with an API key."""
    from test_server import ServerProcess

    folder = tmp_path_factory.mktemp("models")
    (folder / qwen_path.name).symlink_to(qwen_path)
    s = ServerProcess(smollm2_path, "--models-dir", str(folder), "--ctx-size", "1024",
                      "--parallel", "2", api_key=KEY)
    with s:
        s.folder = folder
        yield s


@pytest.fixture
def client(served):
    t = Checked()
    c = ollama.Client(host=served.url, headers={"Authorization": f"Bearer {KEY}"}, transport=t,
                      timeout=300)
    c.checked = t
    return c


QWEN = "qwen2.5-coder-0.5b"
GREEDY = {"temperature": 0, "seed": 1}


@pytest.mark.real_model
@pytest.mark.slow
def test_probes_list_show_ps_version(served, client):
    r = client._request_raw("GET", "/")  # the client asks for JSON, as Ollama's all do
    assert r.status_code == 200 and r.text == "Ollama is running"
    assert httpx.head(served.url + "/", headers={"Accept": "application/json"}).status_code == 200
    page = httpx.get(served.url + "/", headers={"Accept": "text/html,*/*"})  # a browser
    assert "<title>edgellm chat</title>" in page.text
    v = client._request_raw("GET", "/api/version").json()
    assert v["version"] == ollama_library.OLLAMA_VERSION
    names = {m.model: m for m in client.list().models}
    assert {"smollm2:latest", f"{QWEN}:latest"} <= set(names)
    assert names["smollm2:latest"].details.family == "llama"
    assert names["smollm2:latest"].details.quantization_level == "Q4_1"
    assert names["smollm2:latest"].size == served_file_size("smollm2")
    show = client.show("smollm2")
    assert "completion" in show.capabilities and "tools" not in show.capabilities
    assert show.modelinfo["general.architecture"] == "llama"
    assert show.modelinfo["llama.context_length"] == 8192
    assert show.modelinfo["tokenizer.ggml.tokens"] is None  # long arrays: verbose only
    assert "im_start" in show.template
    qshow = client.show(f"{QWEN}:latest")
    assert {"completion", "tools", "insert"} <= set(qshow.capabilities)
    assert qshow.details.parameter_size == "0.5B"
    # a model answers, then is listed as running with its context
    client.generate(model="smollm2", prompt="Hi", options={"num_predict": 1})
    ps = {m.model: m for m in client.ps().models}
    assert ps["smollm2:latest"].context_length == 1024 and ps["smollm2:latest"].expires_at
    with pytest.raises(ollama.ResponseError) as e:
        client.show("llama3:8b")
    assert e.value.status_code == 404 and "llama3:8b" in e.value.error
    # the key is required, and its refusal is Ollama-shaped
    r = httpx.post(served.url + "/api/chat", json={"model": "smollm2", "messages": []})
    assert r.status_code == 401 and set(r.json()) == {"error"}


def served_file_size(name: str) -> int:
    from edgellm import models

    return models.model_path(name).stat().st_size


@pytest.mark.real_model
@pytest.mark.slow
def test_generate_and_chat_streamed_and_whole(client):
    whole = client.generate(model="smollm2", prompt="Name a colour.",
                            options={**GREEDY, "num_predict": 8})
    assert whole.done and whole.done_reason == "length" and whole.eval_count == 8
    assert whole.prompt_eval_count > 0 and whole.total_duration >= whole.eval_duration > 0
    assert whole.prompt_eval_duration > 0 and whole.response
    parts = list(client.generate(model="smollm2:latest", prompt="Name a colour.", stream=True,
                                 options={**GREEDY, "num_predict": 8}))
    assert [p.done for p in parts].count(True) == 1 and parts[-1].done
    assert "".join(p.response for p in parts) == whole.response  # greedy: the same text
    assert parts[-1].eval_count == 8 and parts[-1].done_reason == "length"

    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Say hello."}]
    chat = client.chat(model="smollm2", messages=msgs, options={**GREEDY, "num_predict": 6})
    assert chat.message.role == "assistant" and chat.message.content and chat.eval_count <= 6
    chunks = list(client.chat(model="smollm2", messages=msgs, stream=True,
                              options={**GREEDY, "num_predict": 6}))
    assert "".join(c.message.content for c in chunks) == chat.message.content
    assert chunks[-1].done and chunks[-1].prompt_eval_count == chat.prompt_eval_count
    # a stop string ends it, unwritten
    stopped = client.generate(model="smollm2", prompt="Count: 1, 2, 3, 4,",
                              options={**GREEDY, "num_predict": 30, "stop": [","]})
    assert "," not in stopped.response and stopped.done_reason == "stop"
    raw = client.generate(model="smollm2", prompt="<|im_start|>user\nHi<|im_end|>\n"
                          "<|im_start|>assistant\n", raw=True, options={**GREEDY, "num_predict": 4})
    assert raw.prompt_eval_count < whole.prompt_eval_count + 10 and raw.eval_count > 0
    routes = [p for p, status, _ in client.checked.seen]
    assert routes.count("/api/generate") == 4 and routes.count("/api/chat") == 2


@pytest.mark.real_model
@pytest.mark.slow
def test_structured_format(client):
    schema = {"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}
    r = client.chat(model="smollm2", messages=[{"role": "user", "content": "Invent a person."}],
                    format=schema, options={**GREEDY, "num_predict": 60})
    jsonschema.validate(json.loads(r.message.content), schema)
    r = client.generate(model="smollm2", prompt="A JSON object about a cat:", format="json",
                        options={**GREEDY, "num_predict": 40})
    assert r.done_reason == "length" or isinstance(json.loads(r.response), dict)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


@pytest.mark.real_model
@pytest.mark.slow
def test_tool_calls_whole_and_streamed(client):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat(model=QWEN, messages=ask, tools=[WEATHER], options={**GREEDY,
                                                                         "num_predict": 60})
    calls = r.message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == {"city": "Paris"}
    assert r.done_reason == "stop"
    streamed = [c for c in client.chat(model=QWEN, messages=ask, tools=[WEATHER], stream=True,
                                       options={**GREEDY, "num_predict": 60})]
    with_calls = [c for c in streamed if c.message.tool_calls]
    assert len(with_calls) == 1  # a call is sent whole, arguments an object
    assert with_calls[0].message.tool_calls[0].function.arguments == {"city": "Paris"}
    # the result goes back as a tool message named by tool_name
    history = ask + [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "18 degrees, sunny"}]
    after = client.chat(model=QWEN, messages=history, options={**GREEDY, "num_predict": 30})
    assert "18" in after.message.content or "sunny" in after.message.content.lower()
    # a model whose template takes no tools says so
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="smollm2", messages=ask, tools=[WEATHER])
    assert e.value.status_code == 400 and "does not support tools" in e.value.error


@pytest.mark.real_model
@pytest.mark.slow
def test_embed_and_legacy_embeddings(client):
    r = client.embed(model="smollm2", input=["the cat sat", "a dog ran"])
    assert len(r.embeddings) == 2 and r.prompt_eval_count > 0
    assert all(abs(math.fsum(x * x for x in v) - 1) < 1e-3 for v in r.embeddings)
    one = client.embed(model="smollm2", input="the cat sat")
    assert one.embeddings[0] == pytest.approx(r.embeddings[0], abs=1e-4)
    short = client.embed(model="smollm2", input="the cat sat", dimensions=8)
    assert len(short.embeddings[0]) == 8
    assert math.fsum(x * x for x in short.embeddings[0]) == pytest.approx(1, abs=1e-4)
    legacy = client.embeddings(model="smollm2", prompt="the cat sat").embedding
    norm = math.sqrt(math.fsum(x * x for x in legacy))
    assert [x / norm for x in legacy] == pytest.approx(r.embeddings[0], abs=1e-4)


@pytest.mark.real_model
@pytest.mark.slow
def test_load_unload_forms_fim_and_errors(served, client):
    r = client.generate(model=QWEN)
    assert r.done and r.done_reason == "load"
    assert any(m.model == f"{QWEN}:latest" for m in client.ps().models)
    # fill in the middle: Qwen2.5-Coder's FIM tokens around prompt and suffix
    fim = client.generate(model=QWEN, prompt="def add(a, b):\n    return ",
                          suffix="\n\nprint(add(1, 2))\n", options={**GREEDY, "num_predict": 8})
    assert "a + b" in fim.response
    with pytest.raises(ollama.ResponseError) as e:
        client.generate(model="smollm2", prompt="x", suffix="y")
    assert e.value.status_code == 400 and "does not support insert" in e.value.error
    r = client.generate(model=QWEN, keep_alive=0)
    assert r.done_reason == "unload"
    deadline = time.monotonic() + 30
    while any(m.model == f"{QWEN}:latest" for m in client.ps().models):
        assert time.monotonic() < deadline, "keep_alive 0 did not unload the model"
        time.sleep(0.1)
    r = client.generate(model=QWEN, prompt="Hi", options={"num_predict": 1})
    assert r.load_duration > 0 and r.total_duration > r.load_duration  # loaded for this one
    # errors: Ollama's shape and status
    for kw, status, words in [
            ({"model": "smollm2", "prompt": "x", "options": {"temprature": 1}}, 400, "temprature"),
            ({"model": "smollm2", "prompt": "x", "think": True}, 400, "does not support thinking"),
            ({"model": "nope", "prompt": "x"}, 404, "nope"),
            ({"model": "smollm2", "prompt": "x", "images": ["iVBORw0KGgo="]}, 400, "image")]:
        with pytest.raises(ollama.ResponseError) as e:
            client.generate(**kw)
        assert e.value.status_code == status and words in e.value.error, (kw, e.value.error)
    # a prompt past the context: a 400 before any line, also when streaming
    r = httpx.post(served.url + "/api/generate", headers={"Authorization": f"Bearer {KEY}"},
                   json={"model": "smollm2", "prompt": "word " * 1500}, timeout=60)
    assert r.status_code == 400 and "context" in r.json()["error"]
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="smollm2", messages=[{"role": "user", "content": "x"}],
                    options={"num_ctx": 8})
    assert e.value.status_code == 400 and "num_ctx" in e.value.error


@pytest.mark.real_model
@pytest.mark.slow
def test_pull_create_copy_delete(served, client, gemma3_path):
    progress = list(client.pull("gemma3", stream=True))
    statuses = [p.status for p in progress]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    sized = [p for p in progress if p.total]
    assert sized and sized[-1].completed == sized[-1].total == gemma3_path.stat().st_size
    assert client.pull("gemma3").status == "success"  # not streamed: the last status
    assert "gemma3:latest" in {m.model for m in client.list().models}
    with pytest.raises(ollama.ResponseError) as e:
        client.pull("llama9")
    assert e.value.status_code == 404

    done = client.create(model="pirate", from_="smollm2", system="Answer like a pirate.",
                         parameters={"num_predict": 3, "temperature": 0})
    assert done.status == "success"
    show = client.show("pirate")
    assert show.modelinfo["general.architecture"] == "llama"
    assert "num_predict" in show.parameters and "pirate" in show.modelfile
    r = client.generate(model="pirate", prompt="Hello")
    assert r.eval_count == 3 and r.done_reason == "length"  # the created model's parameters
    steps = list(client.create(model="coder:v1", from_=str(served.folder / next(
        p.name for p in served.folder.iterdir())), stream=True))
    assert steps[-1].status == "success"
    assert "tools" in client.show("coder:v1").capabilities
    assert client.copy("smollm2", "smol-copy:v2").status == "success"
    names = {m.model for m in client.list().models}
    assert {"pirate:latest", "coder:v1", "smol-copy:v2"} <= names
    r = client.chat(model="smol-copy:v2", messages=[{"role": "user", "content": "Hi"}],
                    options={"num_predict": 2})
    assert r.model == "smol-copy:v2" and r.eval_count <= 2
    with pytest.raises(ollama.ResponseError) as e:
        client.create(model="x", from_="smollm2", files={"a.gguf": "sha256:00"})
    assert e.value.status_code == 400 and "files" in e.value.error
    for name in ("pirate", "coder:v1", "smol-copy:v2", "gemma3"):
        assert client.delete(name).status == "success"
    names = {m.model for m in client.list().models}
    assert not names & {"pirate:latest", "coder:v1", "smol-copy:v2", "gemma3:latest"}
    assert gemma3_path.is_file()  # a pulled model leaves the list; the cache keeps the file
    with pytest.raises(ollama.ResponseError) as e:
        client.delete("pirate")
    assert e.value.status_code == 404
    assert all(s < 500 for _, s, _ in client.checked.seen)


@pytest.mark.real_model
@pytest.mark.slow
def test_langchain_chat_ollama_and_embeddings(served, client):
    lc = pytest.importorskip("langchain_ollama")
    from langchain_core.messages import HumanMessage
    from pydantic import BaseModel

    t = Checked()
    kw = {"base_url": served.url, "client_kwargs": {"headers": {"Authorization": f"Bearer {KEY}"},
                                                    "transport": t}}
    llm = lc.ChatOllama(model="smollm2", temperature=0, seed=1, num_predict=6, **kw)
    out = llm.invoke([HumanMessage("Say hello.")])
    assert out.content and out.response_metadata["done_reason"] in ("stop", "length")
    assert out.usage_metadata["output_tokens"] <= 6
    assert "".join(c.content for c in llm.stream("Say hello.")) == out.content

    class Person(BaseModel):
        name: str
        age: int

    person = lc.ChatOllama(model="smollm2", temperature=0, num_predict=60, **kw) \
        .with_structured_output(Person, method="json_schema").invoke("Invent a person.")
    assert isinstance(person, Person)

    coder = lc.ChatOllama(model=QWEN, temperature=0, seed=1, num_predict=60, **kw)
    msg = coder.bind_tools([WEATHER]).invoke("What is the weather in Paris?")
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "get_weather"
    assert msg.tool_calls[0]["args"] == {"city": "Paris"}

    emb = lc.OllamaEmbeddings(model="smollm2", **kw)
    docs = emb.embed_documents(["the cat sat", "a dog ran"])
    direct = client.embed(model="smollm2", input=["the cat sat", "a dog ran"]).embeddings
    assert docs[0] == pytest.approx(direct[0], abs=1e-4)
    assert emb.embed_query("the cat sat") == pytest.approx(direct[0], abs=1e-4)
    assert {"/api/chat", "/api/embed"} <= {p for p, _, _ in t.seen}


# --- the lifecycle's promises, over a stand-in engine ------------------------------------------------

def test_stand_in_engine_in_band_error_cancellation_and_metrics():
    """A generation that runs past --timeout after its first line ends with an `{"error"}`
    line; a client that leaves mid-stream aborts the engine request; /metrics counts both;
    a single-model server answers any name and refuses the verbs that change its set."""
    from test_server_unit import FakeAsyncLLM, RunningServer, metric

    engine = FakeAsyncLLM(token_delay=0.05)
    s = RunningServer(engine=engine, timeout=0.4).wait_ready()
    try:
        body = {"model": "any:tag", "prompt": "hi", "options": {"num_predict": 100}}
        with httpx.stream("POST", s.url + "/api/generate", json=body, timeout=10) as r:
            assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
            lines = [json.loads(x) for x in r.iter_lines() if x.strip()]
        assert lines[0]["response"] and not lines[0]["done"]
        assert set(lines[-1]) == {"error"} and "timed out" in lines[-1]["error"]
        for line in lines[:-1]:
            validate("GenerateStreamEvent", line)
        aborted = engine.aborted
        with httpx.stream("POST", s.url + "/api/chat", timeout=10, json={
                "model": "x", "messages": [{"role": "user", "content": "hi"}],
                "options": {"num_predict": 5}}) as r:
            next(r.iter_lines())  # one line, then leave
        deadline = time.monotonic() + 5
        while engine.aborted == aborted:
            assert time.monotonic() < deadline, "the engine request was not aborted"
            time.sleep(0.02)
        whole = httpx.post(s.url + "/api/chat", json={
            "model": "x", "stream": False, "messages": [{"role": "user", "content": "hi"}],
            "options": {"num_predict": 3, "temperature": 0.5}}, timeout=10).json()
        validate("ChatResponse", whole)
        assert whole["eval_count"] == 3 and whole["prompt_eval_duration"] == 2_000_000
        assert engine.last_params.temperature == 0.5 and engine.last_params.max_tokens == 3
        tags = httpx.get(s.url + "/api/tags")
        assert tags.status_code == 200 and tags.json() == {"models": []}  # no file to describe
        r = httpx.post(s.url + "/api/copy", json={"source": "fake", "destination": "b"})
        assert r.status_code == 400 and "--models-dir" in r.json()["error"]
        text = httpx.get(s.url + "/metrics").text
        assert metric(text, 'edgellm_requests_total{endpoint="ollama_generate",status="504"}') == 1
        assert metric(text, 'edgellm_requests_total{endpoint="ollama_chat",status="200"}') >= 1
        assert metric(text, 'edgellm_requests_total{endpoint="ollama_copy",status="400"}') == 1
    finally:
        s.stop()
