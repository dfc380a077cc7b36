"""LoRA adapters through `edgellm serve BASE --lora NAME=PATH[:SCALE]` (server/lora_api.py): an
adapter picked by OpenAI `model` (vLLM) and by llama-server's `lora: [{id, scale}]`, both in one
batch with the base; /v1/models, /lora-adapters, vLLM's load / unload at run time; unknown names
are 404s; an adapter unloaded under load finishes its running requests. The base and adapters
are tests/test_lora.py's (tiny random llama, PEFT adapters converted by edgellm)."""
import os
import threading

import httpx
import pytest

import hf_checkpoints as hc
from server_helpers import openai_error
from test_server import ServerProcess

pytest.importorskip("edgellm._core")
from edgellm.convert import convert  # noqa: E402
from edgellm.convert.lora import convert_lora  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data", "lora")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("srv_lora")
    d = hc.write_checkpoint(root / "llama", "llama")
    base = root / "tiny-llama.gguf"
    convert(str(d), str(base), "F32")
    out = {"base": str(base)}
    for name in ("llama_r4_qv", "llama_r16_all", "llama_r64_mlp_o"):
        out[name] = str(root / f"{name}.gguf")
        convert_lora(os.path.join(DATA, name), out[name], str(d), "F32")
    return out


@pytest.fixture(scope="module")
def server(files):
    s = ServerProcess(files["base"], "--parallel", "8", "--ctx-size", "512",
                      "--lora", f"qv={files['llama_r4_qv']}", "--lora", f"all={files['llama_r16_all']}:0.5")
    with s:
        yield s


def complete(s, model=None, n=8, **extra):
    body = {"prompt": hc.PROMPT, "max_tokens": n, "temperature": 0, "logprobs": 1, **extra}
    if model is not None:
        body["model"] = model
    r = s.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    return lp["tokens"], lp["token_logprobs"]


def native(s, lora=None, n=8):
    body = {"prompt": hc.PROMPT, "n_predict": n, "temperature": 0, "n_probs": 1, "return_tokens": True}
    if lora is not None:
        body["lora"] = lora
    r = s.post("/completion", body)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def test_models_list_adapters_with_their_base(server):
    data = httpx.get(server.url + "/v1/models", headers=server.headers).json()["data"]
    base_id = data[0]["id"]
    cards = {m["id"]: m for m in data}
    assert cards["qv"]["parent"] == base_id and cards["all"]["parent"] == base_id
    assert cards["all"]["root"].endswith("llama_r16_all.gguf")
    got = httpx.get(server.url + "/lora-adapters", headers=server.headers).json()
    assert [(a["id"], a["name"], a["scale"]) for a in got] == [(0, "qv", 1.0), (1, "all", 0.5)]


def test_model_name_and_lora_ids_select_adapters(server):
    base = complete(server)
    base_named = complete(server, model=httpx.get(server.url + "/v1/models", headers=server.headers)
                          .json()["data"][0]["id"])
    assert base_named == base  # naming the base and no adapter: the base alone
    qv, all_half = complete(server, "qv"), complete(server, "all")
    assert qv[0] != base[0] and all_half[0] != base[0] and qv[0] != all_half[0]
    # llama-server's per-request form: ids in --lora order, unlisted ones off
    toks = lambda r: [t for t in r]  # noqa: E731
    assert toks(native(server, [{"id": 0, "scale": 1.0}])) == toks(native(server, [{"id": 0, "scale": 1.0}]))
    assert native(server) != native(server, [{"id": 0, "scale": 1.0}])
    assert native(server, [{"id": 1, "scale": 0.0}]) == native(server)  # scale 0: the base
    assert native(server, [{"id": 1, "scale": 0.5}]) == native(server, [{"id": 1}])  # its loaded scale


def test_a_batch_of_base_and_adapters_equals_each_alone(server):
    models = [None, "qv", "all", None, "qv", "all", "qv", None]
    alone = [complete(server, m, n=12) for m in models]
    results = [None] * len(models)

    def run(i):
        results[i] = complete(server, models[i], n=12)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(models))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == alone


def test_unknown_adapters_are_404s_naming_them(server):
    r = server.post("/completion", {"prompt": "hi", "n_predict": 1, "lora": [{"id": 7, "scale": 1}]})
    assert r.status_code == 404 and "id 7" in r.text
    r = server.post("/v1/unload_lora_adapter", {"lora_name": "nope"})
    assert r.status_code == 404 and "nope" in r.text
    r = server.post("/completion", {"prompt": "hi", "n_predict": 1, "lora": "bad-shape"})
    assert r.status_code == 404 and "bad-shape" in r.text  # a name that is not loaded
    r = server.post("/completion", {"prompt": "hi", "n_predict": 1, "lora": [{"id": -1}]})
    assert r.status_code == 400


def test_load_and_unload_at_run_time_under_load(server, files):
    r = server.post("/v1/load_lora_adapter", {"lora_name": "mlp", "lora_path": files["llama_r64_mlp_o"]})
    assert r.status_code == 200, r.text
    r = server.post("/v1/load_lora_adapter", {"lora_name": "mlp", "lora_path": files["llama_r64_mlp_o"]})
    assert r.status_code == 400
    r = server.post("/v1/load_lora_adapter", {"lora_name": "bad", "lora_path": files["base"]})
    assert r.status_code == 400 and "not a LoRA adapter" in r.text
    want = complete(server, "mlp", n=120, ignore_eos=True)
    # a long request on "mlp", the adapter unloaded while it runs: it finishes, with its tokens
    body = {"model": "mlp", "prompt": hc.PROMPT, "max_tokens": 120, "temperature": 0, "logprobs": 1,
            "ignore_eos": True, "stream": True}
    got, started = [], threading.Event()

    def stream():
        with httpx.stream("POST", server.url + "/v1/completions", json=body, headers=server.headers,
                          timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    import json

                    ch = json.loads(line[6:])["choices"]
                    if ch and ch[0].get("logprobs"):
                        got.extend(ch[0]["logprobs"]["tokens"])
                        started.set()

    t = threading.Thread(target=stream)
    t.start()
    assert started.wait(60)
    r = server.post("/v1/unload_lora_adapter", {"lora_name": "mlp"})
    assert r.status_code == 200, r.text
    err = openai_error(server.post("/v1/completions", {"model": "mlp", "prompt": "hi", "max_tokens": 1}), 404)
    assert "mlp" in err["message"]
    t.join(120)
    assert got == want[0]
    assert "mlp" not in {m["id"] for m in httpx.get(server.url + "/v1/models", headers=server.headers).json()["data"]}
