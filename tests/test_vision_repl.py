"""`edgellm run` with a model that takes images: a path to an image file in the message attaches it,
as `ollama run` does (the tiny Gemma 3 fixture with its projector beside it, in a pseudo-terminal
as tests/test_run_pty.py drives the REPL, and one-shot)."""
import os
import shutil
import subprocess
import sys

import pytest

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
pexpect = pytest.importorskip("pexpect")
from edgellm.repl.input import image_paths  # noqa: E402
from edgellm.sampling_params import SamplingParams  # noqa: E402
from edgellm.vision import file_part  # noqa: E402
from test_run_pty import N_PREDICT, Terminal, _env  # noqa: E402
from test_vision import DATA, MMPROJ, MODEL  # noqa: E402

QUESTION = "Describe this image."


@pytest.fixture
def folder(tmp_path):
    shutil.copy(MODEL, tmp_path / "gemma3-tiny.gguf")
    shutil.copy(MMPROJ, tmp_path / "mmproj-gemma3-tiny.gguf")  # found beside the model
    shutil.copy(os.path.join(DATA, "image0.png"), tmp_path / "my cat.png")
    return tmp_path


def _expected(folder) -> str:
    with edgellm.LLM(str(folder / "gemma3-tiny.gguf"), n_ctx=1024, n_threads=1, max_seqs=1) as llm:
        return llm.chat([{"role": "user", "content": [file_part(str(folder / "my cat.png")),
                                                      {"type": "text", "text": QUESTION}]}],
                        SamplingParams(temperature=0, max_tokens=int(N_PREDICT))).text.strip()


def test_image_paths_in_a_message(folder):
    cat = str(folder / "my cat.png")
    assert image_paths(f"{QUESTION} {cat.replace(' ', chr(92) + ' ')}") == (QUESTION, [cat])
    assert image_paths(f"'{cat}' {QUESTION}") == (QUESTION, [cat])
    assert image_paths(f'what of "{cat}", and {cat[:-4]}.jpg?') == ("what of , and " + cat[:-4] + ".jpg?", [cat])
    assert image_paths("no /such/file.png here") == ("no /such/file.png here", [])
    assert image_paths("a relative my.png stays") == ("a relative my.png stays", [])


def test_repl_attaches_an_image_path(folder):
    want = _expected(folder)
    t = Terminal(folder / "gemma3-tiny.gguf", folder)
    try:
        t.prompt()
        body = t.ask(f"{QUESTION} ./my\\ cat.png")
        assert "Added image './my cat.png'" in body
        assert body.split("Added image './my cat.png'", 1)[1].strip() == want
        # a model that takes images, asked without one, answers the text alone
        assert "Added image" not in t.ask("Hello")
        assert t.ctrl_d() == 0
    finally:
        t.close()
    # one-shot: the answer alone on stdout, the notice on stderr
    r = subprocess.run([sys.executable, "-m", "edgellm", "run", str(folder / "gemma3-tiny.gguf"), "--temp", "0",
                        "-n", N_PREDICT, "-c", "1024", f"{QUESTION} './my cat.png'"],
                       cwd=str(folder), env=_env(folder), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == want and "Added image './my cat.png'" in r.stderr
