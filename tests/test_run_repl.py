"""The `edgellm run` REPL logic against a fake LLM: input assembly, commands, history,
context trimming, interruption, save/load and output. (test_run_pty.py drives the real
program with SmolLM2 through a pseudo-terminal.)"""
import io
import json
import re

import pytest

edgellm = pytest.importorskip("edgellm", reason="needs the built extension (EDGELLM_BUILD_DIR)")

from edgellm import CompletionChunk, SamplingParams, Usage  # noqa: E402
from edgellm.repl import Conversation, Parameters, ParameterError, Renderer, ReplApp, read_message  # noqa: E402
from edgellm.repl.app import answer_once, answer_reserve  # noqa: E402
from edgellm.repl.conversation import ContextOverflow, ConversationFileError  # noqa: E402
from edgellm.repl.input import LineReader  # noqa: E402
from edgellm.repl.render import format_duration, timing_line, verbose_block  # noqa: E402

ANSI = re.compile(r"\x1b\[")


# ---- fakes -----------------------------------------------------------------------------------

class FakeLLM:
    """Answers 'you said: <last user message>' word by word; one token per word."""

    model_path = "/models/fake.gguf"
    isa = "scalar"
    n_threads = 1
    chat_template = "chatml"

    def __init__(self, n_ctx=4096, load_time=0.25):
        self.n_ctx = n_ctx
        self.load_time = load_time
        self.metadata = {"general.name": "Fake 1M", "general.architecture": "llama",
                         "general.file_type": 3, "llama.context_length": 8192,
                         "llama.embedding_length": 64}
        self.requests = []       # (messages, SamplingParams) per chat request
        self.aborted = 0         # streams closed before their last chunk
        self.completed = 0
        self.closed = False

    def apply_chat_template(self, messages, add_generation_prompt=True, tools=None):
        text = " ".join(f"<{m['role']}> {m['content']}" for m in messages)
        return text + (" <assistant>" if add_generation_prompt else "")

    def tokenize(self, text, add_special=True, parse_special=False):
        return list(range(len(text.split()) + (1 if add_special else 0)))

    def reply(self, messages):
        return "you said: " + messages[-1]["content"]

    def chat_stream_chunks(self, messages, params=None, tools=None):
        messages = [dict(m) for m in messages]
        self.requests.append((messages, params))
        words = self.reply(messages).split(" ")
        if params is not None and params.max_tokens is not None:
            words = words[:params.max_tokens]
        prompt_n = len(self.tokenize(self.apply_chat_template(messages)))

        def stream():
            done = False
            try:
                for i, w in enumerate(words):
                    yield CompletionChunk(text=(" " if i else "") + w, token_ids=[i])
                timings = {"prompt_n": prompt_n, "prompt_ms": 50.0, "prompt_per_second": prompt_n / 0.05,
                           "predicted_n": len(words), "predicted_ms": 200.0,
                           "predicted_per_second": len(words) / 0.2}
                done = True
                yield CompletionChunk(text="", token_ids=[], finish_reason="stop",
                                      usage=Usage(prompt_n, len(words), prompt_n + len(words)),
                                      timings=timings)
            finally:
                if done:
                    self.completed += 1
                else:
                    self.aborted += 1
        return stream()

    def close(self):
        self.closed = True


class ScriptedReader(LineReader):
    """Returns the scripted lines; an exception class in the script is raised instead."""

    def __init__(self, lines):
        self.lines = list(lines)
        self.prompts = []
        self.remembered = []

    def read_line(self, prompt, continuation=False):
        self.prompts.append(prompt)
        if not self.lines:
            raise EOFError
        item = self.lines.pop(0)
        if isinstance(item, type) and issubclass(item, BaseException):
            raise item()
        return item

    def remember(self, entry):
        self.remembered.append(entry)


class InterruptingOut(io.StringIO):
    """A terminal where the user presses Ctrl+C after `after` answer pieces were shown."""

    def __init__(self, after):
        super().__init__()
        self.after = after
        self.pieces = 0
        self.armed = False

    def isatty(self):
        return False

    def write(self, s):
        if self.armed and s.strip() and not s.startswith("\n"):
            self.pieces += 1
            if self.pieces > self.after:
                self.armed = False
                raise KeyboardInterrupt
        return super().write(s)


def make_app(lines, llm=None, decorate=True, verbose=False, base=None, system=None, out=None,
             load_llm=None):
    llm = llm or FakeLLM()
    out = out if out is not None else io.StringIO()
    err = io.StringIO()
    render = Renderer(out=out, err=err, decorate=decorate, color=False)
    reader = ScriptedReader(lines)
    app = ReplApp(llm, reader, render, base_params=base or SamplingParams(max_tokens=None),
                  system=system, verbose=verbose, load_llm=load_llm)
    return app, out, err, reader


# ---- input -----------------------------------------------------------------------------------

def test_triple_quotes_make_one_message_of_many_lines():
    r = ScriptedReader(['"""', "first line", "", "  indented", '"""'])
    assert read_message(r) == "first line\n\n  indented"
    assert r.prompts == [">>> ", "... ", "... ", "... ", "... "]
    assert r.remembered == ['"""\nfirst line\n\n  indented\n"""']


def test_triple_quotes_with_text_on_the_opening_and_closing_lines():
    assert read_message(ScriptedReader(['"""Dear model,', "hello", 'bye"""'])) == "Dear model,\nhello\nbye"
    assert read_message(ScriptedReader(['"""one line"""'])) == "one line"


def test_plain_lines_and_pasted_blocks_pass_through():
    assert read_message(ScriptedReader(["hello there"])) == "hello there"
    # bracketed paste: prompt_toolkit hands the whole block over as one string
    assert read_message(ScriptedReader(["line 1\nline 2\nline 3"])) == "line 1\nline 2\nline 3"
    assert read_message(ScriptedReader(['"""pasted\nblock"""'])) == "pasted\nblock"


def test_set_system_block():
    r = ScriptedReader(['/set system """', "You are terse.", "Answer in French.", '"""'])
    assert read_message(r) == "/set system You are terse.\nAnswer in French."


def test_ctrl_c_inside_a_block_abandons_it():
    app, out, _, reader = make_app(['"""', "half a thought", KeyboardInterrupt, "hi"])
    assert app.run() == 0
    assert [m["content"] for m in app.conversation.messages] == ["hi", "you said: hi"]


# ---- the loop and its keys ---------------------------------------------------------------------

def test_ctrl_d_exits_with_status_0_and_ctrl_c_at_the_prompt_says_how_to_exit():
    app, out, _, _ = make_app([KeyboardInterrupt, EOFError])
    assert app.run() == 0
    assert "Use Ctrl + d or /bye to exit." in out.getvalue()


@pytest.mark.parametrize("word", ["/bye", "/exit"])
def test_bye_and_exit_end_the_session(word):
    app, out, _, reader = make_app([word, "never read"])
    assert app.run() == 0
    assert reader.lines == ["never read"]


def test_answers_stream_with_history_and_a_timing_line():
    llm = FakeLLM()
    app, out, _, _ = make_app(["hello", "again"], llm=llm)
    app.run()
    text = out.getvalue()
    assert "you said: hello\n" in text and "you said: again\n" in text
    assert re.search(r"prompt: \d+ tok, [\d.]+ t/s · answer: 3 tok, 15\.00 t/s", text)
    msgs, _ = llm.requests[1]
    assert [m["content"] for m in msgs] == ["hello", "you said: hello", "again"]


def test_empty_lines_are_ignored():
    llm = FakeLLM()
    app, _, _, _ = make_app(["", "   ", "x"], llm=llm)
    app.run()
    assert len(llm.requests) == 1


def test_verbose_prints_ollamas_block_with_the_load_time_once():
    app, out, err, _ = make_app(["/set verbose", "a", "b", "/set quiet", "c"])
    app.run()
    blocks = err.getvalue().split("total duration:")
    assert len(blocks) == 3
    for label in ("load duration:", "prompt eval count:", "prompt eval duration:", "prompt eval rate:",
                  "eval count:", "eval duration:", "eval rate:"):
        assert label in blocks[1] and label in blocks[2]
    assert "load duration:        250ms" in blocks[1]  # the model's load, reported once
    assert "load duration:        0s" in blocks[2]
    assert "eval count:           3 token(s)" in blocks[1]
    assert "Set 'verbose' mode." in out.getvalue() and "Set 'quiet' mode." in out.getvalue()
    assert out.getvalue().count("answer: ") == 1  # quiet again for 'c'


def test_no_decoration_writes_only_answers_and_no_escape_codes():
    app, out, err, _ = make_app(["hello"], decorate=False)
    app.run()
    assert out.getvalue() == "you said: hello\n\n"
    assert not ANSI.search(out.getvalue() + err.getvalue())


# ---- commands ----------------------------------------------------------------------------------

def test_help_and_unknown_commands():
    app, out, _, _ = make_app(["/?", "/help set", "/? shortcuts", "/frobnicate", "/set bogus", "/show bogus"])
    app.run()
    text = out.getvalue()
    for cmd in ("/set", "/show", "/clear", "/regen", "/read", "/save", "/load", "/bye"):
        assert cmd in text
    assert "/set parameter" in text and "Ctrl + c" in text
    assert "Unknown command '/frobnicate'. Type /? for help" in text
    assert "Unknown command '/set bogus'" in text and "Unknown command '/show bogus'" in text


def test_set_parameter_reaches_the_engine_and_stop_accumulates():
    llm = FakeLLM()
    app, out, err, _ = make_app([
        "/set parameter temperature 0", "/set parameter top_k 5", "/set parameter top_p 0.5",
        "/set parameter min_p 0.1", "/set parameter seed 42", "/set parameter num_predict 2",
        "/set parameter repeat_penalty 1.3", "/set parameter stop User:",
        '/set parameter stop "###" END', "question here"], llm=llm)
    app.run()
    _, p = llm.requests[-1]
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.seed, p.max_tokens, p.repetition_penalty) == \
        (0.0, 5, 0.5, 0.1, 42, 2, 1.3)
    assert p.stop == ["User:", "###", "END"]
    assert "Set parameter 'temperature' to '0.0'" in out.getvalue()
    assert "you said:\n" in out.getvalue()  # num_predict 2 -> two words
    assert err.getvalue() == ""


@pytest.mark.parametrize("line, why", [
    ("/set parameter temperature hot", "temperature takes a number"),
    ("/set parameter temperature -1", "temperature must be >= 0"),
    ("/set parameter top_p 2", "top_p must be in [0, 1]"),
    ("/set parameter typical_p 0", "typical_p must be in (0, 1]"),  # SamplingParams' rule
    ("/set parameter top_k 1.5", "top_k takes a whole number"),
    ("/set parameter num_predict 0", "num_predict must be >= 1"),
    ("/set parameter warp 9", "unknown parameter 'warp'"),
    ("/set parameter seed", "needs a value"),
    ("/set parameter top_k 1 2", "takes one value"),
])
def test_bad_parameters_are_explained_and_change_nothing(line, why):
    llm = FakeLLM()
    app, _, err, _ = make_app([line, "q"], llm=llm)
    app.run()
    assert "Couldn't set parameter" in err.getvalue() and why in err.getvalue()
    assert app.params.values == {}


def test_num_predict_minus_one_means_no_limit_and_seed_minus_one_random():
    p = Parameters()
    p.set("num_predict", ["-1"])
    p.set("seed", ["-1"])
    s = p.sampling(SamplingParams(max_tokens=64, seed=3))
    assert s.max_tokens is None and s.seed is None


def test_set_system_and_clear_keeps_it():
    llm = FakeLLM()
    app, out, _, _ = make_app(["/set system You are a pirate.", "hi", "/clear", "hello", "/show system"], llm=llm)
    app.run()
    first, _ = llm.requests[0]
    last, _ = llm.requests[1]
    assert first[0] == {"role": "system", "content": "You are a pirate."}
    assert last == [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "hello"}]
    assert "Cleared session context" in out.getvalue()
    assert out.getvalue().rstrip().endswith("You are a pirate.")


def test_system_from_the_command_line():
    llm = FakeLLM()
    app, _, _, _ = make_app(["hi"], llm=llm, system="Be brief.")
    app.run()
    assert llm.requests[0][0][0] == {"role": "system", "content": "Be brief."}


def test_regen_asks_again_with_the_same_messages():
    llm = FakeLLM()
    app, out, _, _ = make_app(["first", "second", "/regen", "/regen"], llm=llm)
    app.run()
    assert len(llm.requests) == 4
    assert llm.requests[1][0] == llm.requests[2][0] == llm.requests[3][0]
    assert [m["role"] for m in app.conversation.messages] == ["user", "assistant"] * 2
    assert out.getvalue().count("you said: second") == 3


def test_regen_with_nothing_to_regenerate():
    app, out, _, _ = make_app(["/regen"])
    app.run()
    assert "Nothing to regenerate" in out.getvalue()


def test_read_sends_a_file(tmp_path):
    f = tmp_path / "note.txt"
    f.write_text("line one\nline two\n", encoding="utf-8")
    llm = FakeLLM()
    app, _, err, _ = make_app([f"/read {f}", f"/read {tmp_path / 'missing.txt'}", "/read"], llm=llm)
    app.run()
    assert llm.requests[0][0][-1] == {"role": "user", "content": "line one\nline two"}
    assert "cannot read" in err.getvalue() and "missing.txt" in err.getvalue()
    assert "/read needs a file name" in err.getvalue()
    assert len(llm.requests) == 1


def test_save_and_load_round_trip(tmp_path):
    path = tmp_path / "chat.json"
    llm = FakeLLM()
    app, out, _, _ = make_app(["/set system Be kind.", "/set parameter temperature 0",
                               "/set parameter stop END", "hello", f"/save {path}"], llm=llm)
    app.run()
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["system"] == "Be kind."
    assert doc["messages"] == [{"role": "user", "content": "hello"},
                               {"role": "assistant", "content": "you said: hello"}]
    assert doc["parameters"] == {"temperature": 0.0, "stop": ["END"]}
    assert "Saved 2 messages to" in out.getvalue()

    llm2 = FakeLLM()
    app2, out2, _, _ = make_app([f"/load {path}", "/show history", "and then?"], llm=llm2)
    app2.run()
    msgs, params = llm2.requests[0]
    assert msgs == [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "hello"},
                    {"role": "assistant", "content": "you said: hello"},
                    {"role": "user", "content": "and then?"}]
    assert params.temperature == 0.0 and params.stop == ["END"]
    assert "Loaded 2 messages from" in out2.getvalue()
    assert "user: hello\nassistant: you said: hello" in out2.getvalue()


@pytest.mark.parametrize("content, why", [
    ("not json", "is not a JSON conversation"),
    ('{"messages": "x"}', "'messages' must be a list"),
    ('{"messages": [{"role": "robot", "content": "x"}]}', "messages[0]"),
    ('{"messages": [], "parameters": {"temperature": "hot"}}', "temperature takes a number"),
    ('{"format": "other", "messages": []}', "format 'other'"),
])
def test_load_rejects_bad_files_and_keeps_the_session(tmp_path, content, why):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    app, _, err, _ = make_app(["hi", f"/load {path}"])
    app.run()
    assert why in err.getvalue() and str(path) in err.getvalue()
    assert len(app.conversation.messages) == 2


def test_save_to_an_unwritable_place(tmp_path):
    app, _, err, _ = make_app([f"/save {tmp_path}/no/such/dir/chat.json"])
    app.run()
    assert "cannot write" in err.getvalue()


def test_show_info_parameters_template():
    app, out, _, _ = make_app(["/show info", "/set parameter top_k 7", "/show parameters", "/show template"])
    app.run()
    text = out.getvalue()
    assert re.search(r"architecture\s+llama", text) and re.search(r"quantization\s+Q4_1", text)
    assert re.search(r"context length\s+8192", text) and re.search(r"embedding length\s+64", text)
    assert re.search(r"User defined parameters:\n  top_k\s+7", text)
    assert re.search(r"num_ctx\s+4096", text)
    assert "{# built-in template 'chatml' #}" in text and "<|im_start|>" in text


def test_num_ctx_reloads_the_model():
    loaded = []

    def load(n_ctx):
        loaded.append(n_ctx)
        return FakeLLM(n_ctx=n_ctx, load_time=0.5)

    first = FakeLLM()
    app, out, _, _ = make_app(["/set parameter num_ctx 512", "hi"], llm=first, load_llm=load)
    app.run()
    assert loaded == [512] and first.closed and app.llm.n_ctx == 512
    assert len(app.llm.requests) == 1
    assert "Set parameter 'num_ctx' to '512'" in out.getvalue()


# ---- Ctrl+C while answering -----------------------------------------------------------------------

class LongLLM(FakeLLM):
    def reply(self, messages):
        if messages[-1]["content"] == "tell me a story":
            return " ".join(f"w{i}" for i in range(50))
        return super().reply(messages)


def test_ctrl_c_stops_the_answer_keeps_the_partial_text_and_the_session_goes_on():
    llm = LongLLM()
    out = InterruptingOut(after=5)
    app, _, _, reader = make_app(["tell me a story", "ok", EOFError], llm=llm, out=out)
    orig = app.generate

    def generate():
        out.armed = app.conversation.messages[-1]["content"] == "tell me a story"
        orig()
    app.generate = generate
    assert app.run() == 0
    assert llm.aborted == 1 and llm.completed == 1  # the stream was closed early: aborted
    story = app.conversation.messages[1]
    assert story["role"] == "assistant" and story["content"] == "w0 w1 w2 w3 w4"
    assert app.conversation.messages[-1]["content"] == "you said: ok"
    assert llm.requests[1][0][1]["content"] == "w0 w1 w2 w3 w4"  # the partial answer is history


# ---- context ---------------------------------------------------------------------------------------

def test_history_outgrowing_the_context_drops_the_oldest_turns_and_says_so_once():
    llm = FakeLLM(n_ctx=40)
    base = SamplingParams(max_tokens=8)
    words = [f"message number {i} with some words" for i in range(6)]
    app, out, _, _ = make_app(words, llm=llm, base=base, system="Keep this.")
    app.run()
    for msgs, p in llm.requests:
        n = len(llm.tokenize(llm.apply_chat_template(msgs), add_special=True))
        assert n + 8 <= 40
        assert msgs[0] == {"role": "system", "content": "Keep this."}
        assert msgs[1]["role"] == "user"
    last, _ = llm.requests[-1]
    assert last[-1]["content"] == words[-1]
    assert all(m["content"] != words[0] for m in last)
    assert out.getvalue().count("outgrew the context") == 1


def test_a_message_too_long_for_the_context_is_refused_not_sent():
    llm = FakeLLM(n_ctx=20)
    app, out, err, _ = make_app([" ".join(["word"] * 30), "short"], llm=llm,
                                base=SamplingParams(max_tokens=4))
    app.run()
    assert "too long" in err.getvalue() or "more than the context" in err.getvalue()
    assert len(llm.requests) == 1 and llm.requests[0][0][-1]["content"] == "short"


def test_answer_reserve():
    assert answer_reserve(100, 4096) == 100
    assert answer_reserve(None, 4096) == 1024
    assert answer_reserve(None, 512) == 128
    # --context-shift: the answer goes on past the context, a quarter of it is room enough
    assert answer_reserve(5000, 512, context_shift=True) == 128
    assert answer_reserve(50, 512, context_shift=True) == 50
    assert answer_reserve(None, 512, context_shift=True) == 128


def test_conversation_trimming_keeps_turns_whole():
    c = Conversation("sys", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                             {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
                             {"role": "user", "content": "e"}])
    dropped = c.drop_oldest_until(lambda msgs: len(msgs) <= 4)
    assert dropped == 2 and [m["content"] for m in c.rendered()] == ["sys", "c", "d", "e"]
    with pytest.raises(ContextOverflow):
        c.drop_oldest_until(lambda msgs: False)
    assert len(c.messages) == 3  # left as it was


def test_conversation_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConversationFileError, match="missing.json"):
        Conversation.load(str(tmp_path / "missing.json"))


def test_parameters_from_json_validates():
    with pytest.raises(ParameterError, match="f.json: top_k takes a whole number"):
        Parameters.from_json({"top_k": "many"}, "f.json")
    assert Parameters.from_json({"stop": ["a", "b"], "seed": None}, "f").values == {"stop": ["a", "b"], "seed": None}


# ---- one-shot and rendering -----------------------------------------------------------------------

def test_answer_once_prints_only_the_answer():
    out, err = io.StringIO(), io.StringIO()
    llm = FakeLLM()
    code = answer_once(llm, "the question", Renderer(out=out, err=err, decorate=False),
                       base_params=SamplingParams(temperature=0), system="S")
    assert code == 0
    assert out.getvalue() == "you said: the question\n" and err.getvalue() == ""
    assert llm.requests[0][0] == [{"role": "system", "content": "S"}, {"role": "user", "content": "the question"}]


def test_answer_once_verbose_goes_to_stderr():
    out, err = io.StringIO(), io.StringIO()
    answer_once(FakeLLM(), "q", Renderer(out=out, err=err, decorate=False), verbose=True)
    assert out.getvalue() == "you said: q\n"
    assert "eval rate:" in err.getvalue() and "load duration:        250ms" in err.getvalue()


def test_formats():
    assert format_duration(2.5) == "2.5s"
    assert format_duration(0.0123) == "12.3ms"
    assert format_duration(0.0000952) == "95.2µs"
    assert format_duration(0) == "0s"
    assert timing_line({"prompt_n": 12, "prompt_per_second": 100.0, "predicted_n": 5,
                        "predicted_per_second": 20.5}) == "prompt: 12 tok, 100.00 t/s · answer: 5 tok, 20.50 t/s"
    block = verbose_block({"prompt_n": 3, "prompt_ms": 30.0, "prompt_per_second": 100.0,
                           "predicted_n": 4, "predicted_ms": 2000.0, "predicted_per_second": 2.0}, 2.1, 0.5)
    assert block.splitlines() == [
        "total duration:       2.1s", "load duration:        500ms", "prompt eval count:    3 token(s)",
        "prompt eval duration: 30ms", "prompt eval rate:     100.00 tokens/s", "eval count:           4 token(s)",
        "eval duration:        2s", "eval rate:            2.00 tokens/s"]


def test_banner_only_on_terminals():
    out = io.StringIO()
    Renderer(out=out, err=io.StringIO(), decorate=False).banner([("quant", "Q4_1")], "edgellm · x")
    assert out.getvalue() == ""
    out = io.StringIO()
    Renderer(out=out, err=io.StringIO(), decorate=True, color=True).banner([("quant", "Q4_1")], "edgellm · x")
    assert "quant Q4_1" in out.getvalue() and ANSI.search(out.getvalue())


def test_set_xtc_parameters_reach_sampling_and_show():
    """XTC (llama.cpp's sampler): `/set parameter xtc_probability|xtc_threshold`, range-checked
    from the one table of sampling fields, shown by /show parameters."""
    llm = FakeLLM()
    app, out, err, _ = make_app(["/set parameter xtc_probability 0.5",
                                 "/set parameter xtc_threshold 0.2", "/show parameters", "q"],
                                llm=llm)
    app.run()
    _, p = llm.requests[-1]
    assert (p.xtc_probability, p.xtc_threshold) == (0.5, 0.2)
    assert re.search(r"xtc_probability\s+0\.5", out.getvalue())
    assert err.getvalue() == ""
    with pytest.raises(ParameterError, match=r"xtc_probability must be in \[0, 1\]"):
        Parameters().set("xtc_probability", ["1.5"])
    with pytest.raises(ParameterError, match="xtc_threshold takes a number"):
        Parameters().set("xtc_threshold", ["high"])
