"""Several models in one server (server/model_catalog.py, model_pool.py, model_router.py) over
stand-in engines: routing by name, loading on first use, one load for concurrent first requests,
keep-alive, eviction of the least recently used idle model when the memory budget is full, busy
models never unloaded, models that cannot fit; and the same three real models through
`edgellm serve` and the openai client.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

edgellm = pytest.importorskip("edgellm", reason="edgellm._core is not built (scripts/dev-build.sh)")
pytest.importorskip("uvicorn")

from edgellm.server import ServerConfig, create_app  # noqa: E402
from edgellm.server.model_catalog import CatalogError, ModelCatalog  # noqa: E402
from server_helpers import AppServer, free_port, openai_error  # noqa: E402
from test_server_unit import CHAT, FakeAsyncLLM, SamplingParams, metric, post  # noqa: E402


# --- the names ---------------------------------------------------------------------------------

def _catalog(*paths, models_dir=None, aliases=None):
    return ModelCatalog.build([(p, p) for p in paths], models_dir, aliases)


def test_names_pick_models():
    cat = _catalog("/m/SmolLM2-135M-Instruct.Q4_1.gguf", "/m/gemma-3-270m-q4_k_m.gguf",
                   "/m/my-model-F16.gguf")
    # a known model's file takes edgellm's name; any other its stem
    assert cat.ids == ["smollm2", "gemma3", "my-model-F16"]
    for name, want in [("smollm2", "smollm2"), ("SmolLM2-135M-Instruct.Q4_1", "smollm2"),
                       ("smollm2-135m-instruct:q4_1", "smollm2"), ("smollm2:latest", "smollm2"),
                       ("smollm2:q4_1", "smollm2"), ("smollm2-135m", "smollm2"),
                       ("gemma-3-270m:q4_k_m", "gemma3"), ("gemma3-270m", "gemma3"),
                       ("GEMMA-3-270M-Q4_K_M.gguf", "gemma3"), ("my-model:f16", "my-model-F16"),
                       ("my-model-f16:latest", "my-model-F16"),
                       ("/m/gemma-3-270m-q4_k_m.gguf", "gemma3")]:
        assert cat.find(name).id == want, name
    err = pytest.raises(Exception, cat.find, "llama3").value
    assert err.status == 404 and err.code == "model_not_found"
    assert "smollm2, gemma3, my-model-F16" in err.message
    names = cat.names_of(cat.find("smollm2"))
    assert names[0] == "smollm2" and "smollm2-135m-instruct:q4_1" in names


def test_aliases_ids_and_ambiguous_names():
    cat = _catalog("/a/tiny-Q8_0.gguf", "/b/tiny-Q4_0.gguf",
                   aliases={"chat": "/a/tiny-Q8_0.gguf", "fast": "/c/other.gguf"})
    # --alias NAME=MODEL names the id; a path only named by an alias is served too
    assert cat.ids == ["chat", "tiny-Q4_0", "fast"]
    assert cat.find("tiny-q8_0").id == "chat" and cat.find("tiny:q4_0").id == "tiny-Q4_0"
    assert cat.find("other").id == "fast"
    cat = _catalog("/a/tiny-Q8_0.gguf", "/b/tiny-Q8_0.gguf", aliases={"one": "/a/tiny-Q8_0.gguf",
                                                                     "two": "/b/tiny-Q8_0.gguf"})
    err = pytest.raises(Exception, cat.find, "tiny:q8_0").value  # both files' derived name
    assert err.status == 400 and err.code == "model_ambiguous" and "one, two" in err.message
    with pytest.raises(CatalogError, match="two models are named 'tiny-Q8_0'"):
        _catalog("/a/tiny-Q8_0.gguf", "/b/tiny-Q8_0.gguf")


def test_models_dir_is_scanned_again(tmp_path):
    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "notes.txt").write_bytes(b"")
    cat = _catalog(models_dir=str(tmp_path))
    assert cat.ids == ["a"]
    (tmp_path / "b.gguf").write_bytes(b"")
    assert cat.find("b").id == "b" and cat.ids == ["a", "b"]  # found on the next lookup
    (tmp_path / "empty").mkdir()
    with pytest.raises(CatalogError, match="has no"):
        _catalog(models_dir=str(tmp_path / "empty"))


# --- a server over stand-in engines --------------------------------------------------------------

class Loads:
    """The stand-in loader: one FakeAsyncLLM per load, counted per model file; a load waits for
    `gate` when it is cleared; `fail[path]` is raised instead."""

    def __init__(self, token_delay=0.002):
        self.count = Counter()
        self.engines = {}           # path -> the engine of its latest load
        self.gate = threading.Event()
        self.gate.set()
        self.fail = {}
        self.token_delay = token_delay
        self.configs = {}

    def __call__(self, config):
        self.count[config.model_path] += 1
        self.configs[config.model_path] = config
        assert self.gate.wait(10)
        if config.model_path in self.fail:
            raise self.fail[config.model_path]
        engine = FakeAsyncLLM(token_delay=self.token_delay)
        engine.model_path = config.model_path
        self.engines[config.model_path] = engine
        return engine


class ModelsServer(AppServer):
    def __init__(self, paths=("/m/a.gguf", "/m/b.gguf", "/m/c.gguf"), sizes=None, loads=None,
                 **cfg):
        self.loads = loads or Loads()
        self.sizes = sizes or {}
        port = free_port()
        config = ServerConfig(model=paths[0], port=port, models=[(p, p) for p in paths], **cfg)
        self.app = create_app(config, loader=self.loads, params_factory=SamplingParams,
                              planner=lambda c: self.sizes.get(c.model_path, 100))
        self.start(self.app, port)
        self.wait_started()

    def states(self):
        data = httpx.get(self.url + "/v1/models").json()["data"]
        return {m["id"]: m["status"]["value"] for m in data}

    def wait_state(self, model, state, timeout=10):
        deadline = time.monotonic() + timeout
        while self.states()[model] != state:
            assert time.monotonic() < deadline, self.states()
            time.sleep(0.02)


@pytest.fixture
def models():
    s = ModelsServer()
    yield s
    s.stop()


def chat(s, model, **kw):
    return post(s, "/v1/chat/completions", {**CHAT, "model": model, **kw})


def test_request_model_picks_the_engine_and_others_stay_unloaded(models):
    assert models.states() == {"a": "unloaded", "b": "unloaded", "c": "unloaded"}
    health = httpx.get(models.url + "/health")
    assert health.status_code == 200 and health.json()["models"]["a"] == "unloaded"
    r = chat(models, "b")
    assert r.status_code == 200 and r.json()["model"] == "b"
    assert models.loads.count == Counter({"/m/b.gguf": 1})
    assert models.loads.engines["/m/b.gguf"].finished == 1
    assert models.states() == {"a": "unloaded", "b": "loaded", "c": "unloaded"}
    card = [m for m in httpx.get(models.url + "/v1/models").json()["data"] if m["id"] == "b"][0]
    assert card["meta"]["n_ctx"] == 256 and card["meta"]["memory_bytes"] == 100
    assert "b:latest" in card["aliases"] or "b" in card["aliases"]
    # the same model again: no second load; another model: its own engine
    assert chat(models, "b:latest").status_code == 200
    r = post(models, "/v1/completions", {"model": "c", "prompt": "x", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == "c"
    assert models.loads.count == Counter({"/m/b.gguf": 1, "/m/c.gguf": 1})
    # the other routes go by the same field
    assert post(models, "/tokenize", {"model": "a", "content": "x"}).status_code == 200
    assert models.states() == {"a": "loaded", "b": "loaded", "c": "loaded"}


def test_unknown_model_is_404_listing_the_models(models):
    err = openai_error(chat(models, "llama3"), 404)
    assert err["code"] == "model_not_found" and err["param"] == "model"
    assert "a, b, c" in err["message"]
    # a path no model has is a 404 too, and loads nothing
    r = post(models, "/v1/nothing", {"model": "a"})
    assert r.status_code == 404 and not models.loads.count
    r = httpx.get(models.url + "/v1/chat/completions?model=a")  # 405: nothing loaded for it
    assert r.status_code == 405 and not models.loads.count
    err = openai_error(post(models, "/v1/chat/completions", {**CHAT, "model": 7}), 400)
    assert err["param"] == "model"
    assert openai_error(httpx.post(models.url + "/v1/chat/completions", content=b"{",
                                   timeout=10), 400)["code"] == "invalid_json"
    assert not models.loads.count


def test_openai_client_lists_and_uses_every_model(models):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=models.url + "/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["a", "b", "c"]
    for name in ("a", "b", "c"):
        out = client.chat.completions.create(model=name, messages=CHAT["messages"], max_tokens=3)
        assert out.model == name and out.usage.completion_tokens == 3
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="zzz", messages=CHAT["messages"], max_tokens=3)


def test_concurrent_first_requests_share_one_load_and_wait_for_it(models):
    models.loads.gate.clear()
    results = []

    def one():
        results.append(chat(models, "a").status_code)

    threads = [threading.Thread(target=one) for _ in range(5)]
    for t in threads:
        t.start()
    models.wait_state("a", "loading")
    time.sleep(0.2)  # all five are waiting on the same load
    assert results == [] and models.loads.count["/m/a.gguf"] == 1
    assert httpx.get(models.url + "/health").json()["models"]["a"] == "loading"
    models.loads.gate.set()
    for t in threads:
        t.join(10)
    assert results == [200] * 5
    assert models.loads.count == Counter({"/m/a.gguf": 1})
    assert models.loads.engines["/m/a.gguf"].finished == 5


def test_client_leaving_while_its_model_loads_is_dropped_and_the_load_goes_on(models):
    models.loads.gate.clear()
    with pytest.raises(httpx.TimeoutException):
        post(models, "/v1/chat/completions", {**CHAT, "model": "a"}, timeout=0.5)
    models.wait_state("a", "loading")
    models.loads.gate.set()
    models.wait_state("a", "loaded")
    deadline = time.monotonic() + 5
    while 'status="499"' not in httpx.get(models.url + "/metrics").text:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    engine = models.loads.engines["/m/a.gguf"]
    assert engine.finished == engine.aborted == 0  # the request never reached the engine
    text = httpx.get(models.url + "/metrics").text
    assert metric(text, 'edgellm_model_requests_running{model="a"}') == 0
    assert chat(models, "a").status_code == 200 and models.loads.count["/m/a.gguf"] == 1


def test_keep_alive_unloads_idle_models_and_a_request_sets_its_own():
    s = ModelsServer(keep_alive=2)
    try:
        t0 = time.time()
        assert chat(s, "a").status_code == 200
        engine = s.loads.engines["/m/a.gguf"]
        card = [m for m in httpx.get(s.url + "/v1/models").json()["data"] if m["id"] == "a"][0]
        assert card["status"]["value"] == "loaded"
        assert t0 + 1 <= card["status"]["expires_at"] <= time.time() + 3
        s.wait_state("a", "unloaded", timeout=10)
        assert engine.closed
        # Ollama's keep_alive: -1 keeps it, 0 unloads when the request ends
        assert chat(s, "b", keep_alive=-1).status_code == 200
        assert chat(s, "c", keep_alive="0s").status_code == 200
        s.wait_state("c", "unloaded", timeout=5)
        time.sleep(0.5)
        assert s.states()["b"] == "loaded"
        assert s.loads.engines["/m/b.gguf"].last_params is not None  # keep_alive not passed on
        assert chat(s, "b").status_code == 200  # no keep_alive: the server's 2 s again
        s.wait_state("b", "unloaded", timeout=10)
        err = openai_error(chat(s, "a", keep_alive="soon"), 400)
        assert err["param"] == "keep_alive"
        assert post(s, "/models/load", {"model": "c"}).status_code == 200
        text = httpx.get(s.url + "/metrics").text
        assert metric(text, 'edgellm_model_unloads_total{model="a",reason="keep_alive"}') == 1
        assert metric(text, 'edgellm_model_unloads_total{model="b",reason="keep_alive"}') == 1
        assert metric(text, 'edgellm_model_loaded{model="c"}') == 1
        assert metric(text, 'edgellm_model_ready{model="c"}') == 1
        assert metric(text, 'edgellm_model_loaded{model="b"}') == 0
        assert metric(text, 'edgellm_model_loads_total{model="c"}') == 2
    finally:
        s.stop()


def test_least_recently_used_idle_model_makes_room():
    s = ModelsServer(models_memory=250)  # two of the 100-byte models fit, not three
    try:
        assert chat(s, "a").status_code == 200
        assert chat(s, "b").status_code == 200
        assert chat(s, "a").status_code == 200  # b is now the least recently used
        assert chat(s, "c").status_code == 200
        assert s.states() == {"a": "loaded", "b": "unloaded", "c": "loaded"}
        assert s.loads.engines["/m/b.gguf"].closed
        assert chat(s, "b").status_code == 200  # back in; a is the oldest now
        assert s.states() == {"a": "unloaded", "b": "loaded", "c": "loaded"}
        assert s.loads.count["/m/b.gguf"] == 2
        text = httpx.get(s.url + "/metrics").text
        assert metric(text, 'edgellm_model_unloads_total{model="b",reason="evicted"}') == 1
    finally:
        s.stop()


def test_max_loaded_models_counts_too():
    s = ModelsServer(max_loaded_models=1)
    try:
        assert chat(s, "a").status_code == 200
        assert chat(s, "b").status_code == 200
        assert s.states() == {"a": "unloaded", "b": "loaded", "c": "unloaded"}
    finally:
        s.stop()


def test_busy_model_is_not_unloaded_under_its_request():
    s = ModelsServer(models_memory=150, loads=Loads(token_delay=0.02))  # one model at a time
    try:
        order = []
        body = {**CHAT, "model": "a", "max_tokens": 100, "stream": True}  # 2 s or more
        with httpx.Client(timeout=20) as c, c.stream("POST", s.url + "/v1/chat/completions",
                                                     json=body) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")

            def other():
                order.append(("b", chat(s, "b").status_code))

            t = threading.Thread(target=other)
            t.start()
            time.sleep(0.3)
            assert s.states()["a"] == "loaded" and s.states()["b"] == "unloaded"
            assert not order  # b waits for room
            text = "".join(lines)
            order.append(("a", "done"))
            assert "[DONE]" in text and '"finish_reason":"length"' in text.replace(" ", "")
        t.join(10)
        assert order == [("a", "done"), ("b", 200)]
        assert s.states() == {"a": "unloaded", "b": "loaded", "c": "unloaded"}
        assert s.loads.engines["/m/a.gguf"].aborted == 0  # a's stream was not cut
        assert s.loads.engines["/m/a.gguf"].finished == 1
    finally:
        s.stop()


def test_no_room_while_every_other_model_stays_busy_is_503():
    """The pool itself: a busy model keeps its memory; a request that cannot get room within the
    wait gets 503 no_room_for_model, and the busy model is still loaded."""
    import asyncio

    from edgellm.server.errors import APIError
    from edgellm.server.metrics import ServerMetrics
    from edgellm.server.model_pool import ModelPool

    cat = _catalog("/m/a.gguf", "/m/b.gguf")
    loads = Loads()

    async def run():
        pool = ModelPool(ServerConfig(model="a"), cat.entries, loads, SamplingParams,
                         ServerMetrics(), planner=lambda c: 100, budget=150, wait_timeout=0.2)
        a, b = (pool.slot(e) for e in cat.entries)
        await pool.acquire(a)
        with pytest.raises(APIError) as e:
            await pool.acquire(b)
        assert e.value.status == 503 and e.value.code == "no_room_for_model"
        assert "a (100.0 B" not in e.value.message and "1 running" in e.value.message
        assert a.state == "loaded" and b.state == "unloaded" and b.waiting == 0
        pool.release(a)
        await pool.acquire(b)  # now a is idle: evicted for b
        assert (a.state, b.state) == ("unloaded", "loaded")
        pool.release(b)
        pool.close()

    asyncio.run(run())
    assert loads.count == Counter({"/m/a.gguf": 1, "/m/b.gguf": 1})


class SlowCloses(Loads):
    """Loads whose engines take a while to close (as a real engine writing its cache pages
    does), counting how many engines are alive (made, not yet closed) at the worst moment."""

    def __init__(self, close_delay):
        super().__init__()
        self.close_delay = close_delay
        self.live = 0
        self.most_live = 0
        self.lock = threading.Lock()

    def __call__(self, config):
        engine = super().__call__(config)
        with self.lock:
            self.live += 1
            self.most_live = max(self.most_live, self.live)
        close, loads = engine.close, self

        def slow_close():
            time.sleep(loads.close_delay)
            close()
            with loads.lock:
                loads.live -= 1
        engine.close = slow_close
        return engine


@pytest.mark.parametrize("budget,max_loaded", [(None, 1), (150, None)])
def test_unloads_racing_new_loads_never_exceed_the_limits(budget, max_loaded):
    """Issue 39 defect 3, as a bounded stress test: requests for two models under a limit of one,
    with keep-alive 0 and explicit unloads, so a model's unload (slow to close) races a new load
    of the same model and of the other. At no moment may two engines be alive, and every request
    is answered. Before the fix the unload's end marked a reloading slot unloaded, and the other
    model loaded beside it."""
    import asyncio
    import random

    from edgellm.server.metrics import ServerMetrics
    from edgellm.server.model_pool import LOADED, ModelPool

    cat = _catalog("/m/a.gguf", "/m/b.gguf")
    loads = SlowCloses(close_delay=0.015)
    rng = random.Random(39)

    async def run():
        pool = ModelPool(ServerConfig(model="a"), cat.entries, loads, SamplingParams,
                         ServerMetrics(), planner=lambda c: 100, budget=budget,
                         max_loaded=max_loaded, keep_alive=0, wait_timeout=30)
        slots = [pool.slot(e) for e in cat.entries]
        worst = 0

        async def client(n):  # requests one after another, at random moments
            nonlocal worst
            for _ in range(n):
                await asyncio.sleep(rng.random() * 0.02)
                slot = rng.choice(slots)
                await pool.acquire(slot)
                worst = max(worst, sum(s.state == LOADED for s in slots))
                await asyncio.sleep(rng.random() * 0.005)
                pool.release(slot, keep_alive=rng.choice([0, 0, 0.005, None]))

        async def unloader(n):
            for _ in range(n):
                await asyncio.sleep(rng.random() * 0.02)
                await pool.unload(rng.choice(slots))

        await asyncio.wait_for(asyncio.gather(*[client(60) for _ in range(3)], unloader(60)), 120)
        assert worst <= 1
        pool.close()

    asyncio.run(run())
    assert loads.most_live == 1, f"{loads.most_live} engines were alive at once under a limit of 1"
    assert sum(loads.count.values()) > 30  # the models really were unloaded and loaded again


def test_model_that_cannot_fit_alone_is_503_naming_the_numbers():
    s = ModelsServer(models_memory=500, sizes={"/m/c.gguf": 4096})
    try:
        assert chat(s, "a").status_code == 200
        err = openai_error(chat(s, "c"), 503)
        assert err["code"] == "model_too_large" and err["type"] == "unavailable_error"
        assert "4096 bytes" in err["message"] and "500 bytes" in err["message"]
        assert "/m/c.gguf" not in s.loads.count  # never loaded
        assert s.states()["a"] == "loaded"  # and nothing was evicted for it
    finally:
        s.stop()


def test_failed_loads_are_the_requests_error_and_are_retried():
    loads = Loads()
    from edgellm.memory_plan import MemoryPlanError

    loads.fail["/m/a.gguf"] = edgellm.ModelFormatError("a.gguf: bad magic")
    loads.fail["/m/b.gguf"] = MemoryPlanError("b needs 9 bytes, 3 available")
    s = ModelsServer(loads=loads)
    try:
        err = openai_error(chat(s, "a"), 500)
        assert err["code"] == "model_load_failed" and "bad magic" in err["message"]
        card = [m for m in httpx.get(s.url + "/v1/models").json()["data"] if m["id"] == "a"][0]
        assert card["status"] == {"value": "unloaded", "failed": "a.gguf: bad magic"}
        err = openai_error(chat(s, "b"), 503)
        assert err["code"] == "model_too_large" and "9 bytes, 3 available" in err["message"]
        del loads.fail["/m/a.gguf"]
        assert chat(s, "a").status_code == 200  # tried again
        assert loads.count["/m/a.gguf"] == 2
        assert httpx.get(s.url + "/health").status_code == 200
    finally:
        s.stop()


def test_load_and_unload_routes(models):
    r = post(models, "/models/load", {"model": "b"})
    assert r.status_code == 200 and r.json()["status"] == "loaded"
    assert models.states()["b"] == "loaded"
    r = post(models, "/models/unload", {"model": "b"})
    assert r.status_code == 200 and models.states()["b"] == "unloaded"
    assert models.loads.engines["/m/b.gguf"].closed
    assert openai_error(post(models, "/models/unload", {"model": "q"}), 404)["code"] == \
        "model_not_found"


def test_request_without_model_goes_to_the_first(models):
    r = post(models, "/v1/chat/completions", CHAT)
    assert r.status_code == 200 and r.json()["model"] == "a"
    assert httpx.get(models.url + "/props?model=c").status_code == 200
    assert models.states()["c"] == "loaded"


def test_responses_store_is_shared_between_models(models):
    r = post(models, "/v1/responses", {"model": "a", "input": "hi", "max_output_tokens": 3})
    assert r.status_code == 200, r.text
    rid = r.json()["id"]
    got = httpx.get(f"{models.url}/v1/responses/{rid}")
    assert got.status_code == 200 and got.json()["model"] == "a"
    r = post(models, "/v1/responses", {"model": "b", "input": "and?", "max_output_tokens": 3,
                                       "previous_response_id": rid})
    assert r.status_code == 200 and r.json()["model"] == "b"


def test_one_model_keeps_the_single_model_server():
    """One MODEL and no --models-dir: any `model` value is accepted, loaded at start, as before."""
    engine = FakeAsyncLLM()
    port = free_port()
    config = ServerConfig(model="x.gguf", model_path="x.gguf", port=port,
                          models=[("x.gguf", "x.gguf")])
    assert not config.multi_model
    s = AppServer()
    s.start(create_app(config, loader=lambda c: engine, params_factory=SamplingParams), port)
    try:
        s.wait_ready()
        assert httpx.get(s.url + "/health").json() == {"status": "ok"}
        assert chat(s, "anything-at-all").status_code == 200
    finally:
        s.stop()


# --- the command line ----------------------------------------------------------------------------

def _serve(*args, log=None):
    """`edgellm serve ARGS` on a free port: (process, url). Its output goes to a pipe (read by
    _wait_up when it fails), or to the open file `log` for a server that logs more than a pipe
    holds (a full pipe would block it)."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    paths = [str(root / "python")] if env.get("EDGELLM_BUILD_DIR") else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(root / "tests"), env.get("PYTHONPATH", "")])
    if env.get("EDGELLM_BUILD_DIR"):
        env["EDGELLM_BUILD_DIR"] = os.path.abspath(env["EDGELLM_BUILD_DIR"])
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "edgellm", "serve", *args, "--port", str(port),
                             "--log-level", "warning"], env=env,
                            stdout=subprocess.PIPE if log is None else log,
                            stderr=subprocess.STDOUT, text=True)
    return proc, f"http://127.0.0.1:{port}"


def _wait_up(proc, url, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "server exited"
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "server did not come up"
        time.sleep(0.1)


def _stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_cli_serves_a_models_dir_with_aliases(tmp_path):
    for n in ("one.gguf", "two.gguf"):
        (tmp_path / n).write_bytes(b"")
    proc, url = _serve("--models-dir", str(tmp_path), "--alias", f"first={tmp_path / 'one.gguf'}",
                       "--engine-factory", "test_server_unit:cli_fake_engine")
    try:
        _wait_up(proc, url)
        ids = [m["id"] for m in httpx.get(url + "/v1/models").json()["data"]]
        assert ids == ["first", "two"]
        for name in ("first", "one", "two:latest"):
            r = httpx.post(url + "/v1/chat/completions", json={**CHAT, "model": name}, timeout=10)
            assert r.status_code == 200, r.text
    finally:
        _stop(proc)


def test_cli_refuses_bad_model_options(tmp_path):
    proc, _ = _serve("--engine-factory", "test_server_unit:cli_fake_engine")
    assert proc.wait(30) == 2 and "--models-dir" in proc.stdout.read()
    proc, _ = _serve("a.gguf", "b.gguf", "--alias", "x", "--engine-factory",
                     "test_server_unit:cli_fake_engine")
    assert proc.wait(30) == 2 and "NAME=MODEL" in proc.stdout.read()
    proc, _ = _serve("a.gguf", "b.gguf", "--keep-alive", "later", "--engine-factory",
                     "test_server_unit:cli_fake_engine")
    assert proc.wait(30) == 2 and "keep_alive" in proc.stdout.read()


# --- three real models ---------------------------------------------------------------------------

@pytest.mark.real_model
@pytest.mark.slow
def test_real_models_through_edgellm_serve(smollm2_path, gemma3_path, qwen_path):
    """SmolLM2, Gemma 3 270M and Qwen2.5-Coder-0.5B behind one `edgellm serve`: each answers
    through the openai client, /v1/models follows them from unloaded to loaded, and with room
    for two the least recently used one is unloaded for the third."""
    openai = pytest.importorskip("openai")
    proc, url = _serve("smollm2", str(gemma3_path), "qwen", "--max-loaded-models", "2",
                       "--ctx-size", "512", "--parallel", "2", "--threads", "2")
    try:
        _wait_up(proc, url)
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                               timeout=300)

        def states():
            return {m.id: m.model_extra["status"]["value"] for m in client.models.list()}

        assert states() == {"smollm2": "unloaded", "gemma3": "unloaded",
                            "qwen2.5-coder-0.5b": "unloaded"}
        answers = {}
        for name in ("smollm2", "gemma-3-270m:q4_k_m", "qwen"):
            out = client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8,
                temperature=0)
            answers[out.model] = out.choices[0].message.content
            assert out.usage.completion_tokens > 0
        assert set(answers) == {"smollm2", "gemma3", "qwen2.5-coder-0.5b"}
        assert all(a.strip() for a in answers.values()), answers
        # room for two: smollm2, the least recently used, made room for qwen
        assert states() == {"smollm2": "unloaded", "gemma3": "loaded",
                            "qwen2.5-coder-0.5b": "loaded"}
        meta = {m.id: m.model_extra["meta"] for m in client.models.list()}
        assert meta["gemma3"]["architecture"] == "gemma3" and meta["gemma3"]["n_ctx"] == 512
        assert meta["smollm2"]["memory_bytes"] > 0
        # streaming, and back to the first model
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Count: 1, 2,"}],
            max_tokens=6, temperature=0, stream=True) if c.choices)
        assert text.strip()
        assert states()["smollm2"] == "loaded"
        assert sum(v == "loaded" for v in states().values()) == 2
        with pytest.raises(openai.NotFoundError) as e:
            client.chat.completions.create(model="llama-3-8b", messages=[
                {"role": "user", "content": "x"}], max_tokens=2)
        assert "smollm2" in json.dumps(e.value.body)
    finally:
        _stop(proc)


@pytest.mark.real_model
def test_real_model_over_the_memory_budget_is_503_with_its_plan(smollm2_path, qwen_path):
    """The real memory plan sizes each model: one over --models-memory is refused before any
    byte of it is loaded, with both numbers."""
    from edgellm.memory_plan import plan

    need = plan(str(qwen_path), n_ctx=512, n_threads=2, max_seqs=2).total  # as served below
    budget = need // 2
    proc, url = _serve(str(smollm2_path), "qwen", "--models-memory", str(budget),
                       "--ctx-size", "512", "--parallel", "2", "--threads", "2")
    try:
        _wait_up(proc, url)
        err = openai_error(httpx.post(url + "/v1/chat/completions", json={**CHAT, "model": "qwen"},
                                      timeout=60), 503)
        assert err["code"] == "model_too_large"
        said = int(re.search(r"needs (\d+) bytes", err["message"]).group(1))
        # the plan counts this process's heap for the metadata: a few KB apart from ours
        assert abs(said - need) < need / 100 and f"{budget} bytes" in err["message"]
        states = {m["id"]: m["status"]["value"] for m in
                  httpx.get(url + "/v1/models").json()["data"]}
        assert states == {"smollm2": "unloaded", "qwen2.5-coder-0.5b": "unloaded"}
    finally:
        _stop(proc)
