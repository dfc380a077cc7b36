"""`edgellm pull hf.co/USER/REPO[:QUANT]` and Ollama's model verbs (edgellm/hub.py), against a
local server speaking the Hugging Face Hub's file API (tests/fake_hub.py; no hub is reachable).

The end-to-end part pulls a real GGUF (SmolLM2, served under a Q4_K_M name beside a second quant
and an mmproj) through huggingface_hub with the connection dropped mid-file, then runs the same
name offline and works the names with list / show / cp / rm.
"""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fake_hub import FakeHub
from gguf_fixtures import write_valid_fixture

pytest.importorskip("huggingface_hub")

from edgellm import hub  # noqa: E402
from edgellm.cli import main as cli  # noqa: E402
from edgellm.models import UnknownModelError  # noqa: E402

REPO = "testuser/SmolLM2-135M-Instruct-GGUF"
MODEL_FILE = "SmolLM2-135M-Instruct-Q4_K_M.gguf"
OTHER_QUANT = "SmolLM2-135M-Instruct-Q8_0.gguf"
MMPROJ = "mmproj-SmolLM2-135M-Instruct-F16.gguf"
DROP_AT = 30_000_000  # the first GET of the model ends here, mid-file


# ---- names and the file pick (no server) ------------------------------------------------------

@pytest.mark.parametrize("text, repo, quant", [
    ("hf.co/bartowski/SmolLM2-GGUF:Q4_K_M", "bartowski/SmolLM2-GGUF", "Q4_K_M"),
    ("hf.co/bartowski/SmolLM2-GGUF:q4_k_m", "bartowski/SmolLM2-GGUF", "Q4_K_M"),
    ("hf.co/bartowski/SmolLM2-GGUF", "bartowski/SmolLM2-GGUF", None),
    ("hf.co/bartowski/SmolLM2-GGUF:latest", "bartowski/SmolLM2-GGUF", None),
    ("huggingface.co/a/b.c-d_e:IQ4_XS", "a/b.c-d_e", "IQ4_XS"),
    ("https://huggingface.co/a/b", "a/b", None),
    ("hf://a/b:Q8_0", "a/b", "Q8_0"),
    ("a/b:Q8_0", "a/b", "Q8_0"),
])
def test_repository_names(text, repo, quant):
    ref = hub.parse_ref(text)
    assert (ref.repo, ref.quant) == (repo, quant)
    assert ref.name == f"hf.co/{repo}:{quant or 'latest'}"


def test_what_is_not_a_repository_name(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").write_bytes(b"")
    for text in ("smollm2", "model.gguf", "dir/model.gguf", str(tmp_path / "a" / "b"), "a/b/c"):
        assert hub.parse_ref(text) is None, text
    with pytest.raises(UnknownModelError, match="hf.co/USER/REPO"):
        hub.parse_ref("hf.co/only-a-user")


FILES = ["README.md", "Model-IQ4_XS.gguf", "Model-Q8_0.gguf", "Model-Q4_K_M.gguf",
         "Model-Q4_K_M_L.gguf", "mmproj-Model-F16.gguf", "mmproj-Model-Q8_0.gguf",
         "Model-imatrix.gguf", "big/Model-Q6_K-00002-of-00003.gguf",
         "big/Model-Q6_K-00001-of-00003.gguf", "big/Model-Q6_K-00003-of-00003.gguf"]


@pytest.mark.parametrize("files, quant, parts, mmproj", [
    (FILES, "Q8_0", ["Model-Q8_0.gguf"], "mmproj-Model-Q8_0.gguf"),
    (FILES, "q4_k_m", ["Model-Q4_K_M.gguf"], "mmproj-Model-Q8_0.gguf"),  # not Q4_K_M_L
    (FILES, None, ["Model-Q4_K_M.gguf"], "mmproj-Model-Q8_0.gguf"),      # llama.cpp's default
    ([f for f in FILES if "Q4_K_M" not in f], None, ["Model-Q8_0.gguf"], "mmproj-Model-Q8_0.gguf"),
    (["b-F16.gguf", "a-BF16.gguf"], None, ["b-F16.gguf"], None),           # else the first
    (FILES, "Q6_K", [f"big/Model-Q6_K-0000{i}-of-00003.gguf" for i in (1, 2, 3)], None),
])
def test_pick_files_as_llama_cpp(files, quant, parts, mmproj):
    assert hub.pick_files(files, quant) == (parts, mmproj)


def test_pick_files_errors_name_what_there_is():
    with pytest.raises(hub.HubError, match=r"Q3_K_S.*IQ4_XS, Q4_K_M, Q4_K_M_L, Q6_K, Q8_0"):
        hub.pick_files(FILES, "Q3_K_S")
    with pytest.raises(hub.HubError, match="no GGUF model file"):
        hub.pick_files(["README.md", "mmproj-x-F16.gguf"], None)
    with pytest.raises(hub.HubError, match="part of 3 files"):
        hub.pick_files([f for f in FILES if "00002" not in f], "Q6_K")


# ---- end to end against the fake hub ---------------------------------------------------------

def _edgellm(args, env, stdin=subprocess.DEVNULL):
    return subprocess.run([sys.executable, "-m", "edgellm", *args], env=env, stdin=stdin,
                          capture_output=True, text=True, timeout=300)


def _env(tmp: Path, endpoint: str, **extra) -> dict:
    env = dict(os.environ, HF_ENDPOINT=endpoint, HF_HUB_CACHE=str(tmp / "hf"),
               EDGELLM_MODELS=str(tmp / "models"), HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("HF_TOKEN", None)
    env.pop("HF_HUB_OFFLINE", None)
    env.update(extra)
    return env


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def pulled(tmp_path_factory, smollm2_path):
    """`edgellm pull hf.co/REPO:q4_k_m` once, the model's first GET dropped at DROP_AT bytes."""
    tmp = tmp_path_factory.mktemp("hub")
    small = write_valid_fixture(tmp / "small.gguf")
    files = {MODEL_FILE: smollm2_path, OTHER_QUANT: small,
             MMPROJ: small.read_bytes() + b"mmproj", "README.md": b"# a test repository\n"}
    with FakeHub({REPO: files}, drop_after={MODEL_FILE: DROP_AT}) as server:
        env = _env(tmp, server.url)
        proc = _edgellm(["pull", f"hf.co/{REPO}:q4_k_m"], env)
        requests = list(server.requests)
        model_gets = server.gets(MODEL_FILE)
    return {"tmp": tmp, "proc": proc, "requests": requests, "model_gets": model_gets,
            "env": _env(tmp, "http://127.0.0.1:9"),  # from now on no hub answers
            "small": small, "smollm2": smollm2_path}


def test_pull_picks_the_quant_and_prints_only_the_path(pulled):
    proc = pulled["proc"]
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    path = Path(lines[0])
    assert path.name == MODEL_FILE and path.is_file()
    assert Path(pulled["tmp"] / "hf") in path.parents  # huggingface_hub's cache (HF_HUB_CACHE)
    assert _sha256(path) == _sha256(pulled["smollm2"])
    assert (path.parent / MMPROJ).is_file()  # the projector beside the model
    assert not (path.parent / OTHER_QUANT).exists()
    got = [p for m, p, _ in pulled["requests"] if m == "GET" and "/resolve/" in p]
    assert not any(p.endswith(OTHER_QUANT) or p.endswith("README.md") for p in got)


def test_pull_resumes_a_dropped_download(pulled):
    gets = pulled["model_gets"]
    assert len(gets) == 2, gets
    assert "Range" not in gets[0]
    start = int(gets[1]["Range"].split("=")[1].rstrip("-"))
    assert 0 < start <= DROP_AT  # resumed where the bytes ended, not from 0
    said = [ln for ln in pulled["proc"].stderr.splitlines() if "resume" in ln]
    assert len(said) == 1 and said[0].endswith("Trying to resume download...")  # one line


def test_pull_progress_is_one_bar_on_stderr(pulled):
    err = pulled["proc"].stderr
    assert "\r" not in err  # not a terminal: plain lines
    bar = [ln for ln in err.splitlines() if ln.startswith(f"pulling hf.co/{REPO}:q4_k_m: ")]
    assert bar[0].endswith("0% of 98 MB") and "100% of 98 MB" in bar[-1]
    percents = [int(ln.split(": ")[1].split("%")[0]) for ln in bar]
    assert percents == sorted(percents) and len(percents) >= 3


def test_the_pulled_name_runs_offline(pulled):
    assert pulled["proc"].returncode == 0
    args = ["--temp", "0", "-n", "12", "What is 2+2?"]
    by_name = _edgellm(["run", f"hf.co/{REPO}:Q4_K_M", *args], pulled["env"])
    assert by_name.returncode == 0, by_name.stderr
    by_path = _edgellm(["run", str(pulled["smollm2"]), *args], pulled["env"])
    assert by_name.stdout == by_path.stdout and by_name.stdout.strip()
    info = _edgellm(["info", f"{REPO}:Q4_K_M", "--json"], pulled["env"])  # the bare spelling
    assert json.loads(info.stdout)["architecture"] == "llama"


def test_the_pulled_name_serves(pulled):
    import urllib.request

    from server_helpers import free_port, wait_healthy

    name = f"hf.co/{REPO}:Q4_K_M"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "edgellm", "serve", name, "--port", str(port),
                             "-t", "1", "-np", "1", "-c", "256"], env=pulled["env"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(proc, base)
        req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(
            {"model": name, "max_tokens": 4, "temperature": 0,
             "messages": [{"role": "user", "content": "Hi"}]}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = json.load(r)
        assert answer["choices"][0]["message"]["content"] and answer["usage"]["completion_tokens"] >= 1
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_list_show_cp_rm(pulled, monkeypatch):
    assert pulled["proc"].returncode == 0
    for k in ("EDGELLM_MODELS", "HF_HUB_CACHE", "HF_ENDPOINT"):
        monkeypatch.setenv(k, pulled["env"][k])
    run = CliRunner().invoke
    name = f"hf.co/{REPO}:Q4_K_M"
    digest = _sha256(pulled["smollm2"])

    out = run(cli, ["list"]).output.splitlines()
    assert out[0].split() == ["NAME", "ID", "SIZE", "MODIFIED"]
    row = next(ln for ln in out if ln.startswith(name))
    assert row.split()[1:3] == [digest[:12], "98"] and " ago" in row

    shown = run(cli, ["show", name])
    assert shown.exit_code == 0, shown.output
    assert "  Model\n    architecture        llama\n" in shown.output
    assert "    quantization        Q4_1\n" in shown.output
    assert "  Capabilities\n    completion\n    vision\n" in shown.output  # the mmproj

    assert run(cli, ["cp", name, "smol"]).output == f"copied '{name}' to 'smol'\n"
    assert any(ln.startswith("smol:latest ") and digest[:12] in ln
               for ln in run(cli, ["list"]).output.splitlines())
    path = hub.find("smol").path
    blob = Path(os.path.realpath(path))

    assert run(cli, ["rm", name]).output == f"deleted '{name}'\n"
    assert path.is_file()  # `smol` still names it
    assert "smol" in [m.name.split(":")[0] for m in hub.local_models()]
    assert hub.find(name) is None

    assert run(cli, ["rm", "smol"]).output == "deleted 'smol'\n"
    assert not path.exists() and not blob.exists()
    assert hub.find("smol") is None
    gone = run(cli, ["rm", "smol"])
    assert gone.exit_code == 1 and "model 'smol' not found" in gone.output
    not_pulled = _edgellm(["run", name, "hi"], pulled["env"])  # offline and forgotten
    assert not_pulled.returncode == 1
    assert "cannot reach http://127.0.0.1:9" in not_pulled.stderr
    assert "Traceback" not in not_pulled.stderr


def test_hf_token_and_unknown_quant(tmp_path, monkeypatch):
    small = write_valid_fixture(tmp_path / "small.gguf")
    with FakeHub({"me/private-GGUF": {"m-Q8_0.gguf": small}}, token="hf_secret") as server:
        denied = _edgellm(["pull", "hf.co/me/private-GGUF:Q8_0"], _env(tmp_path, server.url))
        assert denied.returncode == 1 and not denied.stdout
        assert "no repository me/private-GGUF" in denied.stderr and "set HF_TOKEN" in denied.stderr
        assert "Traceback" not in denied.stderr
        env = _env(tmp_path, server.url, HF_TOKEN="hf_secret")
        wrong = _edgellm(["pull", "hf.co/me/private-GGUF:Q2_K"], env)
        assert wrong.returncode == 1 and "no GGUF file for quant 'Q2_K'" in wrong.stderr
        assert "Q8_0" in wrong.stderr
        ok = _edgellm(["pull", "hf://me/private-GGUF"], env)  # no quant: the first file
        assert ok.returncode == 0, ok.stderr
        assert _sha256(Path(ok.stdout.strip())) == _sha256(small)


def test_ps_says_when_no_server_runs():
    out = CliRunner().invoke(cli, ["ps", "--host", "127.0.0.1:9"])
    assert out.exit_code == 1
    assert "no edgellm server is running at http://127.0.0.1:9" in out.output


def test_a_split_model_is_fetched_whole(tmp_path):
    # a real (tiny) model in parts, as gguf-split / convert --split-max-tensors write them
    from gguf_fixtures import write_split
    from tiny_vocab_model import write_tiny_vocab_arch_model

    whole = write_tiny_vocab_arch_model(tmp_path / "tiny.gguf", "phi3", n_rot=24)
    written = write_split(Path(whole), tmp_path / "M-Q4_K_M.gguf", max_tensors=8)
    n = len(written)
    assert n >= 3
    parts = {f"big/{p.name}": p.read_bytes() for p in written}
    size = sum(len(d) for d in parts.values())
    with FakeHub({"me/split-GGUF": {**parts, "big/M-Q8_0.gguf": b"other"}}) as server:
        env = _env(tmp_path, server.url)
        proc = _edgellm(["pull", "hf.co/me/split-GGUF"], env)  # Q4_K_M by default
        assert proc.returncode == 0, proc.stderr
        first = Path(proc.stdout.strip())
        assert first.name == f"M-Q4_K_M-00001-of-{n:05d}.gguf"
        for name, data in parts.items():
            assert (first.parent / Path(name).name).read_bytes() == data
        assert not (first.parent / "M-Q8_0.gguf").exists()
        bar = [ln for ln in proc.stderr.splitlines() if ln.startswith("pulling hf.co/me/split-GGUF: ")]
        totals = {ln.split("% of ")[1].split(" ")[0] for ln in bar if "% of " in ln}
        assert len(totals) == 1  # one bar for every part
        # the pulled name loads from its first part, the other parts found beside it
        info = _edgellm(["info", "hf.co/me/split-GGUF", "--json"], env)
        assert info.returncode == 0, info.stderr
        facts = json.loads(info.stdout)
        assert facts["shards"] == n and facts["file_size"] == size


def _answering(routes):
    """A server answering GET path -> JSON from `routes` (404 otherwise)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            body = json.dumps(routes[self.path]).encode() if self.path in routes else b"{}"
            self.send_response(200 if self.path in routes else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_ps_lists_what_the_server_has_loaded():
    import time as _time

    soon = _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime(_time.time() + 270))
    ollama = {"/api/ps": {"models": [{"name": "smollm2:latest", "model": "smollm2:latest",
                                      "size": 150_000_000, "digest": "b179c9523d0e6a0f98a3",
                                      "size_vram": 0, "context_length": 4096, "expires_at": soon}]}}
    router = {"/v1/models": {"data": [
        {"id": "gemma3", "status": {"value": "loaded", "expires_at": int(_time.time()) + 3 * 3600},
         "meta": {"n_ctx": 8192, "memory_bytes": 400_000_000}},
        {"id": "qwen", "status": {"value": "unloaded"}, "meta": {}}]}}
    for routes, row in ((ollama, ["smollm2:latest", "b179c9523d0e", "150", "MB", "100%", "CPU",
                                  "4096", "4", "minutes", "from", "now"]),
                        (router, ["gemma3", "-", "400", "MB", "100%", "CPU", "8192", "3", "hours",
                                  "from", "now"])):
        server = _answering(routes)
        try:
            out = CliRunner().invoke(cli, ["ps", "--host", f"127.0.0.1:{server.server_address[1]}"])
        finally:
            server.shutdown()
            server.server_close()
        assert out.exit_code == 0, out.output
        lines = out.output.splitlines()
        assert lines[0].split() == ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"]
        assert [ln.split() for ln in lines[1:]] == [row]  # the unloaded one is not listed


def test_bytes_that_do_not_match_the_stated_sha256_are_discarded(tmp_path):
    with FakeHub({"me/bad-GGUF": {"m-Q8_0.gguf": b"GGUF" + bytes(4000)}},
                 stated_sha256={"m-Q8_0.gguf": "ab" * 32}) as server:
        env = _env(tmp_path, server.url)
        proc = _edgellm(["pull", "hf.co/me/bad-GGUF:Q8_0"], env)
    assert proc.returncode == 1 and not proc.stdout
    assert f"m-Q8_0.gguf arrived with SHA-256 {hashlib.sha256(b'GGUF' + bytes(4000)).hexdigest()}" \
        in proc.stderr and "the download was discarded" in proc.stderr
    assert not list((tmp_path / "hf").rglob("*.gguf"))  # neither the link nor the blob stays
    assert not [b for b in (tmp_path / "hf").rglob("*") if b.parent.name == "blobs"]
    assert not (tmp_path / "models" / "names.json").exists() or \
        "bad-GGUF" not in (tmp_path / "models" / "names.json").read_text()


def test_known_models_in_list_cp_rm(tmp_path, monkeypatch):
    import dataclasses

    from edgellm import models

    monkeypatch.setenv("EDGELLM_MODELS", str(tmp_path))
    data = b"GGUF" + bytes(96)
    spec = dataclasses.replace(models.KNOWN_MODELS["smollm2"], name="tiny", filename="tiny.gguf",
                               size=len(data), sha256=hashlib.sha256(data).hexdigest())
    monkeypatch.setitem(models.KNOWN_MODELS, "tiny", spec)
    (tmp_path / "tiny.gguf").write_bytes(data)
    run = CliRunner().invoke
    row = next(ln for ln in run(cli, ["list"]).output.splitlines() if ln.startswith("tiny:latest "))
    assert row.split()[1:3] == [spec.sha256[:12], "100"]
    assert hub.find("tiny:latest").path == tmp_path / "tiny.gguf"
    assert models.resolve("tiny:latest") == tmp_path / "tiny.gguf"

    seen = []
    assert hub.pull("tiny:latest", progress=lambda *a: seen.append(a)) == tmp_path / "tiny.gguf"
    assert seen == [(f"pulling {spec.sha256[:12]}", len(data), len(data)), ("success", None, None)]
    assert run(cli, ["cp", "tiny", "mine"]).exit_code == 0
    for bad, why in (("smollm2", "a known model's or a repository's name"),
                     ("hf.co/a/b", "a known model's or a repository's name"),
                     ("dir/x", "a known model's or a repository's name"), ("x y", "cannot name a model")):
        out = run(cli, ["cp", "tiny", bad])
        assert out.exit_code == 1 and why in out.output, (bad, out.output)
    refused = run(cli, ["rm", "tiny"])
    assert refused.exit_code == 1 and "also named mine:latest" in refused.output
    assert run(cli, ["rm", "mine"]).output == "deleted 'mine'\n"
    assert (tmp_path / "tiny.gguf").is_file()  # the known model's file stays with its name
    assert run(cli, ["rm", "tiny"]).output == "deleted 'tiny'\n"
    assert not (tmp_path / "tiny.gguf").exists()


def test_ollama_api_pull_of_a_hub_name_then_chat(tmp_path, smollm2_path):
    """Ollama's /api/pull takes the same hf.co names through edgellm.hub.pull, with its progress
    lines; the pulled name then answers /api/chat (the `ollama` client, unchanged)."""
    ollama = pytest.importorskip("ollama")
    from server_helpers import free_port, wait_healthy

    repo, quant_file = "me/again-GGUF", "again-Q8_0.gguf"
    (tmp_path / "served").mkdir()
    with FakeHub({repo: {quant_file: smollm2_path}}) as hub_server:
        env = _env(tmp_path, hub_server.url)
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "edgellm", "serve", str(smollm2_path),
                                 "--models-dir", str(tmp_path / "served"), "--port", str(port),
                                 "-t", "1", "-np", "1", "-c", "256"], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(proc, base)
            client = ollama.Client(host=base)
            name = f"hf.co/{repo}:Q8_0"
            steps = list(client.pull(name, stream=True))
            statuses = [s.status for s in steps]
            assert statuses[0] == "pulling manifest" and statuses[-1] == "success", statuses
            sized = [s for s in steps if s.total]
            assert sized and sized[-1].completed == sized[-1].total == smollm2_path.stat().st_size
            assert hub_server.gets(quant_file)  # the bytes came from the hub
            with pytest.raises(ollama.ResponseError) as e:
                client.pull("hf.co/me/missing-GGUF:Q8_0")
            assert e.value.status_code in (404, 500) and "missing-GGUF" in str(e.value)
            answer = client.chat(model=name, messages=[{"role": "user", "content": "Hi"}],
                                 options={"temperature": 0, "num_predict": 4})
            assert answer.message.content and answer.eval_count >= 1
            assert name in [m.model for m in client.list().models]
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
