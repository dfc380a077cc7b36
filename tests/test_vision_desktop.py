"""examples/desktop_chat with a model that takes images, under a real X server (Xvfb) driven by
X input events (xdotool), as tests/test_desktop_example.py drives it: the Image… button opens Tk's
file dialog, the file typed there goes with the next message, and the answer is the model's
greedy answer to the same content parts (the tiny Gemma 3 fixture with its projector beside it)."""
import os
import shutil

import pytest

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
from edgellm.sampling_params import SamplingParams  # noqa: E402
from edgellm.vision import file_part  # noqa: E402
from test_desktop_example import start_app, xserver  # noqa: E402,F401
from test_vision import DATA, MMPROJ, MODEL  # noqa: E402

pytestmark = [pytest.mark.slow]
MAX_TOKENS = 32
QUESTION = "Describe this image."


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    shutil.copy(MODEL, d / "gemma3-tiny.gguf")
    shutil.copy(MMPROJ, d / "mmproj-gemma3-tiny.gguf")
    shutil.copy(os.path.join(DATA, "image1.png"), d / "picture.png")
    return d


def test_image_button_attaches_a_file(xserver, folder, tmp_path):  # noqa: F811
    with edgellm.LLM(str(folder / "gemma3-tiny.gguf"), max_seqs=1, n_threads=1) as llm:
        want = llm.chat([{"role": "user", "content": [file_part(str(folder / "picture.png")),
                                                      {"type": "text", "text": QUESTION}]}],
                        SamplingParams(temperature=0, max_tokens=MAX_TOKENS)).text
    gen = start_app(xserver, folder / "gemma3-tiny.gguf", tmp_path, threads=1, max_tokens=MAX_TOKENS)
    app = next(gen)
    try:
        app.click("load")
        s = app.wait(lambda s: s["loaded"], "the model to load")
        assert s["widgets"]["image"]["enabled"]  # the projector beside it was found
        app.click("image")
        app.xdotool("sleep", "1", "type", "--delay", "5", str(folder / "picture.png"))
        app.xdotool("key", "Return")
        s = app.wait(lambda s: s["images"] == [str(folder / "picture.png")], "the image to attach")
        assert "Attached picture.png" in s["status"]
        app.type_and_send(QUESTION)
        s = app.wait(lambda s: not s["generating"] and s["messages"] == 2, "the answer")
        assert f"You: [picture.png] {QUESTION}" in s["transcript"] and s["images"] == []
        assert s["transcript"].split("Assistant: ", 1)[1].strip() == want.strip()
        assert s["stats"]["images_encoded"] == 1
    finally:
        gen.close()
