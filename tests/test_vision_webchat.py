"""The web chat page with images, in a real headless Chromium (Playwright, as
tests/test_webchat_browser.py drives it), against `edgellm serve` on the tiny Gemma 3 fixture with
its projector: an image attached with the Image button and one pasted into the message each go with
their question, and the answers are the model's greedy answers to the same content parts (checked
against transformers in tests/test_vision.py). A screenshot goes to $EDGELLM_ARTIFACTS (else the
test's tmp_path); docs/images/webchat-image.png is one such."""
import base64
import os

import pytest

from test_webchat_browser import (artifacts, assert_clean, browser, last_answer, page, set_settings,  # noqa: F401
                                  stored_chats, wait_until)

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
from edgellm.sampling_params import SamplingParams  # noqa: E402
from test_vision import DATA, MMPROJ, MODEL, QUESTIONS, _server, messages  # noqa: E402

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def server():
    s = _server(MODEL, mmproj=MMPROJ, webui=True)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def answers():
    """The greedy 8-token chat answers to messages(0) and messages(1), in process."""
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=1, max_seqs=1) as m:
        return [m.chat(messages(i), SamplingParams(temperature=0, max_tokens=8)).text.strip() for i in (0, 1)]


def _answered(page, n: int):
    wait_until(page, f"document.querySelectorAll('.message.assistant[data-state=\"done\"]').length === {n}")


def test_attach_and_paste_an_image(page, server, answers, artifacts):  # noqa: F811
    from playwright.sync_api import expect

    page.goto(server.url + "/")
    expect(page.locator("#attach")).to_be_visible(timeout=20_000)  # the model takes images
    set_settings(page, temperature=0, max_tokens=8)
    # the Image button: a file chosen shows as a thumbnail, then goes with the question
    page.set_input_files("#image-file", os.path.join(DATA, "image0.png"))
    expect(page.locator("#attachments img.thumb")).to_have_count(1)
    page.fill("#input", QUESTIONS[0])
    page.press("#input", "Enter")
    _answered(page, 1)
    assert last_answer(page).locator(".body").inner_text().strip() == answers[0]
    expect(page.locator("#attachments img.thumb")).to_have_count(0)  # sent: the composer is empty
    expect(page.locator(".message.user img.thumb")).to_have_count(1)
    page.screenshot(path=str(artifacts / "webchat-image.png"))
    # a pasted image (a screenshot from the clipboard) is attached the same way
    with open(os.path.join(DATA, "image1.png"), "rb") as f:
        b64 = base64.b64encode(f.read()).decode()
    page.click("#new-chat")
    page.evaluate("""(b64) => {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], 'pasted.png', {type: 'image/png'}));
        document.getElementById('input').dispatchEvent(
            new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));
    }""", b64)
    expect(page.locator("#attachments img.thumb")).to_have_count(1)
    page.fill("#input", QUESTIONS[1])
    page.press("#input", "Enter")
    _answered(page, 1)
    assert last_answer(page).locator(".body").inner_text().strip() == answers[1]
    chats = stored_chats(page)  # the images are kept with their messages
    assert sorted(len(c["messages"][0].get("images", [])) for c in chats) == [1, 1]
    assert_clean(page)


def test_no_image_button_for_a_text_only_model(page, tmp_path):  # noqa: F811
    import shutil

    from playwright.sync_api import expect

    shutil.copy(MODEL, tmp_path / "m.gguf")
    s = _server(str(tmp_path / "m.gguf"), webui=True)
    try:
        page.goto(s.url + "/")
        expect(page.locator("#model-name")).to_have_text("m.gguf", timeout=20_000)
        expect(page.locator("#attach")).to_be_hidden()
        assert_clean(page)
    finally:
        s.stop()
