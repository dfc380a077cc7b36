"""The web chat page (server/webui/) in a real headless Chromium, driven by Playwright, against
`edgellm serve` on SmolLM2 with an API key: the key asked for once and remembered, an answer
seen growing in the DOM as it streams (and equal to the same greedy request answered without
streaming), the stop button aborting a long answer (the partial text kept, the server's
request gone), conversations found again after a reload and deleted, a real tool call by
Qwen2.5-Coder shown; the rendering of hostile model output, markdown, tool calls and the
speculative-decoding timing line from canned streams.

Skips with its reason when Playwright or Chromium is missing, unless EDGELLM_REQUIRE_BROWSER=1
(CI). Screenshots go to $EDGELLM_ARTIFACTS (else the test's tmp_path).
"""
import json
import os
import shutil
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

KEY = "webchat-key"
# Debian's chromium (CI installs it), else a preinstalled Chrome; EDGELLM_CHROMIUM names another
CHROMIUM = os.environ.get("EDGELLM_CHROMIUM") or next(
    (p for p in map(shutil.which, ("chromium", "google-chrome", "google-chrome-stable")) if p),
    "/usr/bin/chromium")


def _no_browser(reason: str):
    if os.environ.get("EDGELLM_REQUIRE_BROWSER", "") not in ("", "0"):
        pytest.fail(f"{reason} (EDGELLM_REQUIRE_BROWSER=1 forbids skipping)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _no_browser("playwright is not installed: pip install playwright (the `test` extra)")
    if not os.path.isfile(CHROMIUM):
        _no_browser(f"no Chromium found (looked for chromium, google-chrome and {CHROMIUM}): "
                    "apt-get install chromium, or set EDGELLM_CHROMIUM")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def server(smollm2_path):
    from test_server import ServerProcess  # the real `edgellm serve` as a subprocess

    s = ServerProcess(smollm2_path, "--ctx-size", "2048", "--parallel", "2", "--alias", "smol",
                      api_key=KEY)
    try:
        yield s.wait_ready()
    finally:
        s.stop()


@pytest.fixture
def artifacts(tmp_path) -> Path:
    out = Path(os.environ.get("EDGELLM_ARTIFACTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
def page(browser):  # listed before `server` by the tests, so a missing browser skips at once
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    # what the page's Content-Security-Policy blocked, should it ever block something it needs
    context.add_init_script("window.__csp = []; document.addEventListener("
                            "'securitypolicyviolation', e => window.__csp.push("
                            "e.violatedDirective + ' ' + e.blockedURI));")
    pg = context.new_page()
    pg.errors = []
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    try:
        yield pg
    finally:
        context.close()


def assert_clean(page) -> None:
    """No uncaught script error and nothing blocked by the page's CSP."""
    assert page.errors == []
    assert page.evaluate("window.__csp") == []


def stored_chats(page) -> list:
    return json.loads(page.evaluate("localStorage.getItem('edgellm.chats.v1')"))["chats"]


def record_growth(page) -> None:
    """From now on, window.__growth lists the last answer's text length after every change."""
    page.evaluate("""() => {
        window.__growth = [];
        new MutationObserver(() => {
            const answers = document.querySelectorAll('.message.assistant .body');
            const last = answers[answers.length - 1];
            if (last) window.__growth.push(last.textContent.length);
        }).observe(document.getElementById('messages'),
                   {childList: true, subtree: true, characterData: true});
    }""")


def set_settings(page, **fields) -> None:
    if page.locator("#settings").is_hidden():
        page.click("#settings-toggle")
    for name, value in fields.items():
        page.fill(f"#{name}", str(value))
    page.click("#settings-toggle")


def ask(page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def last_answer(page):
    return page.locator(".message.assistant").last


def wait_model_name(page, name="smol"):
    from playwright.sync_api import expect

    expect(page.locator("#model-name")).to_have_text(name, timeout=10_000)


def wait_until(page, condition: str, timeout=120.0):
    """Polls `condition` with page.evaluate (the page's CSP forbids the string evaluation
    that Playwright's wait_for_function does in the page)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(condition):
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        time.sleep(0.02)


def engine_metrics(server) -> dict:
    return server.metrics()


def test_chat_stream_stop_reload_and_key(page, server, artifacts):
    # --- the key: asked once (the page's first API call is refused), then remembered
    page.goto(server.url + "/")
    page.wait_for_selector("#key-dialog[open]", timeout=10_000)
    page.fill("#key-input", KEY)
    page.click("#key-save")
    wait_model_name(page)
    assert page.evaluate("localStorage.getItem('edgellm.apiKey')") == KEY
    assert page.locator("#model-picker").is_hidden()  # one model: no picker

    # --- a streamed answer, seen growing
    question = "Write a Python function that adds two numbers."
    set_settings(page, temperature=0, max_tokens=60, seed=7)
    record_growth(page)
    ask(page, question)
    page.wait_for_selector(".message.assistant[data-state=done]", timeout=120_000)
    growth = page.evaluate("window.__growth")
    answer = stored_chats(page)[0]["messages"][1]
    assert answer["content"].strip(), answer
    distinct = sorted(set(growth))
    assert len(distinct) >= 4, f"the answer did not arrive in pieces: {growth}"
    assert growth.index(distinct[1]) < growth.index(distinct[-1])  # it grew over time
    meta = last_answer(page).locator(".meta").inner_text()
    assert "prompt" in meta and "answer" in meta and "t/s" in meta, meta
    assert answer["timings"]["predicted_n"] == answer["usage"]["completion_tokens"]
    page.screenshot(path=str(artifacts / "webchat-answer.png"))

    # the SSE parsing lost nothing: the same greedy request, not streamed, says the same
    r = server.post("/v1/chat/completions", {
        "model": "smol", "messages": [{"role": "user", "content": question}],
        "temperature": 0, "top_p": 0.95, "max_tokens": 60, "seed": 7})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == answer["content"]

    # --- stop mid-answer: partial text kept, buttons back, the server's request gone
    before = engine_metrics(server)
    aborted_before = before.get('edgellm_requests_total{endpoint="chat",status="499"}', 0)
    page.click("#new-chat")
    set_settings(page, max_tokens=1500)
    ask(page, "Tell a very long story about a dragon baking bread.")
    page.wait_for_selector(".message.assistant[data-state=streaming]")
    wait_until(page, "document.querySelector('.message.assistant .body').textContent.length > 80")
    assert engine_metrics(server)["edgellm_requests_running"] == 1
    assert page.locator("#send").is_disabled() and page.locator("#stop").is_enabled()
    page.click("#stop")
    page.wait_for_selector(".message.assistant[data-state=stopped]", timeout=10_000)
    assert page.locator("#stop").is_disabled() and page.locator("#send").is_enabled()
    partial = last_answer(page).locator(".body").inner_text()
    assert len(partial) > 80
    assert "stopped" in last_answer(page).locator(".meta").inner_text()
    m = wait_idle(server)
    assert m.get('edgellm_requests_total{endpoint="chat",status="499"}', 0) == aborted_before + 1
    generated = m["edgellm_generation_tokens_total"]
    time.sleep(0.5)
    assert engine_metrics(server)["edgellm_generation_tokens_total"] == generated  # nothing runs
    assert last_answer(page).locator(".body").inner_text() == partial  # and nothing more came

    # --- reload: both conversations listed, the key not asked again, the partial answer kept
    page.reload()
    wait_model_name(page)
    assert not page.locator("#key-dialog").evaluate("d => d.open")
    titles = page.locator("#chats .chat-title").all_inner_texts()
    assert titles == ["Tell a very long story about a dragon baking bread.",
                      question]
    assert last_answer(page).get_attribute("data-state") == "stopped"
    assert last_answer(page).locator(".body").inner_text() == partial
    page.locator("#chats .chat-title", has_text=question).click()
    assert last_answer(page).locator(".body").inner_text().strip()
    assert page.locator(".message.user .body").inner_text() == question
    page.screenshot(path=str(artifacts / "webchat.png"))

    # --- delete one; it stays deleted after a reload
    dragon = page.locator("#chats li", has_text="dragon")
    dragon.hover()  # the delete button shows on hover
    dragon.locator(".chat-delete").click()
    assert page.locator("#chats .chat-title").all_inner_texts() == [question]
    page.reload()
    page.wait_for_selector("#chats li")
    assert page.locator("#chats .chat-title").all_inner_texts() == [question]
    assert_clean(page)


def test_wrong_saved_key_is_asked_again(page, server):
    page.goto(server.url + "/")
    page.evaluate("localStorage.setItem('edgellm.apiKey', 'not-the-key')")
    page.reload()
    page.wait_for_selector("#key-dialog[open]", timeout=10_000)
    assert "refused" in page.inner_text("#key-reason")
    page.fill("#key-input", KEY)
    page.click("#key-save")
    wait_model_name(page)
    assert page.evaluate("localStorage.getItem('edgellm.apiKey')") == KEY
    assert_clean(page)


HOSTILE = ("<img src=x onerror=\"window.__pwned=1\"> <script>window.__pwned=2</script> "
           "[click](javascript:window.__pwned=3) [ok](https://example.com/?a=1&b=\"2\") "
           "<a href=\"javascript:window.__pwned=4\">x</a> `<b>code</b>` **<i>bold</i>**\n\n"
           "```html\n<script>window.__pwned=5</script>\n```\n\n"
           "![i](https://example.com/x.png\" onerror=\"window.__pwned=6)\n"
           "| <svg onload=window.__pwned=7> | b |\n|---|---|\n| 1 | 2 |\n")


def canned_stream(events) -> str:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def chunk(delta=None, finish=None, **extra) -> dict:
    return {"object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}


def test_model_output_is_rendered_as_text_never_as_html(page, server):
    # the hostile text arrives as streamed deltas, cut at awkward places, as a model's would
    pieces = [HOSTILE[i:i + 7] for i in range(0, len(HOSTILE), 7)]
    body = canned_stream([chunk({"role": "assistant", "content": None})] +
                         [chunk({"content": p}) for p in pieces] + [chunk(finish="stop")])
    page.route("**/v1/chat/completions", lambda route: route.fulfill(
        status=200, headers={"Content-Type": "text/event-stream"}, body=body))
    page.goto(server.url + "/")
    page.evaluate(f"localStorage.setItem('edgellm.apiKey', {json.dumps(KEY)})")
    page.reload()
    ask(page, "<img src=x onerror=\"window.__pwned=8\">")
    page.wait_for_selector(".message.assistant[data-state=done]")
    page.reload()  # and rendered again from localStorage
    page.wait_for_selector(".message.assistant[data-state=done]")
    body_el = last_answer(page).locator(".body")
    assert page.evaluate("window.__pwned") is None
    assert body_el.locator("script, img, svg, iframe").count() == 0
    hrefs = body_el.locator("a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert hrefs == ['https://example.com/?a=1&b="2"', "https://example.com/x.png"]
    handlers = page.evaluate("""() => [...document.querySelectorAll('#messages *')]
        .flatMap(e => [...e.attributes].map(a => a.name)).filter(n => n.startsWith('on'))""")
    assert handlers == []
    text = body_el.inner_text()
    assert "<script>window.__pwned=2</script>" in text and "<b>code</b>" in text
    assert body_el.locator("code", has_text="<b>code</b>").count() == 1
    assert body_el.locator("strong", has_text="<i>bold</i>").count() == 1
    assert page.locator(".message.user .body").inner_text() == "<img src=x onerror=\"window.__pwned=8\">"
    assert_clean(page)


def test_markdown_code_tool_calls_and_speculative_timings(page, server, artifacts):
    md = ("## Plan\n\n1. **first** step\n2. *second* with `x = 1`\n   - nested\n\n"
          "```python\ndef add(a, b):\n    # sum\n    return a + 2  # \"two\"\n```\n")
    calls = [{"index": 0, "id": "call_1", "type": "function",
              "function": {"name": "get_weather", "arguments": ""}}]
    timings = {"prompt_n": 12, "prompt_ms": 40.0, "prompt_per_second": 300.0,
               "predicted_n": 20, "predicted_ms": 800.0, "predicted_per_second": 23.75,
               "draft_n": 16, "draft_n_accepted": 12}
    events = [chunk({"role": "assistant", "content": None})]
    events += [chunk({"content": md[i:i + 5]}) for i in range(0, len(md), 5)]
    events += [chunk({"tool_calls": calls}),
               chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
               chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
               chunk(finish="tool_calls", timings=timings),
               {"object": "chat.completion.chunk", "choices": [],
                "usage": {"prompt_tokens": 12, "completion_tokens": 20, "total_tokens": 32},
                "timings": timings}]
    seen = []

    def fulfill(route):
        seen.append(json.loads(route.request.post_data))
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"},
                      body=canned_stream(events))

    page.route("**/v1/chat/completions", fulfill)
    page.goto(server.url + "/")
    page.evaluate(f"localStorage.setItem('edgellm.apiKey', {json.dumps(KEY)})")
    page.reload()
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    set_settings(page, system="Be brief.", temperature=0.3, top_p=0.9, max_tokens=77, seed=5,
                 tools=json.dumps(tools))
    page.click("#settings-toggle")
    page.check("#show_speculative")  # the statistics are shown when asked for
    page.click("#settings-toggle")
    ask(page, "Weather in Paris?")
    page.wait_for_selector(".message.assistant[data-state=done]")

    sent = seen[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Weather in Paris?"}]
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"], sent["seed"]) == \
        (0.3, 0.9, 77, 5)
    assert sent["tools"] == tools and sent["model"] == "smol"
    assert page.evaluate("navigator.userAgent")  # a real browser ran this

    a = last_answer(page)
    assert a.locator("h2").inner_text() == "Plan"
    assert a.locator("ol > li").count() == 2 and a.locator("ol li ul li").inner_text() == "nested"
    assert a.locator("ol strong").inner_text() == "first"
    assert a.locator("pre code.language-python .tok-keyword").all_inner_texts() == ["def", "return"]
    assert a.locator(".tok-comment").all_inner_texts() == ["# sum", '# "two"']
    assert a.locator(".tok-number").all_inner_texts() == ["2"]
    assert a.locator(".tool-name").inner_text().startswith("tool call: get_weather")
    assert json.loads(a.locator(".tool-call pre").inner_text()) == {"city": "Paris"}
    meta = a.locator(".meta").inner_text()
    assert meta == ("prompt 12 tokens, 300 t/s · answer 20 tokens, 23.8 t/s · "
                    "speculative 12/16 accepted (75%)"), meta
    page.screenshot(path=str(artifacts / "webchat-render.png"))

    # a settings value the server would refuse is caught by the page, named
    set_settings(page, temperature=-1, tools="")
    ask(page, "again")
    page.wait_for_selector(".message.assistant[data-state=error]")
    assert "temperature" in last_answer(page).locator(".error").inner_text()
    assert len(seen) == 1
    assert_clean(page)


def test_model_picker_lists_every_served_model(page, server):
    listing = {"object": "list", "data": [{"id": "smol", "object": "model"},
                                          {"id": "other", "object": "model"}]}
    page.route("**/v1/models", lambda route: route.fulfill(
        status=200, headers={"Content-Type": "application/json"}, body=json.dumps(listing)))
    seen = []

    def fulfill(route):
        seen.append(json.loads(route.request.post_data)["model"])
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"},
                      body=canned_stream([chunk({"content": "hi"}), chunk(finish="stop")]))

    page.route("**/v1/chat/completions", fulfill)
    page.goto(server.url + "/")
    page.wait_for_selector("#model-picker:not([hidden])")
    assert page.locator("#model option").all_inner_texts() == ["smol", "other"]
    page.select_option("#model", "other")
    ask(page, "hello")
    page.wait_for_selector(".message.assistant[data-state=done]")
    assert seen == ["other"]
    page.reload()  # the pick is remembered
    page.wait_for_selector("#model-picker:not([hidden])")
    assert page.locator("#model").input_value() == "other"
    assert_clean(page)


def test_page_waits_while_the_model_loads(page, server):
    from playwright.sync_api import expect

    answers = []

    def models(route):  # the first listing says "loading" (503), as a server starting up does
        answers.append(503 if not answers else 200)
        if answers[-1] == 503:
            route.fulfill(status=503, headers={"Content-Type": "application/json",
                                               "Retry-After": "1"},
                          body=json.dumps({"error": {"message": "loading", "type": "x"}}))
        else:
            route.continue_()

    page.context.add_init_script(f"localStorage.setItem('edgellm.apiKey', {json.dumps(KEY)})")
    page.route("**/v1/models", models)
    page.goto(server.url + "/")
    expect(page.locator("#status")).to_have_text("the model is loading…")
    wait_model_name(page)
    expect(page.locator("#status")).to_have_text("")
    assert answers == [503, 200]
    assert_clean(page)


def wait_idle(server, timeout=15.0) -> dict:
    """The server's metrics once no request runs (the page's request was aborted)."""
    deadline = time.monotonic() + timeout
    while True:
        m = engine_metrics(server)
        if m["edgellm_requests_running"] == 0 and m["edgellm_http_requests_active"] == 0:
            return m
        assert time.monotonic() < deadline, f"a request still runs on the server: {m}"
        time.sleep(0.1)


def test_reload_or_delete_mid_answer(page, server):
    page.context.add_init_script(f"localStorage.setItem('edgellm.apiKey', {json.dumps(KEY)})")
    page.goto(server.url + "/")
    wait_model_name(page)
    set_settings(page, temperature=0, max_tokens=1500)

    # a reload mid-answer: the request ends, the answer keeps what had been saved, as stopped
    ask(page, "Tell a very long story about a cat.")
    wait_until(page, "document.querySelector('.message.assistant .body').textContent.length > 80")
    time.sleep(1.2)  # the page saves a streaming answer about once a second
    page.reload()
    wait_model_name(page)
    assert last_answer(page).get_attribute("data-state") == "stopped"
    assert len(last_answer(page).locator(".body").inner_text()) > 20
    assert "stopped" in last_answer(page).locator(".meta").inner_text()
    wait_idle(server)

    # deleting the conversation being answered aborts the answer and it stays deleted
    page.click("#new-chat")
    ask(page, "Tell a very long story about a fox.")
    wait_until(page, "document.querySelector('.message.assistant .body') && "
                     "document.querySelector('.message.assistant .body').textContent.length > 40")
    fox = page.locator("#chats li", has_text="fox")
    fox.hover()
    fox.locator(".chat-delete").click()
    wait_idle(server)
    assert page.locator("#chats .chat-title").all_inner_texts() == [
        "Tell a very long story about a cat."]
    assert page.locator("#stop").is_disabled() and page.locator("#send").is_enabled()
    page.reload()
    page.wait_for_selector("#chats li")
    assert page.locator("#chats .chat-title").all_inner_texts() == [
        "Tell a very long story about a cat."]
    assert_clean(page)


WEATHER_TOOL = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"]}}}]


@pytest.fixture(scope="module")
def qwen_server(qwen_path):
    from test_server import ServerProcess

    s = ServerProcess(qwen_path, "--ctx-size", "2048", "--parallel", "1", api_key=KEY)
    try:
        yield s.wait_ready()
    finally:
        s.stop()


def test_a_real_tool_call_is_shown(page, qwen_server, qwen_path, artifacts):
    # Qwen2.5-Coder calls the tool on its own (tool_choice auto), as tests/test_server_tools.py
    # checks through the API; here the page sends the tools from its settings and shows the call
    page.context.add_init_script(f"localStorage.setItem('edgellm.apiKey', {json.dumps(KEY)})")
    page.goto(qwen_server.url + "/")
    wait_model_name(page, qwen_path.name)  # no --alias: the file's name
    set_settings(page, temperature=0, max_tokens=100, tools=json.dumps(WEATHER_TOOL))
    ask(page, "What will the weather be in Paris for the next 3 days?")
    page.wait_for_selector(".message.assistant[data-state=done]", timeout=120_000)
    a = last_answer(page)
    assert a.locator(".tool-name").inner_text().startswith("tool call: get_weather")
    args = json.loads(a.locator(".tool-call pre").inner_text())
    assert args["city"] == "Paris", args
    stored = stored_chats(page)[0]["messages"][1]
    assert stored["finish_reason"] == "tool_calls"
    assert stored["tool_calls"][0]["id"].startswith("call_")
    page.screenshot(path=str(artifacts / "webchat-tool-call.png"))
    assert_clean(page)
