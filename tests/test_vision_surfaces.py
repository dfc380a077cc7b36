"""Images through every API of `edgellm serve`, with the real clients where there are some (the
`openai` SDK's Responses API, the `anthropic` SDK, the `ollama` client), on the tiny Gemma 3
fixture (tests/data/vision/make_vision_fixtures.py): each answer equals transformers' greedy tokens
(test_vision.py's references); a model without its projector, a bad image and a wrong media marker
are 400s naming the problem."""
import base64
import os
import shutil

import httpx
import numpy as np
import pytest

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
from edgellm import vision  # noqa: E402
from edgellm.sampling_params import SamplingParams  # noqa: E402
from test_vision import (DATA, LOGPROB_TOL, MMPROJ, MODEL, QUESTIONS, _server, data_uri,  # noqa: E402
                         messages, png)

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")


@pytest.fixture(scope="module")
def ref():
    return np.load(os.path.join(DATA, "gemma3.npz"))


@pytest.fixture(scope="module")
def server():
    s = _server(MODEL, mmproj=MMPROJ)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def text_only(tmp_path_factory):
    d = tmp_path_factory.mktemp("textonly")
    shutil.copy(MODEL, d / "model.gguf")  # without its projector beside it
    s = _server(str(d / "model.gguf"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tok():
    """The fixture with its projector, in process: token texts, the template, the engine's answers."""
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=1, max_seqs=1) as m:
        yield m


def want_text(tok, ref, i) -> str:
    """The chat answer to messages(i): transformers' 8 greedy tokens (test_vision checks that
    LLM.chat gives them), as chat APIs show them (control tokens left out)."""
    out = tok.chat(messages(i), SamplingParams(temperature=0, max_tokens=8))
    assert [t for t in out.token_ids] == ref[f"greedy_{i}"].tolist()
    return out.text


def b64(i: int) -> str:
    return base64.b64encode(png(i)).decode()


# ---- what the server says it takes -----------------------------------------------------------

def test_models_and_props_say_the_model_takes_images(server, text_only):
    body = httpx.get(server.url + "/v1/models").json()
    assert body["models"][0]["capabilities"] == ["completion", "multimodal"]  # llama-server's list
    meta = body["data"][0]["meta"]
    assert meta["modalities"] == ["text", "image"] and meta["mmproj"] == MMPROJ
    props = httpx.get(server.url + "/props").json()
    assert props["modalities"]["vision"] is True and props["media_marker"] == vision.MEDIA_MARKER
    body = httpx.get(text_only.url + "/v1/models").json()
    assert body["models"][0]["capabilities"] == ["completion"] and "modalities" not in body["data"][0]["meta"]
    props = httpx.get(text_only.url + "/props").json()
    assert props["modalities"]["vision"] is False and props["media_marker"] == ""


# ---- the Responses API: input_image ----------------------------------------------------------

def test_responses_input_image_matches_transformers(server, tok, ref):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    for i in range(3):
        r = c.responses.create(model="m", temperature=0, max_output_tokens=8, input=[
            {"role": "user", "content": [{"type": "input_image", "image_url": data_uri(png(i)), "detail": "auto"},
                                         {"type": "input_text", "text": QUESTIONS[i]}]}])
        assert r.output_text == want_text(tok, ref, i)
        assert r.usage.input_tokens == len(ref[f"ids_{i}"])  # the image's block counted
    with pytest.raises(openai.BadRequestError, match="image"):
        c.responses.create(model="m", max_output_tokens=1, input=[
            {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
    with pytest.raises(openai.BadRequestError, match="file_id"):
        c.responses.create(model="m", max_output_tokens=1, input=[
            {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}])


def test_responses_input_image_to_a_text_only_model(text_only):
    c = openai.OpenAI(base_url=text_only.url + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.create(model="m", max_output_tokens=1, input=[
            {"role": "user", "content": [{"type": "input_image", "image_url": data_uri(png(0))}]}])
    err = info.value.body
    assert err["param"] == "input[0].content[0].type" and "text only" in err["message"]


# ---- Anthropic: image blocks -------------------------------------------------------------------

def _image_block(i: int) -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(i)}}


def test_anthropic_image_blocks_match_transformers(server, tok, ref):
    c = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0)
    for i in range(3):
        msgs = [{"role": "user", "content": [_image_block(i), {"type": "text", "text": QUESTIONS[i]}]}]
        m = c.messages.create(model="m", max_tokens=8, messages=msgs, extra_body={"temperature": 0})
        assert m.content[0].text == want_text(tok, ref, i)
        assert m.usage.input_tokens + m.usage.cache_read_input_tokens == len(ref[f"ids_{i}"])
        assert c.messages.count_tokens(model="m", messages=msgs).input_tokens == len(ref[f"ids_{i}"])
    with pytest.raises(anthropic.BadRequestError, match="image"):
        c.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
    # a url source is read under the same media rules as any image URL: no fetch unless allowed
    with pytest.raises(anthropic.BadRequestError, match="allow-remote-media"):
        c.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}])
    with pytest.raises(anthropic.BadRequestError, match="'base64' or 'url'"):
        c.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "file", "file_id": "f"}}]}])


def test_anthropic_image_to_a_text_only_model(text_only):
    c = anthropic.Anthropic(base_url=text_only.url, api_key="none", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="image blocks are not supported: this model takes text only"):
        c.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": [_image_block(0)]}])


# ---- llama.cpp's /completion: multimodal_data at the media markers -----------------------------

def _raw_prompt(tok, i: int) -> str:
    """The chat template's rendering of messages(i) with the image at llama.cpp's media marker
    (and no BOS text: /completion adds the model's BOS as llama-server does)."""
    msgs, _ = tok.chat_renderer.vision.messages_for_template(messages(i))
    text = tok.chat_renderer.apply(msgs, True, None, None, None)
    bos = tok.token_to_piece(tok.tokenize("", add_special=True)[0]).decode()
    assert text.startswith(bos)
    return text[len(bos):].replace("<start_of_image>", vision.MEDIA_MARKER)


def test_completion_multimodal_data_matches_transformers(server, tok, ref):
    for i in range(3):
        prompt = {"prompt_string": _raw_prompt(tok, i), "multimodal_data": [b64(i)]}
        r = httpx.post(server.url + "/completion", timeout=120, json={
            "prompt": prompt, "n_predict": 8, "temperature": 0, "n_probs": 5, "return_tokens": True})
        assert r.status_code == 200, r.text
        b = r.json()
        assert b["tokens"] == ref[f"greedy_{i}"].tolist()
        assert b["tokens_evaluated"] == len(ref[f"ids_{i}"])
        lp = ref[f"logprobs_{i}"]
        first = b["completion_probabilities"][0]["top_logprobs"]
        assert {t["id"] for t in first} == set(np.argsort(-lp)[:5].tolist())
        assert all(abs(t["logprob"] - float(lp[t["id"]])) <= LOGPROB_TOL for t in first)
    # several prompts, one of them with an image, in one request
    r = httpx.post(server.url + "/completion", timeout=120, json={"n_predict": 2, "temperature": 0, "prompt": [
        "Hello", {"prompt_string": _raw_prompt(tok, 0), "multimodal_data": [b64(0)]}]})
    assert r.status_code == 200 and len(r.json()) == 2


@pytest.mark.parametrize("prompt, match", [
    ({"prompt_string": "no marker here", "multimodal_data": ["AAAA"]}, "0 media markers"),
    ({"prompt_string": "<__media__><__media__>", "multimodal_data": ["AAAA"]}, "2 media markers"),
    ({"prompt_string": "<__media__>", "multimodal_data": ["AAAA"]}, "image"),
    ({"prompt_string": "<__media__>", "multimodal_data": "AAAA"}, "array of base64 strings"),
    ({"prompt_string": "<__media__>", "multimodal_data": [7]}, "base64 image data"),
    ({"prompt_string": ["a", "<__media__>"], "multimodal_data": ["AAAA"]}, "must be a string"),
])
def test_completion_multimodal_data_errors(server, prompt, match):
    r = httpx.post(server.url + "/completion", timeout=60, json={"prompt": prompt, "n_predict": 1})
    assert r.status_code == 400 and match in r.json()["error"]["message"], r.text


def test_completion_multimodal_data_to_a_text_only_model(text_only):
    r = httpx.post(text_only.url + "/completion", timeout=60, json={
        "prompt": {"prompt_string": "<__media__>", "multimodal_data": [b64(0)]}, "n_predict": 1})
    assert r.status_code == 400 and "takes no images" in r.json()["error"]["message"]


# ---- Ollama: images ---------------------------------------------------------------------------

def test_ollama_images(server, tok):
    """Ollama's `images` in /api/chat and /api/generate, by the ollama client: the answer is the
    engine's for the same content parts (Ollama's images, then its message text)."""
    ollama = pytest.importorskip("ollama")
    c = ollama.Client(host=server.url)
    parts = [{"type": "image_url", "image_url": {"url": data_uri(png(0))}}, {"type": "text", "text": QUESTIONS[0]}]
    want = tok.chat([{"role": "user", "content": parts}],
                               SamplingParams(temperature=0, max_tokens=6)).text
    r = c.chat(model="m", messages=[{"role": "user", "content": QUESTIONS[0], "images": [png(0)]}],
               options={"temperature": 0, "num_predict": 6})
    assert r.message.content == want
    r = c.generate(model="m", prompt=QUESTIONS[0], images=[png(0)], options={"temperature": 0, "num_predict": 6})
    assert r.response == want
