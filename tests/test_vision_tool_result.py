"""Images inside Anthropic `tool_result` blocks (a screenshot tool's answer), with the `anthropic`
client: each image block goes through the one converter every API's images take
(vision.image_part) into the `role: tool` message's content parts, in order with its text; the
answer equals LLM.chat on the same conversation in OpenAI's form. On the tiny Qwen2.5-VL fixture,
whose template renders image parts in any role's message (as Qwen2.5-VL's own does)."""
import base64
import os

import pytest

edgellm = pytest.importorskip("edgellm")
pytest.importorskip("PIL")
anthropic = pytest.importorskip("anthropic")
from edgellm.sampling_params import SamplingParams  # noqa: E402
from test_vision import DATA, _server, data_uri  # noqa: E402

MODEL = os.path.join(DATA, "qwen25vl-tiny.gguf")
MMPROJ = os.path.join(DATA, "mmproj-qwen25vl-tiny.gguf")


def png(i):
    with open(os.path.join(DATA, f"qwen25vl_image{i}.png"), "rb") as f:
        return f.read()


def image_block(i):
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                        "data": base64.b64encode(png(i)).decode()}}


def anthropic_turns(i, is_error=False):
    return [{"role": "user", "content": "Take a screenshot."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "screenshot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": is_error,
                                          "content": [{"type": "text", "text": "Here it is."}, image_block(i)]},
                                         {"type": "text", "text": "What do you see?"}]}]


def openai_turns(i, is_error=False):
    """The same conversation as LLM.chat takes it: the tool's image as an image_url part."""
    return [{"role": "user", "content": "Take a screenshot."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t1", "name": "screenshot", "content":
                ([{"type": "text", "text": "Error: "}] if is_error else [])
                + [{"type": "text", "text": "Here it is."}, {"type": "image_url", "image_url": {"url": data_uri(png(i))}}]},
            {"role": "user", "content": "What do you see?"}]


@pytest.fixture(scope="module")
def server():
    s = _server(MODEL, mmproj=MMPROJ)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def llm():
    with edgellm.LLM(MODEL, mmproj=MMPROJ, n_ctx=256, n_threads=2, max_seqs=1) as m:
        yield m


@pytest.mark.parametrize("is_error", [False, True])
def test_tool_result_images_reach_the_model(server, llm, is_error):
    c = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0)
    for i in (0, 2):
        ids = llm.chat_renderer.request(openai_turns(i, is_error), None, None, None, None, None)[0]
        assert len(ids.images) == 1  # the tool's image is in the prompt, its block of tokens with it
        n_image = ids.images[0][2].shape[0]
        want = llm.chat(openai_turns(i, is_error), SamplingParams(temperature=0, max_tokens=8))
        m = c.messages.create(model="m", max_tokens=8, messages=anthropic_turns(i, is_error),
                              extra_body={"temperature": 0})
        assert m.content[0].text == want.text
        assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) == len(ids)
        n = c.messages.count_tokens(model="m", messages=anthropic_turns(i, is_error)).input_tokens
        assert n == len(ids) and n_image >= 4
        text_only = [dict(t) for t in anthropic_turns(i, is_error)]
        text_only[2] = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": is_error,
                                                     "content": [{"type": "text", "text": "Here it is."}]},
                                                    {"type": "text", "text": "What do you see?"}]}
        # the image's tokens, less the one placeholder the template wrote for it, plus its two markers
        assert n - c.messages.count_tokens(model="m", messages=text_only).input_tokens == n_image + 2


def test_a_bad_image_in_a_tool_result_is_a_400(server):
    c = anthropic.Anthropic(base_url=server.url, api_key="none", max_retries=0)
    turns = anthropic_turns(0)
    turns[2]["content"][0]["content"][1]["source"]["data"] = "AAAA"
    with pytest.raises(anthropic.BadRequestError, match="image format not recognised"):
        c.messages.create(model="m", max_tokens=1, messages=turns)
    turns = anthropic_turns(0)
    turns[2]["content"][0]["content"].append({"type": "tool_use", "id": "x", "name": "y", "input": {}})
    with pytest.raises(anthropic.BadRequestError, match="only text and image blocks are allowed in a tool_result"):
        c.messages.create(model="m", max_tokens=1, messages=turns)


def test_tool_result_image_to_a_text_only_model(tmp_path):
    import shutil
    shutil.copy(MODEL, tmp_path / "model.gguf")  # without its projector beside it
    s = _server(str(tmp_path / "model.gguf"))
    try:
        c = anthropic.Anthropic(base_url=s.url, api_key="none", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="image blocks are not supported: this model takes text only"):
            c.messages.create(model="m", max_tokens=1, messages=anthropic_turns(0))
    finally:
        s.stop()
